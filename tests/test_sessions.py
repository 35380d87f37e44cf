"""Session logs for next-query suggestion: the AOL missions layout, JSONL, the user split, the candidate pool."""

from __future__ import annotations

import json

import pytest

from rerank.data import get_dataset
from rerank.data.session_sets import Followers, Pool
from rerank.data.sessions import docid, query_text, read_sessions, session_of
from rerank.errors import DataError, FormatError

HEADER = "UserID\tQuery\tTimeStamp\tClickRank\tClickDomain\tMissionID\tComment\n"
DASHES = "-" * 40 + "\n"


def row(user: str, query: str) -> str:
    return f"{user}\t{query}\t2006-03-01 10:00:00\t\t\t1\n"


def missions(tmp_path, text: str):
    path = tmp_path / "m.tsv"
    path.write_text(text)
    return path


def test_users_by_dashes_sessions_by_blank_lines_duplicates_removed(tmp_path):
    path = missions(tmp_path, HEADER + DASHES + row("1", "a b") + row("1", "a  B") + row("1", "c") + "\n"
                    + row("1", "solo") + row("1", "solo") + "\n" + DASHES + row("2", "x") + row("2", "y") + row("2", "x")
                    + "\n" + DASHES)
    log = read_sessions(path)
    assert [s.queries for s in log.sessions] == [("a b", "c"), ("x", "y", "x")]
    assert log.skipped == 1  # "solo" twice: one query once duplicates go
    pairs = log.pairs()
    assert [(p.qid, p.source, p.target) for p in pairs] == [
        ("1-1-1", ("a b",), "c"), ("2-1-1", ("x",), "y"), ("2-1-2", ("x", "y"), "x")]


def test_jsonl_sessions_and_their_faults(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"session": "s1", "queries": ["a", "b", "b", "c"]}) + "\n"
                    + json.dumps({"session": "s2", "user": "u", "queries": ["one"]}) + "\n")
    log = read_sessions(path)
    assert [p.target for p in log.pairs()] == ["b", "c"] and log.skipped == 1
    path.write_text(json.dumps({"session": "s1", "queries": ["a", ""]}) + "\n")
    with pytest.raises(FormatError, match=r"s.jsonl:1: empty query"):
        read_sessions(path)
    path.write_text(json.dumps({"session": "s1", "queries": ["a", "b"]}) + "\n" + '{"session": 2}\n')
    with pytest.raises(FormatError, match=r"s.jsonl:2: expected"):
        read_sessions(path)


@pytest.mark.parametrize("line, problem", [("justoneword\n", "expected UserID<TAB>Query"),
                                           ("1\t \t2006\n", "empty query"),
                                           ("2\tother user\t2006\n", "user 2 inside user 1's session")])
def test_a_malformed_line_is_named_by_file_and_line(tmp_path, line, problem):
    path = missions(tmp_path, HEADER + DASHES + row("1", "a") + line)
    with pytest.raises(FormatError, match=rf"m.tsv:4: {problem}"):
        read_sessions(path)


def test_an_empty_file_holds_no_sessions(tmp_path):
    with pytest.raises(DataError, match="holds no sessions"):
        read_sessions(missions(tmp_path, "\n\n"))


def test_texts_travel_as_docids_and_sessions_as_topics():
    assert docid("a+b c/d") == "a%2Bb+c%2Fd" and query_text(docid("a+b c/d")) == "a+b c/d"
    assert session_of("a b ||| c") == ["a b", "c"] and session_of("a b") == ["a b"]


def test_the_pool_puts_followers_above_bm25(tmp_path):
    log = read_sessions(missions(tmp_path, HEADER + DASHES + row("1", "cheap flights") + row("1", "cheap hotels")
                                 + "\n" + DASHES + row("2", "flights paris") + row("2", "paris hotels") + "\n"))
    others = ["weather", "news today", "maps", "bank login"]  # Okapi's idf is 0 for a word in half the queries
    pool = Pool(Followers(log), ["cheap flights", "cheap hotels", "flights paris", "paris hotels", *others])
    ranked = pool("cheap flights", 3)
    assert ranked[0] == ("cheap hotels", 1.0)  # followed it once
    assert [q for q, _ in ranked[1:]] == ["flights paris"]  # BM25 on "cheap flights", itself left out
    assert ranked[1][1] < 0


@pytest.mark.data
def test_aol_missions_split_by_users(data_root):
    train, dev = get_dataset("aol-missions", data_root), get_dataset("aol-missions-dev", data_root)
    train_log, dev_log = train.log(), dev.log()
    assert not set(train_log.users()) & set(dev_log.users())
    assert (len(train_log.users()), len(dev_log.users())) == (65, 22)  # seeded: the same users every time
    assert len(dev_log.pairs()) == len(dev.qrels()) == len(dev.topics()) == 428
    first = dev_log.pairs()[0]
    assert dev.qrels()[first.qid] == {docid(first.target): 1}
    assert get_dataset("aol-missions-test", data_root).present is (data_root / "aol-missions/missions-test.tsv").is_file()

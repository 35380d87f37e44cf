"""`rerank suggest`, `rerank train` of a generator and the ranking chain, through the real CLI on real data."""

from __future__ import annotations

import json

import pytest

from rerank.runs import RunReader

pytestmark = pytest.mark.data

TINY = ["-O", "d_model=16", "-O", "heads=2", "-O", "ff=32", "-O", "max_query_tokens=4"]


def sessions_file(tmp_path, lines: list[dict]) -> str:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_suggest_on_the_dev_users_and_eval_by_bleu(rerank, tmp_path):
    done = rerank("suggest", "--model", "last-query", "--dataset", "aol-missions", "--split", "dev")
    assert "suggested for 428 session prefixes of 22 users" in done.stderr
    reader = RunReader(iter(done.stdout.splitlines(keepends=True)), "run")
    rankings = list(reader)
    assert reader.header.dataset == "aol-missions-dev" and reader.header.stages[-1]["model"] == "last-query"
    assert len(rankings) == 428 and all(r.timings and len(r.docids) == 1 for r in rankings)
    table = rerank("eval", "-m", "BLEU", "-m", "1gram", "-m", "4gram", input=done.stdout).stdout
    assert table.split("\n")[1].split()[:4] == ["last-query", "0.2184", "0.3457", "0.0259"]


def test_the_ranking_chain_and_the_pool(rerank):
    pool = rerank("retrieve", "aol-missions-dev", "--candidates", "pool").stdout
    scored = rerank("score", "--model", "cooccurrence", input=pool).stdout
    table = rerank("eval", "-m", "Recall@20", "-m", "MRR", input=scored).stdout
    assert table.split("\n")[1].split()[:2] == ["cooccurrence", "0.5350"]  # the share of prefixes the pool covers


def test_bad_session_files_one_line_and_a_non_zero_exit(rerank, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("UserID\tQuery\n1\tcheap flights\n1\n")
    done = rerank("suggest", "--model", "last-query", "--sessions", str(bad), check=False)
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and f"{bad}:3: expected" in done.stderr
    path = sessions_file(tmp_path, [{"session": "a", "queries": ["one"]}, {"session": "b", "queries": ["x", "y"]}])
    done = rerank("suggest", "--model", "last-query", "--sessions", path)
    assert "1 one-query session skipped" in done.stderr and done.stdout.count(" Q0 ") == 1


def test_train_a_generator_then_refuse_it_as_another_model(rerank, tmp_path):
    sessions = [{"session": f"s{i}", "user": f"u{i}", "queries": ["cheap flights", "cheap flights to paris in may",
                                                                  "paris hotels"]} for i in range(8)]
    path = sessions_file(tmp_path, sessions)
    ck = str(tmp_path / "ck")
    done = rerank("train", "transformer", "--train", path, "-o", ck, "--steps", "4", "--eval-every", "2", *TINY)
    assert "trained transformer for 4 steps" in done.stderr and "longer than 4 tokens were cut" in done.stderr
    done = rerank("suggest", "--model", "transformer", "--checkpoint", ck, "--sessions", path, "--beam", "2")
    assert "1 query cut to the model's length" in done.stderr
    wrong = rerank("suggest", "--model", "mtn", "--checkpoint", ck, "--sessions", path, check=False)
    assert wrong.returncode != 0 and "trained for model 'transformer', not 'mtn'" in wrong.stderr
    assert wrong.stdout == ""
    empty = sessions_file(tmp_path, [{"session": "a", "queries": ["one", "one"]}])
    done = rerank("train", "mtn", "--train", empty, "-o", str(tmp_path / "none"), check=False)
    assert done.returncode != 0 and "leave no (prefix, next query) pair" in done.stderr
    assert not (tmp_path / "none").exists()
    done = rerank("train", "mtn", "--train", "aol-missions", "-o", str(tmp_path / "x"), "--negatives", "3",
                  check=False)
    assert done.returncode != 0 and "--negatives: options of the rankers' training" in done.stderr


def test_suggestions_for_ones_own_log_are_judged_by_that_log(rerank, tmp_path):
    log = sessions_file(tmp_path, [{"session": "s", "queries": ["cheap flights", "cheap flights paris", "paris"]}])
    run = rerank("suggest", "--model", "last-query", "--sessions", log).stdout
    table = rerank("eval", "-m", "1gram", "-m", "HITS@1", input=run).stdout  # no --qrels: the log's next queries
    assert table.split("\n")[1].split() == ["last-query", "0.6667", "0.0000"]

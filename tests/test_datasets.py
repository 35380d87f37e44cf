"""The registry reads every real data set in shared/data with the published counts."""

import pytest

from rerank.data import dataset_names, get_dataset

pytestmark = pytest.mark.data

EXPECTED = {  # name: (documents, topics, judged queries, judgements)
    "vaswani": (11429, 93, 93, 2083),
    "cacm": (3204, 64, 52, 796),
    "trec-dl-2019": (5492, 43, 43, 9260),
    "trec-dl-2020": (7042, 200, 54, 11386),
    # QA: judged = TrecQA's questions with a right and a wrong candidate (the "clean" protocol), WikiQA's with a
    # right one (Yang et al. 2015: 873 train, 126 dev questions)
    "trecqa-train": (4718, 93, 78, 4619),
    "trecqa-dev": (1148, 81, 65, 1117),
    "wikiqa-train": (20360, 2118, 873, 8672),
    "wikiqa-dev": (2733, 296, 126, 1130),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts(name, data_root):
    ds = get_dataset(name, data_root)
    qrels = ds.qrels()
    got = (sum(1 for _ in ds.documents()), len(ds.topics()), len(qrels), sum(len(v) for v in qrels.values()))
    assert got == EXPECTED[name]


def test_absent_splits_are_listed_not_present(data_root):
    for name in ("trec-dl-2021", "trecqa-test", "wikiqa-test"):
        assert name in dataset_names()
        assert not get_dataset(name, data_root).present


def test_each_part_needs_only_its_own_files(data_root, tmp_path):
    """Unjudged test topics are what one retrieves a submission for: without qrels, topics and documents used to
    be refused too."""
    import shutil

    from rerank.errors import DataError

    shutil.copytree(data_root / "cacm", tmp_path / "cacm", ignore=shutil.ignore_patterns("qrels*"))
    cacm = get_dataset("cacm", tmp_path)
    assert len(cacm.topics()) == 64 and sum(1 for _ in cacm.documents()) == 3204 and not cacm.present
    with pytest.raises(DataError, match="data set cacm is not present: missing .*qrels"):
        cacm.qrels()


def test_candidates_carry_text_and_order(data_root):
    ds = get_dataset("trec-dl-2019", data_root)
    runs = ds.candidates("bm25")
    assert len(runs) == 43 and all(len(r) == 100 for r in runs)
    first = runs[0]
    assert first.scores == sorted(first.scores, reverse=True)
    texts = ds.doc_texts()
    assert all(d in texts for d in first.docids)


def test_qa_candidate_runs_do_not_leak_labels(rerank):
    import json

    trecqa = json.loads(rerank("eval", "--format", "json", input=rerank("retrieve", "trecqa-dev", "--candidates").stdout).stdout)[0]
    assert trecqa["MAP"] < 0.8  # the file order (right answers first) would give 1.0
    wikiqa = json.loads(rerank("eval", "--format", "json", input=rerank("retrieve", "wikiqa-dev", "--candidates").stdout).stdout)[0]
    assert round(wikiqa["MAP"], 4) == 0.6728  # sentence order in the article: the usual position baseline


def test_qa_questions_left_out_by_the_protocol_are_named_as_such(rerank):
    """TrecQA dev question 1.4 has eight judged (wrong) candidates; the note said it was "not in the qrels", which
    reads as a missing file to a trec_eval user (trec_eval would count it, with AP 0)."""
    trecqa = rerank("eval", input=rerank("retrieve", "trecqa-dev", "--candidates").stdout).stderr
    assert "16 queries are unjudged under trecqa-dev's protocol (questions without both a right and a wrong " \
           "candidate, TrecQA's clean set)" in trecqa and "not in the qrels" not in trecqa
    wikiqa = rerank("eval", input=rerank("retrieve", "wikiqa-dev", "--candidates").stdout).stderr
    assert "170 queries are unjudged under wikiqa-dev's protocol (questions without a right answer" in wikiqa


def test_qa_sets_become_rankings(data_root):
    ds = get_dataset("trecqa-dev", data_root)
    assert ds.topics()["1.4"].startswith("What ethnic group")
    assert "1.4" not in ds.qrels()  # no right answer among its candidates: not judged
    assert all(0 < sum(v.values()) < len(v) for v in ds.qrels().values())


def test_data_commands(rerank, data_root):
    listing = rerank("data", "list").stdout
    assert "vaswani        present" in listing and "trec-dl-2021   not present" in listing
    import json

    shown = json.loads(rerank("data", "show", "cacm").stdout)
    assert shown["counts"] == {"documents": 3204, "topics": 64, "judged_queries": 52, "judgements": 796}
    # the measures as eval's tables label them (they listed AP, RR and R@100 where a leaderboard says MAP, MRR and
    # Recall@100)
    from rerank.data import dataset_names, get_dataset
    from rerank.evaluate.measures import parse_measure

    assert shown["measures"] == ["MAP", "MRR", "P@1", "nDCG@10", "Recall@100"]
    for name in dataset_names():
        assert [parse_measure(m).label for m in get_dataset(name).measures] == list(get_dataset(name).measures), name
    absent = json.loads(rerank("data", "show", "wikiqa-test").stdout)
    assert absent["present"] is False and absent["missing"][0].endswith("WikiQASent-test.txt")
    via_option = rerank("--data-root", str(data_root), "data", "list", env={"RERANK_DATA": ""}).stdout
    assert via_option == listing


def test_a_folder_where_a_data_set_file_belongs_is_not_present(rerank, data_root, tmp_path):
    """Needs ../shared/data (Vaswani). `data list` called a data set present when a folder stood where one of its
    files belongs (only the path's existence was checked); the first reader then failed."""
    (tmp_path / "vaswani").mkdir()
    for name in ("corpus", "query-text.trec"):
        (tmp_path / "vaswani" / name).symlink_to(data_root / "vaswani" / name)
    (tmp_path / "vaswani" / "qrels").mkdir()
    listing = rerank("--data-root", str(tmp_path), "data", "list").stdout
    assert [line.split()[:3] for line in listing.splitlines() if line.startswith("vaswani")] == [
        ["vaswani", "not", "present"]]
    done = rerank("--data-root", str(tmp_path), "eval", "-m", "MAP", check=False,
                  input='# rerank-run: 2\n# dataset: "vaswani"\n1 Q0 1239 1 1.0 x\n# end of run\n')
    assert done.returncode != 0 and done.stderr.strip().endswith(
        f"data set vaswani is not present: missing {tmp_path / 'vaswani' / 'qrels'} (a folder is there)")


def test_a_replayed_candidate_run_cut_to_k_says_so(data_root, monkeypatch):
    """`retrieve --candidates --k 10` kept each query's first 10 candidates, and its stage entry did not say: a
    reviewer could not tell it from the whole run, but by counting."""
    from rerank.retrieve.api import candidates

    monkeypatch.setenv("RERANK_DATA", str(data_root))
    cut = candidates("trec-dl-2019", k=10)
    assert cut.header.stages[-1]["k"] == 10 and max(len(r) for r in cut.rankings) == 10
    assert candidates("trec-dl-2019").header.stages[-1]["k"] is None  # every candidate

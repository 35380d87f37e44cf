"""The embedded Lucene back end ranks exactly as Anserini's own SearchCollection does."""

import io
import json
import os
import subprocess
import sys

import pytest

from rerank.runs import load_run

pytestmark = [pytest.mark.data, pytest.mark.java]

ANSERINI_SCRIPT = """
import sys
from rerank.retrieve.lucene import anserini_search_collection
anserini_search_collection(sys.argv[1], sys.argv[2], sys.argv[3], k=1000)
"""


def test_ranking_equals_search_collection(vaswani_bm25_run, session_home, data_root, tmp_path):
    from rerank.data import get_dataset

    topics = get_dataset("vaswani", data_root).topics()
    (tmp_path / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in topics.items()))
    env = {**os.environ, "RERANK_HOME": str(session_home)}
    subprocess.run([sys.executable, "-c", ANSERINI_SCRIPT, str(session_home / "indexes/vaswani/lucene"),
                    str(tmp_path / "topics.tsv"), str(tmp_path / "anserini.run")], check=True, env=env,
                   capture_output=True)
    (tmp_path / "ours.run").write_text(vaswani_bm25_run)  # rerank retrieve vaswani --k 1000
    with open(tmp_path / "anserini.run") as a, open(tmp_path / "ours.run") as o:
        reference, mine = load_run(a, "anserini"), load_run(o, "ours")
    assert set(reference.queries) == set(mine.queries) == set(topics)
    for qid, ref in reference.queries.items():
        got = mine.queries[qid]
        assert at_printed_precision(got) == at_printed_precision(ref), qid
        assert [round(s, 4) for s in got.scores] == [round(s, 4) for s in ref.scores], qid


PYSERINI_SCRIPT = """
import sys
from rerank.retrieve import jvm
jvm.start()  # Pyserini's own start asks for a JVM module this Java lacks
from pyserini.search.lucene import LuceneSearcher
index, topics, *setups = sys.argv[1:]
with open(topics) as lines:
    queries = [line.rstrip("\\n").split("\\t") for line in lines]
for number, setup in enumerate(setups):
    searcher = LuceneSearcher(index)
    exec(setup)  # the model's set-up, e.g. searcher.set_qld(500)
    with open(f"{topics}.{number}", "w") as out:
        for qid, text in queries:
            for rank, hit in enumerate(searcher.search(text, k=100), 1):
                print(qid, "Q0", hit.docid, rank, f"{hit.score:.6f}", "pyserini", file=out)
"""

PYSERINI_CASES = [
    (["--rm3", "--fb-terms", "5", "--fb-docs", "3", "--original-query-weight", "0.3"],
     "searcher.set_bm25(0.9, 0.4); searcher.set_rm3(fb_terms=5, fb_docs=3, original_query_weight=0.3)",
     "bm25+rm3", {"rm3": True, "fb_terms": 5, "fb_docs": 3, "original_query_weight": 0.3, "k1": 0.9, "b": 0.4}),
    (["--qld", "--mu", "500"], "searcher.set_qld(500)", "qld", {"qld": True, "mu": 500.0}),
]


@pytest.fixture(scope="module")
def pyserini_rankings(vaswani_index, session_home, data_root, tmp_path_factory) -> dict[str, str]:
    """Each case's set-up of Pyserini's LuceneSearcher: its top 100 for every Vaswani topic, as a TREC run, from one
    process (importing pyserini takes 6 s)."""
    from rerank.data import get_dataset

    topics = tmp_path_factory.mktemp("pyserini") / "topics.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in get_dataset("vaswani", data_root).topics().items()))
    setups = [setup for _, setup, _, _ in PYSERINI_CASES]
    env = {**os.environ, "RERANK_HOME": str(session_home)}
    subprocess.run([sys.executable, "-c", PYSERINI_SCRIPT, str(session_home / "indexes/vaswani/lucene"), str(topics),
                    *setups], check=True, env=env, capture_output=True)
    return {setup: topics.with_name(f"{topics.name}.{number}").read_text() for number, setup in enumerate(setups)}


@pytest.mark.parametrize("flags, pyserini, stage, said", PYSERINI_CASES)
def test_rm3_and_qld_rank_as_pyserinis_searcher(rerank, pyserini_rankings, data_root, flags, pyserini, stage, said):
    """`--rm3` and `--qld` with their parameters give the ranking of Pyserini's LuceneSearcher set up the same
    way, and the stage's header says every parameter of the model searched with."""
    from rerank.data import get_dataset

    topics = get_dataset("vaswani", data_root).topics()
    ours = rerank("retrieve", "vaswani", "--k", "100", *flags).stdout
    expected = load_run(io.StringIO(pyserini_rankings[pyserini]), "pyserini")
    got = load_run(io.StringIO(ours), "ours")
    assert set(expected.queries) == set(got.queries) == set(topics)
    for qid, ref in expected.queries.items():
        assert at_printed_precision(got.queries[qid]) == at_printed_precision(ref), qid
    header = json.loads(next(line for line in ours.splitlines() if line.startswith("# stage:"))[len("# stage:"):])
    assert header["name"] == stage and {key: header.get(key) for key in said} == said
    assert "k1" not in header if "qld" in said else "mu" not in header


def test_rm3_defaults_are_said():
    from rerank.retrieve.lucene import ranking_flags

    assert ranking_flags(rm3=True)[1] == {"k1": 0.9, "b": 0.4, "rm3": True, "fb_terms": 10, "fb_docs": 10,
                                          "original_query_weight": 0.5}


def test_fb_docs_beyond_fifty_acts(rerank, vaswani_index, data_root, tmp_path):
    """RM3 takes its feedback from the first search's results, which Anserini (and Pyserini) cut at 50
    (-rerankCutoff): --fb-docs 100 or 1000 ranked exactly as --fb-docs 50, while the header said 100 or 1000.
    Over 15 of the 93 topics: feedback from 1000 documents for all of them took a quarter of a minute."""
    from rerank.data.formats import read_topics

    topics = tmp_path / "topics.tsv"
    first = list(read_topics(data_root / "vaswani" / "query-text.trec").items())[:15]
    topics.write_text("".join(f"{qid}\t{text}\n" for qid, text in first))

    def ranked(fb_docs: int) -> str:
        run = rerank("retrieve", "vaswani", "--topics", str(topics), "--rm3", "--fb-docs", str(fb_docs), "--k", "20",
                     "--trec").stdout
        assert len(run.splitlines()) == 20 * 15
        return run

    at_50, at_100 = ranked(50), ranked(100)
    assert at_100 != at_50 and ranked(1000) not in (at_50, at_100)


@pytest.mark.parametrize("args, said", [
    (["--fb-terms", "5"], "--fb-terms set RM3 feedback: add --rm3"),
    (["--rm3", "--fb-docs", "0"], "--fb-docs must be a positive number below 2^31, not 0"),
    (["--rm3", "--fb-terms", "3000000000"], "--fb-terms must be a positive number below 2^31, not 3000000000"),
    (["--qld", "--mu", "1e39"], "--mu must be a positive number (at most 3.403e+38), not 1e+39"),
    (["--rm3", "--original-query-weight", "1.5"], "--original-query-weight must be in [0, 1], not 1.5"),
    (["--rm3", "--backend", "dense"], "--backend dense does not take --rm3"),
    (["--rm3", "--candidates"], "--rm3 would be ignored"),
    (["--threads", "4", "--candidates"], "--threads would be ignored"),  # it was, without a word (study G)
    (["--mu", "500"], "--mu sets query likelihood's Dirichlet smoothing: add --qld"),
    (["--qld", "--b", "0.5"], "--k1 and --b are BM25's; --qld scores by query likelihood instead"),
    (["--qld", "--mu", "-1"], "--mu must be a positive number (at most 3.403e+38), not -1.0"),
])
def test_rm3_and_qld_mistakes(rerank, args, said):
    refused = rerank("retrieve", "vaswani", *args, check=False)
    assert refused.returncode == 2 and said in refused.stderr and not refused.stdout, refused.stderr


def at_printed_precision(ranking):
    """trec_eval's order of a ranking whose scores are printed with 6 decimals, as Anserini prints them
    (two scores 1e-6 apart tie in its file, and trec_eval then orders them by docid)."""
    return sorted(zip((round(s, 6) for s in ranking.scores), ranking.docids), reverse=True)


def test_beir_queries_and_qrels_give_the_trec_files_figures(rerank, vaswani_bm25_run, data_root, tmp_path):
    """A BEIR collection's queries.jsonl and qrels/test.tsv, here Vaswani's own topics and qrels written in
    that layout: the same run and the same MAP as the TREC files."""
    from rerank.data import get_dataset

    vaswani = get_dataset("vaswani", data_root)
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n"
                                                    for qid, text in vaswani.topics().items()))
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{qid}\t{docid}\t{grade}\n" for qid, judged in vaswani.qrels().items() for docid, grade in judged.items()))
    native = vaswani_bm25_run
    beir = rerank("retrieve", "vaswani", "--topics", str(tmp_path / "queries.jsonl")).stdout
    assert [line for line in beir.splitlines() if line[0] != "#"] == [line for line in native.splitlines() if line[0] != "#"]
    figures = [rerank("eval", "-m", "MAP", *qrels, input=run).stdout.split()[-1]
               for run, qrels in ((native, []), (beir, ["--qrels", str(tmp_path / "test.tsv")]))]
    assert figures == ["0.2856", "0.2856"]


def test_ir_datasets_pyterrier_and_trec_xml_files_give_the_trec_files_figures(rerank, vaswani_bm25_run, data_root,
                                                                                tmp_path):
    """Vaswani's topics and qrels as other tools write them: ir_datasets' `export ... queries --format jsonl` of TREC
    topics (`query_id`, the query in `title`) and its qrels as a pandas frame (`query_id doc_id relevance iteration`),
    a TREC Web track XML topics file, and a PyTerrier qrels frame (`qid docno label`). Each was refused; each now
    gives the run and the MAP of the TREC files."""
    from rerank.data import get_dataset

    vaswani = get_dataset("vaswani", data_root)
    topics, judged = vaswani.topics(), [(q, d, g) for q, docs in vaswani.qrels().items() for d, g in docs.items()]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"query_id": qid, "title": text, "description": "d",
                                                                "narrative": "n"}) + "\n" for qid, text in topics.items()))
    (tmp_path / "topics.xml").write_text("<webtrack2009>\n" + "".join(
        f'<topic number="{qid}" type="single">\n  <query>{text}</query>\n</topic>\n' for qid, text in topics.items())
        + "</webtrack2009>\n")
    (tmp_path / "irds.tsv").write_text("query_id\tdoc_id\trelevance\titeration\n"
                                       + "".join(f"{q}\t{d}\t{g}\t0\n" for q, d, g in judged))
    (tmp_path / "pyterrier.txt").write_text("qid docno label\n" + "".join(f"{q} {d} {g}\n" for q, d, g in judged))
    native = vaswani_bm25_run
    for topics_file, qrels_file in (("queries.jsonl", "irds.tsv"), ("topics.xml", "pyterrier.txt")):
        run = rerank("retrieve", "vaswani", "--topics", str(tmp_path / topics_file)).stdout
        assert [line for line in run.splitlines() if line[0] != "#"] == [
            line for line in native.splitlines() if line[0] != "#"]
        assert rerank("eval", "-m", "MAP", "--qrels", str(tmp_path / qrels_file), input=run).stdout.split()[-1] == \
            "0.2856"


def test_stream_header_and_timings(rerank, vaswani_index):
    out = rerank("retrieve", "vaswani", "--k", "10").stdout.splitlines()
    assert out[0] == "# rerank-run: 2" and out[-1] == "# end of run"
    assert '# dataset: "vaswani"' in out
    assert any(line.startswith("# stage:") and '"backend": "lucene"' in line and '"threads": 2' in line
               and '"k1": 0.9' in line and '"b": 0.4' in line for line in out)  # defaults too: they were left out
    timing = [line for line in out if line.startswith("# time: 1 bm25 ")]
    assert len(timing) == 1 and timing[0].split()[-1] == "10"
    records = [line for line in out if not line.startswith("#")]
    assert len(records) == 93 * 10


def test_query_that_matches_nothing_keeps_its_time_and_scores_zero(rerank, vaswani_index, data_root, tmp_path):
    (tmp_path / "topics.tsv").write_text("1\tzzqqxx\n2\tcomputer\n")
    out = rerank("retrieve", "vaswani", "--topics", str(tmp_path / "topics.tsv"), "--k", "5").stdout
    times = [line.split() for line in out.splitlines() if line.startswith("# time:")]
    assert [t[2] for t in times] == ["1", "2"] and [t[-1] for t in times] == ["0", "5"]  # found, not the --k asked
    (tmp_path / "nothing.tsv").write_text("1\tzzqqxx\n")
    nothing = rerank("retrieve", "vaswani", "--topics", str(tmp_path / "nothing.tsv")).stdout
    scored = rerank("eval", "--qrels", str(data_root / "vaswani/qrels"), "-m", "nDCG@10", input=nothing)
    assert scored.stdout.split()[-1] == "0.0000" and "1 judged query has no results" in scored.stderr  # of its one
    assert "wrong qrels" not in scored.stderr  # it retrieved nothing to judge


def test_custom_corpus_and_topics(rerank, data_root, tmp_path):
    corpus = data_root / "cacm" / "cacm.jsonl"
    (tmp_path / "topics.tsv").write_text("q1\tparallel processing\nq2\tcompiler optimisation\n")
    rerank("index", "my-cacm", "--corpus", str(corpus))
    out = rerank("retrieve", "my-cacm", "--topics", str(tmp_path / "topics.tsv"), "--k", "5", "--trec").stdout.splitlines()
    assert len(out) == 10 and out[0].startswith("q1 Q0 CACM-")
    # MS MARCO's collection.tsv form, docid<TAB>text, as it is
    (tmp_path / "collection.tsv").write_text("p1\tthe manhattan project\np2\tparallel processing of compilers\n")
    rerank("index", "my-tsv", "--corpus", str(tmp_path / "collection.tsv"))
    out = rerank("retrieve", "my-tsv", "--topics", str(tmp_path / "topics.tsv"), "--trec").stdout.splitlines()
    assert [line.split()[:3] for line in out] == [["q1", "Q0", "p2"], ["q2", "Q0", "p2"]]


@pytest.mark.parametrize("name, documents, note", [
    # A user study indexed trec-dl-2019 and took BM25 over its 5,492 pool passages (nDCG@10 0.46) for the published
    # first stage (0.5058 over 8.8 million), with nothing said.
    ("trec-dl-2019", 5492, "trec-dl-2019's documents are the passages of its candidate runs (bm25, bm25-rm3), not the "
     "whole collection they came from: a search over them is not comparable with those runs or a published first "
     "stage (replay one: rerank retrieve trec-dl-2019 --candidates)"),
    # A QA study indexed trecqa-dev and took BM25 over the candidate sentences of every question (MAP 0.4058) for an
    # answer-selection figure, which ranks each question's own candidates.
    ("trecqa-dev", 1148, "trecqa-dev's documents are the candidate sentences of all its questions: a search over them "
     "ranks other questions' sentences too, where answer selection, and its published figures, rank each question's "
     "own (rerank retrieve trecqa-dev --candidates, then score)"),
])
def test_searching_a_data_sets_own_candidates_says_what_the_search_is_not(rerank, tmp_path, name, documents, note):
    """Needs ../shared/data (TREC DL 2019, TrecQA)."""
    env = {"RERANK_HOME": str(tmp_path)}
    built = rerank("index", name, env=env)
    progress = [line for line in built.stderr.splitlines() if line.startswith(f"rerank: indexing {name}: ")]
    assert all(f"/{documents} docs in " in line for line in progress)  # where the build took long enough to say
    assert built.stderr.splitlines()[len(progress):] == [f"indexed {documents} documents into index '{name}' (lucene)",
                                                         f"rerank: note: {note}"]
    assert rerank("retrieve", name, "--k", "5", env=env).stderr == f"rerank: note: {note}\n"
    assert "note" not in rerank("retrieve", name, "--candidates", env=env).stderr


def test_own_corpus_edge_cases(rerank, session_home, tmp_path):
    """Documents without text are skipped (as Anserini does) and said so; a query of more than 1,024 distinct
    terms used to come back empty with a Java stack trace; a damaged index gave a jnius traceback after the
    stream's header was written; index names could leave indexes/."""
    import json

    docs = [{"id": "d1", "contents": "w5 computer"}, {"id": "d2", "contents": " "}, {"id": "d3", "contents": "w7 w8"}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    built = rerank("index", "edge", "--corpus", str(tmp_path / "c.jsonl"))
    assert "indexed 2 documents" in built.stderr and "1 document without text was skipped" in built.stderr
    (tmp_path / "long.tsv").write_text("1\t" + " ".join(f"w{i}" for i in range(3000)) + "\n")
    found = rerank("retrieve", "edge", "--topics", str(tmp_path / "long.tsv"), "--trec").stdout.split("\n")
    assert [line.split()[2] for line in found if line] == ["d3", "d1"]
    for segments in (session_home / "indexes" / "edge" / "lucene").glob("segments_*"):
        segments.unlink()
    broken = rerank("retrieve", "edge", "--topics", str(tmp_path / "long.tsv"), check=False)
    assert broken.returncode == 1 and "IndexNotFoundException" in broken.stderr and not broken.stdout
    assert "Traceback" not in broken.stderr
    for name in ("../escaped", "", ".hidden"):
        refused = rerank("index", name, "--corpus", str(tmp_path / "c.jsonl"), check=False)
        assert refused.returncode == 2 and "must be a plain folder name" in refused.stderr, name
    assert not (session_home / "escaped").exists()
    missing = rerank("retrieve", "nowhere", "--topics", str(tmp_path / "long.tsv"), check=False)
    assert "build it with: rerank index nowhere --corpus FILE" in missing.stderr


def test_an_index_older_than_its_documents_is_said_by_retrieve_and_by_the_texts_scored(rerank, tiny_tk, tmp_path):
    """A corpus edited (or another --data-root) after the build was searched, and its texts scored, as they were,
    saying nothing: a dense index rebuilt alone ranked by the new texts and the score stage read the old ones."""
    corpus, topics = (tmp_path / "c.jsonl").resolve(), tmp_path / "t.tsv"
    corpus.write_text('{"id": "d1", "contents": "waveguides"}\n{"id": "d2", "contents": "ionosphere"}\n')
    topics.write_text("q1\tdielectric liquids\n")
    rerank("index", "edited", "--corpus", str(corpus))
    assert "warning" not in rerank("retrieve", "edited", "--topics", str(topics)).stderr
    corpus.write_text('{"id": "d1", "contents": "dielectric liquids"}\n{"id": "d2", "contents": "ionosphere"}\n')
    stale = rerank("retrieve", "edited", "--topics", str(topics))
    assert (f"warning: {corpus} has changed since index edited was built; rebuild it (rerank index edited --corpus "
            f"{corpus} --overwrite); until then it searches the documents as they were") in stale.stderr
    scored = rerank("score", "--model", "tk", "--checkpoint", tiny_tk, "--no-cache", input=stale.stdout)
    assert "; until then the texts scored are those of its build" in scored.stderr


@pytest.mark.data
def test_an_index_of_another_copy_of_its_data_set_is_not_said_to_have_changed(data_root, tmp_path, monkeypatch):
    """An index built under one --data-root and searched under another said the data set 'has changed' since its
    build, where it is read from another copy: the warning now says so, and names both."""
    import shutil

    from rerank.retrieve.store import outdated, source_state

    built_from = {"dataset": "cacm", "files": source_state({"dataset": "cacm"}, skip=("qrels", "topics"))}
    assert outdated("cacm", built_from) is None
    shutil.copytree(data_root / "cacm", tmp_path / "cacm")
    monkeypatch.setenv("RERANK_DATA", str(tmp_path))
    said = outdated("cacm", built_from)
    assert said.startswith("data set cacm is read from other files than index cacm was built from "
                           f"({(tmp_path / 'cacm').resolve()}/") and "has changed" not in said, said
    assert f"built from {(data_root / 'cacm').resolve()}/" in said and "rerank index cacm --overwrite" in said


def test_bytes_that_are_not_utf8_are_read_as_anserini_reads_them_and_said(rerank, tmp_path):
    """Latin-1 bytes in a corpus or topics file became U+FFFD without a word (the text changed silently)."""
    (tmp_path / "latin.jsonl").write_bytes(b'{"id": "a", "contents": "caf\xe9 cr\xe8me"}\n{"id": "b", "contents": "tea"}\n')
    (tmp_path / "topics.tsv").write_bytes(b"1\tcaf\xe9 tea\n")
    built = rerank("index", "latin", "--corpus", str(tmp_path / "latin.jsonl"))
    assert "indexed 2 documents" in built.stderr
    assert f"{tmp_path / 'latin.jsonl'}: 2 invalid UTF-8 byte sequence(s) read as U+FFFD" in built.stderr
    found = rerank("retrieve", "latin", "--topics", str(tmp_path / "topics.tsv"), "--trec")
    assert f"{tmp_path / 'topics.tsv'}: 1 invalid UTF-8 byte sequence(s)" in found.stderr  # one note, read twice
    assert found.stderr.count("invalid UTF-8") == 1 and {line.split()[2] for line in found.stdout.splitlines()} == {"a", "b"}
    failed = rerank("retrieve", "nowhere", "--topics", str(tmp_path / "topics.tsv"), check=False)
    assert failed.stderr.strip().splitlines()[-1].startswith("rerank: error: no Lucene index")  # the error stays last


@pytest.mark.parametrize("signal_name, code, said", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_signals_reach_rerank_not_the_jvm(rerank, vaswani_index, session_home, data_root, tmp_path, signal_name,
                                         code, said):
    """Ctrl-C or SIGTERM once the JVM runs is answered by rerank (one line, exit 128 + signal, the temporary
    output removed), not by the JVM's own shutdown, which hung or killed the process mid-call and could leave
    an hs_err_pid*.log in the working folder."""
    from pathlib import Path

    from signals import signal_when_ready

    stream = rerank("retrieve", "vaswani", "--k", "3").stdout
    lines = stream.splitlines(keepends=True)
    third = [i for i, line in enumerate(lines) if line.startswith("# time:")][2]
    two_queries = "".join(lines[: third + 2])  # and the third's first line, which ends the second
    env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "rerank", "score", "--model", "minilm-bi", "--no-cache",
                                "-o", str(tmp_path / "out.run")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=tmp_path)
    process.stdin.write(two_queries)
    process.stdin.flush()  # stdin stays open: once its passages are read, the stage waits for more queries
    maps = Path(f"/proc/{process.pid}/maps")
    err = signal_when_ready(process, lambda: "libjvm" in maps.read_text(), signal_name,  # the JVM reads the passages
                            "rerank score")
    assert process.returncode == code and f"rerank: {said}" in err, err
    assert not list(tmp_path.iterdir())  # no out.run, no temporary sibling, no hs_err_pid*.log


def test_a_build_of_an_index_another_process_is_building_is_refused(rerank, session_home, tmp_path, monkeypatch):
    """Two `rerank index NAME --overwrite` at once raced to move their folders into place; the loser could fail
    with a bare 'Directory not empty', and a dense build's shards were shared. While one process builds an index
    (it holds the build lock, as here), another is refused in one line and leaves the index alone."""
    from rerank.retrieve.store import build_lock

    monkeypatch.setenv("RERANK_HOME", str(session_home))
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "d1", "contents": "some words"}) + "\n")
    with build_lock("busy", "lucene"):  # another process building index 'busy'
        refused = rerank("index", "busy", "--corpus", str(tmp_path / "c.jsonl"), "--overwrite", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "rerank: error: index 'busy' (lucene) is being built by another process; wait for it to finish"]
    assert not (session_home / "indexes" / "busy").exists()
    built = rerank("index", "busy", "--corpus", str(tmp_path / "c.jsonl"))  # once it has finished
    assert "indexed 1 documents" in built.stderr
    assert sorted(p.name for p in (session_home / "indexes" / "busy").iterdir()) == ["lucene"]


def test_a_run_says_which_build_of_which_documents_it_searched_and_with_which_anserini(rerank, tmp_path):
    """A reviewer holding a Lucene run alone could not tell which build of the index it searched (dense and
    Elasticsearch stages record `index_build`), what documents that build was made from, or the Anserini that
    ranked them (its BM25 and analyzer have changed between versions); nor which topics file, by content."""
    import hashlib
    import re

    from rerank.retrieve import jvm

    corpus, topics = (tmp_path / "c.jsonl").resolve(), tmp_path / "t.tsv"
    corpus.write_text('{"id": "d1", "contents": "waveguides"}\n{"id": "d2", "contents": "ionosphere waveguides"}\n')
    topics.write_text("q1\twaveguides\n")
    env = {"RERANK_HOME": str(tmp_path)}
    rerank("index", "mine", "--corpus", str(corpus), env=env)
    manifest_path = tmp_path / "indexes" / "mine" / "lucene" / "rerank-index.json"
    manifest = json.loads(manifest_path.read_text())
    out = rerank("retrieve", "mine", "--topics", str(topics), env=env).stdout
    header = load_run(io.StringIO(out), "run").header
    stage = header.stages[-1]
    assert stage["index_build"] == manifest["source"]["index_build"]
    assert stage["index_documents"] == {"corpus": str(corpus), "files": manifest["source"]["files"]}
    assert re.fullmatch(r"\d+(\.\d+)+", stage["anserini_version"]) and jvm.fatjar().name == (
        f"anserini-{stage['anserini_version']}-fatjar.jar")
    assert header.get("topics_sha256") == hashlib.sha256(topics.read_bytes()).hexdigest()[:16]
    assert "#" not in rerank("cat", "--trec", input=out).stdout  # pure TREC lines still, for trec_eval
    del manifest["source"]["index_build"]  # a build from before ids were recorded: its manifest's time says which
    manifest_path.write_text(json.dumps(manifest))
    out = rerank("retrieve", "mine", "--topics", str(topics), env=env).stdout
    assert load_run(io.StringIO(out), "run").header.stages[-1]["index_build"] == manifest["created"]


def test_a_score_stage_says_which_build_of_the_index_it_read_its_texts_from(rerank, tmp_path, monkeypatch):
    """A score stage reads its texts from the Lucene index the stream names, and named no build of it: a run
    re-scored after the index was rebuilt read that build's texts, and a reviewer holding it could not tell that
    they were not those of the build it was retrieved from. Its entry now names the build (`texts_index_build`), as a
    search names the one it searched; texts from a corpus file (or a data set) come from no build, and it names none."""
    from rerank.models.bert import BiEncoderReranker
    from rerank.runs import RunReader, Stream
    from rerank.score import score_stream

    corpus, topics = (tmp_path / "c.jsonl").resolve(), tmp_path / "t.tsv"
    corpus.write_text('{"id": "d1", "contents": "waveguides"}\n{"id": "d2", "contents": "ionosphere waveguides"}\n')
    topics.write_text("q1\twaveguides\n")
    env = {"RERANK_HOME": str(tmp_path)}
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    manifest = tmp_path / "indexes" / "textbuild" / "lucene" / "rerank-index.json"
    rerank("index", "textbuild", "--corpus", str(corpus), env=env)
    retrieved = rerank("retrieve", "textbuild", "--topics", str(topics), env=env).stdout

    def stage_entries(corpus_given: str | None = None) -> list[dict]:
        """The header of `rerank score --model minilm-bi --no-cache [--corpus FILE]`, in-process: score_stream
        writes it before reading any text (a start loads torch, MiniLM and a JVM)."""
        reader = RunReader(io.StringIO(retrieved), "run")
        rankings = list(reader)
        return score_stream(Stream(reader.header, rankings), BiEncoderReranker(), cache=False,
                            corpus=corpus_given).header.stages

    first = json.loads(manifest.read_text())["source"]["index_build"]
    out = rerank("score", "--model", "minilm-bi", "--no-cache", input=retrieved, env=env).stdout
    stages = load_run(io.StringIO(out), "run").header.stages
    assert stages[-1]["texts_index_build"] == stages[0]["index_build"] == first == stage_entries()[-1][
        "texts_index_build"]
    rerank("index", "textbuild", "--corpus", str(corpus), "--overwrite", env=env)
    rebuilt = json.loads(manifest.read_text())["source"]["index_build"]
    assert rebuilt != first and stage_entries()[-1]["texts_index_build"] == rebuilt
    assert "texts_index_build" not in stage_entries(str(corpus))[-1]

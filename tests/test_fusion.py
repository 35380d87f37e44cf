"""Run fusion: RRF and CombSUM values by hand, headers and timings, the CLI and the pipeline stage."""

from __future__ import annotations

import io
import textwrap

import pytest

from rerank.errors import UsageError
from rerank.retrieve.fusion import fuse
from rerank.runs import load_run

BM25 = textwrap.dedent("""\
    # rerank-run: 1
    # dataset: "vaswani"
    # index: "vaswani"
    # stage: {"name": "bm25", "stage": "retrieve", "backend": "lucene"}
    # time: 1 bm25 10.000 3
    1 Q0 a 1 9.0 bm25
    1 Q0 b 2 7.0 bm25
    1 Q0 c 3 5.0 bm25
    # time: 2 bm25 20.000 3
    2 Q0 x 1 3.0 bm25
    2 Q0 y 2 1.0 bm25
    """)
DENSE = textwrap.dedent("""\
    # rerank-run: 1
    # dataset: "vaswani"
    # index: "vaswani"
    # stage: {"name": "dense", "stage": "retrieve", "backend": "dense"}
    # time: 1 dense 4.000 3
    1 Q0 c 1 0.9 dense
    1 Q0 d 2 0.5 dense
    1 Q0 a 3 0.1 dense
    # time: 3 dense 5.000 1
    3 Q0 z 1 0.7 dense
    """)


def run(text, source):
    return load_run(io.StringIO(text), source)


def fused(method="rrf", **kw):
    stream = fuse([run(BM25, "bm25.run"), run(DENSE, "dense.run")], method, **kw)
    return stream.header, {r.qid: r for r in stream.rankings}


def fused_with(*runs):
    stream = fuse(list(runs), "rrf")
    return stream.header, list(stream.rankings)


def test_rrf_by_hand():
    _, out = fused("rrf", k=60)
    q1 = dict(zip(out["1"].docids, out["1"].scores))
    assert q1["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert q1["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert q1["b"] == pytest.approx(1 / 62) and q1["d"] == pytest.approx(1 / 62)
    assert out["1"].docids == ["c", "a", "d", "b"]  # ties broken by docid descending, as trec_eval does
    assert out["2"].docids == ["x", "y"] and out["3"].docids == ["z"]  # a query in one run only


def test_combsum_minmax_and_zscore_by_hand():
    _, out = fused("combsum", norm="minmax")
    q1 = dict(zip(out["1"].docids, out["1"].scores))
    assert q1 == pytest.approx({"a": 1.0 + 0.0, "b": 0.5, "c": 0.0 + 1.0, "d": 0.5})
    assert out["3"].scores == [1.0]  # a single score normalises to 1
    _, out = fused("combsum", norm="zscore")
    q2 = dict(zip(out["2"].docids, out["2"].scores))
    assert q2 == pytest.approx({"x": 1.0, "y": -1.0})


def test_header_lists_inputs_and_timings_add_up():
    header, out = fused("rrf", k=10, depth=2, name="hybrid")
    assert header.dataset == "vaswani" and header.get("index") == "vaswani"
    stage = header.stages[-1]
    assert stage["name"] == "hybrid" and stage["method"] == "rrf" and stage["k"] == 10 and stage["depth"] == 2
    assert [i["run"] for i in stage["inputs"]] == ["bm25.run", "dense.run"]
    assert stage["inputs"][1]["stages"][0]["backend"] == "dense"
    assert len(out["1"]) == 2
    stages = [(t.stage, t.ms) for t in out["1"].timings]
    assert stages[:2] == [("bm25", 10.0), ("dense", 4.0)] and stages[2][0] == "hybrid"
    assert [t.stage for t in out["3"].timings] == ["dense", "hybrid"]


def test_an_upstream_stage_shared_by_the_inputs_is_timed_once():
    """Fusing bm25 with its own re-ranking used to count bm25's time twice, doubling the cost in budget curves."""
    reranked = BM25.replace('"backend": "lucene"}', '"backend": "lucene"}\n# stage: {"name": "bi", "stage": "score"}') \
        .replace("# time: 1 bm25 10.000 3", "# time: 1 bm25 10.000 3\n# time: 1 bi 2.000 3")
    stream = fuse([run(BM25, "bm25.run"), run(reranked, "bi.run")], "rrf", name="hybrid")
    timings = {r.qid: [(t.stage, t.ms) for t in r.timings] for r in stream.rankings}
    assert timings["1"][:2] == [("bm25", 10.0), ("bi", 2.0)] and [t[0] for t in timings["1"]] == ["bm25", "bi", "hybrid"]
    assert [t[0] for t in timings["2"]] == ["bm25", "hybrid"]
    other = BM25.replace('"backend": "lucene"}', '"backend": "lucene", "k1": 1.2}')  # another bm25, equally fast
    stream = fuse([run(BM25, "bm25.run"), run(other, "bm25b.run")], "rrf", name="hybrid")
    assert [t.stage for t in next(iter(stream.rankings)).timings] == ["bm25", "bm25", "hybrid"]


def test_a_stage_shared_with_a_fused_input_is_timed_once():
    """Fusing `fuse bm25 dense` with bm25 again counted bm25's time twice: in the fused input bm25 sits inside the
    fuse stage's inputs, where the shared stage was not looked for (and two bm25 stages, equally fast, inside one
    fused input were counted once)."""
    hybrid = fuse([run(BM25, "bm25.run"), run(DENSE, "dense.run")], "rrf", name="hybrid")
    written = io.StringIO()
    hybrid.write(written)
    again = fuse([run(written.getvalue(), "hybrid.run"), run(BM25, "bm25.run")], "rrf", name="again")
    assert [t.stage for t in next(iter(again.rankings)).timings] == ["bm25", "dense", "hybrid", "again"]
    other = BM25.replace('"backend": "lucene"}', '"backend": "lucene", "k1": 1.2}')  # another bm25, equally fast
    both = io.StringIO()
    fuse([run(BM25, "bm25.run"), run(other, "bm25b.run")], "rrf", name="both").write(both)
    again = fuse([run(both.getvalue(), "both.run"), run(DENSE, "dense.run")], "rrf", name="again")
    assert [t.stage for t in next(iter(again.rankings)).timings] == ["bm25", "bm25", "both", "dense", "again"]


def test_inputs_that_name_other_packages_or_pipeline_files_fuse():
    """What describes a stage (the packages that encoded the stored vectors it read, the pipeline file that ran it)
    is no reason to refuse its run as an input: it is kept in the input's entries, and not raised to the fusion's."""
    described = '"encoded_with": {"torch": "1.13.0"}, "pipeline": "/p.toml", "pipeline_sha256": "ab"'
    own = DENSE.replace('"backend": "dense"}', f'"backend": "dense", {described}}}')
    header, out = fused_with(run(BM25, "bm25.run"), run(own, "dense.run"))
    assert header.stages[-1]["inputs"][1]["stages"][0]["encoded_with"] == {"torch": "1.13.0"}
    assert not {"encoded_with", "pipeline"} & set(header.stages[-1]) and len(out) == 3


def test_runs_of_different_data_sets_are_refused():
    other = DENSE.replace('"vaswani"', '"cacm"')
    with pytest.raises(UsageError, match="different data sets"):
        fuse([run(BM25, "a"), run(other, "b")])
    with pytest.raises(UsageError, match="at least two"):
        fuse([run(BM25, "a")])


def test_each_input_keeps_its_header_and_a_topics_file_edited_between_them_is_refused():
    """The fused header keeps only the fields its inputs agree on (or a topics file one input alone names): a
    reviewer of it could not tell which index, topics file or cut of queries each input was of. A topics file edited
    between the inputs holds other queries under the same path, which fusion took for the same topics."""
    own = DENSE.replace('# index: "vaswani"', '# index: "vaswani-dense"\n# topics: "/t.tsv"\n# topics_sha256: "aa"')
    header, _ = fused_with(run(BM25, "bm25.run"), run(own, "dense.run"))
    assert [i["header"] for i in header.stages[-1]["inputs"]] == [
        {"dataset": "vaswani", "index": "vaswani"},
        {"dataset": "vaswani", "index": "vaswani-dense", "topics": "/t.tsv", "topics_sha256": "aa"}]
    assert (header.get("topics"), header.get("topics_sha256"), header.get("index")) == ("/t.tsv", "aa", None)
    edited = own.replace('"aa"', '"bb"').replace("dense", "qld")
    with pytest.raises(UsageError, match="different topics files' contents .dense.run: aa, qld.run: bb"):
        fused_with(run(own, "dense.run"), run(edited, "qld.run"))


def test_an_rrf_constant_too_large_for_floats_is_refused():
    """`--k 1e400` as digits was an OverflowError traceback; from 2**53 on, every rank got the same 1 / (k + rank),
    and the fused ranking was docid order."""
    for k in (2 ** 53, 10 ** 400):
        with pytest.raises(UsageError, match="is too large: from 2\\*\\*53 on"):
            fuse([run(BM25, "a"), run(DENSE, "b")], "rrf", k=k)
    assert fused("rrf", k=2 ** 52)[1]["1"].docids == ["c", "a", "d", "b"]


@pytest.mark.data
def test_fuse_cli_reads_stdin_and_files(rerank, tmp_path):
    (tmp_path / "bm25.run").write_text(BM25)
    done = rerank("fuse", str(tmp_path / "bm25.run"), "-", "--method", "combsum", "--norm", "minmax", input=DENSE)
    out = run(done.stdout, "fused")
    assert out.header.stages[-1]["inputs"][1]["run"] == "<stdin>"
    assert out.queries["1"].docids[:2] == ["c", "a"]
    evaluated = rerank("eval", input=done.stdout).stdout
    assert "fused" in evaluated
    assert "rerank: note: 2 queries are missing from some of the runs and are fused from the others (2, 3)" in done.stderr
    for wrong, words in ((["--norm", "zscore"], "reads ranks only"), (["--method", "combsum", "--k", "10"], "has none"),
                         (["--name", "my run"], "must be one word"), (["--name", ""], "must be one word")):
        refused = rerank("fuse", str(tmp_path / "bm25.run"), "-", *wrong, input=DENSE, check=False)
        assert refused.returncode != 0 and words in refused.stderr and not refused.stdout, wrong
    one = rerank("fuse", str(tmp_path / "bm25.run"), check=False)
    assert one.returncode == 2 and "at least two runs" in one.stderr
    bad = rerank("fuse", str(tmp_path / "bm25.run"), str(tmp_path / "nope.run"), check=False)
    assert bad.returncode != 0 and "run file not found" in bad.stderr
    # runs of two data sets: the error alone, not first a note about their queries that differ
    other = rerank("fuse", str(tmp_path / "bm25.run"), "-", input=DENSE.replace('"vaswani"', '"cacm"'), check=False)
    assert other.returncode == 2 and other.stderr.startswith("rerank: error: cannot fuse runs of different data sets")


@pytest.mark.data
def test_a_run_given_twice_is_refused_by_fuse_as_by_eval_and_budget(rerank, tmp_path):
    """`fuse A.run A.run` fused the run with itself (each document counted twice) where eval and budget refuse a run
    given twice; the three share one check, which also knows the file under another spelling (./A.run, a link)."""
    (tmp_path / "bm25.run").write_text(BM25)
    (tmp_path / "link.run").symlink_to(tmp_path / "bm25.run")
    for again in ("bm25.run", "./bm25.run", str(tmp_path / "link.run")):
        twice = rerank("fuse", "bm25.run", again, check=False, cwd=tmp_path)
        assert twice.returncode == 2 and twice.stdout == "" and twice.stderr == (
            f"rerank: error: run {again} is given twice; give it once\n"), again
    evaluated = rerank("eval", "bm25.run", "./bm25.run", check=False, cwd=tmp_path)
    assert evaluated.returncode == 2 and evaluated.stderr == (  # it compared bm25:bm25.run with bm25:./bm25.run
        "rerank: error: run ./bm25.run is given twice; give it once, or label the copies (A=./bm25.run)\n")
    assert rerank("eval", "A=bm25.run", "B=./bm25.run", "-m", "P@1", cwd=tmp_path).stdout


@pytest.mark.data
@pytest.mark.java
def test_pipeline_fuse_stage(rerank, vaswani_index, session_home, tmp_path):
    pipeline = tmp_path / "hybrid.toml"
    pipeline.write_text(textwrap.dedent("""\
        dataset = "vaswani"
        measures = ["MAP", "nDCG@10"]
        [[stage]]
        name = "bm25"
        kind = "retrieve"
        k = 100
        [[stage]]
        name = "bm25-long"
        kind = "retrieve"
        k = 100
        k1 = 1.2
        b = 0.75
        [[stage]]
        name = "fused"
        kind = "fuse"
        inputs = ["bm25", "bm25-long"]
        method = "rrf"
        """))
    done = rerank("run", str(pipeline))
    assert "fused" in done.stdout and "bm25-long" in done.stdout
    with open(session_home / "runs" / "hybrid" / "fused.run") as handle:
        fused_run = load_run(handle, "fused")
    stage = fused_run.header.stages[-1]
    assert [i["name"] for i in stage["inputs"]] == ["bm25", "bm25-long"]
    assert len(fused_run.queries) == 93
    again = rerank("run", str(pipeline))
    assert "fused: up to date" in again.stderr
    pipeline.write_text(pipeline.read_text().replace('inputs = ["bm25", "bm25-long"]', 'inputs = ["bm25", "nope"]'))
    bad = rerank("run", str(pipeline), check=False)
    assert bad.returncode != 0 and "reads 'nope', which no earlier stage makes" in bad.stderr


def test_normalisation_survives_scores_at_the_float_limit():
    """Finite scores are legal in a run; near 1e308 a range or a square overflows, and NaN came out."""
    import math

    from rerank.normalise import minmax, zscores

    extreme = [1e308, -1e308, 0.0]
    assert minmax(extreme) == [1.0, 0.0, 0.5]
    assert all(math.isfinite(z) for z in zscores(extreme)) and zscores(extreme)[2] == 0.0
    assert minmax([8.6, 2.0]) == [1.0, 0.0] and zscores([3.0, 3.0]) == [0.0, 0.0]


def test_combsum_of_raw_scores_that_overflow_is_refused():
    """CombSUM with --norm none added 1e308 to 1e308 and wrote 'inf' into the run, which every reader refuses."""
    from rerank.errors import DataError

    huge = "1 Q0 a 1 1e308 x\n1 Q0 b 2 1.0 x\n"
    with pytest.raises(DataError, match="query 1: the scores of document a add up beyond the largest float"):
        list(fuse([run(huge, "a.run"), run(huge, "b.run")], "combsum", norm="none").rankings)
    assert fused("combsum", norm="none")[1]["1"].scores == [9.1, 7.0, 5.9, 0.5]  # ordinary sums pass

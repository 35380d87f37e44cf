"""The evaluator agrees with trec_eval exactly, and leaderboards carry significance marks."""

import gzip
import json
from csv import reader
from pathlib import Path

import numpy as np
import pytest

from rerank.evaluate.reference import trec_eval
from rerank.evaluate.significance import compare, holm, paired_randomization

TREC_EVAL_NAMES = {"MAP": "map", "MRR": "recip_rank", "P@1": "P_1", "nDCG@10": "ndcg_cut_10",
                   "Recall@100": "recall_100", "HITS@10": "success_10"}


def test_holm_is_monotone_step_down():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_randomization_test_is_seeded_and_sensible():
    diff = np.array([0.1, 0.2, 0.15, 0.3, 0.05, 0.2, 0.1, 0.25])
    assert paired_randomization(diff) == paired_randomization(diff) < 0.05
    assert paired_randomization(np.zeros(5)) == 1.0
    c = compare(np.array([0.5, 0.5, 0.2]), np.array([0.4, 0.5, 0.3]))
    assert (c.wins, c.ties, c.losses) == (1, 1, 1)


def test_an_equal_difference_on_every_query_is_significant_without_a_warning():
    """A run 0.1 above the baseline on every query (NumRet of a deeper run, say) leaked scipy's 'Precision loss ...
    catastrophic cancellation' RuntimeWarning onto stderr."""
    import warnings

    baseline = np.array([0.3, 0.5, 0.7, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare(baseline + 0.1, baseline)
    assert c.t_p < 1e-6 and c.wins == 4


def test_the_tests_and_corrections_a_leaderboard_can_use():
    """Only a Holm-corrected t-test together with the randomization test could mark a difference; PyTerrier's users
    choose the test (t, wilcoxon) and the correction."""
    from scipy import stats

    from rerank.evaluate.significance import correct

    rng = np.random.default_rng(0)
    baseline = rng.uniform(size=30)
    candidate = baseline + rng.normal(0.05, 0.1, size=30)
    c = compare(candidate, baseline, ("wilcoxon",))
    assert c.wilcoxon_p == pytest.approx(stats.wilcoxon(candidate - baseline).pvalue)
    assert compare(candidate, baseline).wilcoxon_p is None  # not computed unless asked for
    assert compare(baseline, baseline, ("wilcoxon",)).wilcoxon_p == 1.0
    # how large, beside whether: the t-test's 95% interval of the mean difference, and Cohen's d_z
    interval = stats.ttest_rel(candidate, baseline).confidence_interval(0.95)
    assert c.ci95 == pytest.approx((interval.low, interval.high)) and c.ci95[0] < c.delta < c.ci95[1]
    assert c.effect_size == pytest.approx((candidate - baseline).mean() / (candidate - baseline).std(ddof=1))
    same = compare(baseline + 0.1, baseline)  # every difference equal: a point, and no finite d_z
    assert same.ci95 == pytest.approx((0.1, 0.1)) and same.effect_size is None
    one = compare(np.array([0.5]), np.array([0.2]))  # one query: no spread to estimate, so no interval at all
    assert one.ci95 is None and one.t_p == 1.0  # it was (0.3, 0.3), as sure as a point
    assert correct([0.01, 0.04, 0.5], "bonferroni") == pytest.approx([0.03, 0.12, 1.0])
    assert correct([0.01, 0.04, 0.5], "none") == [0.01, 0.04, 0.5]
    assert correct([0.01, 0.04, 0.5], "holm") == holm([0.01, 0.04, 0.5])


def _whole_matrix_randomization(diff, permutations=10_000, seed=42):
    """The test as one sign matrix of permutations x queries: what paired_randomization must equal."""
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(permutations, diff.size))
    extreme = np.count_nonzero(np.abs((signs * diff).mean(axis=1)) >= abs(diff.mean()) - 1e-12)
    return (extreme + 1) / (permutations + 1)


@pytest.mark.parametrize("size", [3, 101, 700])
def test_randomization_test_in_blocks_equals_the_whole_matrix(size, monkeypatch):
    import rerank.evaluate.significance as significance

    diff = np.random.default_rng(size).normal(0.01, 0.2, size)
    monkeypatch.setattr(significance, "SIGN_BLOCK", 1000)  # several blocks, one of them partial
    assert paired_randomization(diff) == _whole_matrix_randomization(diff)


def test_randomization_test_memory_does_not_grow_with_permutations_times_queries():
    """50,000 queries (MS MARCO's training set) made a 10,000 x 50,000 sign matrix, twice: 8 GB."""
    import tracemalloc

    diff = np.random.default_rng(0).normal(0.0, 0.1, 2_000)  # whole, 2 x 160 MB
    tracemalloc.start()
    try:
        paired_randomization(diff)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, f"peak {peak / 2**20:.0f} MB"


@pytest.mark.data
@pytest.mark.java
@pytest.mark.parametrize("name, qrels", [("vaswani", "vaswani/qrels"), ("cacm", "cacm/qrels.cacm.txt")])
def test_retrieve_eval_equals_trec_eval(name, qrels, rerank, data_root, session_home, tmp_path, request):
    if name == "vaswani":  # `rerank retrieve vaswani`, searched once a session
        stream = request.getfixturevalue("vaswani_bm25_run")
    else:
        if not (session_home / "indexes" / name / "lucene").exists():  # other back ends' indexes of it may be there
            rerank("index", name)
        stream = rerank("retrieve", name).stdout
    trec = rerank("cat", "--trec", input=stream).stdout
    (tmp_path / "run").write_text(trec)
    ours = json.loads(rerank("eval", "--format", "json", *sum((["-m", m] for m in TREC_EVAL_NAMES), []),
                             input=stream).stdout)[0]
    reference = trec_eval(data_root / qrels, tmp_path / "run", ["map", "recip_rank", "P.1", "ndcg_cut.10",
                                                               "recall.100", "success.10"])
    for label, te_name in TREC_EVAL_NAMES.items():
        assert round(ours[label], 4) == reference[te_name], label


@pytest.mark.parametrize("batch", [1, 25, 10**6])
def test_a_run_evaluated_in_batches_of_queries_gives_trec_evals_figures(batch, tmp_path, monkeypatch):
    """evaluate hands pytrec_eval a batch of queries at a time (a whole run at once cost 70 MB a million lines):
    every query evaluated once, in whichever batch, with its own judgements; a query deeper than a batch, one
    judged and not retrieved, and one retrieved and not judged, as trec_eval -c -q gives them."""
    import random

    from rerank.evaluate import measures
    from rerank.runs import load_run

    rng = random.Random(7)
    run_lines, qrels_lines = [], []
    for q in range(12):
        depth = [3, 40, 1, 17][q % 4]
        for rank, doc in enumerate(rng.sample(range(60), depth), 1):
            run_lines.append(f"q{q} Q0 d{doc} {rank} {round(100 - rank + rng.random(), 1)} t\n")
        if q != 5:  # q5: retrieved, not judged
            qrels_lines += [f"q{q} 0 d{doc} {rng.randint(0, 2)}\n" for doc in rng.sample(range(60), 15)]
    qrels_lines.append("q99 0 d1 1\n")  # judged, never retrieved
    (tmp_path / "run").write_text("".join(run_lines))
    (tmp_path / "qrels").write_text("".join(qrels_lines))
    monkeypatch.setattr(measures, "BATCH_DOCUMENTS", batch)
    named = measures.parse_measures(["MAP", "nDCG@10", "P@5", "MRR"], 1)
    qrels = {}
    for line in qrels_lines:
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    ours = measures.evaluate(load_run(open(tmp_path / "run"), "run"), qrels, named)
    theirs = trec_eval(tmp_path / "qrels", tmp_path / "run", ["map", "ndcg_cut.10", "P.5", "recip_rank"],
                       per_query=True)
    names = {"MAP": "map", "nDCG@10": "ndcg_cut_10", "P@5": "P_5", "MRR": "recip_rank"}
    assert ours.missing == ["q99"] and ours.unjudged == ["q5"]
    for label, name in names.items():  # (trec_eval -q has no line for q99; its mean counts it as 0)
        assert {qid: round(value, 4) for qid, value in ours.per_query[label].items()} == \
            {**{qid: value for (measure, qid), value in theirs.items() if measure == name and qid != "all"},
             "q99": 0.0}, label


@pytest.mark.data
def test_trec_format_gives_trec_evals_lines(rerank, data_root):
    """`--format trec` prints what `trec_eval -q -c` prints, line for line but the measures' names, so scripts
    written against trec_eval's output read it; the tables before it were rerank's own layout alone. The measures
    come in trec_eval's order (map, recip_rank, ndcg_cut_10), not -m's: they came as given, which this test hid by
    comparing the lines sorted."""
    import subprocess

    from rerank.evaluate.reference import trec_eval_binary

    run = str(data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt")
    qrels = str(data_root / "trec-dl" / "qrels" / "qrels.dl19-passage.txt")
    ours = rerank("eval", run, "--qrels", qrels, "--min-rel", "2", "-m", "AP", "-m", "nDCG@10", "-m", "RR",
                  "--format", "trec", "-q").stdout.splitlines()
    theirs = subprocess.run([str(trec_eval_binary()), "-c", "-q", "-l", "2", "-m", "map", "-m", "ndcg_cut.10", "-m",
                             "recip_rank", qrels, run], capture_output=True, text=True, check=True).stdout.splitlines()
    named = {"MAP": "map", "nDCG@10": "ndcg_cut_10", "MRR": "recip_rank"}  # rerank's labels of AP and RR
    renamed = [f"{named[measure.strip()]:<22}\t{qid}\t{value}" for measure, qid, value in (l.split("\t") for l in ours)]
    assert renamed == theirs and len(ours) == 3 * 44
    assert rerank("eval", run, "--qrels", qrels, "--min-rel", "2", "-m", "AP", "--format", "trec").stdout == \
        "MAP                   \tall\t" + theirs[-3].split("\t")[2] + "\n"  # without -q, the means alone
    twice = rerank("eval", run, f"again={run}", "--qrels", qrels, "--format", "trec", check=False)
    assert twice.returncode == 2 and "--format trec gives one run's lines" in twice.stderr


@pytest.mark.data
def test_trec_format_has_no_lines_for_a_query_the_run_lacks(rerank, data_root, tmp_path):
    """trec_eval -q -c counts a judged query missing from the run as 0 in `all` but prints no lines for it; --format
    trec printed each such query's zeros as lines of their own, which trec_eval's output never holds."""
    import subprocess

    from rerank.evaluate.reference import trec_eval_binary

    qrels = str(data_root / "trec-dl" / "qrels" / "qrels.dl19-passage.txt")
    lines = (data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt").read_text().splitlines(keepends=True)
    run = tmp_path / "without-two.run"
    run.write_text("".join(line for line in lines if line.split()[0] not in ("1037798", "104861")))
    ours = rerank("eval", str(run), "--qrels", qrels, "--min-rel", "2", "-m", "AP", "--format", "trec",
                  "-q").stdout.splitlines()
    theirs = subprocess.run([str(trec_eval_binary()), "-c", "-q", "-l", "2", "-m", "map", qrels, str(run)],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line.replace("MAP", "map", 1) for line in ours] == theirs
    assert len(ours) == 42 and ours[-1].split("\t")[1] == "all"


@pytest.mark.data
def test_gzipped_runs_are_read(rerank, data_root, tmp_path):
    """TREC's archived runs come gzipped; eval reads them as it reads gzipped topics and qrels."""
    plain = data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt"
    packed = tmp_path / "bm25.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    qrels = str(data_root / "trec-dl" / "qrels" / "qrels.dl19-passage.txt")
    figures = [rerank("eval", str(path), "--qrels", qrels, "--min-rel", "2", "-m", "nDCG@10").stdout.split()[-1]
               for path in (plain, packed)]
    assert figures == ["0.5058", "0.5058"]
    # Saved under a plain name (gzip's magic bytes tell it), or as UTF-16 with its mark (PowerShell's `>`): the
    # run was 'not UTF-8 text' and the qrels U+FFFD bytes in 8 columns, or "grade '\x001\x00' is not an integer"
    renamed, utf16 = tmp_path / "bm25.txt", tmp_path / "bm25-utf16.txt"
    renamed.write_bytes(packed.read_bytes())
    utf16.write_bytes(plain.read_text().encode("utf-16"))
    packed_qrels, utf16_qrels = tmp_path / "qrels-gz.txt", tmp_path / "qrels-utf16.txt"
    packed_qrels.write_bytes(gzip.compress(Path(qrels).read_bytes()))
    utf16_qrels.write_bytes(Path(qrels).read_text().encode("utf-16"))
    for run, judged in ((renamed, packed_qrels), (utf16, utf16_qrels)):
        done = rerank("eval", str(run), "--qrels", str(judged), "--min-rel", "2", "-m", "nDCG@10")
        assert done.stdout.split()[-1] == "0.5058" and "U+FFFD" not in done.stderr, done.stderr
    (tmp_path / "bad.gz").write_text("1 Q0 a 1 2.5 t\n")
    done = rerank("eval", str(tmp_path / "bad.gz"), "--qrels", qrels, check=False)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [
        f"rerank: error: {tmp_path / 'bad.gz'}: cannot be read as gzip (Not a gzipped file (b'1 '))"]


@pytest.mark.data
def test_depth_evaluates_each_querys_top_documents_as_trec_eval_M(rerank, data_root):
    """trec_eval -M: a 100-deep run evaluated at 10, as a re-ranker of the top 10 would be judged (it had no
    counterpart: MAP and Recall have no cutoff in ir_measures' names, so a run had to be cut by hand)."""
    dl = data_root / "trec-dl"
    qrels, run = dl / "qrels" / "qrels.dl19-passage.txt", dl / "bm25" / "trec_results_dl19.txt"
    measures = ["MAP", "Recall@100", "nDCG@10"]
    cut, whole = (json.loads(rerank("eval", str(run), "--qrels", str(qrels), "--min-rel", "2", *depth,
                                    *[a for m in measures for a in ("-m", m)], "--format", "json").stdout)[0]
                  for depth in (["-M", "10"], []))
    ref = trec_eval(qrels, run, ["map", "recall.100", "ndcg_cut.10"], min_rel=2, depth=10)
    assert [round(cut[m], 4) for m in measures] == [ref["map"], ref["recall_100"], ref["ndcg_cut_10"]]
    assert cut["MAP"] < whole["MAP"] and cut["nDCG@10"] == whole["nDCG@10"]
    done = rerank("eval", str(run), "--qrels", str(qrels), "--depth", "0", check=False)
    assert done.returncode == 2 and "--depth" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.data
def test_an_msmarco_run_converted_by_cat_evaluates_as_pyserinis_conversion_does(rerank, data_root, tmp_path):
    """Pyserini's runs in --output-format msmarco ('qid<TAB>docid<TAB>rank') were refused with 'convert it to TREC
    lines first', and rerank had no way to. `cat --msmarco` writes what Pyserini's converter writes, each document
    scored 1/rank, so eval's figures are trec_eval's on that conversion."""
    dl = data_root / "trec-dl"
    qrels = dl / "qrels" / "qrels.dl19-passage.txt"
    records = [line.split() for line in (dl / "bm25" / "trec_results_dl19.txt").read_text().splitlines()]
    (tmp_path / "run.tsv").write_text("".join(f"{qid}\t{docid}\t{rank}\n" for qid, _, docid, rank, _, _ in records))
    (tmp_path / "pyserini.trec").write_text("".join(f"{qid} Q0 {docid} {rank} {1 / int(rank)} TEMPRUN\n"
                                                    for qid, _, docid, rank, _, _ in records))
    refused = rerank("eval", str(tmp_path / "run.tsv"), "--qrels", str(qrels), check=False)
    assert refused.returncode == 1 and "rerank cat --msmarco FILE converts it" in refused.stderr
    converted = rerank("cat", "--msmarco", "--trec", str(tmp_path / "run.tsv")).stdout
    assert [line.split()[:5] for line in converted.splitlines()] == [
        [qid, "Q0", docid, rank, repr(1 / int(rank))] for qid, _, docid, rank, _, _ in records]
    board, = json.loads(rerank("eval", "--qrels", str(qrels), "--min-rel", "2", "-m", "MAP", "-m", "nDCG@10",
                               "-m", "MRR@10", "--format", "json", input=converted).stdout)
    ref = trec_eval(qrels, tmp_path / "pyserini.trec", ["map", "ndcg_cut.10", "recip_rank"], min_rel=2, depth=10)
    assert round(board["nDCG@10"], 4) == ref["ndcg_cut_10"] and round(board["MRR@10"], 4) == ref["recip_rank"]
    assert round(board["MAP"], 4) == trec_eval(qrels, tmp_path / "pyserini.trec", ["map"], min_rel=2)["map"]


@pytest.mark.data
def test_a_ranx_json_run_and_qrels_evaluate_as_trec_eval_does_on_their_trec_files(rerank, data_root, tmp_path):
    """ranx saves runs and qrels as JSON, {qid: {docid: score or grade}}: eval refused the run as 'expected 6 columns,
    found 1' and the qrels as 'its lines are JSON records', naming neither the layout nor a way to read it. The run
    converts with `cat --ranx`, the qrels are read as they are, and eval's figures are trec_eval's on the TREC files."""
    dl = data_root / "trec-dl"
    qrels, run = dl / "qrels" / "qrels.dl19-passage.txt", dl / "bm25" / "trec_results_dl19.txt"
    as_json = {}
    for qid, _, docid, _, score, _ in (line.split() for line in run.read_text().splitlines()):
        as_json.setdefault(qid, {})[docid] = float(score)
    (tmp_path / "run.json").write_text(json.dumps(as_json, indent=2))  # as ranx's Run.save("run.json") writes it
    grades = {}
    for qid, _, docid, grade in (line.split() for line in qrels.read_text().splitlines()):
        grades.setdefault(qid, {})[docid] = int(grade)
    (tmp_path / "qrels.json").write_text(json.dumps(grades, indent=2))
    refused = rerank("eval", str(tmp_path / "run.json"), "--qrels", str(qrels), check=False)
    assert refused.returncode == 1 and "ranx's JSON run, {qid: {docid: score}}? rerank cat --ranx FILE converts it" \
        in refused.stderr and "Traceback" not in refused.stderr
    converted = rerank("cat", "--ranx", str(tmp_path / "run.json")).stdout
    board, = json.loads(rerank("eval", "--qrels", str(tmp_path / "qrels.json"), "--min-rel", "2", "-m", "MAP",
                               "-m", "nDCG@10", "--format", "json", input=converted).stdout)
    ref = trec_eval(qrels, run, ["map", "ndcg_cut.10"], min_rel=2)
    assert [round(board["MAP"], 4), round(board["nDCG@10"], 4)] == [ref["map"], ref["ndcg_cut_10"]]
    both = rerank("cat", "--ranx", "--msmarco", str(tmp_path / "run.json"), check=False)
    assert both.returncode == 2 and "--msmarco and --ranx are two layouts of RUN" in both.stderr


@pytest.mark.data
def test_dl19_leaderboard_matches_trec_eval_with_graded_relevance(rerank, data_root, tmp_path):
    dl = data_root / "trec-dl"
    bm25 = rerank("retrieve", "trec-dl-2019", "--candidates", "bm25").stdout
    rm3 = rerank("retrieve", "trec-dl-2019", "--candidates", "bm25-rm3").stdout
    (tmp_path / "bm25").write_text(bm25)
    (tmp_path / "rm3").write_text(rm3)
    board = json.loads(rerank("eval", str(tmp_path / "bm25"), str(tmp_path / "rm3"), "--format", "json",
                              "-m", "nDCG@10", "-m", "MRR@10", "-m", "MAP").stdout)
    by_run = {row["run"]: row for row in board}
    assert round(by_run["bm25"]["nDCG@10"], 4) == 0.5058
    assert by_run["bm25"]["baseline"] and not by_run["bm25-rm3"]["baseline"]
    assert set(by_run["bm25-rm3"]["versus_baseline"]["MAP"]) >= {"t_p", "rand_p", "holm_p", "wins", "ties", "losses"}
    # Same figures as trec_eval with relevance level 2 on the published run files.
    for run, path in (("bm25", dl / "bm25" / "trec_results_dl19.txt"), ("bm25-rm3", dl / "bm25-rm3" / "trec_results_dl19.txt")):
        ref = trec_eval(dl / "qrels" / "qrels.dl19-passage.txt", path, ["ndcg_cut.10", "map", "recip_rank"], min_rel=2)
        assert round(by_run[run]["nDCG@10"], 4) == ref["ndcg_cut_10"]
        assert round(by_run[run]["MAP"], 4) == ref["map"]
    text = rerank("eval", str(tmp_path / "bm25"), str(tmp_path / "rm3")).stdout
    assert "(baseline)" in text and "W/T/L" in text and "0.2807+" in text  # MAP gain is significant
    csv = rerank("eval", str(tmp_path / "bm25"), str(tmp_path / "rm3"), "--format", "csv", "-m", "MAP").stdout
    lines = list(reader(csv.splitlines()))  # numbers apart from marks, every digit (as JSON's)
    versus = by_run["bm25-rm3"]["versus_baseline"]["MAP"]
    assert lines == [["run", "baseline", "MAP", "MAP delta", "MAP delta 95% CI low", "MAP delta 95% CI high",
                      "MAP effect size (d)", "MAP vs baseline", "MAP p (t-test)",
                      "MAP p (t-test, Holm)", "MAP p (randomization)", "MAP p (randomization, Holm)", "MAP W/T/L",
                      "missing_queries", "unjudged_queries"],
                     ["bm25-rm3", "false", repr(by_run["bm25-rm3"]["MAP"]),
                      repr(by_run["bm25-rm3"]["MAP"] - by_run["bm25"]["MAP"]), *map(repr, versus["ci95"]),
                      repr(versus["effect_size"]), "+", repr(versus["t_p"]),
                      repr(versus["holm_p"]), repr(versus["rand_p"]), repr(versus["corrected"]["randomization"]),
                      "27/1/15", "0", "0"],
                     ["bm25", "true", repr(by_run["bm25"]["MAP"]), *[""] * 10, "0", "0"]]


@pytest.mark.data
def test_trec_eval_names_and_thresholds_match_trec_eval(rerank, data_root):
    """trec_eval's own measure names work, and -l 2 reaches every thresholded measure (Rprec, bpref too)."""
    dl = data_root / "trec-dl"
    qrels, run = dl / "qrels" / "qrels.dl19-passage.txt", dl / "bm25" / "trec_results_dl19.txt"
    names = ["ndcg_cut.10", "P.5,10", "recip_rank", "Rprec", "bpref", "map_cut.10"]
    ours = json.loads(rerank("eval", str(run), "--qrels", str(qrels), "--min-rel", "2", "--format", "json",
                             *sum((["-m", m] for m in names), [])).stdout)[0]
    ref = trec_eval(qrels, run, names, min_rel=2)
    for label, te_name in {"nDCG@10": "ndcg_cut_10", "P@5": "P_5", "P@10": "P_10", "MRR": "recip_rank",
                           "Rprec": "Rprec", "Bpref": "bpref", "MAP@10": "map_cut_10"}.items():
        assert round(ours[label], 4) == ref[te_name], label
    assert ref["Rprec"] != trec_eval(qrels, run, ["Rprec"])["Rprec"]  # the threshold matters here


@pytest.mark.data
@pytest.mark.java
def test_trec_evals_official_set_matches_trec_eval(rerank, data_root):
    """`-m official` (trec_eval's default output) was refused, and `iprec_at_recall` with it: its recall levels
    0.0 and 1.0 did not read as measures. Every figure of the set equals trec_eval's; gm_map, which ir_measures
    lacks, is said to be left out."""
    dl = data_root / "trec-dl"
    qrels, run = dl / "qrels" / "qrels.dl19-passage.txt", dl / "bm25" / "trec_results_dl19.txt"
    done = rerank("eval", str(run), "--qrels", str(qrels), "--min-rel", "2", "--format", "json", "-m", "official")
    ours = json.loads(done.stdout)[0]
    ref = trec_eval(qrels, run, ["official"], min_rel=2)
    names = {"MAP": "map", "MRR": "recip_rank", "Rprec": "Rprec", "Bpref": "bpref", "NumQ": "num_q",
             "NumRel": "num_rel", "NumRet": "num_ret", "NumRelRet": "num_rel_ret",
             **{f"P@{k}": f"P_{k}" for k in (5, 10, 15, 20, 30, 100, 200, 500, 1000)},
             **{f"IPrec@{level / 10:.1f}": f"iprec_at_recall_{level / 10:.2f}" for level in range(11)}}
    assert set(ref) == {*names.values(), "gm_map"}
    # num_rel at -l 2 is the sum of trec_eval's per-query figures, its total without -c; with -c it counts grade >= 1
    ref["num_rel"] = trec_eval(qrels, run, ["num_rel"], min_rel=2, complete=False)["num_rel"]
    for label, te_name in names.items():
        assert round(ours[label], 4) == ref[te_name], label
    assert "rerank: note: trec_eval's gm_map cannot be computed by ir_measures: left out" in done.stderr
    assert list(ours)[2:8] == ["NumQ", "NumRet", "NumRel", "NumRelRet", "MAP", "Rprec"]  # as trec_eval prints them
    # Two runs: sorted, and wins counted, by MAP, the set's first measure that is not a count (NumQ ranks nothing)
    rm3 = dl / "bm25-rm3" / "trec_results_dl19.txt"
    board = rerank("eval", str(run), str(rm3), "--qrels", str(qrels), "--min-rel", "2", "-m", "official").stdout
    header, first, second = board.splitlines()[:3]
    assert header.endswith("W/T/L (MAP)") and first.startswith(str(rm3)) and "(baseline)" in second  # MRR: BM25 first


@pytest.mark.data
@pytest.mark.java
def test_counts_are_summed_as_trec_eval_sums_them(rerank, data_root, tmp_path):
    """num_q and num_rel_ret were averaged (NumQ 1.0000); a query missing from the run still counts in num_q and
    num_rel under -c. num_rel per query counted grade >= 1 under --min-rel 2 (trec_eval -q -l 2: grade >= 2)."""
    dl = data_root / "trec-dl"
    qrels, lines = dl / "qrels" / "qrels.dl19-passage.txt", (dl / "bm25" / "trec_results_dl19.txt").read_text()
    first = lines.split()[0]
    (tmp_path / "run").write_text("".join(line + "\n" for line in lines.splitlines() if line.split()[0] != first))
    names = ["num_q", "num_rel", "num_ret", "num_rel_ret"]
    ours = json.loads(rerank("eval", str(tmp_path / "run"), "--qrels", str(qrels), "--min-rel", "2", "--format", "json",
                             *sum((["-m", m] for m in names), [])).stdout)[0]
    ref = trec_eval(qrels, tmp_path / "run", names, min_rel=2)
    # num_rel counts grade >= 2 as every level-2 measure does (trec_eval -q -l 2 per query; ir_measures
    # NumRel(rel=2)); trec_eval -c's `all` line alone counts grade >= 1 there, whatever -l says
    relevant = sum(int(line.split()[3]) >= 2 for line in qrels.read_text().splitlines())
    assert {"NumQ": 43, "NumRel": relevant, "NumRet": 4200, "NumRelRet": ref["num_rel_ret"]} == \
        {label: ours[label] for label in ("NumQ", "NumRel", "NumRet", "NumRelRet")}
    assert ref["num_q"] == 43 and ref["num_ret"] == 4200 and ref["num_rel"] > relevant
    per_query = json.loads(rerank("eval", str(tmp_path / "run"), "--qrels", str(qrels), "--min-rel", "2", "-m",
                                  "num_rel", "--per-query", "--format", "json").stdout)
    ref_per_query = trec_eval(qrels, tmp_path / "run", ["num_rel"], min_rel=2, per_query=True)
    rows = {row["qid"]: row["NumRel"] for row in per_query}
    assert {qid: value for (_, qid), value in ref_per_query.items() if qid != "all"} == \
        {qid: value for qid, value in rows.items() if qid not in (first, "all")} and rows["all"] == relevant


def test_measure_names_and_their_errors():
    from rerank.errors import UsageError
    from rerank.evaluate.measures import parse_measure, parse_measures

    assert [m.label for m in parse_measures(["P.5,10", "P@5", "ndcg_cut_10", "IPrec(recall=0.1)",
                                             "IPrec(recall=0.2)"], 2)] == \
        ["P@5", "P@10", "nDCG@10", "IPrec(recall=0.1)", "IPrec(recall=0.2)"]
    assert parse_measure("bpref", 2).measure.params["rel"] == 2
    assert "rel" not in parse_measure("NumRet", 2).measure.params  # a count, not a threshold
    assert parse_measure("AP(rel=3)", 2).measure.params["rel"] == 3
    assert parse_measure("num_rel_ret", 2).measure.params["rel"] == 2  # trec_eval -l 2 counts grade >= 2
    assert parse_measure("IPrec@0.1", 2).label == "IPrec@0.1"
    for bad, message in (("P.5,10", "names 2 measures"), ("nDCG@0", "cannot read"), ("ndcg_cut.0", "cannot read"),
                         ("SDCG@10", "cannot be computed"), ("runid", "unknown measure"),
                         # trec_eval's own, which ir_measures cannot compute, were "unknown measure" or "cannot read"
                         ("gm_map", "trec_eval's gm_map cannot be computed by ir_measures"),
                         ("11pt_avg", "trec_eval's 11pt_avg cannot be computed"),
                         ("relative_P.5", "trec_eval's relative_P.5 cannot be computed"),
                         # a parameter the measure has not: was "cannot be computed by ir_measures' providers"
                         ("nDCG(rel=2)@10", r"nDCG takes no parameter 'rel' \(its parameters: cutoff, dcg, gains"),
                         ("AP(cutof=10)", "AP takes no parameter 'cutof'"),
                         ("P@5(rel=2)", r"parameters go before the cutoff, P\(rel=2\)@5"),  # was "cannot read" alone
                         ("P@1.0", "a cutoff must be a whole number of documents, not 1.0")):
        with pytest.raises(UsageError, match=message):
            parse_measure(bad, 2)


def test_several_measures_in_one_name_are_told_to_name_each_alone():
    """`-m MAP,P@5` (or ir_measures' `-m 'AP nDCG@10'`) said 'cannot read measure' and listed example names, each of
    which the user had typed."""
    from rerank.errors import UsageError
    from rerank.evaluate.measures import parse_measures

    for text, options in (("MAP,P@5", "-m MAP -m P@5"), ("AP nDCG@10", "-m AP -m nDCG@10"),
                          ("map, P.5", "-m map -m P.5")):
        with pytest.raises(UsageError, match=f"cannot read measure '{text}': several measures in one name; "
                                             f"name each alone \\({options} on the command line"):
            parse_measures([text], 1)
    with pytest.raises(UsageError, match="cannot read measure 'MAP,nDCG10'; try MAP"):  # not a list of names: as before
        parse_measures(["MAP,nDCG10"], 1)


@pytest.mark.java
def test_tied_scores_rank_alike_in_every_measure(tmp_path):
    """trec_eval breaks ties by docid descending (b before a); ir_measures' RR@k and Judged@k providers broke
    them by docid ascending, so MRR@10 said 1.0 where MRR, P@1 and trec_eval say 0.5 and 0."""
    from rerank.data.formats import read_qrels
    from rerank.evaluate.measures import evaluate, parse_measures
    from rerank.runs import load_run

    (tmp_path / "qrels").write_text("1 0 a 1\n1 0 c 0\n")
    (tmp_path / "run").write_text("1 Q0 a 1 1.0 t\n1 Q0 b 2 1.0 t\n1 Q0 c 3 0.5 t\n")
    with open(tmp_path / "run") as handle:
        run = load_run(handle, "run")
    measures = parse_measures(["MRR", "MRR@10", "MRR@1", "P@1", "Judged@1", "Judged@3"], 1)
    got = evaluate(run, read_qrels(str(tmp_path / "qrels")), measures)
    assert {m.label: got.overall(m.label) for m in measures} == \
        {"MRR": 0.5, "MRR@10": 0.5, "MRR@1": 0.0, "P@1": 0.0, "Judged@1": 0.0, "Judged@3": 2 / 3}
    assert trec_eval(tmp_path / "qrels", tmp_path / "run", ["recip_rank"]) == {"recip_rank": 0.5}


@pytest.mark.java
def test_scores_a_float_apart_tie_as_trec_eval_reads_them(rerank, tmp_path):
    """trec_eval keeps scores as C floats: 100.000002 and 100.000001 are one float, a tie it breaks by docid
    descending (b first). eval ranked a first by the doubles, MAP 1.0 where trec_eval, pytrec_eval and ir_measures
    say 0.5; -M 1 kept a, trec_eval -M 1 keeps b."""
    (tmp_path / "qrels").write_text("1 0 a 1\n1 0 b 0\n")
    (tmp_path / "run").write_text("1 Q0 a 1 100.000002 t\n1 Q0 b 2 100.000001 t\n1 Q0 c 3 99 t\n")
    for depth in ([], ["-M", "1"]):
        got = json.loads(rerank("eval", str(tmp_path / "run"), "--qrels", str(tmp_path / "qrels"), "-m", "MAP",
                                "-m", "MRR", *depth, "--format", "json").stdout)[0]
        ref = trec_eval(tmp_path / "qrels", tmp_path / "run", ["map", "recip_rank"], depth=int(depth[1]) if depth
                        else None)
        assert (got["MAP"], got["MRR"]) == (ref["map"], ref["recip_rank"]) == ((0.5, 0.5) if not depth else (0, 0))


@pytest.mark.java
@pytest.mark.parametrize("grades", ["-2 -5", "-1 -1"])
def test_a_query_judged_only_below_zero_is_evaluated_as_trec_eval_reads_it(grades, rerank, tmp_path):
    """trec_eval reads every negative grade alike (in the pool, unjudged) but sizes an array by a query's highest
    grade. A query whose every grade is -2 or lower (the Web track's junk pages) made pytrec_eval, so eval, die of a
    segmentation fault, with no word said; one judged only -1, evaluated first, lost its figures (NumRet 0) or,
    with several measures, crashed too. Its figures are trec_eval's for the same judgements at -1."""
    (tmp_path / "run").write_text("2 Q0 c 1 1 t\n2 Q0 d 2 0 t\n1 Q0 a 1 2 t\n1 Q0 b 2 1 t\n")
    c, d = grades.split()
    (tmp_path / "qrels").write_text(f"1 0 a 1\n1 0 b 0\n2 0 c {c}\n2 0 d {d}\n")
    (tmp_path / "minus1").write_text("1 0 a 1\n1 0 b 0\n2 0 c -1\n2 0 d -1\n")  # trec_eval evaluates 1 first
    names = {"MAP": "map", "Bpref": "bpref", "nDCG": "ndcg", "P@1": "P_1", "NumRel": "num_rel", "NumRet": "num_ret",
             "NumRelRet": "num_rel_ret", "MRR": "recip_rank", "Rprec": "Rprec"}
    got = json.loads(rerank("eval", "run", "--qrels", "qrels", "--format", "json", "-q",
                            *sum((["-m", m] for m in names), []), cwd=tmp_path).stdout)
    ref = trec_eval(tmp_path / "minus1", tmp_path / "run", [n.replace("P_", "P.") for n in names.values()],
                    per_query=True)
    assert [row["qid"] for row in got] == ["1", "2", "all"]
    for row in got:
        assert {label: row[label] for label in names} == {label: ref[(name, row["qid"])] for label, name in
                                                          names.items()}, row["qid"]


@pytest.mark.java
def test_ids_with_unicode_spaces_are_split_as_trec_eval_splits(rerank, tmp_path):
    """trec_eval splits lines on ASCII whitespace: a docid holding a no-break space (a Wikipedia title) is one
    column. The qrels reader refused it ('found 5 columns'), and a run with it was read, or refused as 7 columns,
    depending on whether some other line of the file had two spaces in a row."""
    nbsp = "a\u00a0b"
    (tmp_path / "qrels").write_text(f"1 0 {nbsp} 1\n1 0 c 0\n", encoding="utf-8")
    for name, gap in (("single", " "), ("double", "  ")):
        (tmp_path / name).write_text(f"1 Q0 c 1 3 t\n1{gap}Q0 {nbsp} 2 2 t\n", encoding="utf-8")
        got = json.loads(rerank("eval", str(tmp_path / name), "--qrels", str(tmp_path / "qrels"), "-m", "MAP",
                                "--format", "json").stdout)[0]
        assert got["MAP"] == trec_eval(tmp_path / "qrels", tmp_path / name, ["map"])["map"] == 0.5


@pytest.mark.data
def test_per_query_and_formats(rerank, tmp_path):
    stream = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    csv = rerank("eval", "--per-query", "--format", "csv", input=stream).stdout.splitlines()
    assert csv[0] == "run,qid,MAP,MRR,P@1"
    assert csv[-1].startswith("candidates,all,")
    assert len(csv) == 1 + 65 + 1  # the judged (clean) questions, then the mean
    rows = json.loads(rerank("eval", "--per-query", "--format", "json", input=stream).stdout)
    assert rows[-1]["qid"] == "all" and all(isinstance(row["MAP"], float) for row in rows)
    assert [float(line.split(",")[2]) for line in csv[1:]] == [row["MAP"] for row in rows]  # not rounded to 4
    md = rerank("eval", "--format", "markdown", input=stream).stdout
    assert md.startswith("| run | MAP | MRR | P@1 |")


@pytest.mark.data
def test_ids_a_qa_set_does_not_have_are_not_called_unjudged_by_its_protocol(rerank):
    """A query id from elsewhere was counted among the questions the protocol leaves out on purpose."""
    stream = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    lines = stream.splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if line.startswith("# end"))
    done = rerank("eval", input="".join(lines[:end] + ["elsewhere7 Q0 d1 1 1.0 candidates\n"] + lines[end:]))
    assert "16 queries are unjudged under trecqa-dev's protocol" in done.stderr
    assert "1 query is not a query of trecqa-dev and is ignored (elsewhere7)" in done.stderr


@pytest.mark.data
def test_a_plain_run_of_a_qa_set_is_judged_by_naming_the_data_set(rerank, tmp_path):
    """Another tool's TrecQA run has no header, and TrecQA ships no qrels file for --qrels: eval had no way in."""
    stream = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    (tmp_path / "plain.run").write_text(rerank("cat", "--trec", input=stream).stdout)
    plain = str(tmp_path / "plain.run")
    own = rerank("eval", "--format", "csv", input=stream).stdout.splitlines()[1].split(",")[1:]
    done = rerank("eval", plain, "--dataset", "trecqa-dev", "--format", "csv")
    assert done.stdout.splitlines()[1].split(",")[1:] == own  # the clean protocol's 65 questions, as for the header
    assert "16 queries are unjudged under trecqa-dev's protocol" in done.stderr
    assert "--dataset NAME" in rerank("eval", plain, check=False).stderr
    assert "takes --dataset trecqa-dev" in rerank("eval", plain, "--qrels", "trecqa-dev", check=False).stderr
    other = rerank("eval", "--dataset", "wikiqa-dev", input=stream, check=False)
    assert other.returncode != 0 and "header names the data set trecqa-dev" in other.stderr


@pytest.mark.data
def test_a_plain_run_of_another_wikiqa_split_is_refused(rerank, tmp_path):
    """WikiQA's Sent files carry no ids and each split's questions were numbered Q1, Q2, ... with sentences Q1-0,
    ...: a train run judged as dev matched dev's questions by number and got MAP 0.66, a figure of nothing."""
    train = rerank("cat", "--trec", input=rerank("retrieve", "wikiqa-train", "--candidates").stdout).stdout
    (tmp_path / "train.run").write_text(train)
    done = rerank("eval", str(tmp_path / "train.run"), "--dataset", "wikiqa-dev", check=False)
    assert done.returncode != 0 and "none of its 2118 queries is judged in wikiqa-dev" in done.stderr


@pytest.mark.data
def test_missing_and_unjudged_queries_are_reported(rerank, data_root, tmp_path):
    lines = (data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt").read_text().splitlines()
    first_qid = lines[0].split()[0]
    partial = "\n".join(line for line in lines if line.split()[0] != first_qid) + "\n99999 Q0 x 1 1.0 t\n"
    (tmp_path / "run").write_text(partial)
    done = rerank("eval", str(tmp_path / "run"), "--qrels", str(data_root / "trec-dl/qrels/qrels.dl19-passage.txt"),
                  "--min-rel", "2", "-m", "nDCG@10")
    assert f"1 judged query has no results and counts as 0 ({first_qid})" in done.stderr  # it said "1 judged queries"
    assert "1 query is not in the qrels and is ignored (99999)" in done.stderr
    board = rerank("eval", str(tmp_path / "run"), "--qrels", str(data_root / "trec-dl/qrels/qrels.dl19-passage.txt"),
                   "--min-rel", "2", "-m", "nDCG@10", "--format", "csv").stdout  # the counts, as JSON has them
    header, row = reader(board.splitlines())
    assert dict(zip(header, row))["missing_queries"] == "1" and dict(zip(header, row))["unjudged_queries"] == "1"
    assert "no document of grade" not in done.stderr
    strict = rerank("eval", str(tmp_path / "run"), "--qrels", str(data_root / "trec-dl/qrels/qrels.dl19-passage.txt"),
                    "--min-rel", "3", "-m", "nDCG@10")
    assert "7 judged queries have no document of grade >= 3 and score 0 in most measures" in strict.stderr


@pytest.mark.data
def test_a_plain_run_judged_by_a_data_sets_own_qrels_is_told_its_relevance_level(rerank, data_root, tmp_path):
    """A header-less DL 2019 run (Pyserini's, cat --trec's) with --qrels qrels.dl19-passage.txt counts grade >= 1, as
    trec_eval does without -l: MRR@10 0.82 against the data set's 0.70, and nothing said why."""
    run = str(data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt")
    qrels = str(data_root / "trec-dl" / "qrels" / "qrels.dl19-passage.txt")
    done = rerank("eval", run, "--qrels", qrels, "-m", "MRR@10")
    assert done.stdout.split()[-1] == "0.8233"  # trec_eval's default level, as before
    assert (f"{qrels} is trec-dl-2019's qrels, whose evaluation counts grade >= 2 as relevant; the run's header "
            "names no data set, so binary measures count grade >= 1 (trec_eval's default): pass --min-rel 2"
            in done.stderr)
    official = rerank("eval", run, "--qrels", qrels, "-m", "MRR@10", "--min-rel", "2")
    assert official.stdout.split()[-1] == "0.7024" and "is trec-dl-2019's qrels" not in official.stderr
    own = tmp_path / "qrels.txt"  # qrels of one's own: trec_eval's default, unremarked
    own.write_text(open(qrels).read())
    assert "counts grade" not in rerank("eval", run, "--qrels", str(own), "-m", "MRR@10").stderr
    missing = rerank("eval", run, "--qrels", str(tmp_path / "none.txt"), check=False)
    assert missing.returncode == 1 and f"file not found: {tmp_path / 'none.txt'}" in missing.stderr


def test_sort_takes_a_measure_as_m_spells_it(rerank, tmp_path):
    """`-m AP --sort AP` was refused ("--sort 'AP' is not one of the measures: MAP"), as were R@100, RR, P_5 and
    ndcg_cut.10, in eval and in a pipeline's `sort`."""
    from rerank.evaluate.measures import label_among
    from rerank.pipeline import load_pipeline

    labels = ["NumRet", "MAP", "Recall@100", "MRR", "P@5", "nDCG@10"]
    for spelled, label in [("AP", "MAP"), ("map", "MAP"), ("MAP", "MAP"), ("R@100", "Recall@100"), ("RR", "MRR"),
                           ("P_5", "P@5"), ("ndcg_cut.10", "nDCG@10"), ("P@10", None), ("nonsense", None)]:
        assert label_among(spelled, labels) == label, spelled
    # through the CLI: a retrieves more (NumRet, the first measure, puts it on top); b ranks the relevant higher
    (tmp_path / "a.run").write_text("1 Q0 d2 1 3.0 a\n1 Q0 d1 2 2.0 a\n1 Q0 d5 3 1.0 a\n2 Q0 d4 1 3.0 a\n"
                                    "2 Q0 d6 2 2.0 a\n2 Q0 d7 3 1.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d1 1 3.0 b\n1 Q0 d2 2 2.0 b\n2 Q0 d3 1 3.0 b\n2 Q0 d4 2 2.0 b\n")
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    done = rerank("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "NumRet", "-m", "AP", "--sort", "map",
                  cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[1].startswith("b.run ") and lines[2].startswith("a.run (baseline)"), done.stdout
    (tmp_path / "u.run").write_text("1 Q0 d1 1 2.0 u\n9 Q0 d1 1 2.0 u\n")  # query 9 unjudged: a note, if evaluated
    done = rerank("eval", "u.run", "--qrels", "qrels", "-m", "AP", "--sort", "P_5", cwd=tmp_path, check=False)
    assert done.returncode == 2 and done.stderr == "rerank: error: --sort 'P_5' is not one of the measures: MAP\n"
    done = rerank("eval", "u.run", "--qrels", "qrels", "--baseline", "x", cwd=tmp_path, check=False)
    assert done.returncode == 2 and done.stderr == "rerank: error: --baseline 'x' names none of the runs: u.run\n"
    spec = tmp_path / "p.toml"
    spec.write_text('dataset = "vaswani"\nmeasures = ["AP", "R@100", "P_5"]\nsort = "R@100"\n'
                    '[[stage]]\nname = "bm25"\nkind = "retrieve"\n')
    load_pipeline(spec)


def test_per_query_rows_say_each_querys_difference_to_the_baseline(rerank, tmp_path):
    """`--per-query` over several runs gave each run's values apart: which queries a re-ranker helped or hurt had
    to be worked out by hand. Each compared run's rows now carry `LABEL delta` columns (the run's "all" row: the
    difference of the means), `--sort` orders each run's queries by it, and the CSV leaderboard gives the mean
    difference and both p-values, not just the +/- mark."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n3 0 d5 1\n")
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.0 a\n2 Q0 d4 1 2.0 a\n2 Q0 d3 2 1.0 a\n3 Q0 d5 1 2.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d2 1 2.0 b\n1 Q0 d1 2 1.0 b\n2 Q0 d3 1 2.0 b\n3 Q0 d5 1 2.0 b\n"
                                    "3 Q0 d6 2 1.0 b\n")
    common = ("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "MRR", "-m", "NumRet", "--per-query")
    rows = json.loads(rerank(*common, "--format", "json", cwd=tmp_path).stdout)
    by_run = {(row["run"], row["qid"]): row for row in rows}
    assert by_run["a.run", "1"]["MRR delta"] is None  # the baseline's own rows
    assert [by_run["b.run", q]["MRR delta"] for q in ("1", "2", "3", "all")] == [-0.5, 0.5, 0.0, 0.0]
    assert by_run["b.run", "all"]["NumRet delta"] == 1  # counts: the difference of the sums
    table = rerank(*common, "--sort", "RR", cwd=tmp_path).stdout.splitlines()
    assert table[0].split() == ["run", "qid", "MRR", "NumRet", "MRR", "delta", "NumRet", "delta"]
    assert [line.split()[:2] for line in table[5:]] == [["b.run", "2"], ["b.run", "3"], ["b.run", "1"],
                                                        ["b.run", "all"]]
    assert table[6].split()[4:] == ["+0.0000", "+1"] and table[1].split()[1] == "1"  # baseline: by MRR itself
    board = rerank("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "MRR", "--format", "csv", cwd=tmp_path)
    header, *rows = reader(board.stdout.splitlines())
    compared, base = sorted(rows, key=lambda row: row[1])  # baseline "false" first
    assert header == ["run", "baseline", "MRR", "MRR delta", "MRR delta 95% CI low", "MRR delta 95% CI high",
                      "MRR effect size (d)", "MRR vs baseline", "MRR p (t-test)", "MRR p (t-test, Holm)",
                      "MRR p (randomization)", "MRR p (randomization, Holm)", "MRR W/T/L", "missing_queries",
                      "unjudged_queries"]
    assert compared[3] == "0.0" and float(compared[4]) < 0 < float(compared[5]) and float(compared[6]) == 0.0
    assert float(compared[8]) == float(compared[9]) == 1.0 and 0 < float(compared[10]) == float(compared[11]) <= 1
    assert compared[12] == "1/1/1" and base[3:] == [""] * 10 + ["0", "0"]


def test_eval_marks_differences_by_the_chosen_tests_and_correction(rerank, tmp_path):
    """--test and --correction: a difference is marked when every chosen test's corrected p is below 0.05; the CSV
    has each test's raw and corrected p-values, and the legend says which tests and correction marked it."""
    rng = np.random.default_rng(1)
    qids = [str(q) for q in range(40)]
    (tmp_path / "qrels").write_text("".join(f"{q} 0 rel 1\n" for q in qids))

    def write(name, ranks):  # the relevant document at a given rank: reciprocal rank 1/rank
        lines = []
        for q, rank in zip(qids, ranks):
            lines += [f"{q} Q0 d{i} {i} {100 - i} {name}" for i in range(1, rank)]
            lines.append(f"{q} Q0 rel {rank} {100 - rank} {name}")
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    base = rng.integers(1, 6, size=40)
    write("a.run", base)
    write("b.run", np.maximum(1, base - (rng.uniform(size=40) < 0.3)))  # better on some queries
    write("c.run", base)  # the same as the baseline
    common = ("eval", "a.run", "b.run", "c.run", "--qrels", "qrels", "-m", "MRR", "--baseline", "a.run")
    rows = {row[0]: row for row in reader(rerank(*common, "--test", "wilcoxon", "--correction", "none", "--format",
                                                  "csv", cwd=tmp_path).stdout.splitlines())}
    assert rows["run"][7:10] == ["MRR vs baseline", "MRR p (Wilcoxon)", "MRR W/T/L"]
    raw = float(rows["b.run"][8])
    assert raw < 0.025 and rows["b.run"][7] == "+"  # uncorrected, below 0.05
    rows = {row[0]: row for row in reader(rerank(*common, "--test", "wilcoxon", "--correction", "bonferroni",
                                                  "--format", "csv", cwd=tmp_path).stdout.splitlines())}
    assert rows["run"][8:10] == ["MRR p (Wilcoxon)", "MRR p (Wilcoxon, Bonferroni)"]
    assert float(rows["b.run"][9]) == pytest.approx(min(1.0, 2 * raw)) and float(rows["c.run"][9]) == 1.0
    table = rerank(*common, "--test", "t", "--test", "wilcoxon", cwd=tmp_path).stdout
    assert table.endswith("+/- : better/worse than a.run (paired t-test and Wilcoxon signed-rank test, Holm-corrected "
                          "over the runs compared, each p < 0.05)\n")
    done = rerank(*common, "--test", "sign", cwd=tmp_path, check=False)
    assert done.returncode == 2 and "'sign' is not one of 't', 'randomization', 'wilcoxon'" in done.stderr


def test_a_baseline_named_by_a_stage_name_that_several_runs_carry(rerank, tmp_path):
    """Two runs of a stage named `dense` are shown as dense:exact.run and dense:hnsw.run; `--baseline dense` said it
    named none of the runs, when it named two."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    from rerank.runs import QueryRanking, RunHeader, RunWriter

    for name, first in (("exact.run", "d1"), ("hnsw.run", "d2")):
        header = RunHeader({}).with_stage({"name": "dense"})
        with open(tmp_path / name, "w") as handle, RunWriter(handle, header) as out:
            out.write(QueryRanking("1", [first], [2.0]))
            out.write(QueryRanking("2", ["d3"], [2.0]))
    common = ("eval", "exact.run", "hnsw.run", "--qrels", "qrels", "--baseline")
    done = rerank(*common, "dense", cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert done.stderr == ("rerank: error: --baseline 'dense' is the stage name of several runs: dense:exact.run, "
                           "dense:hnsw.run; name one of them\n")
    assert "dense:hnsw.run (baseline)" in rerank(*common, "hnsw.run", cwd=tmp_path).stdout
    done = rerank(*common, "bm25", cwd=tmp_path, check=False)
    assert done.returncode == 2 and "'bm25' names none of the runs: dense:exact.run, dense:hnsw.run" in done.stderr


def test_a_threshold_in_the_name_above_every_grade_is_said(rerank, tmp_path):
    """`-m "AP(rel=2)"` on binary qrels gave 0.0000 with no word of why."""
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.0 a\n2 Q0 d3 1 2.0 a\n")
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    done = rerank("eval", "a.run", "--qrels", "qrels", "-m", "AP(rel=2)", "-m", "AP", cwd=tmp_path)
    assert done.stderr == ("rerank: note: AP(rel=2): no judgement has grade >= 2 (the highest is 1), so it is 0 for "
                           "every query\n")
    assert rerank("eval", "a.run", "--qrels", "qrels", "-m", "AP(rel=1)", cwd=tmp_path).stderr == ""


def test_counts_get_no_significance_mark(rerank, tmp_path):
    """A run retrieving one more document on each of 8 queries was marked `NumRet 16+`: a count is no finding."""
    (tmp_path / "qrels").write_text("".join(f"{q} 0 d1 1\n" for q in range(8)))
    (tmp_path / "a.run").write_text("".join(f"{q} Q0 d1 1 2.0 a\n" for q in range(8)))
    (tmp_path / "b.run").write_text("".join(f"{q} Q0 d1 1 2.0 b\n{q} Q0 d2 2 1.0 b\n" for q in range(8)))
    table = rerank("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "NumRet", "-m", "AP", "--sort", "NumRet",
                   cwd=tmp_path).stdout
    assert table.splitlines()[1].split()[:3] == ["b.run", "16", "1.0000"], table
    assert table.splitlines()[0].endswith("W/T/L (MAP)")  # wins are counted on a measure, not on a count
    csv = rerank("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "NumRet", "--format", "csv", cwd=tmp_path).stdout
    assert csv.splitlines()[1] == "b.run,false,16,8,,,,,,,,,8/0/0,0,0"  # the sums' difference, and no p-values


def test_one_measure_named_two_ways_fills_both_columns(tmp_path):
    """`-m MAP -m 'AP(rel=1)'` (or, with --min-rel 2, 'AP(rel=2)'), `-m IPrec@0.1 -m IPrec@0.10` or `-m official
    -m IPrec@0.00` named one ir_measures measure under two labels: the first column read 0.0000 on every query."""
    from rerank.data.formats import read_qrels
    from rerank.evaluate.measures import evaluate, parse_measures
    from rerank.runs import load_run

    (tmp_path / "qrels").write_text("1 0 a 1\n1 0 c 1\n2 0 b 1\n")
    (tmp_path / "run").write_text("1 Q0 a 1 3.0 t\n1 Q0 b 2 2.0 t\n1 Q0 c 3 1.0 t\n2 Q0 b 1 1.0 t\n")
    with open(tmp_path / "run") as handle:
        run = load_run(handle, "run")
    measures = parse_measures(["MAP", "AP(rel=1)", "P@2", "P(rel=1)@2"], 1)
    got = evaluate(run, read_qrels(str(tmp_path / "qrels")), measures)
    assert {m.label: round(got.overall(m.label), 4) for m in measures} == \
        {"MAP": 0.9167, "AP(rel=1)": 0.9167, "P@2": 0.5, "P(rel=1)@2": 0.5}


def test_a_recall_level_has_one_label_however_spelled():
    """IPrec@0.00, IPrec@.0 and IPrec@0.50 kept their spelling as labels: beside `-m official` (whose
    iprec_at_recall_0.00 reads IPrec@0.0) the same figure came twice, and `--sort IPrec@0.00` was refused as
    "not one of the measures"."""
    from rerank.evaluate.measures import label_among, parse_measure, parse_measures

    labels = [m.label for m in parse_measures(["official", "IPrec@0.00", "IPrec@.5", "IPrec@1.00", "IPrec@0.50"], 1)]
    assert [label for label in labels if label.startswith("IPrec")] == [f"IPrec@{level / 10:.1f}" for level in range(11)]
    assert parse_measure("IPrec@.25").label == "IPrec@0.25"
    for spelled, label in [("IPrec@0.00", "IPrec@0.0"), ("IPrec@.0", "IPrec@0.0"), ("IPrec@1.000", "IPrec@1.0"),
                           ("iprec_at_recall_0.50", "IPrec@0.5")]:
        assert label_among(spelled, labels) == label, spelled


def test_a_skipped_trec_eval_measure_is_named_once():
    """`-m official -m all_trec` (or official twice) said "trec_eval's gm_map, ..., gm_map cannot be computed"."""
    from rerank.evaluate.measures import trec_names_skipped

    assert trec_names_skipped(["official", "official"]) == ["gm_map"]
    skipped = trec_names_skipped(["official", "all_trec", "MAP"])
    assert skipped.count("gm_map") == 1 and "utility" in skipped


def test_eval_names_runs_label_equals_file_as_budget_does(rerank, tmp_path):
    """`rerank budget bm25=a.run` names a curve; `rerank eval bm25=a.run` said "run file not found: bm25=a.run",
    so a leaderboard's rows could only be called by their stage names or file paths (PyTerrier's `names=`)."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.0 a\n2 Q0 d4 1 2.0 a\n2 Q0 d3 2 1.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d2 1 2.0 b\n1 Q0 d1 2 1.0 b\n2 Q0 d3 1 2.0 b\n")
    done = rerank("eval", "BM25=a.run", "BM25+RM3=b.run", "--qrels", "qrels", "-m", "MRR", "--format", "csv",
                  cwd=tmp_path)
    assert sorted(line.split(",")[0] for line in done.stdout.splitlines()[1:]) == ["BM25", "BM25+RM3"]
    done = rerank("eval", "BM25=a.run", "b.run", "--qrels", "qrels", "-m", "MRR", "--baseline", "b.run",
                  cwd=tmp_path)
    assert "b.run (baseline)" in done.stdout and "\nBM25 " in done.stdout
    assert "BM25 (baseline)" in rerank("eval", "BM25=a.run", "b.run", "--qrels", "qrels", "-m", "MRR",
                                       "--baseline", "BM25", cwd=tmp_path).stdout
    done = rerank("eval", "x=a.run", "-", "--qrels", "qrels", "-m", "MRR", "--per-query", cwd=tmp_path,
                  input=(tmp_path / "b.run").read_text())
    assert {line.split()[0] for line in done.stdout.splitlines()[1:]} == {"x", "<stdin>"}
    done = rerank("eval", "x=a.run", "x=b.run", "--qrels", "qrels", cwd=tmp_path, check=False)
    assert done.returncode == 2 and "two runs are named 'x' (a.run, b.run)" in done.stderr, done.stderr
    # a labelled run clashes with no unlabelled one of its stage name: the copy was shown as a:copy.run
    from rerank.runs import QueryRanking, RunHeader, RunWriter

    for name in ("staged.run", "copy.run"):
        with open(tmp_path / name, "w") as handle, RunWriter(handle, RunHeader({}).with_stage({"name": "bm25"})) as out:
            out.write(QueryRanking("1", ["d1"], [2.0]))
    done = rerank("eval", "A=staged.run", "copy.run", "--qrels", "qrels", "-m", "MRR", "--format", "csv",
                  cwd=tmp_path)
    assert sorted(line.split(",")[0] for line in done.stdout.splitlines()[1:]) == ["A", "bm25"]
    done = rerank("eval", "A=", "b.run", "--qrels", "qrels", cwd=tmp_path, check=False)  # "run file not found: "
    assert done.returncode == 2 and done.stderr == "rerank: error: 'A=': LABEL=FILE needs a file after '='\n"


@pytest.mark.data
def test_a_run_none_of_whose_documents_is_judged_is_named(rerank, data_root, tmp_path):
    """CACM's qrels given for a Vaswani run: their query ids overlap, so nothing was refused, and a row of zeros
    came with no word of why."""
    judged = [line.split() for line in (data_root / "vaswani" / "qrels").read_text().splitlines()[:20]]
    (tmp_path / "v.run").write_text("".join(f"{q} Q0 {d} 1 1.0 bm25\n" for q, _, d, _ in judged))
    qrels = data_root / "cacm" / "qrels.cacm.txt"
    done = rerank("eval", "v.run", "--qrels", str(qrels), "-m", "MAP", cwd=tmp_path)
    assert f"rerank: note: v.run: none of its retrieved documents is judged in {qrels} (wrong qrels for this " \
           "run?)" in done.stderr
    right = rerank("eval", "v.run", "--qrels", str(data_root / "vaswani" / "qrels"), "-m", "MAP", cwd=tmp_path)
    assert "none of its retrieved documents" not in right.stderr
    # Vaswani's qrels list relevant documents alone: a top 5 that misses them is no sign of the wrong qrels
    other = next(d for q, _, d, _ in (line.split() for line in (data_root / "vaswani" / "qrels").open()) if q == "2")
    (tmp_path / "miss.run").write_text(f"1 Q0 {other} 1 1.0 bm25\n")
    missed = rerank("eval", "miss.run", "--qrels", str(data_root / "vaswani" / "qrels"), "-m", "MAP", cwd=tmp_path)
    assert "none of its retrieved documents" not in missed.stderr


def test_a_note_that_several_runs_share_is_said_once(rerank, tmp_path):
    """A leaderboard of five CACM runs printed "12 queries are not in the qrels and are ignored (34, 35, ...)" five
    times, once per run: the runs that share a note are now named on one line."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.0 a\n9 Q0 d1 1 2.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d2 1 2.0 b\n2 Q0 d3 1 2.0 b\n9 Q0 d1 1 2.0 b\n")
    (tmp_path / "c.run").write_text("1 Q0 d1 1 2.0 c\n2 Q0 d3 1 2.0 c\n")
    done = rerank("eval", "a.run", "b.run", "c.run", "--qrels", "qrels", "-m", "MRR", cwd=tmp_path)
    notes = [line for line in done.stderr.splitlines() if line.startswith("rerank: note:")]
    assert notes == ["rerank: note: a.run: 1 judged query has no results and counts as 0 (2)",
                     "rerank: note: a.run, b.run: 1 query is not in the qrels and is ignored (9)"], done.stderr
    # runs alike in the ids a note shows (the first ten) but not in the rest are told apart
    (tmp_path / "qrels").write_text("".join(f"{q} 0 d1 1\n" for q in range(15)))  # ids in order: 0 1 10 ... 14 2 ... 9
    (tmp_path / "d.run").write_text("".join(f"{q} Q0 d1 1 2.0 d\n" for q in (0, 9)))  # 13 missing, the same first
    (tmp_path / "e.run").write_text("".join(f"{q} Q0 d1 1 2.0 e\n" for q in (0, 8)))  # ten shown, then 8 or 9
    done = rerank("eval", "d.run", "e.run", "--qrels", "qrels", "-m", "MRR", cwd=tmp_path)
    notes = [line for line in done.stderr.splitlines() if line.startswith("rerank: note:")]
    assert [note.split(":")[2].strip() for note in notes] == ["d.run", "e.run"], done.stderr


def test_baseline_by_the_stage_name_of_a_run_renamed_label_equals_file(rerank, tmp_path):
    """`eval X=bm25.run rm3.run --baseline bm25` said "'bm25' is the stage name of several runs: X" of one run: a
    stage name was only ever shared (runs shown as name:file) before LABEL=FILE. One run's stage name picks it."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n2 0 d3 1\n")
    for name, lines in (("bm25", "1 Q0 d1 1 2.0 bm25\n2 Q0 d4 1 2.0 bm25\n2 Q0 d3 2 1.0 bm25\n"),
                        ("rm3", "1 Q0 d2 1 2.0 rm3\n1 Q0 d1 2 1.0 rm3\n2 Q0 d3 1 2.0 rm3\n")):
        (tmp_path / f"{name}.run").write_text(f'# rerank-run: 2\n# stage: {{"name": "{name}"}}\n{lines}# end of run\n')
    done = rerank("eval", "X=bm25.run", "rm3.run", "--qrels", "qrels", "-m", "MRR", "--baseline", "bm25",
                  cwd=tmp_path)
    assert "X (baseline)" in done.stdout, done.stdout
    done = rerank("eval", "X=bm25.run", "Y=bm25.run", "rm3.run", "--qrels", "qrels", "-m", "MRR", "--baseline",
                  "bm25", cwd=tmp_path, check=False)
    assert done.returncode == 2 and "stage name of several runs: X, Y; name one" in done.stderr, done.stderr


def test_a_label_with_a_bar_keeps_its_markdown_row_whole(rerank, tmp_path):
    """`eval 'a|b=FILE' --format markdown` split that run's row at the label's '|': one cell too many."""
    (tmp_path / "qrels").write_text("1 0 d1 1\n")
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d2 1 2.0 b\n1 Q0 d1 2 1.0 b\n")
    for extra in ([], ["--per-query"]):
        done = rerank("eval", "a|b=a.run", "b.run", "--qrels", "qrels", "-m", "MRR", "--format", "markdown", *extra,
                      cwd=tmp_path)
        rows = [line for line in done.stdout.splitlines() if line.startswith("|")]
        assert len({line.replace("\\|", "").count("|") for line in rows}) == 1, done.stdout
        assert any(line.startswith("| a\\|b ") for line in rows), done.stdout


@pytest.mark.data
def test_a_run_over_some_of_a_data_sets_topics_is_evaluated_on_them(rerank, home, data_root, vaswani_bm25_run,
                                                                   tmp_path):
    """`retrieve vaswani --topics eight.trec` (eight of Vaswani's queries) dropped the data set from the header, so
    eval asked for --qrels, and with them counted the other 85 judged queries as 0: MAP 0.02 for a BM25 whose MAP
    over those eight is 0.29. The header now keeps the data set, and eval evaluates the queries the run was made
    for; runs compared are compared on the queries all were made for."""
    import re

    from rerank.models.bert import BiEncoderReranker
    from rerank.runs import RunReader, Stream
    from rerank.score import ScoreStats, score_stream

    tops = re.findall(r"<top>.*?</top>", (data_root / "vaswani" / "query-text.trec").read_text(), re.S)
    (tmp_path / "eight.trec").write_text("\n".join(tops[:8]) + "\n")
    (tmp_path / "other.trec").write_text("\n".join(tops[8:16]) + "\n")
    for name in ("eight", "other"):
        rerank("retrieve", "vaswani", "--topics", f"{name}.trec", "-o", f"{name}.run", cwd=tmp_path)
    (tmp_path / "all.run").write_text(vaswani_bm25_run)  # rerank retrieve vaswani -o all.run
    rows = json.loads(rerank("eval", "all.run", "-m", "MAP", "-q", "--format", "json", cwd=tmp_path).stdout)
    over_eight = sum(row["MAP"] for row in rows if row["qid"] in {str(q) for q in range(1, 9)}) / 8

    def mean_map(*runs: str, **kwargs) -> tuple[dict, str]:
        done = rerank("eval", *runs, "-m", "MAP", "--format", "json", cwd=tmp_path, **kwargs)
        return {row["run"]: row["MAP"] for row in json.loads(done.stdout)}, done.stderr

    alone, notes = mean_map("eight.run")
    assert alone["bm25"] == pytest.approx(over_eight) and "count as 0" not in notes
    assert ("rerank: note: evaluated on the 8 judged queries it was made for (a run from a topics file or cut by "
            "cat --first: the queries it holds), not on all 93 of vaswani") in notes
    # beside a run of every query, both rows are means over those eight, and the tests pair them
    board, notes = mean_map("all.run", "eight.run")
    assert board["bm25:eight.run"] == pytest.approx(over_eight) == board["bm25:all.run"]
    assert "evaluated on the 8 judged queries every run was made for" in notes and "not in the qrels" not in notes
    # re-scored with every Vaswani text given (--topics), it is still a run of those eight (`rerank score eight.run
    # --model minilm-bi --depth 5 --topics query-text.trec -o scored.run`, in-process: a start loads torch and MiniLM)
    with open(tmp_path / "eight.run") as handle:
        reader = RunReader(handle, "eight.run")
        rankings = list(reader)
    stats = ScoreStats()
    with open(tmp_path / "scored.run", "w") as out:
        score_stream(Stream(reader.header, rankings), BiEncoderReranker(), 5, stats=stats,
                     topics=str(data_root / "vaswani" / "query-text.trec")).write(out)
    assert "8 queries" in stats.summary("minilm-bi", 5)
    assert "evaluated on the 8 judged queries" in mean_map("scored.run")[1]
    # the topics file moved away: the run still holds the queries it was made for
    (tmp_path / "eight.trec").unlink()
    assert mean_map("eight.run")[0]["bm25"] == pytest.approx(over_eight)
    disjoint = rerank("eval", "eight.run", "other.run", cwd=tmp_path, check=False)
    assert disjoint.returncode == 1 and "the runs share no judged query" in disjoint.stderr
    # a query of one's own under a Vaswani id is not Vaswani's: no data set, so eval asks for qrels as before
    (tmp_path / "own.tsv").write_text("1\tmicrowave ovens\n")
    rerank("retrieve", "vaswani", "--topics", "own.tsv", "-o", "own.run", cwd=tmp_path)
    assert "dataset" not in (tmp_path / "own.run").read_text().split("\n# stage:")[0]


@pytest.mark.data
def test_candidates_for_some_of_a_data_sets_queries_are_replayed_and_evaluated_on_them(rerank, data_root, tmp_path):
    """`retrieve trec-dl-2019 --candidates --topics three.tsv` was refused (--topics would be ignored): a quick
    experiment on a few queries replayed all 43 queries' candidates. It replays those of the topics alone."""
    from rerank.data import get_dataset

    three = dict(list(get_dataset("trec-dl-2019").topics().items())[:3])
    (tmp_path / "three.tsv").write_text("".join(f"{q}\t{text}\n" for q, text in three.items()))
    rerank("retrieve", "trec-dl-2019", "--candidates", "--topics", "three.tsv", "-o", "three.run", cwd=tmp_path)
    run = (tmp_path / "three.run").read_text()
    assert {line.split()[0] for line in run.splitlines() if not line.startswith("#")} == set(three)
    assert '# dataset: "trec-dl-2019"' in run and f'# topics: "{tmp_path / "three.tsv"}"' in run
    done = rerank("eval", "three.run", "-m", "nDCG@10", "--format", "json", cwd=tmp_path)
    assert "evaluated on the 3 judged queries it was made for" in done.stderr
    rerank("retrieve", "trec-dl-2019", "--candidates", "-o", "all.run", cwd=tmp_path)
    rows = json.loads(rerank("eval", "all.run", "-m", "nDCG@10", "-q", "--format", "json", cwd=tmp_path).stdout)
    assert json.loads(done.stdout)[0]["nDCG@10"] == pytest.approx(
        sum(row["nDCG@10"] for row in rows if row["qid"] in three) / 3)


@pytest.mark.data
def test_cat_cuts_a_run_to_its_first_queries_and_top_documents_and_eval_counts_those_alone(rerank, data_root,
                                                                                           tmp_path):
    """Needs ../shared/data (Vaswani's qrels). A run cut with head lacks its end line and is refused, whose advice,
    grep -v '^#', dropped the header too (eval then asked for --qrels, and counted the other queries as 0).
    `cat --first N --depth K` cuts it and keeps it a whole run that says so."""
    relevant = {line.split()[0]: line.split()[2] for line in (data_root / "vaswani" / "qrels").read_text().splitlines()}
    run = ('# rerank-run: 2\n# dataset: "vaswani"\n# stage: {"name": "x"}\n'
           + "".join(f"# time: {q} x 1.5 2\n{q} Q0 {relevant[q]} 1 2.0 x\n{q} Q0 nosuch 2 1.0 x\n" for q in "123")
           + "# end of run\n")
    cut = rerank("cat", "--first", "2", "--depth", "1", input=run).stdout
    assert cut.splitlines()[2] == '# cut: {"depth": 1, "queries": 2}' and cut.endswith("# end of run\n")
    assert [line.split()[:3] for line in cut.splitlines() if not line.startswith("#")] == [
        ["1", "Q0", relevant["1"]], ["2", "Q0", relevant["2"]]]
    assert "# time: 2 x 1.500 2" in cut  # the stage's own time and depth, not the cut's
    done = rerank("eval", "-m", "P@1", "-m", "P@2", "--format", "json", input=cut)
    row, = json.loads(done.stdout)
    assert (row["P@1"], row["P@2"], row["missing_queries"]) == (1.0, 0.5, 0)
    assert "evaluated on the 2 judged queries it was made for" in done.stderr and "count as 0" not in done.stderr
    again = rerank("cat", "--first", "5", "--depth", "3", input=cut).stdout  # a looser cut keeps the tighter one
    assert '# cut: {"depth": 1, "queries": 2}' in again
    cut_by_head = "\n".join(run.splitlines()[:6]) + "\n"
    refused = rerank("cat", "--first", "1", input=cut_by_head, check=False)  # the whole input is still checked
    assert refused.returncode == 1 and "rerank cat --first N or --depth K" in refused.stderr
    for bad in ("0", "-1", "x"):
        assert rerank("cat", "--first", bad, input=run, check=False).returncode == 2


@pytest.mark.data
def test_depths_are_compared_on_the_queries_evaluated(rerank, tmp_path):
    """Needs ../shared/data (TrecQA). A QA board of all candidates against a run cut to its first questions (each
    question's whole list) said the runs were of different depths (20 against 92: the longest list of each run's
    own questions) and that MAP read past rank 20 where the shallower run had no documents, which was false on
    the question both were evaluated on."""
    stream = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    (tmp_path / "all.run").write_text(stream)
    (tmp_path / "first.run").write_text(rerank("cat", "--first", "2", input=stream).stdout)
    done = rerank("eval", "first.run", "all.run", "-m", "MAP", cwd=tmp_path)
    assert "evaluated on the 1 judged query every run was made for" in done.stderr
    assert "different depths" not in done.stderr
    shallow = rerank("eval", "first.run", "-", "-m", "MAP", cwd=tmp_path,
                     input=rerank("cat", "--depth", "3", input=stream).stdout)
    assert "different depths (candidates:first.run 20, candidates:<stdin> 3)" in shallow.stderr


@pytest.mark.data
def test_runs_of_different_depths_are_said_to_be_when_a_measure_reads_past_the_shallower(rerank, vaswani_index,
                                                                                          tmp_path):
    """Needs ../shared/data (Vaswani). A user study's board of BM25 at k = 100 against RM3 at 1000 marked RM3
    significantly better on MAP, with nothing said; at one depth (-M 100) the difference is not significant. (Here
    at 10 against 100, which is as significant and not at -M 10, for a quarter of the searching.)"""
    rerank("retrieve", "vaswani", "--k", "10", "-o", "bm25.run", cwd=tmp_path)
    rerank("retrieve", "vaswani", "--rm3", "--k", "100", "-o", "rm3.run", cwd=tmp_path)
    board = rerank("eval", "bm25.run", "rm3.run", "-m", "MAP", "-m", "P@10", "--format", "json", cwd=tmp_path)
    assert board.stderr == ("rerank: note: the runs are of different depths (bm25 10, bm25+rm3 100), and MAP reads "
                            "past rank 10, where the shallower run has no documents: -M 10 evaluates every run to "
                            "that depth\n")
    def largest_p(done) -> float:
        row, = [row for row in json.loads(done.stdout) if row["run"] == "bm25+rm3"]
        return max(row["versus_baseline"]["MAP"]["corrected"].values())

    assert largest_p(board) < 0.05
    same = rerank("eval", "bm25.run", "rm3.run", "-m", "MAP", "-M", "10", "--format", "json", cwd=tmp_path)
    assert same.stderr == "" and largest_p(same) >= 0.05
    assert rerank("eval", "bm25.run", "rm3.run", "-m", "P@10", "-m", "nDCG@10", cwd=tmp_path).stderr == ""


@pytest.mark.data
def test_run_queries_averages_over_the_queries_a_run_holds_as_trec_eval_without_c(rerank, vaswani_index, data_root,
                                                                                  tmp_path):
    """Needs ../shared/data (Vaswani). A run cut with awk to ten queries was averaged over all 93 judged ones, as
    trec_eval -c does, with no way to get trec_eval's default, the mean over the run's queries."""
    stream = rerank("retrieve", "vaswani", "--k", "100", "--trec", cwd=tmp_path).stdout
    cut = "".join(line + "\n" for line in stream.splitlines() if int(line.split()[0]) <= 10)
    (tmp_path / "ten.trec").write_text(cut)
    qrels = data_root / "vaswani" / "qrels"
    done = rerank("eval", "ten.trec", "--qrels", str(qrels), "-m", "MAP", "-m", "nDCG@10", "-m", "P@5",
                  "--run-queries", "--format", "json", cwd=tmp_path)
    row, = json.loads(done.stdout)
    expected = trec_eval(qrels, tmp_path / "ten.trec", ["map", "ndcg_cut.10", "P.5"], complete=False)
    assert (row["MAP"], row["nDCG@10"], row["P@5"]) == pytest.approx(
        (expected["map"], expected["ndcg_cut_10"], expected["P_5"]), abs=1e-4)
    assert "evaluated on the 10 judged queries it was made for (--run-queries: the queries it holds)" in done.stderr
    every = json.loads(rerank("eval", "ten.trec", "--qrels", str(qrels), "-m", "MAP", "--format", "json",
                              cwd=tmp_path).stdout)[0]["MAP"]
    assert every == pytest.approx(trec_eval(qrels, tmp_path / "ten.trec", ["map"])["map"], abs=1e-4)
    assert every < row["MAP"]


@pytest.mark.data
def test_latex_tables_for_a_paper(rerank, data_root, tmp_path):
    """Needs ../shared/data (Vaswani's qrels). A user writing a paper had markdown at best: a booktabs tabular with
    the best figure of each measure in bold, marks as superscripts, names escaped (ndcg_cut_10, a run a_b)."""
    relevant = {line.split()[0]: line.split()[2] for line in (data_root / "vaswani" / "qrels").read_text().splitlines()}
    for name, first in (("good", True), ("poor", False)):
        lines = [f"{q} Q0 {doc if first else 'nosuch'} 1 2.0 {name}\n{q} Q0 other 2 1.0 {name}\n"
                 for q, doc in relevant.items()]
        (tmp_path / f"{name}.run").write_text('# rerank-run: 2\n# dataset: "vaswani"\n' + "".join(lines)
                                              + "# end of run\n")
    done = rerank("eval", "a_b=good.run", "poor.run", "-m", "P@1", "-m", "num_ret", "--baseline", "poor.run",
                  "--format", "latex", cwd=tmp_path)
    assert done.stdout.splitlines() == [
        r"\begin{tabular}{lrrr}", r"\toprule", r"run & P@1 & NumRet & W/T/L (P@1) \\", r"\midrule",
        r"a\_b & \textbf{1.0000}$^{+}$ & 186 & 93/0/0 \\", r"poor.run (baseline) & 0.0000 & 186 & - \\",
        r"\bottomrule", r"\end{tabular}",
        "% +/- : better/worse than poor.run (paired t-test and randomization test, Holm-corrected over the runs "
        "compared, each p < 0.05)"]
    per_query = rerank("eval", "good.run", "-q", "-m", "ndcg_cut.10", "--format", "latex", cwd=tmp_path).stdout
    assert per_query.splitlines()[:3] == [r"\begin{tabular}{llr}", r"\toprule", r"run & qid & nDCG@10 \\"]


@pytest.mark.data
def test_a_run_of_unjudged_queries_alone_is_named_as_one_run(rerank, tmp_path):
    """A run from a topics file of queries its data set does not judge was told 'the runs share no judged query',
    a message about several runs."""
    (tmp_path / "unjudged.tsv").write_text("1.4\tWhat ethnic group / race are Crip members ?\n")
    run = rerank("retrieve", "trecqa-dev", "--candidates", "--topics", "unjudged.tsv", cwd=tmp_path).stdout
    done = rerank("eval", input=run, check=False)
    assert done.returncode == 1 and "<stdin>: its one query is not judged in trecqa-dev" in done.stderr


@pytest.mark.data
def test_baseline_names_its_file_in_any_spelling(rerank, tmp_path):
    """`--baseline ./b.run` (or its absolute path) for a run given as b.run said "names none of the runs"."""
    (tmp_path / "a.run").write_text("1 Q0 d2 1 3.0 a\n1 Q0 d1 2 2.0 a\n")
    (tmp_path / "b.run").write_text("1 Q0 d1 1 3.0 b\n1 Q0 d2 2 2.0 b\n")
    (tmp_path / "qrels").write_text("1 0 d1 1\n")
    for spelled in ("./b.run", str(tmp_path / "b.run")):
        done = rerank("eval", "a.run", "b.run", "--qrels", "qrels", "-m", "AP", "--baseline", spelled, cwd=tmp_path)
        assert "b.run (baseline)" in done.stdout and "a.run (baseline)" not in done.stdout, spelled

"""Time-budget report: synthetic runs with known costs and qualities, and the real DL 2019 candidates."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from rerank.errors import DataError, UsageError
from rerank.evaluate import budget
from rerank.runs import QueryRanking, RunHeader, RunWriter, Timing, load_run

QIDS = [f"q{i}" for i in range(1, 9)]
DOCS = [f"d{i}" for i in range(1, 21)]


def _qrels_file(tmp_path) -> str:
    """d1 and d2 are relevant for every query."""
    path = tmp_path / "qrels.txt"
    path.write_text("".join(f"{q} 0 {d} {int(d in ('d1', 'd2'))}\n" for q in QIDS for d in DOCS))
    return str(path)


def _write_run(tmp_path, model: str, depth: int, ms_per_query: float, found: int, cache: bool = False) -> str:
    """A run with `found` of the 2 relevant docs on top (the other last), after a 1 ms first stage."""
    header = (RunHeader({"qrels": _qrels_file(tmp_path)}).with_stage({"name": "bm25", "stage": "retrieve"})
              .with_stage({"name": model, "stage": "score", "depth": depth, "cache": cache}))
    path = tmp_path / f"{model}-{depth}.run"
    on_top, at_bottom = ["d1", "d2"][:found], ["d1", "d2"][found:]
    order = on_top + [d for d in DOCS if d not in ("d1", "d2")] + at_bottom
    with open(path, "w") as handle, RunWriter(handle, header) as writer:
        for i, qid in enumerate(QIDS):
            ranking = QueryRanking.from_scores(qid, order, range(len(order), 0, -1), tag=model)
            ranking.timings = [Timing("bm25", 1.0, 20), Timing(model, ms_per_query + i * 0.01, depth)]
            writer.write(ranking)
    return str(path)


def _load(path: str, label: str | None = None):
    with open(path) as handle:
        run = load_run(handle, path)
    run.label = label or run.header.stages[-1]["name"]
    return run


def test_costs_sum_every_stage_and_cheap_model_wins_small_budgets(tmp_path):
    # "slow" reaches a perfect ranking at depth 20 for 100 ms; "fast" only half of it, but for 5 ms.
    paths = [_write_run(tmp_path, "slow", 20, 99.0, 2), _write_run(tmp_path, "slow", 5, 29.0, 1),
             _write_run(tmp_path, "fast", 20, 4.0, 1)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    assert label == "nDCG@10"
    by = {(p.model, p.depth): p for p in points}
    assert by["fast", 20].median_ms == pytest.approx(5.035)  # 1 ms first stage + 4 ms + the i*0.01 spread
    assert by["slow", 20].effectiveness == pytest.approx(1.0)
    assert by["slow", 5].effectiveness < 1.0
    report = budget.build_report(points, label, "median", [2, 10, 50, 200])
    rows = report.budget_rows()
    assert rows[0]["fast"] is None and rows[0]["slow"] is None
    assert rows[1]["fast"]["depth"] == 20 and rows[1]["slow"] is None
    assert rows[3]["slow"] == {"effectiveness": pytest.approx(1.0), "depth": 20}
    # fast wins until slow's depth-20 point fits (100.035 ms); from 30 ms both reach the same quality, so fast is
    # not better there ("fast is better than slow below 100" was said), and below 30 ms only fast fits
    assert [(c.better, c.other, round(c.below_ms, 3)) for c in report.crossings] == [("fast", "slow", 100.035)]
    assert "fast is at least as good as slow where both fit, from 30.1 to 101 ms per query" in \
        budget.render(report, "table")


def test_a_model_ahead_at_every_budget_is_reported_as_a_lead(tmp_path):
    """Curves that never cross give no crossing, but the report still says which model leads (TK against
    BERT on DL 2019 is such a pair); equal effectiveness at some budgets is said as "at least as good"."""
    paths = [_write_run(tmp_path, "quick", 20, 4.0, 2), _write_run(tmp_path, "slow", 20, 99.0, 1),
             _write_run(tmp_path, "twin", 5, 50.0, 2)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    report = budget.build_report(points, label, "median", [10, 200])
    assert report.crossings == []
    assert {(lead.better, lead.other, lead.ties) for lead in report.leads} == {
        ("quick", "slow", False), ("quick", "twin", True), ("twin", "slow", False)}
    text = budget.render(report, "markdown")
    assert "- quick is better than slow at every budget where both fit, from 101 ms per query on" in text
    assert "- quick is at least as good as twin at every budget where both fit, from 51.1 ms per query on" in text
    assert json.loads(budget.render(report, "json"))["leads"][0]["sentence"].startswith("quick is")


def test_a_bar_in_a_model_label_is_escaped_in_markdown(tmp_path):
    """`budget 'bm25|bert=FILE' --format markdown` split its rows into one cell too many; eval's tables escaped
    it already (the two tables are one function now)."""
    points, label = budget.measure_points([_load(_write_run(tmp_path, "m", 20, 4.0, 2), "bm25|bert")], "nDCG@10")
    text = budget.render(budget.build_report(points, label, "median", [10]), "markdown")
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in text.split("\n\n")]
    for table in filter(None, tables):  # every row of a table as many cells as its header
        assert len({line.replace("\\|", "").count("|") for line in table}) == 1, table
    assert text.count("bm25\\|bert") == 2


def test_deepest_fitting_depth_versus_the_oracle(tmp_path):
    """Deeper is worse here: a budget buys the deepest depth that fits, unless pick="best" (an oracle)."""
    paths = [_write_run(tmp_path, "m", 5, 2.0, 2), _write_run(tmp_path, "m", 20, 20.0, 1)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    deepest = budget.build_report(points, label, "median", [50]).budget_rows()[0]["m"]
    oracle = budget.build_report(points, label, "median", [50], pick="best").budget_rows()[0]["m"]
    assert deepest["depth"] == 20 and oracle["depth"] == 5
    assert oracle["effectiveness"] > deepest["effectiveness"]


def test_p95_statistic_uses_the_tail(tmp_path):
    points, _ = budget.measure_points([_load(_write_run(tmp_path, "m", 20, 10.0, 2))], "nDCG@10")
    assert points[0].p95_ms > points[0].median_ms
    assert budget.best_within(points, points[0].median_ms, "median") is points[0]
    assert budget.best_within(points, points[0].median_ms, "p95") is None


def test_judged_and_timed_queries_are_counted_apart(tmp_path):
    """CACM times 64 queries but judges 52: one 'queries' column said 64 beside a MAP averaged over 52."""
    run = _load(_write_run(tmp_path, "m", 20, 10.0, 2))
    extra = QueryRanking.from_scores("q99", DOCS, range(20, 0, -1), timings=[Timing("m", 10.0, 20)])
    run.queries["q99"] = extra  # timed, but not in the qrels
    points, label = budget.measure_points([run], "nDCG@10")
    assert (points[0].judged, points[0].timed) == (8, 9)
    text = budget.render(budget.build_report(points, label, "median", [50]), "table")
    assert text.split("\n")[0].split()[:6] == ["model", "depth", "judged", "nDCG@10", "timed", "median_ms"]


def test_a_batch_timed_run_is_said_so_under_the_default_table(tmp_path):
    """Lucene splits a batch's time evenly over its queries, so its median is its p95: said only with --statistic
    p95, while the default table showed equal columns unexplained. A run with per-query times of its own is not
    named."""
    lucene = _load(_write_run(tmp_path, "lucene", 20, 5.0, 2))
    lucene.header.stages[:] = [{"name": "bm25", "stage": "retrieve", "timing": "amortised"}]
    for ranking in lucene.queries.values():
        ranking.timings = [Timing("bm25", 40.0, 20)]
    reranked = _load(_write_run(tmp_path, "bert", 20, 50.0, 2))
    reranked.header.stages[0]["timing"] = "amortised"  # its bert stage still timed each query
    points, label = budget.measure_points([lucene, reranked], "nDCG@10")
    for fmt in ("table", "markdown"):
        text = budget.render(budget.build_report(points, label), fmt)
        said = [line for line in text.split("\n") if "per batch" in line]
        assert said == [("- " if fmt == "markdown" else "") + f"{lucene.source}: timed per batch of queries, each query "
                        "an equal share, so median_ms and p95_ms show no per-query spread"]


def test_untimed_run_names_the_stage(tmp_path):
    header = RunHeader({"qrels": _qrels_file(tmp_path)}).with_stage({"name": "bm25", "stage": "candidates"})
    handle = io.StringIO()
    RunWriter(handle, header).write_all([QueryRanking.from_scores("q1", DOCS, range(20, 0, -1))])
    handle.seek(0)
    run = load_run(handle, "plain.run")
    with pytest.raises(DataError, match=r"plain.run: the run has no per-query timings.*'bm25' \(candidates\)"):
        budget.query_costs(run)
    assert budget.query_costs(run, zero_untimed=True) == {"q1": 0.0}


def test_zero_untimed_does_not_hide_a_partly_timed_run(tmp_path):
    """--zero-untimed counted the one query that had lost its time line as 0 ms, lowering the median."""
    with open(_write_run(tmp_path, "bert", 10, 50.0, 2)) as handle:
        run = load_run(handle, "part.run")
    run.queries["q3"].timings = []
    for zero in (False, True):
        with pytest.raises(DataError, match=r"part.run: 1 of 8 queries have no '# time:' line \(first: q3\)"):
            budget.query_costs(run, zero_untimed=zero)


def test_a_budget_equal_to_a_points_time_fits_it(tmp_path):
    """A p95 worked out by hand from the '# time:' lines (5.0665 ms here) bought nothing at that budget: numpy's
    interpolation gave 5.0665000000000004, which the JSON showed too."""
    points, label = budget.measure_points([_load(_write_run(tmp_path, "fast", 20, 4.0, 1))], "nDCG@10")
    assert (points[0].median_ms, points[0].p95_ms) == (5.035, 5.0665)
    report = budget.build_report(points, label, "p95", [5.0665])
    assert report.budget_rows()[0]["fast"] == {"effectiveness": points[0].effectiveness, "depth": 20}


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_a_budget_is_shown_as_given(tmp_path, fmt):
    """CACM's minilm-bi at depth 10 took a median of 1556.696 ms: `--budgets 1556.6955,1556.696` gave two rows both
    labelled 1556.7 (six significant digits), one with the model and one without; 1234567.5 showed as 1.23457e+06."""
    points, label = budget.measure_points([_load(_write_run(tmp_path, "fast", 20, 4.0, 1))], "nDCG@10")
    report = budget.build_report(points, label, "p95", [5.06649, 5.0665, 1234567.5])
    lines = budget.render(report, fmt).splitlines()
    labels = [line.strip("| ").split()[0] for line in lines if line.strip("| ").startswith(("5.066", "123"))]
    assert labels == ["5.06649", "5.0665", "1234567.5"]


def test_a_run_is_timed_over_the_queries_it_is_evaluated_on(tmp_path):
    """Beside a run cut to its first 2 queries (rerank cat --first 2), a whole run was evaluated on those 2 but
    timed over all 8: on DL 2019, minilm-bi at depth 10 showed a median of 756 ms over 43 queries beside its
    nDCG@10 over the 10 it shared with a cut depth-20 run (597 ms over those 10)."""
    whole, cut = _load(_write_run(tmp_path, "m", 10, 4.0, 1)), _load(_write_run(tmp_path, "m", 20, 40.0, 2))
    cut.header = RunHeader({**cut.header.fields, "cut": {"queries": 2}}, cut.header.stages, cut.header.version)
    cut.queries = {qid: cut.queries[qid] for qid in QIDS[:2]}
    points, _ = budget.measure_points([whole, cut], "nDCG@10")
    assert [(p.depth, p.judged, p.timed, p.median_ms) for p in points] == [(10, 2, 2, 5.005), (20, 2, 2, 41.005)]


def test_a_stage_without_timings_under_a_timed_one_is_named(tmp_path):
    """minilm-bi over TREC DL's replayed candidates was charged its own time alone, beside Lucene runs charged
    their retrieval, and nothing said so; a candidates run on its own needs --zero-untimed to count as 0 ms."""
    path = _write_run(tmp_path, "bi", 10, 50.0, 2)
    with open(path) as handle:
        run = load_run(handle, path)
    run.header.stages.insert(0, {"name": "pool", "stage": "candidates"})
    run.label = "bi"
    said: list[str] = []
    budget.measure_points([run, _load(_write_run(tmp_path, "bi", 20, 90.0, 2))], "nDCG@10", note=said.append)
    assert said == [f"{path}: stage pool recorded no '# time:' lines (replayed candidates?), so it counts as 0 ms "
                    "per query"]


def test_a_model_that_merely_fits_first_is_not_called_better(tmp_path):
    """"dense is better than bm25 below 45.7 ms" was said of a dense run with the lower MAP: below 45.7 ms bm25
    had no point at all. That is said as it is; where both fit, "better" still compares them."""
    paths = [_write_run(tmp_path, "early", 20, 2.0, 1), _write_run(tmp_path, "late", 20, 40.0, 2)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    report = budget.build_report(points, label, "median", [10, 200])
    assert [(c.better, c.other, c.alone) for c in report.crossings] == [("early", "late", True)]
    assert report.crossings[0].sentence() == "early fits from 3.04 ms per query, late only from 41.1"
    text = budget.render(report, "table")
    assert "early is the best that fits from 3.04 to 41.1 ms per query\nlate is the best that fits from 41.1 ms per " \
           "query on\n" in text


def test_each_sentence_is_true_read_alone_and_the_best_model_is_said_once_per_budget(tmp_path):
    """Five CACM runs gave 20 pairwise sentences, among them "below 70.5 ms per query only dense fits (bm25+rm3
    needs 70.5)": of that pair only, while QLD fit from 25.6 ms with a higher MAP and dense itself needed 53.6 ms.
    The report now says which model is best from which budget on; "only fits" is said of a pair, by name."""
    paths = [_write_run(tmp_path, "qld", 20, 24.0, 1), _write_run(tmp_path, "dense", 20, 52.0, 0),
             _write_run(tmp_path, "rm3", 20, 69.0, 2)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    report = budget.build_report(points, label, "median", [100])
    said = {c.sentence() for c in report.crossings}
    assert "dense fits from 53.1 ms per query, rm3 only from 70.1" in said
    assert not any("only dense fits" in sentence for sentence in said)
    notes = budget.render(report, "table").split("\n\n")[-1].splitlines()
    assert notes == ["qld is the best that fits from 25.1 to 70.1 ms per query",
                     "rm3 is the best that fits from 70.1 ms per query on",
                     "rm3 is better than dense at every budget where both fit, from 70.1 ms per query on",
                     "rm3 is better than qld at every budget where both fit, from 70.1 ms per query on",
                     "qld is better than dense at every budget where both fit, from 53.1 ms per query on"]


def test_a_pair_is_said_whichever_of_the_two_fits_first(tmp_path):
    """Vaswani's BM25 (47 ms), QLD (49 ms) and BM25+RM3 (63 ms): "bm25 is better than qld at every budget where both
    fit" was said, but nothing of RM3 against QLD or BM25, which it beats wherever both fit: a pair whose better
    model fits later was left out, one whose better model fits first was said."""
    paths = [_write_run(tmp_path, "cheap", 20, 2.0, 1), _write_run(tmp_path, "costly", 20, 40.0, 2)]
    report = budget.build_report(*budget.measure_points([_load(p) for p in paths], "nDCG@10"), "median", [100])
    notes = budget.render(report, "table").split("\n\n")[-1].splitlines()
    assert notes[-1] == "costly is better than cheap at every budget where both fit, from 41.1 ms per query on"
    paths = [_write_run(tmp_path, "cheap", 20, 2.0, 2), _write_run(tmp_path, "costly", 20, 40.0, 1)]
    report = budget.build_report(*budget.measure_points([_load(p) for p in paths], "nDCG@10"), "median", [100])
    notes = budget.render(report, "table").split("\n\n")[-1].splitlines()
    assert notes[-1] == "cheap is better than costly at every budget where both fit, from 41.1 ms per query on"


def test_better_is_said_only_where_both_fit(tmp_path):
    """"TK is better than BERT at every budget from 12.1 ms per query on" (DL 2019) counted the budgets below
    BERT's first point, 123 ms, where TK merely fits; a crossing's first span did the same ("tk+bm25 is better
    than bert from 11.9 to 439"). Both now compare the pair from where both fit."""
    paths = [_write_run(tmp_path, "a", 20, 2.0, 1), _write_run(tmp_path, "b", 5, 10.0, 0),
             _write_run(tmp_path, "b", 20, 50.0, 2), _write_run(tmp_path, "c", 20, 100.0, 0)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    report = budget.build_report(points, label, "median", [200])
    said = [c.sentence() for c in report.crossings] + [lead.sentence() for lead in report.leads]
    assert said == ["a is better than b where both fit, from 11.1 to 51.1 ms per query",
                    "a is better than c at every budget where both fit, from 102 ms per query on",
                    "b is better than c at every budget where both fit, from 102 ms per query on"]
    leads = json.loads(budget.render(report, "json"))["leads"]
    assert [(lead["from_ms"], lead["other_from_ms"]) for lead in leads] == [(3.035, 101.035), (11.035, 101.035)]
    both = budget.Lead("x", "y", 5.0, False)  # both fit from the start: said as before
    assert both.sentence() == "x is better than y at every budget from 5 ms per query on"


def test_csv_marks_the_best_models_of_each_budget(tmp_path):
    """The CSV had no word of the best models the text names: a `best` column, true on each budget's best
    model(s) (several where equal, none where nothing fits), after the columns it had."""
    import pandas as pd

    paths = [_write_run(tmp_path, "slow", 20, 99.0, 2), _write_run(tmp_path, "slow", 5, 29.0, 1),
             _write_run(tmp_path, "fast", 20, 4.0, 1)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    table = pd.read_csv(io.StringIO(budget.render(budget.build_report(points, label, "median", [2, 10, 50, 200]),
                                                  "csv")))
    assert list(table.columns) == ["budget_ms", "statistic", "pick", "model", "depth", "nDCG@10", "best"]
    assert table["best"].dtype == bool
    best = table[table.best].groupby("budget_ms")["model"].apply(list).to_dict()
    assert best == {10: ["fast"], 50: ["fast", "slow"], 200: ["slow"]}


def test_the_plot_marks_where_the_best_model_changes_not_every_crossing(tmp_path, monkeypatch):
    """The plot drew a line at every pairwise crossing (25 on DL 2019), here at 11 ms where x overtakes y while
    top is best; it now marks where the best model changes, as the text says, under the frontier."""
    import matplotlib.pyplot as plt

    paths = [_write_run(tmp_path, "y", 20, 2.0, 0), _write_run(tmp_path, "x", 5, 3.0, 0),
             _write_run(tmp_path, "x", 20, 10.0, 1), _write_run(tmp_path, "top", 20, 5.0, 2)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    report = budget.build_report(points, label)
    assert [(b.models, b.from_ms) for b in report.best] == [(("y",), 3.035), (("x", "y"), 4.035), (("top",), 6.035)]
    assert [c.below_ms for c in report.crossings if {c.better, c.other} == {"x", "y"}] == [11.035]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    budget.plot(report, str(tmp_path / "budget.png"))
    lines = figures[0].axes[0].get_lines()
    vertical = sorted(line.get_xdata()[0] for line in lines if len(set(line.get_xdata())) == 1 and
                      len(line.get_xdata()) == 2)
    assert vertical == pytest.approx([4.035, 6.035])
    frontier, = (line for line in lines if line.get_label() == "best that fits")
    none_found = next(p.effectiveness for p in points if p.model == "y")  # at 3, 4, 6, 11 ms and the right edge
    assert list(frontier.get_ydata()) == pytest.approx([none_found] * 2 + [1.0] * 3)


def test_a_free_point_is_labelled_free_on_the_plot(tmp_path, monkeypatch):
    """With --zero-untimed, DL 2019's replayed BM25 candidates (0 ms in the table) were drawn at half the cheapest
    time, 624 ms beside minilm-bi's 1248 ms p95, labelled "100" alone: the plot read as BM25 costing 624 ms."""
    import matplotlib.pyplot as plt

    free = _load(_write_run(tmp_path, "bm25x", 20, 0.0, 1))
    for ranking in free.queries.values():
        ranking.timings = []
    points, label = budget.measure_points([free, _load(_write_run(tmp_path, "slow", 5, 29.0, 2))], "nDCG@10",
                                          zero_untimed=True)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    budget.plot(budget.build_report(points, label), str(tmp_path / "budget.png"))
    labels = sorted(text.get_text() for text in figures[0].axes[0].texts)
    assert labels == ["20 (0 ms)", "5"]


def test_crossings_in_milliseconds_are_never_in_scientific_notation():
    assert budget.Crossing("deep", "bm25", 2103.4, 12.25).sentence() == \
        "deep is better than bm25 from 12.3 to 2104 ms per query"
    assert budget.Lead("deep", "bm25", 1500.0, False).sentence().endswith("from 1500 ms per query on")


def test_a_boundary_is_rounded_up_so_the_sentence_holds_at_the_budget_it_prints(tmp_path):
    """"fits from 1248 ms" was said of a point costing 1248.08 ms, which a 1248 ms budget does not fit: boundaries
    were rounded to the nearest. They are rounded up now, and a value off its rounding by float noise alone stays."""
    assert budget.Best(("tk",), 1248.08).sentence() == "tk is the best that fits from 1249 ms per query on"
    assert budget.Best(("tk",), 12.100000000000001).sentence() == "tk is the best that fits from 12.1 ms per query on"
    assert budget.Best(("tk",), 0.01234).sentence() == "tk is the best that fits from 0.0124 ms per query on"
    paths = [_write_run(tmp_path, "early", 20, 2.0, 1), _write_run(tmp_path, "late", 20, 40.0, 2)]
    points, label = budget.measure_points([_load(p) for p in paths], "nDCG@10")
    for best in budget.build_report(points, label, "median", [100]).best:
        printed = float(best.sentence().split(" from ")[1].split()[0])
        row = budget.build_report(points, label, "median", [printed]).budget_rows()[0]
        assert all(row[model] is not None for model in best.models), (best.sentence(), row)


def test_a_boundary_of_29_digits_or_more_is_said_whole():
    """A '# time:' line may hold any finite number of milliseconds; a boundary of 1e28 ms or more was a traceback
    (decimal.InvalidOperation: rounding it to whole milliseconds took more than Decimal's 28 digits)."""
    assert budget.Best(("tk",), 1e28).sentence() == f"tk is the best that fits from 1{'0' * 28} ms per query on"
    assert budget.Best(("tk",), 1.5e300).sentence() == f"tk is the best that fits from 15{'0' * 299} ms per query on"


def test_labels_files_and_cached_stages_inside_a_fusion(tmp_path, monkeypatch):
    from rerank.cli.io import split_label
    from rerank.evaluate.budget import cached_score_stages

    monkeypatch.chdir(tmp_path)
    (tmp_path / "k=5.run").write_text("")
    assert split_label("k=5.run") == (None, "k=5.run") and split_label("bert=k5.run") == ("bert", "k5.run")
    fused = [{"name": "bm25", "stage": "retrieve"},
             {"name": "rrf", "stage": "fuse", "inputs": [{"run": "bi.run", "stages": [
                 {"name": "bm25", "stage": "retrieve"}, {"name": "bi", "stage": "score", "cache": True}]}]}]
    assert cached_score_stages(fused) == ["bi"]


@pytest.mark.parametrize("text", ["0", "-5", "abc", "5,,10", "nan"])
def test_non_positive_numbers_are_refused(text):
    with pytest.raises(UsageError):
        budget.positive_numbers(text, "--budgets")


def test_default_budgets_span_the_costs(tmp_path):
    points, _ = budget.measure_points([_load(_write_run(tmp_path, "m", 20, 30.0, 2))], "nDCG@10")
    assert budget.default_budgets(points, "median") == [20, 50]


def test_cli_report_plot_and_errors(tmp_path, rerank):
    slow = _write_run(tmp_path, "slow", 20, 99.0, 2)
    fast = _write_run(tmp_path, "fast", 20, 4.0, 1)
    plot = tmp_path / "budget.png"
    done = rerank("budget", f"cheap={fast}", slow, "--format", "json", "--plot", str(plot), "--budgets", "10,200")
    report = json.loads(done.stdout)
    assert {p["model"] for p in report["points"]} == {"cheap", "slow"}
    assert report["crossings"][0]["sentence"] == "cheap fits from 5.04 ms per query, slow only from 101"
    assert [b["sentence"] for b in report["best"]] == ["cheap is the best that fits from 5.04 to 101 ms per query",
                                                       "slow is the best that fits from 101 ms per query on"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = rerank("budget", slow, "--budgets", "10,-1", check=False)
    assert bad.returncode == 2 and "--budgets must be positive numbers, not '-1'" in bad.stderr
    assert "Traceback" not in bad.stderr
    for option, value, message in (("--budgets", "1_0", "--budgets must be positive numbers separated by commas, "
                                                        "not '1_0'"),
                                   ("--depths", "10.5", "--depths must be positive integers separated by commas, "
                                                        "not '10.5'")):
        given = ("--model", "minilm-bi") if option == "--depths" else (slow,)  # --model reads stdin
        refused = rerank("budget", *given, option, value, input=Path(slow).read_text(), check=False)  # 1_0 read as 10
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    # no runs named: the one piped in, as eval reads it (it said "no runs given"); at a terminal, what to give
    piped = rerank("budget", "--format", "json", "--budgets", "10,200", input=Path(slow).read_text())
    assert {p["model"] for p in json.loads(piped.stdout)["points"]} == {"slow"}
    empty = rerank("budget", input="", check=False)
    assert empty.returncode == 1 and "empty input: <stdin> holds no run records" in empty.stderr
    leader, follower = pty.openpty()
    with os.fdopen(leader), os.fdopen(follower) as terminal:
        bad = subprocess.run([sys.executable, "-m", "rerank", "budget"], stdin=terminal, capture_output=True, text=True,
                             timeout=120)
    assert bad.returncode == 2 and "no runs given: name run files (one per model and depth), pipe one in" in bad.stderr
    twice = rerank("budget", slow, slow, check=False)  # the check eval and fuse share (it said "both 'slow' at depth 20")
    assert twice.returncode == 2 and f"run {slow} is given twice; give it once, or label the copies" in twice.stderr
    # a cut by cat --depth keeps its stage's depth and time: said, as a user took it for a shallower point
    shallow = tmp_path / "slow-cut.run"
    shallow.write_text(rerank("cat", "--depth", "5", slow).stdout)
    cut = rerank("budget", slow, str(shallow), check=False)
    assert cut.returncode == 2 and cut.stderr.strip().splitlines() == [
        f"rerank: error: {shallow} and {slow} are both 'slow' at depth 20 ({shallow}: a cut by cat --depth keeps its "
        "stage's depth and time; for a shallower point, run the stage that deep); label one differently (LABEL=FILE)"]
    assert "score cache" not in done.stderr
    cached = rerank("budget", _write_run(tmp_path, "cached", 20, 0.1, 2, cache=True))
    assert "stage cached ran with the score cache on" in cached.stderr and "--no-cache" in cached.stderr
    # a first stage timed as one batch (Lucene, dense, Elasticsearch) has no spread of its own to put in a p95
    amortised = tmp_path / "amortised.run"
    amortised.write_text(open(slow).read().replace('"stage": "retrieve"', '"stage": "retrieve", "timing": "amortised"'))
    for statistic, said in (("median", False), ("p95", True)):
        done = rerank("budget", str(amortised), "--statistic", statistic)
        assert ("amortised.run: stage bm25 timed its queries per batch, each an equal share of its batch, so its p95 "
                "shows no per-query spread" in done.stderr) == said, done.stderr  # dense's batches: p95 > median
    few = tmp_path / "few.run"  # a run of 2 of the 8 judged queries: its mean counts the other 6 as 0
    qid_of = {True: lambda line: line.split()[2], False: lambda line: line.split()[0]}  # '# time: QID ...' or a record
    few.write_text("".join(line for line in open(slow) if line.startswith("# ") and not line.startswith("# time:")
                           or qid_of[line.startswith("# time:")](line) in ("q1", "q2")))
    partial = rerank("budget", str(few))
    assert "note: slow: 6 judged queries have no results and count as 0" in partial.stderr


def test_no_runs_and_stdin_closed_is_told_what_to_give():
    """`rerank budget <&-` (a cron job, a daemon): Python's sys.stdin is None, and asking it isatty() was a
    traceback; eval says what to give."""
    done = subprocess.run([sys.executable, "-m", "rerank", "budget"], preexec_fn=lambda: os.close(0),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no runs given: name run files (one per model and depth), pipe one in" in done.stderr


@pytest.mark.data
def test_real_dl2019_candidates(tmp_path, rerank):
    """The shipped candidates carry no timings: refused with the stage named, accepted as free."""
    candidates = tmp_path / "bm25.run"
    candidates.write_text(rerank("retrieve", "trec-dl-2019", "--candidates", "bm25").stdout)
    refused = rerank("budget", str(candidates), check=False)
    assert refused.returncode == 1
    assert "no per-query timings" in refused.stderr and "'bm25' (candidates)" in refused.stderr
    # the same run with a timed stage cut at depth 10 (keeps BM25's order, so the same nDCG@10)
    with open(candidates) as handle:
        run = load_run(handle, str(candidates))
    timed = tmp_path / "cut10.run"
    with open(timed, "w") as handle, \
            RunWriter(handle, run.header.with_stage({"name": "cut", "stage": "score", "depth": 10})) as writer:
        for ranking in run.queries.values():
            ranking.timings = [Timing("cut", 3.0, 10)]
            writer.write(ranking)
    done = rerank("budget", "--zero-untimed", str(candidates), str(timed), "--format", "json")
    points = {p["model"]: p for p in json.loads(done.stdout)["points"]}
    assert points["bm25"]["effectiveness"] == pytest.approx(0.5058, abs=5e-5)
    assert points["cut"]["median_ms"] == pytest.approx(3.0) and points["cut"]["depth"] == 10
    assert points["bm25"]["judged"] == points["bm25"]["timed"] == 43
    # equal rankings: below 3 ms only bm25 fits, which is not "better" (it said "at every budget from 0 ms")
    assert [lead["sentence"] for lead in json.loads(done.stdout)["leads"]] == [
        "bm25 is at least as good as cut at every budget where both fit, from 3 ms per query on"]
    csv_text = rerank("budget", "--zero-untimed", str(candidates), str(timed), "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert {(row["budget_ms"], row["model"]) for row in rows if row["best"] == "True"} == {
        ("2.0", "bm25"), ("5.0", "bm25"), ("5.0", "cut")}


def test_each_depth_pays_for_every_passage_it_scores(tmp_path, monkeypatch):
    """The bi-encoder keeps passage vectors in memory: a deeper pass used to reuse the shallower pass's and
    looked as cheap (232 ms at depth 10 against 237 ms at depth 5)."""
    from rerank.evaluate.budget_scoring import score_at_depths
    from rerank.models.bert import BiEncoderReranker

    (tmp_path / "topics.tsv").write_text("q1\tkernel pooling\nq2\tneural ranking\n")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": f"text {d} about ranking"}) + "\n"
                                                   for d in DOCS[:4]))
    header = RunHeader({"topics": str(tmp_path / "topics.tsv"), "corpus": str(tmp_path / "corpus.jsonl")})
    buffer = io.StringIO()
    RunWriter(buffer, header.with_stage({"name": "bm25", "stage": "retrieve"})).write_all(
        QueryRanking.from_scores(qid, DOCS[:4], [4, 3, 2, 1], timings=[Timing("bm25", 1.0, 4)]) for qid in ("q1", "q2"))
    embedded: list[int] = []
    real_embed = BiEncoderReranker.embed
    monkeypatch.setattr(BiEncoderReranker, "embed", lambda self, texts: embedded.append(len(texts)) or
                        real_embed(self, texts))
    runs = score_at_depths(io.StringIO(buffer.getvalue()), "cands", "minilm-bi", None, [2, 4])
    passages = [n for n in embedded if n > 1]  # a query is embedded alone
    assert passages == [2, 4]  # the queries share the 4 passages: each pass embeds those it scores, once
    assert [budget.run_depth(run) for run in runs] == [2, 4]


def test_a_topics_file_edited_since_is_said_once_not_at_every_depth(tmp_path, capsys):
    """budget --model read the stream's topics file again for each depth, and said it had changed since the stream's
    stages read it once per depth."""
    from rerank.evaluate.budget_scoring import score_at_depths
    from rerank.runs import file_fields

    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tkernel pooling\nq2\tneural ranking\n")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": f"text {d} about ranking"}) + "\n"
                                                   for d in DOCS[:4]))
    header = RunHeader({**file_fields(topics=str(topics)), "corpus": str(tmp_path / "corpus.jsonl")})
    buffer = io.StringIO()
    RunWriter(buffer, header.with_stage({"name": "bm25", "stage": "retrieve"})).write_all(
        QueryRanking.from_scores(qid, DOCS[:4], [4, 3, 2, 1], timings=[Timing("bm25", 1.0, 4)]) for qid in ("q1", "q2"))
    topics.write_text("q1\tkernel pooling\nq2\tlearning to rank\n")
    capsys.readouterr()
    runs = score_at_depths(io.StringIO(buffer.getvalue()), "cands", "minilm-bi", None, [2, 3, 4])
    assert [budget.run_depth(run) for run in runs] == [2, 3, 4]
    assert capsys.readouterr().err.count(f"rerank: warning: {topics} has changed since the stream's stages read it") == 1


def test_depth_is_the_one_scored_not_the_one_asked_for(tmp_path):
    """`--depth 200` over 20 candidates scores 20: two such runs are one point, not two."""
    path = _write_run(tmp_path, "bert", 200, 5.0, 2)
    run = _load(path)
    for ranking in run.queries.values():
        ranking.timings = [Timing("bm25", 1.0, 20), Timing("bert", 5.0, 20)]
    assert budget.run_depth(run) == 20


def test_runs_of_one_name_but_other_checkpoints_are_not_one_curve(tmp_path):
    """Curves were grouped by stage name alone: TK at depth 20 from one checkpoint and at 100 from a retrained one
    (or another model given --name tk) were drawn as one model's curve, saying nothing."""
    runs = [_load(_write_run(tmp_path, "tk", depth, 5.0 * depth, 2)) for depth in (20, 100)]
    for run, checkpoint in zip(runs, ("aaaa", "bbbb")):
        run.header.stages[-1].update(model="tk", checkpoint_hash=checkpoint)
    with pytest.raises(UsageError, match="both curve 'tk' but were made differently .checkpoint_hash aaaa vs bbbb"):
        budget.measure_points(runs, "nDCG@10")
    runs[1].label = "tk-retrained"  # labelled apart: two curves
    points, _ = budget.measure_points(runs, "nDCG@10")
    assert {p.model for p in points} == {"tk", "tk-retrained"}
    runs[1].header.stages[-1]["checkpoint_hash"] = "aaaa"  # one checkpoint at two depths: one curve, as before
    runs[1].label = None
    assert {p.model for p in budget.measure_points(runs, "nDCG@10")[0]} == {"tk"}


def test_runs_of_one_model_with_other_options_are_not_one_curve(tmp_path):
    """On CACM, minilm-bi at depth 5 with --max-length 32 (117 ms) and at depth 10 as it comes (2456 ms) were drawn as
    one curve, 'minilm-bi', saying nothing: the options that change a model's scores or speed (rerank score's
    --max-length, --precision, --quantize, --compile, --device) make another curve, as another checkpoint does."""
    runs = [_load(_write_run(tmp_path, "minilm-bi", depth, 5.0 * depth, 2)) for depth in (5, 10)]
    for run, max_length in zip(runs, (32, 256)):
        run.header.stages[-1].update(model="minilm-bi", max_length=max_length)
    with pytest.raises(UsageError, match="both curve 'minilm-bi' but were made differently .max_length 32 vs 256"):
        budget.measure_points(runs, "nDCG@10")
    runs[0].header.stages[-1]["max_length"] = 256
    assert {p.model for p in budget.measure_points(runs, "nDCG@10")[0]} == {"minilm-bi"}
    runs[1].header.stages[-1]["scores_version"] = 2  # scored by a rerank that computes the model otherwise
    with pytest.raises(UsageError, match="made differently .scores_version None vs 2"):
        budget.measure_points(runs, "nDCG@10")


def test_runs_of_one_model_scored_by_another_rerank_are_one_curve(tmp_path):
    """Stage entries record the rerank that ran them, and a Lucene stage its index build and Anserini: what a
    reviewer needs, not what the model scored with. One checkpoint at two depths, the second scored by a later
    rerank over another build of the index, stays one curve."""
    from rerank import code_version

    runs = [_load(_write_run(tmp_path, "tk", depth, 5.0 * depth, 2)) for depth in (20, 100)]
    assert [stage["rerank_version"] for stage in runs[0].header.stages] == [code_version()] * 2
    runs[1].header.stages[-1]["rerank_version"] = "0.2.0"
    runs[1].header.stages[0].update(index_build="20270101000000-abcd", anserini_version="2.0.0")
    assert {p.model for p in budget.measure_points(runs, "nDCG@10")[0]} == {"tk"}


def test_runs_of_one_model_scored_under_other_packages_are_one_curve(tmp_path):
    """A score stage records the torch, transformers and tokenizers it scored with, for a reviewer; like the rerank
    that ran it, they do not make another curve: one model at three depths, one scored under another torch and one
    by an older rerank that recorded none, is one curve of three points. So do those that encoded its stored vectors
    and the pipeline file that ran it."""
    import tokenizers
    import torch
    import transformers

    from rerank.evaluate.budget_scoring import score_at_depths

    (tmp_path / "topics.tsv").write_text("q1\tkernel pooling\nq2\tneural ranking\n")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": f"text {d} about ranking"}) + "\n"
                                                   for d in DOCS[:4]))
    header = RunHeader({"topics": str(tmp_path / "topics.tsv"), "corpus": str(tmp_path / "corpus.jsonl"),
                        "qrels": _qrels_file(tmp_path)})
    buffer = io.StringIO()
    RunWriter(buffer, header.with_stage({"name": "bm25", "stage": "retrieve"})).write_all(
        QueryRanking.from_scores(qid, DOCS[:4], [4, 3, 2, 1], timings=[Timing("bm25", 1.0, 4)]) for qid in ("q1", "q2"))
    runs = score_at_depths(io.StringIO(buffer.getvalue()), "cands", "minilm-bi", None, [2, 3, 4])
    assert runs[0].header.stages[-1]["packages"] == {"torch": torch.__version__, "transformers": transformers.__version__,
                                                     "tokenizers": tokenizers.__version__}
    runs[1].header.stages[-1]["packages"]["torch"] = "2.0.0"
    del runs[2].header.stages[-1]["packages"]
    runs[1].header.stages[-1].update(encoded_with={"torch": "2.0.0"}, pipeline="/p.toml", pipeline_sha256="ab")
    points, _ = budget.measure_points(runs, "nDCG@10")
    assert [(p.model, p.depth) for p in points] == [("minilm-bi", 2), ("minilm-bi", 3), ("minilm-bi", 4)]


def test_runs_from_stored_vectors_and_on_the_fly_are_not_one_curve(tmp_path):
    """On CACM, TK at depth 10 from its stored encodings (53 ms) and at depth 50 encoding the documents on the fly
    (387 ms, where stored ones took 190) were one curve, 'tk'. Same scores, another cost: refused, as other
    options are; two runs from stored vectors, wherever those are, stay one curve."""
    runs = [_load(_write_run(tmp_path, "tk", depth, 5.0 * depth, 2)) for depth in (10, 50)]
    runs[0].header.stages[-1]["encodings"] = "stored (/home/a/indexes/cacm/tk-ccdfa8f92a59)"
    runs[1].header.stages[-1]["encodings"] = "on the fly (no stored encodings for cacm or cacm)"
    with pytest.raises(UsageError, match="both curve 'tk' but were made differently .document vectors stored vs on "
                                         "the fly"):
        budget.measure_points(runs, "nDCG@10")
    runs[1].header.stages[-1]["encodings"] = "stored (/home/b/indexes/cacm/tk-ccdfa8f92a59)"
    assert {p.model for p in budget.measure_points(runs, "nDCG@10")[0]} == {"tk"}
    runs[0].header.stages[-1].update(encodings=None, passages="stored (/home/a/indexes/cacm/dense)")  # minilm-bi's
    assert {p.model for p in budget.measure_points(runs, "nDCG@10")[0]} == {"tk"}


def test_a_curve_named_like_the_budget_column_is_refused(tmp_path):
    """`rerank budget budget_ms=cacm.run bi.run` ended in a TypeError traceback: each budget's row is keyed by the
    curves' names beside its `budget_ms`, which the curve's result replaced."""
    runs = [_load(_write_run(tmp_path, "fast", 20, 4.0, 1), "budget_ms"), _load(_write_run(tmp_path, "slow", 5, 29.0, 1))]
    with pytest.raises(UsageError, match=r"fast-20.run: a curve cannot be named 'budget_ms'"):
        budget.measure_points(runs, "nDCG@10")


def test_a_measure_name_standing_for_several_is_refused(tmp_path):
    run = _load(_write_run(tmp_path, "bert", 20, 5.0, 2))
    with pytest.raises(UsageError, match="names 2 measures"):
        budget.measure_points([run], "P.5,10")
    for count in ("NumRel", "num_rel_ret"):  # a curve of a constant, or of a sum: no effectiveness
        with pytest.raises(UsageError, match=f"-m {count} is a count"):
            budget.measure_points([run], count)


def test_measures_given_twice_are_refused_not_the_last_taken(tmp_path, rerank):
    """`rerank budget RUN -m nDCG@10 -m MAP`, as eval takes several, drew MAP's curves alone, saying nothing."""
    done = rerank("budget", _write_run(tmp_path, "bert", 20, 5.0, 2), "-m", "nDCG@10", "-m", "MAP", check=False)
    assert done.returncode == 2 and done.stdout == "" and done.stderr == (
        "rerank: error: rerank budget's curves are of one measure, and -m is given 2 times (nDCG@10, MAP): give one "
        "(rerank eval compares several)\n")


def test_the_plot_is_written_in_the_format_its_name_asks_for(tmp_path, rerank):
    """`--plot budget.pdf` wrote PNG bytes into budget.pdf (explain's plot had been mended, budget's not); a
    suffix matplotlib cannot write is refused before any run is read."""
    run = _write_run(tmp_path, "m", 20, 5.0, 2)
    rerank("budget", run, "--plot", str(tmp_path / "budget.pdf"))
    assert (tmp_path / "budget.pdf").read_bytes()[:5] == b"%PDF-"
    rerank("budget", run, "--plot", str(tmp_path / "budget.svg"))
    assert b"<svg" in (tmp_path / "budget.svg").read_bytes()[:500]
    bad = rerank("budget", run, "--plot", str(tmp_path / "budget.jpgx"), "-o", str(tmp_path / "report.txt"), check=False)
    assert bad.returncode == 2 and "cannot write .jpgx images" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "report.txt").exists() and not (tmp_path / "budget.jpgx").exists()


def test_a_plot_that_cannot_be_written_is_refused_before_the_report_is_printed(tmp_path, rerank):
    """`--plot FILE` where FILE cannot be made (its folder a file here; a read-only one alike, which root may write
    to, so it is not the test) printed the whole report, then failed on the plot."""
    run = _write_run(tmp_path, "m", 20, 5.0, 2)
    plot = f"{run}/budget.png"  # under a file
    bad = rerank("budget", run, "--plot", plot, check=False)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == f"rerank: error: --plot {plot}: {run} is not a folder\n"


def test_a_report_that_cannot_be_written_is_refused_before_any_run_is_read(tmp_path, rerank):
    """`-o FILE` where FILE cannot be made was found out only when the report was written: after every run was read
    and, with --model, after minutes of scoring. Here the run is malformed, so reading it first says that instead."""
    run = tmp_path / "broken.run"
    run.write_text("q1 Q0 d1 one 2.0 tag\n")
    report = f"{run}/budget.md"  # under a file
    bad = rerank("budget", str(run), "-o", report, check=False)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == f"rerank: error: -o {report}: {run} is not a folder\n"


def test_an_output_that_names_one_of_the_runs_is_refused(tmp_path, rerank):
    """`-o` or `--plot` naming a run read (a slip of the shell's completion) replaced that run with the report
    or a PNG, and exited 0."""
    run = str(Path(_write_run(tmp_path, "m", 20, 5.0, 2)).rename(tmp_path / "m20"))  # no suffix: a plot's name too
    before = Path(run).read_bytes()
    for option, what in (("-o", "report"), ("--plot", "plot")):
        bad = rerank("budget", f"label={run}", option, run, check=False)
        assert bad.returncode == 2 and f"{option} {run} is one of the runs to read; the {what} would replace it" in bad.stderr
        assert Path(run).read_bytes() == before

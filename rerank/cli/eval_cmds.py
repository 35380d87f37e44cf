"""`rerank eval`: one evaluator for every stage; several runs make a leaderboard."""

from __future__ import annotations

import contextlib
import os

import click

from ..errors import UsageError
from ..evaluate import report
from ..evaluate.measures import parse_measures, sort_among
from ..evaluate.session import evaluate_runs, judgements_for, load_runs
from . import cli
from .io import check_dataset_option, open_run_inputs, split_label, typed
from .leaderboard import leaderboard_options


def _baseline_index(runs, baseline: str | None) -> int:
    if baseline is None:
        return 0
    for i, run in enumerate(runs):
        if baseline in (run.name, run.source):
            return i
    if os.path.isfile(baseline):  # the file under another spelling (./a.run, its absolute path, a link to it)
        files = [i for i, run in enumerate(runs)
                 if os.path.isfile(run.source) and os.path.samefile(baseline, run.source)]
        if len(files) == 1:
            return files[0]
    shared = [i for i, run in enumerate(runs) if run.header.stages and run.header.stages[-1].get("name") == baseline]
    if len(shared) == 1:  # the stage name of a run renamed LABEL=FILE: it was called that of "several runs"
        return shared[0]
    if shared:  # a stage name that several runs carry, shown as name:file
        raise UsageError(f"--baseline {baseline!r} is the stage name of several runs: "
                         f"{', '.join(runs[i].name for i in shared)}; name one of them")
    raise UsageError(f"--baseline {baseline!r} names none of the runs: {', '.join(r.name for r in runs)}")


def _refuse_tests_without_a_comparison(runs: int, per_query: bool) -> None:
    """--test/--correction mark a leaderboard's differences to its baseline: with one run, or per query, they were
    ignored without a word, and a table without marks read as 'no significant difference'."""
    given = [{"tests": "--test", "correction": "--correction"}[param] for param in typed("tests", "correction")]
    if given and (runs == 1 or per_query):
        why = "--per-query shows differences without tests" if per_query else "one run has no baseline to test against"
        raise UsageError(f"{'/'.join(given)} marks differences between several runs on a leaderboard; {why}")


@cli.command("eval")
@click.argument("runs", nargs=-1)
@click.option("--qrels", type=click.Path(dir_okay=False), help="Qrels file (default: the data set named in the run header).")
@click.option("--dataset", "dataset_name", default=None, metavar="NAME",
              help="The data set a run without a header is of (a plain TREC run from another tool): its qrels, "
                   "protocol and measures.")
@leaderboard_options()
@click.option("--min-rel", type=int, default=None, help="Lowest grade that counts as relevant (trec_eval -l).")
@click.option("-q", "--per-query", is_flag=True,
              help="One row per query and run; with several runs, each query's difference to the baseline too.")
@click.option("--format", "fmt", type=click.Choice((*report.FORMATS, "trec")), default="table", show_default=True,
              help="trec: trec_eval's 'measure qid value' lines, of one run.")
@click.option("-M", "--depth", type=click.IntRange(min=1), default=None,
              help="Evaluate each query's top DEPTH documents alone (trec_eval -M), e.g. a 1000-deep run at 100.")
@click.option("--run-queries", is_flag=True,
              help="Average over the judged queries the runs hold (trec_eval without -c), not "
                   "over every judged query with a missing one as 0 (trec_eval -c).")
@click.option("--strict", is_flag=True, help="Insist that ranks agree with scores.")
def eval_command(runs, qrels, dataset_name, measures, min_rel, per_query, fmt, baseline, sort_by, tests, correction,
                 depth, run_queries, strict) -> None:
    """Evaluate RUNS (files; '-' or none for stdin) and print a table or leaderboard.

    A run is named by its last stage (or its file); LABEL=FILE names it LABEL, as in rerank budget.
    """
    labelled = [split_label(arg) for arg in runs] or [(None, None)]
    with contextlib.ExitStack() as stack:
        labels = [label for label, _ in labelled]
        loaded = load_runs(open_run_inputs(stack, [path for _, path in labelled], labels), strict, labels)
    for run in loaded:
        same = [other.source for other in loaded if other.name == run.name]
        if len(same) > 1:
            raise UsageError(f"two runs are named {run.name!r} ({', '.join(same)}); give them different labels")
        if depth is not None:  # in trec_eval's order, as trec_eval -M cuts
            run.queries = {qid: ranking.as_trec_eval_reads().head(depth) for qid, ranking in run.queries.items()}
    if dataset_name is not None:
        check_dataset_option(dataset_name, [(run.header.dataset, run.source) for run in loaded])
    judgements = judgements_for(loaded, qrels, min_rel, dataset_name, "--dataset")
    # the leaderboard's options are refused before any measure is computed, and before the notes that computing
    # them prints: the error alone
    base = _baseline_index(loaded, baseline)
    _refuse_tests_without_a_comparison(len(loaded), per_query)
    if fmt == "trec" and (len(loaded) > 1 or sort_by is not None):
        raise UsageError("--format trec gives one run's lines in trec_eval's order, as trec_eval does: "
                         + ("leave out --sort" if len(loaded) == 1 else "evaluate the runs one at a time"))
    labels = [m.label for m in parse_measures(list(measures or judgements.measures), judgements.min_rel)]
    sort_label = sort_among(sort_by, labels) if sort_by is not None else None
    evaluations, named, warnings = evaluate_runs(loaded, judgements, list(measures), run_queries=run_queries)
    for warning in warnings:
        click.echo(f"rerank: note: {warning}", err=True)
    if fmt == "trec":
        click.echo(report.render_trec(evaluations[0], named, per_query), nl=False)
        return
    if per_query:
        click.echo(report.render_per_query(evaluations, named, fmt, base, sort_label), nl=False)
        return
    significance = report.Significance.chosen(tests, correction)
    rows = report.leaderboard(evaluations, named, base, sort_by, significance)
    click.echo(report.render(rows, named, fmt, evaluations[base].run_name, significance), nl=False)

"""`rerank eval`: one evaluator for every stage; several runs make a leaderboard."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import click

from ..errors import UsageError
from ..evaluate import report
from ..evaluate.measures import parse_measures, sort_among
from ..evaluate.session import Judgements, evaluate_runs, judgements_for, load_runs
from ..runs import Run
from . import cli
from .io import check_dataset_option, open_run_inputs, split_label, typed
from .leaderboard import judging_options, leaderboard_options


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


def refuse_tests_without_a_comparison(runs: int, per_query: bool) -> None:
    """--test/--correction mark a leaderboard's differences to its baseline: with one run, or per query, they were
    ignored without a word, and a table without marks read as 'no significant difference'."""
    given = [{"tests": "--test", "correction": "--correction"}[param] for param in typed("tests", "correction")]
    if given and (runs == 1 or per_query):
        why = "--per-query shows differences without tests" if per_query else "one run has no baseline to test against"
        raise UsageError(f"{'/'.join(given)} marks differences between several runs on a leaderboard; {why}")


@dataclass
class Judged:
    """Runs read and named as eval reads them, with their judgements and the index of the baseline among them."""

    runs: list[Run]
    judgements: Judgements
    base: int

    def sort_label(self, measures: tuple[str, ...], sort_by: str | None) -> str | None:
        """The measure's label that --sort names among those the board shows (-m's, else the data set's)."""
        if sort_by is None:
            return None
        named = parse_measures(list(measures or self.judgements.measures), self.judgements.min_rel)
        return sort_among(sort_by, [m.label for m in named])


def judged_runs(runs: tuple[str, ...], options: dict) -> Judged:
    """RUNS (files, LABEL=FILE, '-' or none for stdin) read, cut and judged as `judging_options` and --baseline
    (`options`, as click passes them) say: eval's and report's errors, before any measure is computed."""
    labelled = [split_label(arg) for arg in runs] or [(None, None)]
    with contextlib.ExitStack() as stack:
        labels = [label for label, _ in labelled]
        loaded = load_runs(open_run_inputs(stack, [path for _, path in labelled], labels), options["strict"], labels)
    for run in loaded:
        same = [other.source for other in loaded if other.name == run.name]
        if len(same) > 1:
            raise UsageError(f"two runs are named {run.name!r} ({', '.join(same)}); give them different labels")
        if options["depth"] is not None:  # in trec_eval's order, as trec_eval -M cuts
            run.queries = {qid: ranking.as_trec_eval_reads().head(options["depth"])
                           for qid, ranking in run.queries.items()}
    if options["dataset_name"] is not None:
        check_dataset_option(options["dataset_name"], [(run.header.dataset, run.source) for run in loaded])
    judgements = judgements_for(loaded, options["qrels"], options["min_rel"], options["dataset_name"], "--dataset")
    return Judged(loaded, judgements, _baseline_index(loaded, options["baseline"]))


@cli.command("eval")
@click.argument("runs", nargs=-1)
@judging_options()
@leaderboard_options()
@click.option("-q", "--per-query", is_flag=True,
              help="One row per query and run; with several runs, each query's difference to the baseline too.")
@click.option("--format", "fmt", type=click.Choice((*report.FORMATS, "trec")), default="table", show_default=True,
              help="trec: trec_eval's 'measure qid value' lines, of one run.")
def eval_command(runs, measures, per_query, fmt, sort_by, tests, correction, **options) -> None:
    """Evaluate RUNS (files; '-' or none for stdin) and print a table or leaderboard.

    A run is named by its last stage (or its file); LABEL=FILE names it LABEL, as in rerank budget.
    """
    # the leaderboard's options are refused before any measure is computed, and before the notes that computing
    # them prints: the error alone
    judged = judged_runs(runs, options)
    loaded, base = judged.runs, judged.base
    refuse_tests_without_a_comparison(len(loaded), per_query)
    if fmt == "trec" and (len(loaded) > 1 or sort_by is not None):
        raise UsageError("--format trec gives one run's lines in trec_eval's order, as trec_eval does: "
                         + ("leave out --sort" if len(loaded) == 1 else "evaluate the runs one at a time"))
    sort_label = judged.sort_label(measures, sort_by)
    evaluations, named, warnings = evaluate_runs(loaded, judged.judgements, list(measures),
                                                 run_queries=options["run_queries"])
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

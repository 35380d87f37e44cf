"""`rerank budget`: effectiveness within per-query time budgets, from the timings in run streams."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from ..atomic import check_writable, plot_format
from ..errors import UsageError
from ..evaluate import budget as budgets_lib
from ..evaluate.session import load_runs
from . import cli
from .io import in_existing_folder, open_run_input, open_run_inputs, refuse_replacing_an_input, split_label


def _read_runs(labelled: list[tuple[str | None, str]], output: str | None, plot_path: str | None,
               statistic: str) -> list:
    """The run files (LABEL=FILE), each named by its label or last stage, with what their timings cannot tell."""
    read = [("one of the runs to read", path) for _, path in labelled]
    for option, path, what in (("-o", output, "report"), ("--plot", plot_path, "plot")):
        refuse_replacing_an_input(option, path, what, read)
    with contextlib.ExitStack() as stack:
        loaded = load_runs(open_run_inputs(stack, [path for _, path in labelled], [label for label, _ in labelled]),
                           strict=False)
    for run, (label, _) in zip(loaded, labelled):
        run.label = label or (run.header.stages[-1].get("name") if run.header.stages else None) or run.source
        cached = budgets_lib.cached_note(run)
        if cached:
            click.echo(f"rerank: warning: {cached}", err=True)
        shared = budgets_lib.stages_where(run.header.stages, lambda stage: stage.get("timing") == "amortised")
        if shared and statistic == "p95":
            click.echo(f"rerank: note: {run.source}: stage {', '.join(shared)} timed its queries per batch, each "
                       "an equal share of its batch, so its p95 shows no per-query spread", err=True)
    return loaded


@cli.command("budget")
@click.argument("runs", nargs=-1)
@click.option("--model", "model_name", default=None,
              help="Re-rank the candidate stream on stdin with this model at every --depths, timing each.")
@click.option("--checkpoint", default=None, help="Checkpoint folder for --model.")
@click.option("--depths", default=None, help="Depths for --model, e.g. 5,10,20,50,100.")
@click.option("--interpolate", type=float, default=None, metavar="ALPHA",
              help="With --model: interpolate with the first stage as rerank score --interpolate does.")
@click.option("-m", "--measure", "measures", multiple=True,
              help="Effectiveness measure, one (default: the data set's first, e.g. nDCG@10).")
@click.option("--qrels", type=click.Path(dir_okay=False), help="Qrels file (default: the data set named in the runs).")
@click.option("--budgets", "budget_text", default=None, help="Budgets in ms per query, e.g. 5,10,50 (default: a 1-2-5 series).")
@click.option("--statistic", type=click.Choice(budgets_lib.STATISTICS), default="median", show_default=True,
              help="Per-query time that must fit the budget.")
@click.option("--pick", type=click.Choice(budgets_lib.PICKS), default="deepest", show_default=True,
              help="Per budget: the deepest depth that fits, or the most effective one (an oracle over the judgements).")
@click.option("--zero-untimed", is_flag=True, help="Count a run without '# time:' lines (e.g. replayed candidates) as 0 ms.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "markdown", "json"]), default="table", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=in_existing_folder,
              help="Write a plot here (.png, .pdf or .svg).")
@click.option("--title", default=None, help="Plot title.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, callback=in_existing_folder,
              help="Write the report here instead of stdout.")
def budget_command(runs, model_name, checkpoint, depths, interpolate, measures, qrels, budget_text, statistic, pick, zero_untimed, fmt,
                   plot_path, title, output) -> None:
    """Effectiveness reachable within per-query time budgets, one curve per model.

    \b
    RUNS are run files ('-' or none: stdin), each one model at one depth (LABEL=FILE names the curve; default: the
    last stage's name). A query's cost is the sum of all its '# time:' lines (every stage). --model re-ranks the
    candidate stream on stdin at each depth, beside any run files given.
      rerank budget bm25=bm25.run bert10.run bert100.run tk10.run tk100.run --plot budget.png
      rerank retrieve trec-dl-2019 --candidates bm25 | rerank budget --model tk --checkpoint CK --depths 10,50,100
      rerank retrieve trec-dl-2019 --candidates bm25 | rerank budget bert10.run --model tk --checkpoint CK --depths 10
    """
    from ..atomic import atomic_output

    if output and plot_path and os.path.realpath(output) == os.path.realpath(plot_path):
        raise UsageError(f"-o and --plot are both {output}: the plot would replace the report; give each a file")
    if len(measures) > 1:  # the last alone was used, as for any option given twice: eval's habit of several -m
        raise UsageError(f"rerank budget's curves are of one measure, and -m is given {len(measures)} times "
                         f"({', '.join(measures)}): give one (rerank eval compares several)")
    measure = measures[0] if measures else None
    if title is not None and not plot_path:
        raise UsageError("--title is the plot's title: give --plot FILE too")
    if plot_path:  # before any run is read or scored, and before the report is printed, which it followed
        plot_format(plot_path)
        check_writable(plot_path)
    if output:  # before --model spends minutes scoring, which it followed
        check_writable(output)
    from ..checkpoint import refuse_spoiling_an_unlisted_checkpoint

    for path in (output, plot_path):
        refuse_spoiling_an_unlisted_checkpoint(path)
    chosen = budgets_lib.positive_numbers(budget_text, "--budgets") if budget_text is not None else None
    labelled = [split_label(arg) for arg in runs]
    if model_name is not None:
        if not depths:
            raise UsageError("--model needs --depths, e.g. --depths 10,20,50,100")
        if any(path == "-" for _, path in labelled):
            raise UsageError("with --model, stdin is the candidate stream to re-rank: give the other runs as files, "
                             "not '-'")
        depth_list = budgets_lib.positive_numbers(depths, "--depths", int)
    else:
        if depths is not None or checkpoint is not None or interpolate is not None:
            raise UsageError("--depths, --checkpoint and --interpolate go with --model")
        if not runs and (sys.stdin is None or sys.stdin.isatty()):  # none piped in (or stdin closed): nothing to read
            raise UsageError("no runs given: name run files (one per model and depth), pipe one in, or use --model "
                             "with --depths")
        labelled = labelled or [(None, "-")]
    # run files first: a mistake in one is said before --model spends minutes scoring
    loaded = _read_runs(labelled, output, plot_path, statistic) if labelled else []
    if model_name is not None:
        from ..evaluate.budget_scoring import score_at_depths

        with open_run_input(None) as (handle, source):
            loaded += score_at_depths(handle, source, model_name, checkpoint, depth_list, interpolate)
    points, label = budgets_lib.measure_points(loaded, measure, qrels, zero_untimed,
                                               note=lambda message: click.echo(f"rerank: note: {message}", err=True))
    report = budgets_lib.build_report(points, label, statistic, chosen, pick)
    with atomic_output(output) as handle:  # a plot that cannot be written takes the report with it
        handle.write(budgets_lib.render(report, fmt))
        if plot_path:
            budgets_lib.plot(report, plot_path, title)
    if plot_path:
        click.echo(f"rerank: wrote plot {plot_path}", err=True)

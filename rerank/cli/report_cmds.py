"""`rerank report`: eval's leaderboard, per-query differences, time budgets and provenance as one HTML page."""

from __future__ import annotations

import click

from ..evaluate import report
from ..evaluate import html_report
from ..evaluate.session import evaluate_runs
from . import cli
from .eval_cmds import refuse_tests_without_a_comparison, judged_runs
from .io import in_existing_folder, refuse_replacing_an_input, split_label
from .leaderboard import judging_options, leaderboard_options


@cli.command("report")
@click.argument("runs", nargs=-1)
@judging_options()
@leaderboard_options()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), callback=in_existing_folder,
              help="The HTML page to write ('-': stdout).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Documents of each run shown for a query.")
@click.option("--zero-untimed", is_flag=True,
              help="Count a run without '# time:' lines (replayed candidates) as 0 ms on the time-budget curves, "
                   "as rerank budget does.")
def report_command(runs, measures, sort_by, tests, correction, output, top, zero_untimed, **options) -> None:
    """Compare RUNS (files, LABEL=FILE; '-' or none for stdin) on one self-contained HTML page.

    \b
    The page holds eval's leaderboard (sortable), each query's difference to the baseline with both runs' top
    documents, the time-budget curves of the runs that carry timings, and each run's provenance.
      rerank report bm25=bm25.run rm3=rm3.run --baseline bm25 -o report.html
    """
    html_report.check_output(output)
    refuse_replacing_an_input("-o", output, "page", [("one of the runs to read", split_label(arg)[1])
                                                      for arg in runs])
    judged = judged_runs(runs, options)
    refuse_tests_without_a_comparison(len(judged.runs), False)
    judged.sort_label(measures, sort_by)
    html_report.refuse_disjoint_runs(judged.runs, judged.judgements)
    evaluations, named, warnings = evaluate_runs(judged.runs, judged.judgements, list(measures),
                                                 run_queries=options["run_queries"])
    for warning in warnings:
        click.echo(f"rerank: note: {warning}", err=True)
    html_report.write(html_report.Compared(
        judged.runs, judged.judgements, evaluations, named, judged.base, sort_by,
        report.Significance.chosen(tests, correction), warnings, top, zero_untimed, options["dataset_name"]), output)
    if output != "-":
        click.echo(f"rerank: wrote report {output}", err=True)

"""`rerank run PIPELINE`: execute a declarative experiment file."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..evaluate import html_report, report
from ..pipeline import run_pipeline
from . import cli
from .io import in_existing_folder
from .leaderboard import leaderboard_options


@cli.command("run")
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(report.FORMATS), default="table", show_default=True)
@click.option("--force", is_flag=True, help="Recompute every stage even if its run file is up to date.")
@click.option("-q", "--per-query", is_flag=True,
              help="One row per query and run, with each query's difference to the baseline (as eval --per-query).")
@leaderboard_options(pipeline=True)
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, callback=in_existing_folder,
              help="Also write rerank report's HTML page of the evaluated stages here.")
def run_command(pipeline: str, fmt: str, force: bool, per_query: bool, measures, baseline, sort_by, tests,
                correction, report_path) -> None:
    """Run every stage of PIPELINE (TOML), reuse unchanged runs under runs/, print the leaderboard.

    -m, --baseline, --sort, --test and --correction override the file's keys of their names for the leaderboard
    alone: every stage's run is reused as it would be without them.
    """
    overrides = {"measures": measures, "baseline": baseline, "sort": sort_by, "tests": tests,
                 "correction": correction}
    if report_path == "-":
        raise UsageError("--report takes a file: the leaderboard is what goes to stdout")
    if report_path is not None:  # before any stage runs
        html_report.check_output(report_path, "--report")
    click.echo(run_pipeline(pipeline, fmt, force, per_query, overrides, report_path), nl=False)
    if report_path not in (None, "-"):
        click.echo(f"rerank: wrote report {report_path}", err=True)

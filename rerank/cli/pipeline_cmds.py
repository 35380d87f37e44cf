"""`rerank run PIPELINE`: execute a declarative experiment file."""

from __future__ import annotations

import click

from ..evaluate import report
from ..pipeline import run_pipeline
from . import cli
from .leaderboard import leaderboard_options


@cli.command("run")
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(report.FORMATS), default="table", show_default=True)
@click.option("--force", is_flag=True, help="Recompute every stage even if its run file is up to date.")
@click.option("-q", "--per-query", is_flag=True,
              help="One row per query and run, with each query's difference to the baseline (as eval --per-query).")
@leaderboard_options(pipeline=True)
def run_command(pipeline: str, fmt: str, force: bool, per_query: bool, measures, baseline, sort_by, tests,
                correction) -> None:
    """Run every stage of PIPELINE (TOML), reuse unchanged runs under runs/, print the leaderboard.

    -m, --baseline, --sort, --test and --correction override the file's keys of their names for the leaderboard
    alone: every stage's run is reused as it would be without them.
    """
    overrides = {"measures": measures, "baseline": baseline, "sort": sort_by, "tests": tests,
                 "correction": correction}
    click.echo(run_pipeline(pipeline, fmt, force, per_query, overrides), nl=False)

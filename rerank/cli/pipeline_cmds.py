"""`rerank run PIPELINE`: execute a declarative experiment file."""

from __future__ import annotations

import click

from ..pipeline import run_pipeline
from . import cli


@cli.command("run")
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "markdown"]), default="table", show_default=True)
@click.option("--force", is_flag=True, help="Recompute every stage even if its run file is up to date.")
@click.option("-q", "--per-query", is_flag=True,
              help="One row per query and run, with each query's difference to the baseline (as eval --per-query).")
def run_command(pipeline: str, fmt: str, force: bool, per_query: bool) -> None:
    """Run every stage of PIPELINE (TOML), reuse unchanged runs under runs/, print the leaderboard."""
    click.echo(run_pipeline(pipeline, fmt, force, per_query), nl=False)

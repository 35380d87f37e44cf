"""`rerank run PIPELINE`: execute a declarative experiment file."""

from __future__ import annotations

import click

from ..pipeline import run_pipeline
from . import cli


@cli.command("run")
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "markdown"]), default="table", show_default=True)
@click.option("--force", is_flag=True, help="Recompute every stage even if its run file is up to date.")
def run_command(pipeline: str, fmt: str, force: bool) -> None:
    """Run every stage of PIPELINE (TOML), reuse unchanged runs under runs/, print the leaderboard."""
    click.echo(run_pipeline(pipeline, fmt, force), nl=False)

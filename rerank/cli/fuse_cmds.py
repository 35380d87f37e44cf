"""`rerank fuse`: combine first-stage runs (e.g. BM25 and dense) into one run stream."""

from __future__ import annotations

import contextlib

import click

from ..errors import UsageError, counted, verb
from ..evaluate.session import load_runs, some_ids
from ..retrieve import fusion
from . import cli
from .io import declared_options, open_run_inputs, run_output_options, write_stream


@cli.command()
@click.argument("runs", nargs=-1, required=True)
@declared_options([option for option in fusion.FUSE_STAGE.parameters if option.name != "inputs"])
@click.option("--name", "stage_name", default="fused", show_default=True, help="Run tag for the fused run.")
@run_output_options
def fuse(runs, method, k, norm, depth, stage_name, output, trec_only) -> None:
    """Fuse two or more RUNS of the same topics ('-' reads one of them from stdin).

    \b
    rerank retrieve vaswani -o bm25.run
    rerank retrieve vaswani --backend dense | rerank fuse bm25.run - | rerank eval
    """
    if len(runs) < 2:
        raise UsageError("rerank fuse needs at least two runs")
    with contextlib.ExitStack() as stack:
        loaded = load_runs(open_run_inputs(stack, runs), strict=False)
    fused = fusion.fuse(loaded, method, k, norm, depth, stage_name)  # refuses runs it cannot fuse, before the note
    uneven = fusion.uneven_queries(loaded)
    if uneven:
        are = verb(len(uneven), "is", "are")
        click.echo(f"rerank: note: {counted(len(uneven), 'query', 'queries')} {are} missing from some of the runs and "
                   f"{are} fused from the others {some_ids(uneven)}", err=True)
    write_stream(fused, output, trec_only)

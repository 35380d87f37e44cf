"""`rerank answer`: a reader stage, from a run of retrieved facts to a run of answer entities."""

from __future__ import annotations

import itertools

import click

from ..errors import UsageError
from ..runs import RunReader, Stream
from . import cli
from .io import open_run_input, run_output_options, write_no_queries, write_stream
from .score_cmds import parse_model_options


def load_reader(model_name: str, checkpoint: str | None, options: dict, threads: int | None):
    """The reader `model_name`, its options checked against its declaration, or one line saying what is wrong."""
    from ..models.base import check_threads, model_spec, models_of_kind, set_threads

    spec = model_spec(model_name)
    if spec.kind != "reader":
        raise UsageError(f"--model {model_name} is no reader (it scores {spec.kind}s: rerank score); readers: "
                         f"{', '.join(models_of_kind('reader'))}")
    if spec.needs_checkpoint and not checkpoint:
        raise UsageError(f"--model {model_name} needs --checkpoint DIR (train one with: rerank train {model_name} "
                         f"{spec.train_example} -o DIR)")
    if checkpoint and not spec.needs_checkpoint:
        raise UsageError(f"--model {model_name} has no weights to load: drop --checkpoint")
    if options and spec.needs_checkpoint:
        raise UsageError(f"-O: {model_name}'s architecture is its checkpoint's; give -O to rerank train")
    declared = {option.name: option for option in spec.architecture}
    unknown = [key for key in options if key not in declared]
    if unknown:
        raise UsageError(f"-O {unknown[0]}: {model_name} takes {', '.join(declared) or 'no options'}")
    check_threads(threads)
    reader = spec.load(checkpoint, **{key: declared[key].check(value, model_name) for key, value in options.items()})
    if "torch" in reader.packages:  # not imported for a reader without it (frequency): 3 s of every command
        set_threads(threads, 1)
    return reader


@cli.command()
@click.argument("run", required=False)
@click.option("--model", "model_name", required=True, help="Reader: frequency (no training) or mdqa.")
@click.option("--checkpoint", type=click.Path(), default=None, help="Checkpoint folder (rerank train mdqa).")
@click.option("--depth", default=30, show_default=True, help="Retrieved facts read per question (as training read them).")
@click.option("--k", default=100, show_default=True, help="Answers written per question.")
@click.option("--batch-size", default=32, show_default=True, help="Questions per forward pass.")
@click.option("--threads", type=int, default=None, help="Torch threads (default 1).")
@click.option("-O", "--model-option", "model_option", multiple=True, metavar="KEY=VALUE",
              help="Reader option, e.g. -O weighting=count (frequency).")
@click.option("--name", "stage_name", default=None, help="Stage name and run tag (default: the model name).")
@run_output_options
def answer(run, model_name, checkpoint, depth, k, batch_size, threads, model_option, stage_name, output,
           trec_only) -> None:
    """Answer each question of RUN (retrieved facts, default stdin) with a ranking of entities."""
    from ..answer import AnswerStats, answer_stream

    reader_model = load_reader(model_name, checkpoint, parse_model_options(model_option), threads)
    with open_run_input(run) as (handle, source):
        reader = RunReader(handle, source)
        rankings = iter(reader)
        first = next(rankings, None)
        if first is None:
            write_no_queries(reader, source, output, trec_only, "nothing to answer")
            return
        stats = AnswerStats()
        stream = answer_stream(Stream(reader.header, itertools.chain([first], rankings)), reader_model, depth, k,
                               batch_size, stage_name, stats)
        write_stream(stream, output, trec_only)
    click.echo(f"rerank: {stats.summary(stage_name or model_name)}", err=True)

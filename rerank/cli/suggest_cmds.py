"""`rerank suggest`: a suggester's next queries for every session prefix, as a run stream."""

from __future__ import annotations

import click

from ..errors import UsageError, counted
from . import cli
from .io import run_output_options, write_stream


def session_set(dataset_name: str, split: str, sessions: str | None):
    """The data set of session prefixes to suggest for: a named one's split, or one's own log."""
    from ..data import get_dataset
    from ..data.session_sets import SessionDataset, sessions_file_dataset

    if sessions:
        return sessions_file_dataset(sessions)
    name = dataset_name if split == "train" else f"{dataset_name}-{split}"
    dataset = get_dataset(name)
    if not isinstance(dataset, SessionDataset):
        raise UsageError(f"--dataset {dataset_name}: not a data set of search sessions (aol-missions is one)")
    return dataset


@cli.command()
@click.option("--model", "model_name", required=True, help="Suggester: mtn, transformer, seq2seq, cooccurrence, last-query.")
@click.option("--checkpoint", type=click.Path(), default=None, help="Checkpoint folder (from rerank train), for trained models.")
@click.option("--dataset", "dataset_name", default="aol-missions", show_default=True, help="Data set of sessions.")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="dev", show_default=True,
              help="Its users to suggest for (test: aol-missions-test, when missions-test.tsv is there).")
@click.option("--sessions", type=click.Path(dir_okay=False), default=None,
              help="Your own log instead (Webis-SMC-12 TSV, or JSONL {\"session\": ID, \"queries\": [...]}): every "
                   "prefix of every session.")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Suggestions per prefix.")
@click.option("--beam", type=click.IntRange(min=1), default=5, show_default=True,
              help="Beam width of trained models (1: greedy).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Torch threads.")
@click.option("--name", "stage_name", default=None, help="Stage name and run tag (default: the model name).")
@run_output_options
def suggest(model_name, checkpoint, dataset_name, split, sessions, k, beam, threads, stage_name, output,
            trec_only) -> None:
    """Suggest the next query for every session prefix of a data set's users and write a run stream."""
    from ..models.base import model_spec, set_threads

    spec = model_spec(model_name)
    if spec.kind != "generator":
        raise UsageError(f"--model {model_name} ranks passages; suggesters: mtn, transformer, seq2seq, cooccurrence, "
                         "last-query")
    if spec.needs_checkpoint and not checkpoint:
        raise UsageError(f"--model {model_name} needs --checkpoint DIR (train one with: rerank train {model_name} "
                         f"{spec.train_example} -o DIR)")
    dataset = session_set(dataset_name, split, sessions)
    set_threads(threads)
    options = {"beam": beam} if spec.needs_checkpoint else {}
    model = spec.load(checkpoint, **options)
    from ..suggest import suggest_stream

    stream = suggest_stream(dataset, model, k, stage_name or model_name, options)
    written = write_stream(stream, output, trec_only)
    note = f"; {counted(model.truncated, 'query', 'queries')} cut to the model's length" if model.truncated else ""
    click.echo(f"rerank: suggested for {counted(written, 'session prefix', 'session prefixes')} of "
               f"{dataset.log().summary()}{note}", err=True)

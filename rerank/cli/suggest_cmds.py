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
    if not isinstance(get_dataset(dataset_name), SessionDataset):
        raise UsageError(f"--dataset {dataset_name}: not a data set of search sessions (aol-missions is one)")
    return get_dataset(dataset_name if split == "train" else f"{dataset_name.removesuffix('-' + split)}-{split}")


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


# `rerank train`'s options that a generator's training reads; the rest are the rankers'
_GENERATOR_OPTIONS = {"model_name", "train_set", "dev_set", "output", "overwrite", "steps", "batch_groups", "lr", "eval_every",
                      "patience", "seed", "max_minutes", "threads", "model_option", "pretrain", "pretrain_steps"}


def train_suggester(spec, params: dict) -> None:
    """`rerank train mtn|transformer|seq2seq`: teacher forcing on session pairs (rerank/train_generator.py)."""
    import os
    import shlex
    import sys

    from ..train_generator import GeneratorArgs, train_generator
    from .io import typed
    from .score_cmds import parse_model_options

    if spec.trainer is None:
        raise UsageError(f"{spec.name} has nothing to train: use it directly (rerank suggest --model {spec.name})")
    ignored = [f"--{p.replace('_', '-')}" for p in typed(*(set(params) - _GENERATOR_OPTIONS))]
    if ignored:
        raise UsageError(f"{', '.join(sorted(ignored))}: options of the rankers' training, not of {spec.name}'s")
    if not params["train_set"]:
        raise UsageError(f"rerank train {spec.name} needs --train (e.g. {spec.train_example})")
    args = GeneratorArgs(
        train=params["train_set"], output=params["output"], dev=params["dev_set"], steps=params["steps"],
        batch=params["batch_groups"] if "batch_groups" in typed("batch_groups") else 32,
        lr=params["lr"] if params["lr"] is not None else spec.lr, eval_every=params["eval_every"],
        patience=params["patience"], seed=params["seed"], max_minutes=params["max_minutes"],
        threads=params["threads"] or 1, overwrite=params["overwrite"], pretrain=tuple(params["pretrain"]),
        pretrain_steps=params["pretrain_steps"],
        command=f"cd {shlex.quote(os.getcwd())} && {shlex.join(['rerank', *sys.argv[1:]])}",
        model_options=parse_model_options(params["model_option"]))
    result = train_generator(spec.name, args, log=lambda message: click.echo(f"rerank: {message}", err=True))
    best = (f"best dev cross-entropy {-result.best:.4f} at step {result.best_step}" if result.best is not None
            else "no dev pairs")
    click.echo(f"rerank: trained {spec.name} for {counted(result.steps, 'step')} in {result.seconds:.0f} s "
               f"({result.stopped}); {best}; checkpoint in {args.output}", err=True)

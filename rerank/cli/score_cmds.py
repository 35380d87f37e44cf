"""`rerank score` (re-rank a run stream with a model) and `rerank train` (fit a model, keep the best)."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import sys
from pathlib import Path

import click

from ..errors import UsageError, counted
from ..models.base import BF16_EMULATED, EVERY_MODEL_TAKES, bf16_is_emulated, models_taking, on_cpu, registered
from ..params import Option
from ..score import MODEL_OPTIONS, SCORE_STAGE
from ..runs import RunReader, Stream, query_count
from . import cli
from .ray_options import ray_engine, ray_options
from .io import (check_dataset_option, declared_options, open_run_input, refuse_replacing_an_input, run_output_options, typed,
                 write_no_queries, write_stream)


def _which_models(option: Option) -> str:
    """A model option's help says which models take it."""
    if option.name not in MODEL_OPTIONS or option.name in EVERY_MODEL_TAKES:
        return ""
    return f" ({' and '.join(models_taking(option.name))} only)"


@cli.command()
@click.argument("run", required=False)
@click.option("--dataset", "dataset_name", default=None, metavar="NAME",
              help="The data set a run without a header is of (Pyserini's run of trec-dl-2019): its texts, and for "
                   "eval its qrels.")
@declared_options(SCORE_STAGE.parameters, _which_models, required=("model",))
@click.option("--name", "stage_name", default=None, help="Stage name and run tag (default: the model name).")
@ray_options
@run_output_options
def score(run, model, checkpoint, depth, cache, skip_missing, topics, corpus, dataset_name, interpolate, stage_name,
          ray_address, workers, gpus_per_worker, output, trec_only, **given) -> None:
    """Re-score the top DEPTH candidates of each query in RUN (default stdin) with a model."""
    refuse_replacing_an_input("-o", output, "run", [("the --topics file", topics), ("the --corpus file", corpus)])
    from ..docstore import doc_store_for, queries_for
    from ..models.base import check_checkpoint_given, checked_model_options, load_model
    from ..score import ScoreStats, check_score_options, score_stream

    options = checked_model_options(model, {k: v for k, v in given.items() if v is not None})
    check_score_options(depth, interpolate)
    with open_run_input(run) as (handle, source), \
            ray_engine(ray_address, workers, gpus_per_worker, options.get("threads")) as engine:
        reader = RunReader(handle, source)
        rankings = iter(reader)
        first = next(rankings, None)
        if first is None:  # still check the model, and replace an -o file rather than leave an older run there
            load_model(model, checkpoint, **options)
            write_no_queries(reader, source, output, trec_only, "nothing to score")
            return
        if dataset_name is not None:  # texts found, and eval's qrels, as for the data set's own runs
            check_dataset_option(dataset_name, [(reader.header.dataset, source)])
            reader.header.fields = {"dataset": dataset_name, **reader.header.fields}
        remedy = "pass --dataset NAME (a run of a data set's queries), or --topics/--corpus"
        queries = queries_for(reader.header, topics, remedy)  # fail on a header naming nothing before loading a model
        store = doc_store_for(reader.header, corpus, remedy)
        if engine is None:
            reranker = load_model(model, checkpoint, **options)
        else:  # each worker loads it, attached to this stream's documents
            check_checkpoint_given(model, checkpoint)
            reranker = engine.load(model, checkpoint, options, (reader.header, store.origin))
        if given["precision"] == "bf16" and on_cpu(given["device"] or "cpu") and bf16_is_emulated():
            click.echo(f"rerank: warning: {BF16_EMULATED}", err=True)
        stats = ScoreStats()
        stream = score_stream(Stream(reader.header, itertools.chain([first], rankings)), reranker, depth,
                              cache=cache, skip_missing=skip_missing, stage=stage_name, store=store,
                              queries=queries, stats=stats, interpolate=interpolate, topics=topics, corpus=corpus,
                              total=query_count(reader.header), engine=engine)
        write_stream(stream, output, trec_only)
    click.echo(f"rerank: {stats.summary(stage_name or model, depth)}", err=True)


def parse_model_options(items: tuple[str, ...]) -> dict:
    """KEY=VALUE pairs; a VALUE that reads as JSON (64, true, 0.1) becomes that, anything else a string."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--model-option wants KEY=VALUE, not {item!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _training_takes(option_or_device: str) -> list[str]:
    return [name for name, spec in registered().items()
            if option_or_device in spec.train_options or option_or_device in spec.train_devices]


@cli.command()
@click.argument("model_name", metavar="MODEL")
@click.option("--train", "train_set", default=None,
              help="Data set whose judged candidates train the model (or give --candidates RUN_FILE).")
@click.option("--dev", "dev_set", default=None,
              help="Data set, or run file of judged queries, for early stopping (its figures are then dev figures).")
@click.option("--dev-fraction", type=float, default=0.0, show_default=True,
              help="Hold out this share of the training queries for early stopping instead of --dev.")
@click.option("--dev-fold", default=None, metavar="K/N",
              help="Hold out the K-th of N folds of the training queries instead (N runs: cross-validation).")
@click.option("-o", "--output", required=True, type=click.Path(), help="Checkpoint folder to write.")
@click.option("--overwrite", is_flag=True, help="Replace the checkpoint already in OUTPUT.")
@click.option("--candidates", default=None,
              help="A candidate run the data set ships (default: its first, e.g. bm25), or a run file (e.g. from "
                   "rerank retrieve) whose judged queries train; its header names its data set, texts and qrels.")
@click.option("--qrels", type=click.Path(dir_okay=False), default=None,
              help="Judgements for run files (--candidates FILE, --dev FILE) instead of their data set's.")
@click.option("--dev-qrels", type=click.Path(dir_okay=False), default=None,
              help="Judgements for the --dev run file alone (BEIR's qrels/dev.tsv; --qrels then judges the "
                   "candidates); its queries may then be in the --candidates run too.")
@click.option("--topics", type=click.Path(dir_okay=False), default=None,
              help="Query texts for run files whose header names neither data set nor topics.")
@click.option("--dev-topics", type=click.Path(dir_okay=False), default=None,
              help="Query texts for the --dev run file alone (e.g. a queries.dev.tsv; --topics then serves the "
                   "candidates).")
@click.option("--corpus", type=click.Path(dir_okay=False), default=None,
              help="Document texts for run files whose header names neither data set, index nor corpus.")
@click.option("--min-rel", type=int, default=None,
              help="Lowest grade that counts as relevant, for run files (default: the data set's, else 1).")
@click.option("--steps", default=300, show_default=True, help="Optimiser steps at most.")
@click.option("--batch-groups", default=4, show_default=True, help="Groups (one positive + negatives) per step.")
@click.option("--negatives", default=7, show_default=True, help="Negatives per group.")
@click.option("--loss", type=click.Choice(["listwise", "pairwise", "pointwise"]), default=None,
              help="Loss over a group (default: the model's; listwise, pointwise for ctrn/qrnn as in their paper).")
@click.option("--lr", type=float, default=None,
              help="Peak learning rate (linear warm-up and decay); default: the model's ("
                   f"{', '.join(f'{name} {spec.lr:g}' for name, spec in registered().items() if spec.trainer)}).")
@click.option("--head-lr-scale", type=float, default=1.0, show_default=True,
              help="Learning-rate factor for a model's freshly initialised head (bert: classifier + pooler).")
@click.option("--eval-every", default=50, show_default=True, help="Steps between dev evaluations.")
@click.option("--patience", default=3, show_default=True, help="Dev evaluations without improvement before stopping.")
@click.option("--eval-on-start", is_flag=True,
              help="Evaluate on the dev set before the first step too: the starting weights (--init's) can stay "
                   "the best.")
@click.option("--dev-depth", default=100, show_default=True, help="Candidates per dev query to re-rank.")
@click.option("--metric", default=None, help="Dev measure (default: the dev data set's first, e.g. nDCG@10).")
@click.option("--seed", default=42, show_default=True)
@click.option("--teacher", type=click.Path(), default=None, help="Run of teacher scores (distillation): for the training candidates, and its unjudged queries are distilled on too (the dev queries left out).")
@click.option("--distill", type=click.Choice(["margin-mse", "kl"]), default=None,
              help="Distillation loss (with --teacher; default margin-mse).")
@click.option("--distill-weight", type=float, default=None, help="Weight of the distillation loss (with --teacher; default 1).")
@click.option("--teacher-scale", type=float, default=None,
              help="Multiply teacher scores (e.g. 20 for a bi-encoder's cosines; with --teacher; default 1).")
@click.option("--teacher-min-score", type=float, default=None,
              help="Distil on an unjudged teacher query only if its best teacher score reaches this.")
@click.option("--max-minutes", type=float, default=None, help="Stop (after a last dev evaluation) when this much time has passed.")
@click.option("--max-length", type=int, default=None,
              help=f"Tokens per (query, passage) pair ({' and '.join(_training_takes('max_length'))} only; default "
                   "--init's, else 256).")
@click.option("--threads", type=int, default=None, help="Torch threads.")
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="bf16: forward passes under bfloat16 autocast, about 2x the steps per minute on CPUs with "
                   "AVX512-BF16/AMX, slower without AVX512.")
@click.option("--device", default="cpu", show_default=True,
              help=f"Where to train: cpu, or cuda (cuda:N) for {' and '.join(_training_takes('cuda'))} on a GPU (with "
                   "--precision bf16: bfloat16 autocast).")
@click.option("-O", "--model-option", "model_option", multiple=True, metavar="KEY=VALUE",
              help="Architecture option of the model (its config), e.g. -O embeddings=minilm-context, -O "
                   "projection=64 for TK; an unknown key is refused with the known ones (see docs/models.md).")
@click.option("--pretrain", multiple=True, type=click.Path(dir_okay=False),
              help="Generators: query files (qid<TAB>query) to pretrain on first, e.g. the MS MARCO train queries.")
@click.option("--pretrain-steps", default=1000, show_default=True, help="Generators: steps of pretraining.")
@click.option("--init", "init_from", type=click.Path(), default=None,
              help="Start from this checkpoint's weights (continue training) instead of the packaged ones.")
def train(model_name, train_set, dev_set, dev_fraction, dev_fold, output, overwrite, candidates, qrels, dev_qrels,
          topics, dev_topics, corpus, min_rel, steps, batch_groups, negatives,
          loss, lr, head_lr_scale, eval_every, patience, eval_on_start, dev_depth, metric, seed, teacher, distill,
          distill_weight,
          teacher_scale, teacher_min_score, max_minutes, max_length, threads, precision, device, model_option,
          pretrain, pretrain_steps, init_from) -> None:
    """Train MODEL on judged candidates (a data set's, or a run file's) and write the best checkpoint to OUTPUT."""
    from ..checkpoint import read_checkpoint
    from ..models.base import checked_model_options, model_spec, registered
    from ..train import TrainArgs, check_trainable, refuse_dev_options_without_dev

    spec = registered().get(model_name)
    if spec is not None and spec.kind == "generator":  # next-query suggesters: rerank/train_generator.py
        from .suggest_cmds import train_suggester

        return train_suggester(spec, click.get_current_context().params)
    if pretrain:
        raise UsageError(f"--pretrain: an option of the next-query generators' training, not of {model_name}'s")
    if spec is not None and spec.kind == "reader":  # trains on questions and their answers: reader_train.py
        from ..reader_train import train_reader as run_training

        lr = lr if lr is not None else model_spec(model_name).lr
    else:
        from ..train import train as run_training

        check_trainable(model_name)
    refuse_dev_options_without_dev(typed("eval_every", "patience", "dev_depth"), dev_set, dev_fraction, dev_fold)
    given = {k: v for k, v in (("max_length", max_length), ("threads", threads)) if v is not None}
    # TK caps queries and documents apart: no --max-length
    options = given if spec is not None and spec.kind == "reader" else checked_model_options(model_name, given)
    if init_from:
        read_checkpoint(init_from, model_name)
    args = TrainArgs(train=train_set, output=output, dev=dev_set, dev_fraction=dev_fraction,
                     dev_fold=dev_fold, candidates=candidates, qrels=qrels, topics=topics, corpus=corpus,
                     min_rel=min_rel, dev_qrels=dev_qrels, dev_topics=dev_topics,
                     steps=steps, batch_groups=batch_groups, negatives=negatives,
                     lr=lr if lr is not None else model_spec(model_name).lr, head_lr_scale=head_lr_scale,
                     loss=loss or model_spec(model_name).loss,
                     eval_every=eval_every, patience=patience, eval_on_start=eval_on_start, dev_depth=dev_depth,
                     metric=metric, seed=seed,
                     teacher=teacher, distill=distill, distill_weight=distill_weight, teacher_scale=teacher_scale,
                     teacher_min_score=teacher_min_score,
                     max_minutes=max_minutes, precision=precision, device=device, overwrite=overwrite,
                     command=f"cd {shlex.quote(os.getcwd())} && {shlex.join(['rerank', *sys.argv[1:]])}",
                     model_options={**options, **model_spec(model_name).checked_architecture(
                                        parse_model_options(model_option)),
                                    **({"base": str(Path(init_from).resolve())} if init_from else {})})
    result = run_training(model_name, args, log=lambda message: click.echo(f"rerank: {message}", err=True))
    best = f"best dev value {result.best:.4f} at step {result.best_step}" if result.best is not None else "no dev set"
    click.echo(f"rerank: trained {model_name} for {counted(result.steps, 'step')} in {result.seconds:.0f} s "
               f"({result.stopped}); {best}; checkpoint in {output}", err=True)


@cli.command()
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Checkpoint folder to write.")
@click.option("--overwrite", is_flag=True, help="Replace the checkpoint already in OUTPUT.")
def average(checkpoints, output, overwrite) -> None:
    """Average the weights of CHECKPOINTS of one model (a "model soup", e.g. of continuations of one
    parent with other seeds) into a new checkpoint, which scores like any trained one."""
    from ..checkpoint import average_checkpoints

    manifest = average_checkpoints(list(checkpoints), output, overwrite)
    click.echo(f"rerank: averaged {len(checkpoints)} {manifest['model']} checkpoints into {output} "
               f"(hash {manifest['hash']})", err=True)

"""The train stage: a pipeline trains a ranker from nothing, into a checkpoint a later stage scores with.

    [[stage]]
    name = "qrnn-train"
    kind = "train"
    model = "qrnn"
    train = "trecqa-train"
    dev_fraction = 0.2
    steps = 500
    options = { overlap = false }     # rerank train -O overlap=false
    [[stage]]
    name = "qrnn"
    kind = "score"
    input = "candidates"
    model = "qrnn"
    checkpoint = "qrnn-train"         # the checkpoint of that stage: runs/<pipeline>/qrnn-train/

Its keys are `rerank train`'s options, and it runs the same loop (`train.train`) with the same defaults: the
model's learning rate and loss where the stage gives none, TrainArgs' for the rest. The pipeline keeps the
checkpoint and trains again only when the stage's keys or the files of the data sets it names change.
"""

from __future__ import annotations

from dataclasses import fields

from .errors import UsageError
from .params import Option
from .stages import StageSpec, register_stage

# the stage's keys that the model takes, not the loop: as `rerank train --threads` and `--max-length` pass them
MODEL_KEYS = ("threads", "max_length")

TRAIN_STAGE = register_stage(StageSpec(
    kind="train", run="rerank.train_stage:train_stage", check="rerank.train_stage:check_train_stage",
    output="checkpoint",
    parameters=(
        Option("model", str, None, "The model to train (one whose spec has a trainer and scores pairs)."),
        Option("train", str, None, "Data set whose judged candidates train the model."),
        Option("candidates", str, None, "A candidate run the data set ships, or a run file, to train on."),
        Option("dev", str, None, "Data set, or run file of judged queries, for early stopping."),
        Option("dev_fraction", float, None, "Hold out this share of the training queries for early stopping."),
        Option("dev_fold", str, None, "K/N: hold out the K-th of N folds of the training queries."),
        Option("steps", int, None, "Optimiser steps at most."),
        Option("batch_groups", int, None, "Groups (one positive + negatives) per step."),
        Option("negatives", int, None, "Negatives per group."),
        Option("loss", str, None, "listwise, pairwise or pointwise (default: the model's)."),
        Option("lr", float, None, "Peak learning rate (default: the model's)."),
        Option("head_lr_scale", float, None, "Learning-rate factor for a freshly initialised head."),
        Option("eval_every", int, None, "Steps between dev evaluations."),
        Option("patience", int, None, "Dev evaluations without improvement before stopping."),
        Option("eval_on_start", bool, None, "Evaluate on the dev set before the first step too."),
        Option("dev_depth", int, None, "Candidates per dev query to re-rank."),
        Option("metric", str, None, "Dev measure (default: the dev data set's first)."),
        Option("seed", int, None, "Random seed (default 42)."),
        Option("teacher", str, None, "Run of teacher scores to distil from.", path="file"),
        Option("distill", str, None, "Distillation loss: margin-mse or kl."),
        Option("distill_weight", float, None, "Weight of the distillation loss."),
        Option("teacher_scale", float, None, "Multiply teacher scores."),
        Option("max_minutes", float, None, "Stop (after a last dev evaluation) when this much time has passed."),
        Option("precision", str, None, "fp32 or bf16."),
        Option("device", str, None, "cpu, or cuda for the models that train on a GPU."),
        Option("threads", int, None, "Torch threads."),
        Option("max_length", int, None, "Tokens per (query, passage) pair, for the models that take it."),
        Option("options", dict, None, "Architecture options, as rerank train -O KEY=VALUE: { overlap = false }."),
    )))


def training_args(params: dict):
    """The stage's keys as `rerank train` makes its TrainArgs of its flags, into the folder params["output"]."""
    from .models.base import checked_model_options, model_spec
    from .train import TrainArgs, check_trainable

    if "model" not in params:
        raise UsageError("a train stage needs `model`")
    spec = model_spec(params["model"])
    if spec.kind != "pair":  # generators and readers train in loops of their own (rerank train dispatches)
        raise UsageError(f"a train stage trains models that score pairs; {spec.name} is a {spec.kind}: train it with "
                         f"rerank train {spec.name} and give its folder as `checkpoint`")
    check_trainable(spec.name)
    loop_keys = {f.name for f in fields(TrainArgs)} - {"output", "overwrite", "model_options", "command"}
    given = {key: value for key, value in params.items() if key in loop_keys}
    model_options = checked_model_options(spec.name, {key: params[key] for key in MODEL_KEYS if key in params})
    return TrainArgs(**{"train": None, **given}, output=params["output"], overwrite=True,
                     lr=params.get("lr", spec.lr), loss=params.get("loss", spec.loss),
                     model_options={**model_options, **spec.checked_architecture(params.get("options", {}))})


def check_train_stage(_dataset: str, params: dict) -> None:
    """What `rerank train` would refuse of these keys, before any stage runs (the data is read when it trains)."""
    from .train import refuse_dev_options_without_dev

    args = training_args(params)
    refuse_dev_options_without_dev(list(params), args.dev, args.dev_fraction, args.dev_fold)
    args.check()


def train_stage(_dataset: str, params: dict, _input: None) -> str:
    """Pipeline stage `kind = "train"`: trains into params["output"]; returns what it did, in a line."""
    import click

    from .train import train

    done = train(params["model"], training_args(params),
                 log=lambda message: click.echo(f"rerank: {params['name']}: {message}", err=True))
    best = f"; best dev value {done.best:.4f} at step {done.best_step}" if done.best is not None else ""
    return f"trained {params['model']}: {done.steps} steps in {done.seconds:.0f} s ({done.stopped}){best}"

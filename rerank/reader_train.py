"""Training a reader (`rerank train mdqa`): the questions of a run of retrieved facts, their answers as targets.

A reader learns a sigmoid per candidate answer (several right answers per question), not a ranking of the
documents it is given, so its batches are questions, not train.py's groups of a positive and negatives. The rest is
train.py's: its arguments (TrainArgs), seeding, optimiser and schedule, checkpoint record, folder and hash, the
output lock, and early stopping on a dev measure computed by the shared evaluator.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .answer import DEPTH, Fact, Question, questions_dataset, ranked
from .data import get_dataset
from .docstore import doc_store_for, queries_for
from .errors import DataError, UsageError, counted
from .locks import exclusive
from .models.base import model_spec, set_threads
from .runs import Run, RunHeader, load_run, open_run_file
from .checkpoint import check_output, record_ending
from .train import (PASSIVE_THREADS, TrainArgs, TrainResult, _nothing_written, adamw, diverged, run_record,
                    save_checkpoint)


@dataclass
class ReaderSet:
    """The questions of a run file with their facts, and their answers (the qrels of the run's data set)."""

    source: str
    dataset: str
    questions: list[Question]
    answers: dict[str, set[str]]


def reader_set(path: str, depth: int, option: str) -> ReaderSet:
    """A run of retrieved facts (`rerank retrieve movie-dialog-qa-train`) as training or dev questions."""
    if not Path(path).is_file():
        raise UsageError(f"{option} {path}: not a run file; give a run of retrieved facts (rerank retrieve "
                         "movie-dialog-qa-train -o FILE)")
    with open_run_file(path) as handle:
        run = load_run(handle, path)
    name = questions_dataset(run.header, f"{option} {path}")
    queries = queries_for(run.header, None, "retrieve it again from a data set")
    store = doc_store_for(run.header, None, "retrieve it again from a data set")
    qrels = get_dataset(name).qrels()
    questions = []
    for qid, ranking in run.queries.items():
        if qid not in queries:
            raise DataError(f"{option} {path}: query {qid} has no text in {name}")
        texts = store.texts(ranking.docids[:depth])
        facts = [Fact(d, texts[d], rank) for rank, d in enumerate(ranking.docids[:depth], 1) if d in texts]
        questions.append(Question.of(qid, queries[qid], facts))
    answers = {qid: {d for d, grade in judged.items() if grade > 0} for qid, judged in qrels.items()}
    return ReaderSet(path, name, questions, answers)


def entity_vocabulary(training: ReaderSet) -> list[str]:
    """The entities a reader can answer with: those of the training facts, and the training answers."""
    found = {e for q in training.questions for f in q.facts for _, _, e in f.entities}
    found |= {a for q in training.questions for a in training.answers.get(q.qid, ())}
    return sorted(found)


def dev_value(reader, dev: ReaderSet, measure, batch: int = 64) -> float:
    from .evaluate.measures import evaluate

    reader.net.eval()
    rankings = {}
    for start in range(0, len(dev.questions), batch):
        part = dev.questions[start : start + batch]
        for q, scores in zip(part, reader.answer(part, 100)):
            rankings[q.qid] = ranked(q.qid, scores, q.named, 100, "dev", 0.0, len(q.facts))
    reader.net.train()
    qrels = {q.qid: {a: 1 for a in dev.answers.get(q.qid, ())} for q in dev.questions if dev.answers.get(q.qid)}
    return evaluate(Run(RunHeader(), rankings, "dev"), qrels, [measure]).overall(measure.label)


# TrainArgs that a reader's training has no use for, with their defaults: given otherwise, they are refused
UNUSED = {"train": None, "dev_fraction": 0.0, "dev_fold": None, "qrels": None, "topics": None, "corpus": None,
          "min_rel": None, "dev_qrels": None, "dev_topics": None, "negatives": 7, "head_lr_scale": 1.0,
          "loss": "listwise", "teacher": None, "precision": "fp32", "device": "cpu", "eval_on_start": False,
          "dev_depth": 100}  # it reads as many facts as `rerank answer --depth` does by default (answer.DEPTH)


def check_reader_args(model_name: str, args: TrainArgs) -> None:
    spec = model_spec(model_name)
    given = [key for key, default in UNUSED.items() if getattr(args, key) != default]
    if given:
        raise UsageError(f"rerank train {model_name} does not take --{given[0].replace('_', '-')}: it trains on a run "
                         f"of retrieved facts and early-stops on another ({spec.train_example})")
    if not args.candidates or not args.dev:
        raise UsageError(f"rerank train {model_name} needs --candidates RUN (retrieved facts of the training questions) "
                         f"and --dev RUN (of the validation questions): {spec.train_example}")
    if "base" in args.model_options:
        raise UsageError(f"rerank train {model_name} does not take --init: it trains from scratch")
    check_output(args.output, args.overwrite)


def train_reader(model_name: str, args: TrainArgs, depth: int = DEPTH,
                 log: Callable[[str], None] = lambda _m: None) -> TrainResult:
    """Train reader `model_name` on the questions of the run `args.candidates`, keep the best on `args.dev`."""
    check_reader_args(model_name, args)
    with exclusive(args.output, f"{args.output} is being written by another process (rerank train with the same "
                                "-o); wait for it to finish, or choose another folder"):
        return _train_reader(model_name, args, depth, log)


def _train_reader(model_name: str, args: TrainArgs, depth: int, log: Callable[[str], None]) -> TrainResult:
    from .evaluate.measures import parse_measure

    rng = random.Random(args.seed)
    training = reader_set(args.candidates, depth, "--candidates")
    dev = reader_set(args.dev, depth, "--dev")
    overlap = {q.qid for q in training.questions} & {q.qid for q in dev.questions}
    if overlap:
        raise DataError(f"--dev {args.dev} shares {counted(len(overlap), 'question')} with --candidates: "
                        "early stopping on questions it trains on says nothing")
    measure = parse_measure(args.metric or get_dataset(dev.dataset).measures[0])
    questions = [q for q in training.questions if training.answers.get(q.qid)]
    if not questions:
        raise DataError(f"--candidates {args.candidates}: no question has an answer to learn")
    entities = entity_vocabulary(training)
    log(f"{counted(len(questions), 'training question')}, {counted(len(dev.questions), 'dev question')}, "
        f"{counted(len(entities), 'candidate entity', 'candidate entities')}")
    os.environ.setdefault(*PASSIVE_THREADS)
    import torch

    options = dict(args.model_options)
    set_threads(options.pop("threads", None), 1)
    torch.manual_seed(args.seed)
    spec = model_spec(model_name)
    reader = spec.new_trainable(entities=entities, **options)
    net = reader.net
    net.train()
    optimizer, schedule = adamw([{"params": [p for p in net.parameters() if p.requires_grad], "lr": args.lr}], args)
    record = run_record(args, ["candidates", "dev"])
    record.update(depth=depth, train_questions=len(questions), dev_questions=len(dev.questions),
                  dev_measure=measure.label, dev_source=str(Path(args.dev).resolve()),
                  train_source=str(Path(args.candidates).resolve()))
    began = time.perf_counter()
    history: list[dict] = []
    written: list[dict] = []
    best, best_step, since_best, stopped, step = None, None, 0, "steps", 0
    losses: list[float] = []
    order: list[Question] = []
    index = {e: i for i, e in enumerate(entities)}
    try:
        while step < args.steps:
            if len(order) < args.batch_groups:
                epoch = list(questions)
                rng.shuffle(epoch)
                order += epoch
            batch, order = order[: args.batch_groups], order[args.batch_groups :]
            targets = torch.zeros(len(batch), len(entities))
            weights = torch.ones(len(batch), len(entities))
            for b, q in enumerate(batch):
                for answer in training.answers[q.qid]:
                    if answer in index:
                        targets[b, index[answer]] = 1.0
                for named in q.named:  # never answered: no use learning to rank them
                    if named in index:
                        weights[b, index[named]] = 0.0
            logits = net(net.batch(batch, reader.words))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, weights, reduction="sum")
            loss = loss / len(batch)
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            if not (math.isfinite(loss.item()) and math.isfinite(norm)):
                raise DataError(diverged(args, step + 1, best_step))
            optimizer.step()
            schedule.step()
            step += 1
            losses.append(loss.item())
            if step % 10 == 0:
                log(f"step {step}/{args.steps}: mean loss of the last 10 steps {sum(losses[-10:]) / 10:.4f}, "
                    f"{time.perf_counter() - began:.0f} s")
            out_of_time = args.max_minutes is not None and time.perf_counter() - began > args.max_minutes * 60
            if step % args.eval_every == 0 or step == args.steps or out_of_time:
                value = dev_value(reader, dev, measure)
                recent = losses[-args.eval_every:]
                history.append({"step": step, measure.label: round(value, 4), "loss": round(sum(recent) / len(recent), 4),
                                "seconds": round(time.perf_counter() - began, 1)})
                log(f"step {step}: dev {measure.label} = {value:.4f} on {dev.source}")
                if best is None or value > best:
                    save_checkpoint(args.output, model_name, net, {
                        **record, "step": step, "dev_value": value, "history": history,
                        "seconds": round(time.perf_counter() - began, 1), "ended": None}, written)
                    best, best_step, since_best = value, step, 0
                else:
                    since_best += 1
                    if since_best >= args.patience:
                        stopped = "early stopping"
                        break
            if out_of_time:
                stopped = "time budget"
                break
    except (KeyboardInterrupt, SystemExit):
        if best_step is not None:
            record_ending(Path(args.output), ended=f"interrupted at step {step}", last_step=step, history=history)
        log(f"training interrupted at step {step}; " + (_nothing_written(args.output) if best_step is None else
                                                         f"{args.output} keeps the best checkpoint so far (step "
                                                         f"{best_step})"))
        raise
    seconds = time.perf_counter() - began
    record_ending(Path(args.output), ended=stopped, last_step=step, history=history, total_seconds=round(seconds, 1))
    return TrainResult(step, best, best_step, history, seconds, stopped)

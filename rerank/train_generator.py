"""Training of next-query generators (`rerank train mtn|transformer|seq2seq|hred`): teacher forcing on the (session
prefix, next query) pairs of the training users, label-smoothed cross-entropy, with the ranker loop's parts
(train.py): the seed, `optimiser` (AdamW, linear warm-up and decay), and `Keeper` (checkpoint folders written
atomically with their content hash, the best dev evaluation kept, `patience` evaluations without improvement stop
it). The dev measure is the dev users' token cross-entropy, negated (the keeper keeps the highest).

With `pretrain` files of queries (the MS MARCO train queries), the vocabulary takes in their words seen at least
twice, and the model first learns for `pretrain_steps` to restore each query from a copy with every word dropped with
probability 0.25 (a denoising language model of queries, which teaches it to copy words of its input), then trains
on the session pairs as above.

The training data: a session data set (`aol-missions`: its train users; dev: the data set's dev users,
`aol-missions-dev`) or one's own session file (its users split by the same seeded rule).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .checkpoint import check_output, package_versions, record_ending
from .data.sessions import Pair, SessionLog
from .errors import DataError, UsageError, counted
from .locks import exclusive
from .train import PASSIVE_THREADS, Keeper, Prepared, TrainResult, optimiser


@dataclass
class GeneratorArgs:
    train: str
    output: str
    dev: str | None = None  # default: the training data set's dev users
    steps: int = 2000
    batch: int = 32
    lr: float = 1e-3
    warmup: float = 0.05
    weight_decay: float = 0.01
    smoothing: float = 0.1
    eval_every: int = 100
    patience: int = 3
    seed: int = 42
    max_minutes: float | None = None
    threads: int | None = 1
    pretrain: tuple[str, ...] = ()  # query files (qid<TAB>query, gzip or not) to pretrain on first
    pretrain_steps: int = 1000
    overwrite: bool = False
    command: str = ""
    model_options: dict[str, Any] = field(default_factory=dict)
    # what train.optimiser and train.Keeper read of a ranker's arguments, as a generator has them
    head_lr_scale: float = 1.0
    dev_fraction: float = 0.0
    dev_fold: str | None = None
    dev_depth: int = 0


@dataclass
class CrossEntropyDev:
    """The dev users' pairs as train.Keeper evaluates a dev set: the negated mean token cross-entropy."""

    queries: list[Pair]
    source: str
    measure: Any = None

    def __post_init__(self) -> None:
        self.measure = type("Measure", (), {"label": "-cross-entropy"})()

    def evaluate(self, model: Any, _depth: int, chunk: int = 64) -> float:
        import torch

        model.eval()
        with torch.no_grad():
            total = sum(model.loss([list(p.source) for p in part], [p.target for p in part]).item() * len(part)
                        for part in (self.queries[i: i + chunk] for i in range(0, len(self.queries), chunk)))
        model.train()
        return -total / len(self.queries)


def _logs(args: GeneratorArgs) -> tuple[SessionLog, SessionLog, dict]:
    """The training and dev logs, and what to record of their sources."""
    from .data import dataset_names, get_dataset, unknown_dataset
    from .data.session_sets import SessionDataset, sessions_file_dataset

    if args.train in dataset_names():
        dataset = get_dataset(args.train)
        if not isinstance(dataset, SessionDataset) or dataset.split != "train":
            raise UsageError(f"--train {args.train}: generators train on a data set of search sessions' training "
                             "users (aol-missions)")
        dev = get_dataset(args.dev or f"{args.train}-dev")
        train_log, dev_log = dataset.log(), dev.log()
        source = {"train": args.train, "dev": dev.name}
    elif Path(args.train).is_file():
        whole = sessions_file_dataset(args.train)
        train_log, dev_log = whole.log().split("train"), whole.log().split("dev")
        source = {"train": str(Path(args.train).resolve()), "dev": "its dev users"}
    else:
        raise unknown_dataset(args.train, "; or a session file (TSV or JSONL)", option="--train")
    if not train_log.pairs():
        raise DataError(f"--train {args.train}: the training users leave no (prefix, next query) pair "
                        f"({train_log.summary()}); a session needs two different queries in a row")
    return train_log, dev_log, source


def train_generator(model_name: str, args: GeneratorArgs, log: Callable[[str], None]) -> TrainResult:
    from .models.base import model_spec

    spec = model_spec(model_name)
    options = spec.checked_architecture(args.model_options)
    check_output(args.output, args.overwrite)
    train_log, dev_log, source = _logs(args)
    with exclusive(args.output, f"{args.output} is being written by another process (rerank train with the same "
                                "-o); wait for it to finish, or choose another folder"):
        return _train(model_name, spec, options, args, train_log, dev_log, source, log)


def _batches(pairs: list[Pair], size: int, rng: random.Random):
    while True:
        order = pairs[:]
        rng.shuffle(order)
        for start in range(0, len(order) - size + 1 if len(order) >= size else 1, size):
            yield order[start: start + size]


def _pretraining_queries(files: tuple[str, ...], log: Callable[[str], None]) -> list[str]:
    from .data.formats import read_topics
    from .data.sessions import normalised

    queries = [normalised(q) for path in files for q in read_topics(path).values()]
    queries = [q for q in queries if q]
    if files:
        log(f"pretraining on {counted(len(queries), 'query', 'queries')} of {', '.join(files)}")
    return queries


def _noised(query: str, rng: random.Random) -> str:
    words = query.split()
    kept = [w for w in words if rng.random() >= 0.25]
    return " ".join(kept or [rng.choice(words)])


def _pretrain(model: Any, model_name: str, queries: list[str], args: GeneratorArgs, rng: random.Random,
              log: Callable[[str], None]) -> None:
    """Restore each query from a copy with words dropped, for `pretrain_steps` steps (its own warm-up and decay)."""
    import torch

    optimizer, schedule = optimiser(model, model_name, replace(args, steps=args.pretrain_steps))
    model.train()
    losses = []
    for step in range(1, args.pretrain_steps + 1):
        batch = rng.sample(queries, min(args.batch, len(queries)))
        loss = model.loss([[_noised(q, rng)] for q in batch], batch, args.smoothing)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if step % 100 == 0:
            log(f"pretraining step {step}: loss {sum(losses[-100:]) / len(losses[-100:]):.4f}")


def _train(model_name: str, spec: Any, options: dict, args: GeneratorArgs, train_log: SessionLog,
           dev_log: SessionLog, source: dict, log: Callable[[str], None]) -> TrainResult:
    os.environ.setdefault(*PASSIVE_THREADS)
    import torch

    from .models.base import set_threads

    set_threads(args.threads)
    random.seed(args.seed)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    pairs, dev_pairs = train_log.pairs(), dev_log.pairs()
    log(f"training on {train_log.summary()}; dev: {dev_log.summary()}")
    began = time.perf_counter()  # pretraining included
    extra = _pretraining_queries(args.pretrain, log)
    model = spec.new_trainable(texts=[q for p in pairs for q in (*p.source, p.target)], extra=extra, **options)
    if extra:
        _pretrain(model, model_name, extra, args, rng, log)
    optimizer, schedule = optimiser(model, model_name, args)
    record = {**asdict(args), **source, "model_options": options, "versions": package_versions(),
              "torch_threads": torch.get_num_threads(), "train_pairs": len(pairs), "dev_pairs": len(dev_pairs),
              "vocabulary": len(model.vocab.words)}
    del record["overwrite"]
    dev = CrossEntropyDev(dev_pairs, source["dev"]) if dev_pairs else None
    keeper = Keeper(model, model_name, args, Prepared(pairs, None, dev, None), record, log)
    step, stopped = 0, "steps"
    model.train()
    batches = _batches(pairs, min(args.batch, len(pairs)), rng)
    try:
        while step < args.steps:
            batch = next(batches)
            loss = model.loss([list(p.source) for p in batch], [p.target for p in batch], args.smoothing)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            step += 1
            keeper.losses.append(loss.item())
            stop = keeper.stop_after(step)
            if stop:
                stopped = stop
                break
        if dev is None:
            keeper.keep(step, None)
    except (KeyboardInterrupt, SystemExit):
        log(keeper.interrupted(step))
        raise
    if model.vocab.cut:
        log(f"note: {counted(len(model.vocab.cut), 'query text', 'query texts')} longer than "
            f"{model.config['max_query_tokens']} tokens were cut while training")
    seconds = time.perf_counter() - began
    record_ending(Path(args.output), ended=stopped, last_step=step, history=keeper.history,
                  total_seconds=round(seconds, 1))
    return TrainResult(step, keeper.best, keeper.best_step, keeper.history, seconds, stopped)

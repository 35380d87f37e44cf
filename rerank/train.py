"""A model-agnostic training loop for re-rankers, and the checkpoint folder format.

A trainable model is a `torch.nn.Module` adapter (see `TrainableRanker`) that scores groups of
candidates, `score_batch(queries, docs) -> Tensor[B, n]`, and can `save(folder)` itself; models
name a factory as their spec's `trainer` (`"module:function"`, called with the model options).

Training data come from judged candidates: a run the data set ships, or a run file of the user's (e.g.
from `rerank retrieve`; its queries' and documents' texts found through its header, or `topics`/`corpus`,
and its judgements from its data set's or a `qrels` file; a dev run file may have its split's own, `dev_qrels`
and `dev_topics`, as BEIR judges its splits apart). For every training query, each candidate
with grade >= the relevance level (`min_rel`) is a positive; a group is one positive plus `negatives`
candidates graded below `min_rel` (unjudged candidates count as non-relevant, as trec_eval does),
re-sampled every epoch. Losses: listwise softmax cross-entropy over the group (the positive is the
target) or pairwise logistic (RankNet) positive-vs-each-negative. Optional distillation mixes in a
MarginMSE or listwise-KL loss against a teacher run's scores for the same candidates. The teacher run
may hold queries the training set does not judge (e.g. unlabelled MS MARCO train queries, see
benchmarks/distill_teacher.sh): each becomes a distillation-only group per epoch, its query and passage
text found through the run's header, as the score stage finds them; the dev set's among them are left out.

Dev evaluation re-ranks the dev queries' candidates with the model under training and computes one
measure with the shared evaluator; the best checkpoint is kept (written atomically) and training
stops after `patience` evaluations without improvement, after `steps`, or when `max_minutes` pass.
For an honest test figure, hold out part of the training queries (`dev_fraction`) instead of using
the test set for early stopping; with few queries, `dev_fold="k/n"` holds out the k-th of n folds, so n
runs give a cross-validated dev curve over every training query (benchmarks/tk_train.py --folds).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from .atomic import atomic_dir
from .checkpoint import (CHECKPOINT_FILE, check_output, package_versions, queries_seen, query_digest, query_records,
                         query_space, ranked_over, read_checkpoint, record_ending, refuse_output_in, trained_qids,
                         write_checkpoint)
from .data import dataset_names, get_dataset, unknown_dataset
from .data.formats import Qrels
from .errors import DataError, ParameterError, RerankError, UsageError, counted, verb
from .locks import exclusive
from .models.base import (BF16_EMULATED, bf16_is_emulated, check_device, device_kind, model_spec, on_cpu, registered,
                          trainable_models)
from .paths import file_sha256
from .runs import QueryRanking, Run, RunHeader, load_run, open_run_file

if TYPE_CHECKING:
    from .docstore import DocStore

# OpenMP threads that sleep rather than spin while waiting. Must be set before torch is imported. On a
# shared, oversubscribed 2-core machine spinning threads made a forward pass up to 10x slower; on an
# idle one the difference is lost in the noise for BERT-sized matrix products.
PASSIVE_THREADS = ("OMP_WAIT_POLICY", "PASSIVE")


class TrainableRanker(Protocol):
    """What the loop needs from a model (an nn.Module): group scoring and saving."""

    model_name: str

    def score_batch(self, queries: list[str], docs: list[list[str]]) -> Any:
        """Scores as a Tensor[B, n]: row i scores docs[i] (all rows the same length) for queries[i]."""

    def save(self, folder: Path) -> dict:
        """Write weights (and tokenizer/vocabulary) into `folder`; return the config to record."""

    # Optional: `head_parameters() -> list[Parameter]`, freshly initialised parameters (a new scoring
    # head on pretrained weights) that train at `head_lr_scale` times the learning rate.


def refuse_dev_options_without_dev(given: list[str], dev: str | None, dev_fraction: float | None,
                                   dev_fold: str | None) -> None:
    """Options of the dev evaluation among `given` where no dev evaluation runs: they would be ignored."""
    unused = [name for name in ("eval_every", "patience", "dev_depth") if name in given]
    if unused and not (dev or dev_fraction or dev_fold):
        raise ParameterError(", ".join(f"{{{name}}}" for name in unused) + ": options of the dev evaluation, which "
                             "needs a dev set ({dev}, {dev_fraction} or {dev_fold})",
                             *unused, "dev", "dev_fraction", "dev_fold")


def check_trainable(name: str) -> None:
    """Refuse a model that cannot be trained (`rerank train` asks first, before any training data is read)."""
    if not getattr(registered().get(name), "trainer", None):
        raise UsageError(f"cannot train model {name!r}; trainable: {', '.join(trainable_models())}")


# ---------------------------------------------------------------------------------------------- the data

DISTILL_DEFAULTS = {"distill": "margin-mse", "distill_weight": 1.0, "teacher_scale": 1.0}
DEV_OWN = ("qrels", "topics")  # the run files' options a --dev run file may have its own of (--dev-qrels, ...)


@dataclass
class TrainArgs:
    """Everything that defines a training run (recorded in the checkpoint)."""

    train: str | None  # a data set; None when `candidates` is a run file whose header says whose it is
    output: str
    dev: str | None = None  # a data set or a run file
    dev_fraction: float = 0.0
    dev_fold: str | None = None  # "k/n": hold out the k-th of n folds of the training queries (cross-validation)
    candidates: str | None = None  # a candidate run the data set ships (default: its first), or a run file
    # For run files (candidates, dev): judgements, texts and relevance level instead of their data set's
    qrels: str | None = None
    topics: str | None = None
    corpus: str | None = None
    min_rel: int | None = None
    # A --dev run file's own judgements and query texts, where its split has files of its own (BEIR's qrels/dev.tsv
    # beside qrels/train.tsv, MS MARCO's queries.dev.tsv): instead of qrels/topics, which then serve the candidates
    dev_qrels: str | None = None
    dev_topics: str | None = None
    steps: int = 300
    batch_groups: int = 4
    negatives: int = 7
    lr: float = 3e-5
    head_lr_scale: float = 1.0
    weight_decay: float = 0.01
    warmup: float = 0.1
    loss: str = "listwise"
    eval_every: int = 50
    patience: int = 3
    dev_depth: int = 100
    metric: str | None = None
    seed: int = 42
    teacher: str | None = None
    # The distillation options are None unless given, so that check() can refuse them without a teacher;
    # with one, those left None take DISTILL_DEFAULTS.
    distill: str | None = None  # "margin-mse" or "kl"
    distill_weight: float | None = None
    teacher_scale: float | None = None  # multiplies teacher scores (e.g. 20 for cosines, the bi-encoder's own scale)
    teacher_min_score: float | None = None  # unjudged teacher queries whose best score is lower are skipped
    max_minutes: float | None = None
    precision: str = "fp32"  # "bf16": forward passes under bfloat16 autocast (about 2x the steps on AVX512-BF16 CPUs)
    device: str = "cpu"  # where the weights and batches live: "cuda" for models whose spec trains there
    overwrite: bool = False  # replace a checkpoint already at `output` (else refused, as index and encode refuse)
    eval_on_start: bool = False  # a dev evaluation before the first step (Hugging Face's eval_on_start)
    model_options: dict = field(default_factory=dict)
    # How it was asked for, as a shell line that reruns it (`cd FOLDER && rerank train ...`): the arguments above
    # are the parsed ones, and relative paths among the typed ones need the folder. None from library calls.
    command: str | None = None

    def __post_init__(self) -> None:
        if self.teacher is not None:
            for key, value in DISTILL_DEFAULTS.items():
                if getattr(self, key) is None:
                    setattr(self, key, value)

    def check(self) -> None:
        if self.loss not in LOSSES:
            raise UsageError(f"--loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        if self.teacher is None:
            given = [f"--{key.replace('_', '-')}" for key in (*DISTILL_DEFAULTS, "teacher_min_score")
                     if getattr(self, key) is not None]
            if given:  # they would be ignored
                raise UsageError(f"{', '.join(given)}: distillation options, which need a teacher run (--teacher RUN)")
        else:
            if self.distill not in ("margin-mse", "kl"):
                raise UsageError(f"--distill must be margin-mse or kl, not {self.distill!r}")
            if not 0 <= self.distill_weight < math.inf:
                raise UsageError(f"--distill-weight must be >= 0 and finite, not {self.distill_weight}")
            if self.teacher_min_score is not None and not math.isfinite(self.teacher_min_score):
                raise UsageError(f"--teacher-min-score must be a finite number, not {self.teacher_min_score}")
            refuse_a_piped_run("--teacher", self.teacher)
            if Path(self.teacher).is_dir():
                raise UsageError(f"--teacher {self.teacher} is a folder; give a run file")
            if not Path(self.teacher).is_file():
                raise DataError(f"teacher run not found: {self.teacher}")
        if self.precision not in ("fp32", "bf16"):
            raise UsageError(f"--precision must be fp32 or bf16, not {self.precision!r}")
        if not on_cpu(self.device):  # torch's import takes seconds; cpu needs no check
            check_device(self.device)
        if not 0 <= self.dev_fraction < 1:
            raise UsageError(f"--dev-fraction must be in [0, 1), not {self.dev_fraction}")
        base = self.model_options.get("base")
        if base:
            refuse_output_in(self.output, base, "the checkpoint training starts from (--init)")
        check_output(self.output, self.overwrite)
        if sum(map(bool, (self.dev, self.dev_fraction, self.dev_fold))) > 1:
            raise UsageError("give only one of --dev DATASET, --dev-fraction and --dev-fold")
        if self.eval_on_start and not (self.dev or self.dev_fraction or self.dev_fold):
            raise UsageError("--eval-on-start evaluates on a dev set: give --dev, --dev-fraction or --dev-fold")
        if self.dev is not None and (self.dev == self.train
                                     or (_same_file(self.dev, self.candidates) and self.dev_qrels is None)):
            # early stopping would pick by the training queries; with judgements of its own the dev split of one run
            # (BEIR's one queries.jsonl) holds other queries, and build_dev refuses any it shares with training
            # (a data set brings its own judgements: --dev-qrels is for a run file)
            apart = " (or judge its dev queries apart: --dev-qrels FILE)" if self.dev != self.train else ""
            raise UsageError(f"--dev {self.dev} is the training set; hold queries out with --dev-fraction or --dev-fold"
                             f"{apart}")
        if self.dev_fold is not None:
            self.fold()
        for label, value in (("--steps", self.steps), ("--batch-groups", self.batch_groups),
                             ("--negatives", self.negatives), ("--eval-every", self.eval_every),
                             ("--dev-depth", self.dev_depth), ("--lr", self.lr), ("--head-lr-scale", self.head_lr_scale),
                             ("--patience", self.patience),
                             *([("--teacher-scale", self.teacher_scale)] if self.teacher is not None else []),
                             *([("--max-minutes", self.max_minutes)] if self.max_minutes is not None else [])):
            if not 0 < value < math.inf:
                raise UsageError(f"{label} must be positive and finite, not {value}")
        if not -2**63 <= self.seed < 2**64:  # torch.manual_seed's range: beyond it, an overflow traceback
            raise UsageError(f"--seed must be between -2^63 and 2^64-1, not {self.seed}")
        if self.metric is not None:
            from .evaluate.measures import parse_measure

            if not (self.dev or self.dev_fraction or self.dev_fold):
                raise UsageError("--metric is the dev measure: give a dev set too (--dev, --dev-fraction or --dev-fold)")
            parse_measure(self.metric)
        if self.train is not None and self.train not in dataset_names():
            raise unknown_dataset(self.train, option="--train")
        if self.train is None and not self.candidate_file:
            raise UsageError("give the training data: --train DATASET, or --candidates RUN_FILE (a run of judged "
                             "queries, e.g. from rerank retrieve)")
        if self.dev is not None and self.dev not in dataset_names():
            refuse_a_piped_run("--dev", self.dev)
        if self.dev is not None and self.dev not in dataset_names() and not Path(self.dev).is_file():
            raise UsageError(f"--dev {self.dev!r} is neither a data set nor a run file; known data sets: "
                             f"{', '.join(dataset_names())}")
        if self.dev in dataset_names() and not get_dataset(self.dev).run_files:  # not "pass --candidates FILE"
            raise DataError(f"--dev {self.dev} ships no candidate run to evaluate on: retrieve some (rerank "
                            f"retrieve {self.dev} > FILE) and pass --dev FILE")
        own = [f"--dev-{key}" for key in DEV_OWN if getattr(self, f"dev_{key}") is not None]
        if own and not self.dev_file:  # they would be ignored
            dev = (f"--dev {self.dev} is a data set, which brings its own" if self.dev
                   else "give the dev run with --dev FILE")
            raise UsageError(f"{', '.join(own)}: for a dev run file (--dev FILE); {dev}")
        if not self.candidate_file:
            # the run files' options serve the dev run file, where it has none of its own (--dev-qrels, ...)
            given = [f"--{key.replace('_', '-')}" for key in ("qrels", "topics", "corpus", "min_rel")
                     if getattr(self, key) is not None
                     and not (self.dev_file and getattr(self, f"dev_{key}", None) is None)]
            if given:  # they would be ignored: named data sets bring their own
                raise UsageError(f"{', '.join(given)}: for candidate run files (--candidates FILE, --dev FILE); "
                                 f"the data set {self.train} brings its own"
                                 + (f", and the dev run has {', '.join(own)}" if own else ""))
        from .evaluate.session import check_min_rel

        check_min_rel(self.min_rel)  # as eval's --min-rel

    @property
    def dev_file(self) -> bool:
        """Whether `dev` names a run file rather than a data set (check() found it)."""
        return self.dev is not None and self.dev not in dataset_names()

    @property
    def candidate_file(self) -> bool:
        """Whether `candidates` names a run file rather than a run the training data set ships."""
        if self.candidates is None:
            return False
        if self.train is not None and self.candidates in get_dataset(self.train).run_files:
            return False
        if self.candidates == "-":  # other stages read '-' as stdin; training keeps the file's path and digest
            raise UsageError("--candidates takes a run file, not stdin ('-'): save the stream first "
                             "(rerank retrieve ... > train.run) and pass --candidates train.run")
        refuse_a_piped_run("--candidates", self.candidates)
        if Path(self.candidates).is_dir():
            raise UsageError(f"--candidates {self.candidates} is a folder; give a run file")
        if not Path(self.candidates).is_file():
            shipped = get_dataset(self.train).run_files if self.train else {}
            if shipped:
                raise DataError(f"--candidates {self.candidates} is neither a run of {self.train} "
                                f"({', '.join(shipped)}) nor a run file")
            if self.train:  # it said "candidate run file not found", as if a name were no choice here
                raise DataError(f"--candidates {self.candidates} is no run file, and {self.train} ships no candidate "
                                f"run to name: retrieve some (rerank retrieve {self.train} > FILE) and pass "
                                "--candidates FILE")
            shipping = [n for n in dataset_names() if self.candidates in get_dataset(n).run_files]
            hint = f" (a run {', '.join(shipping)} ships? give --train DATASET too)" if shipping else ""
            raise DataError(f"candidate run file not found: {self.candidates}{hint}")
        return True

    def fold(self) -> tuple[int, int]:
        """`dev_fold` "k/n" as (k, n), 1 <= k <= n, n >= 2."""
        try:
            k, n = (int(part) for part in str(self.dev_fold).split("/"))
        except ValueError:
            raise UsageError(f"--dev-fold must be K/N (e.g. 2/5), not {self.dev_fold!r}") from None
        if not (n >= 2 and 1 <= k <= n):
            raise UsageError(f"--dev-fold K/N needs N >= 2 and 1 <= K <= N, not {self.dev_fold!r}")
        return k, n


def refuse_a_piped_run(option: str, path: str) -> None:
    """A run file training reads is recorded by its sha256 and read again: a pipe (`--candidates <(...)`) would be
    empty by then. It was called 'not found', a file that was there."""
    if Path(path).exists() and not Path(path).is_file() and not Path(path).is_dir():
        raise UsageError(f"{option} {path} is not a regular file (a pipe?): training records a run file's sha256 "
                         "and reads it again; save it to a file first")


def _same_file(a: str | None, b: str | None) -> bool:
    return bool(a and b and Path(a).is_file() and Path(b).is_file() and Path(a).samefile(b))


@dataclass
class JudgedQuery:
    qid: str
    text: str
    ranking: QueryRanking
    positives: list[str]
    negatives: list[str]


@dataclass
class Judged:
    """Judged queries with their candidates, and what evaluating a ranking of them needs."""

    queries: list[JudgedQuery]
    texts: dict[str, str]
    qrels: Qrels
    min_rel: int
    measures: tuple[str, ...]
    name: str  # the data set, or the run file when its header names none
    note: str = ""  # the queries its qrels file left out, said once the data are known to be usable
    # The documents its queries were ranked over, as a text store's `origin` names them ({"dataset": NAME} or
    # {"corpus": PATH}): query ids name queries within one collection (CACM's query 1 is not Vaswani's)
    documents: dict = field(default_factory=dict)


def _judged(rankings: list[QueryRanking], topics: dict[str, str], texts: dict[str, str], qrels: Qrels,
            min_rel: int) -> list[JudgedQuery]:
    """The judged queries among `rankings`, their candidates split by the relevance level."""
    out = []
    for ranking in rankings:
        grades = qrels.get(ranking.qid)
        if not grades or ranking.qid not in topics:
            continue
        positives = [d for d in ranking.docids if grades.get(d, 0) >= min_rel and d in texts]
        negatives = [d for d in ranking.docids if grades.get(d, 0) < min_rel and d in texts]
        out.append(JudgedQuery(ranking.qid, topics[ranking.qid], ranking, positives, negatives))
    return out


def judged_queries(dataset_name: str, run: str | None) -> Judged:
    """Queries of a data set with the candidates of a run it ships, split by the data set's relevance level."""
    dataset = get_dataset(dataset_name)
    if not dataset.run_files:
        raise DataError(f"training reads candidate runs, and {dataset_name} ships none: retrieve some (rerank "
                        f"retrieve {dataset_name} > FILE) and pass --candidates FILE")
    qrels, texts = dataset.qrels(), dataset.doc_texts()
    queries = _judged(dataset.candidates(run), dataset.topics(), texts, qrels, dataset.min_rel)
    if not queries:
        raise DataError(f"data set {dataset_name} has no judged queries with candidates to train or evaluate on")
    return Judged(queries, texts, qrels, dataset.min_rel, dataset.measures, dataset_name,
                  documents={"dataset": dataset_name})


def run_with_records(path: str, what: str = "") -> Run:
    """A whole run file that training reads, refused as empty input when it holds no run lines (an empty file, or a
    header alone): not "no qrels" or "no query is judged", as eval says it, nor, of a teacher, that it "scores none
    of the training candidates", as if it held some."""
    with open_run_file(path) as handle:
        run = load_run(handle, path)
    if not any(r.docids for r in run.queries.values()):
        raise DataError(f"empty input: {what}{path} holds no run records")
    return run


def judged_run_file(path: str, args: TrainArgs, log: Callable[[str], None], dev: bool = False) -> Judged:
    """The judged queries of a run file and their candidates: texts through its header (or --topics/--corpus),
    as the score stage finds them; judgements from --qrels or its data set (or --train's), as eval finds them.
    The `dev` run's own --dev-qrels/--dev-topics, where given, stand in for --qrels/--topics."""
    from .docstore import doc_store_for, queries_for
    from .evaluate.session import judgements_for

    (qrels_option, qrels), (topics_option, topics_file) = (_run_file_option(args, key, dev) for key in DEV_OWN)
    run = run_with_records(path)
    if args.train is not None and run.header.dataset not in (None, args.train):
        raise UsageError(f"{path} is a run of {run.header.dataset}, not of --train {args.train}")
    header = RunHeader({**run.header.fields, "dataset": run.header.dataset or args.train})
    if qrels and header.dataset in dataset_names() and get_dataset(header.dataset).judged:
        # one --qrels serves --candidates and --dev: a dev run of another data set would silently score 0
        log(f"warning: {path} is a run of {header.dataset}; {qrels_option} {qrels} judges it, not "
            f"{header.dataset}'s qrels")
    try:
        judgements = judgements_for([run], qrels, args.min_rel, fallback_dataset=args.train,
                                    qrels_option=qrels_option)
    except UsageError as error:  # its messages speak of "the run": say which
        raise UsageError(f"{path}: {error}") from None
    remedy = (f"the run {path} needs a '# ' header naming a data set known here, or its topics and corpus "
              f"(pass {topics_option}/--corpus)")
    topics = queries_for(header, topics_file, remedy=remedy)
    rankings = [r for qid, r in run.queries.items() if judgements.qrels.get(qid)]
    if not rankings:  # before any text is read
        split = (" (the training queries' judgements? give the dev run's with --dev-qrels FILE)"
                 if dev and args.qrels and not args.dev_qrels else "")
        raise DataError(f"no query of {path} is judged in {judgements.source}{split}: nothing to train or "
                        "evaluate on")
    wanted = {d for r in rankings for d in r.docids}
    store = doc_store_for(header, args.corpus, remedy=remedy)
    texts = store.texts(wanted)
    name = header.dataset or path
    if wanted and not texts:  # a file given is named as given: "(pass --corpus)" told the user to do what they did
        question = "is --corpus the run's corpus?" if args.corpus else "is it the run's corpus? (pass --corpus)"
        raise DataError(f"none of the candidates of {path} is in {store.source}; {question}")
    if len(texts) < len(wanted):
        log(f"warning: {len(wanted) - len(texts)} of the {len(wanted)} candidates of {path}'s judged queries have "
            f"no text in {store.source}; they are left out")
    untitled = [r.qid for r in rankings if r.qid not in topics]
    if len(untitled) == len(rankings):
        where = (f"{topics_file} ({topics_option}); are they the run's queries?" if topics_file
                 else f"its topics; are they the run's? (pass {topics_option})")
        raise DataError(f"no judged query of {path} has a text in {where}")
    if untitled:
        n = len(untitled)
        log(f"warning: {counted(n, 'judged query', 'judged queries')} of {path} {verb(n, 'has', 'have')} no text in the "
            f"topics; {verb(n, 'it is', 'they are')} left out")
    note = ""
    if qrels and len(rankings) < len(run.queries):  # as eval says: a qrels file of one split judges the others' none
        from .evaluate.session import some_ids

        unjudged = [qid for qid in run.queries if not judgements.qrels.get(qid)]
        note = (f"note: {counted(len(unjudged), 'query', 'queries')} of {path} {verb(len(unjudged), 'is', 'are')} "
                f"not judged in {qrels} and left out {some_ids(unjudged)}")
    queries = _judged(rankings, topics, texts, judgements.qrels, judgements.min_rel)
    return Judged(queries, texts, judgements.qrels, judgements.min_rel, judgements.measures, name, note,
                  ranked_over(header.dataset, store))


def _run_file_option(args: TrainArgs, key: str, dev: bool) -> tuple[str, str | None]:
    """The option that names a run file's `key` file (qrels, topics), and that file: the dev run's own where given."""
    if dev and getattr(args, f"dev_{key}") is not None:
        return f"--dev-{key}", getattr(args, f"dev_{key}")
    return f"--{key}", getattr(args, key)


def training_set(args: TrainArgs, log: Callable[[str], None]) -> Judged:
    if args.candidate_file:
        return judged_run_file(args.candidates, args, log)
    return judged_queries(args.train, args.candidates)


def dev_set(args: TrainArgs, log: Callable[[str], None]) -> Judged:
    """The --dev data set with the run it ships (the training one's, if it ships one so named), or a run file."""
    if args.dev in dataset_names():
        shipped = get_dataset(args.dev).run_files
        return judged_queries(args.dev, args.candidates if args.candidates in shipped else None)
    return judged_run_file(args.dev, replace(args, train=None), log, dev=True)


@dataclass
class Group:
    """One training example: a query and candidates; for a labelled group the first is a judged positive
    and the rest are negatives, for a teacher-only group they are ordered by the teacher's score."""

    qid: str
    query: str
    passages: list[str]
    docids: list[str]
    labelled: bool


def sample_groups(queries: list[JudgedQuery], texts: dict[str, str], negatives: int,
                  rng: random.Random) -> list[Group]:
    """One epoch: every (query, positive) with `negatives` sampled negatives.

    Queries with fewer negatives than asked (short QA candidate lists) sample with replacement.
    """
    groups = []
    for query in queries:
        if not query.negatives:
            continue
        for positive in query.positives:
            if len(query.negatives) >= negatives:
                chosen = rng.sample(query.negatives, negatives)
            else:
                chosen = [rng.choice(query.negatives) for _ in range(negatives)]
            docids = [positive, *chosen]
            groups.append(Group(query.qid, query.text, [texts[d] for d in docids], docids, True))
    return groups


@dataclass
class Teacher:
    """A teacher run: scores for the training candidates (of the training queries it holds) and, for the queries
    the training set does not judge (e.g. unlabelled MS MARCO train queries), candidates to distil on, their text
    found through the run's header as the score stage finds it."""

    scores: dict[str, dict[str, float]]  # of the training queries it holds (the same queries), by id
    extra: list[tuple[str, str, list[str]]]  # (qid, query text, docids) of the unjudged queries
    extra_scores: dict[str, dict[str, float]]  # theirs, by id: one may share its id with a training query
    texts: dict[str, str]
    documents: dict = field(default_factory=dict)  # what the unjudged queries were ranked over (Judged.documents)

    def groups(self, size: int, rng: random.Random) -> list[Group]:
        """One epoch over the unjudged queries: `size` sampled candidates each, best teacher score first."""
        out = []
        for qid, query, docids in self.extra:
            scores = self.extra_scores[qid]
            chosen = sorted(rng.sample(docids, min(size, len(docids))), key=scores.__getitem__, reverse=True)
            out.append(Group(qid, query, [self.texts[d] for d in chosen], chosen, False))
        return out

    def targets(self, group: Group) -> list[float] | None:
        """The teacher's scores of a group's candidates, from its copy of the group's query (a labelled group's
        training query, or the unjudged query it distils on); None where it does not score them all."""
        scores = (self.scores if group.labelled else self.extra_scores).get(group.qid, {})
        return [scores[d] for d in group.docids] if all(d in scores for d in group.docids) else None


def same_queries(run: Run, topics: dict[str, str], documents: dict, store: DocStore, others: dict[str, str],
                 others_documents: dict, others_texts: dict[str, str]) -> set[str]:
    """The ids of `run`'s queries (their words in `topics`, ranked over `documents`, whose texts `store` holds) that
    are `others`' too (id -> words, ranked over `others_documents`, some of whose texts are `others_texts`): the same
    id and words over the same documents. An id alone names other words in another topics file of one's own, and
    another query in another collection (CACM's and Vaswani's are both numbered from 1). Documents described
    otherwise (a data set's, and a corpus file written from it) are the same where the texts of those both queries
    rank are: a name cannot tell them apart."""
    words = {qid for qid, text in others.items()
             if qid in run.queries and qid in topics and query_digest(topics[qid]) == query_digest(text)}
    if not words or documents == others_documents:
        return words
    shared = {d for qid in words for d in run.queries[qid].docids if d in others_texts}
    return words if shared and store.texts(shared) == {d: others_texts[d] for d in shared} else set()


def teacher_scored(run: Run) -> tuple[dict[str, QueryRanking], str | None]:
    """Each query's candidates whose scores in a teacher `run` are a model's, and what a note should say of the rest.
    Where its last stage is a score stage, the head it re-scored (`score.scored_count`): below it, head_over_tail's
    filler scores (its first stage's order, one unit apart) would teach that order as the teacher's. A run whose last
    stage is another (retrieve, fuse, another tool's run) is taken whole; a fusion of a score stage that left filler
    draws on it, which the note says."""
    from .score import scored_count

    last = run.header.stages[-1] if run.header.stages else {}
    if last.get("stage") != "score":
        filling = fused_filler(last, run) if last.get("stage") == "fuse" else []
        return run.queries, (f"it fuses the score stage{'s' if len(filling) > 1 else ''} {', '.join(filling)}, which "
                             "left candidates below the head it re-scored with filler scores (their first stage's "
                             "order): the fused scores drawing on them are used as targets as they are"
                             if filling else None)
    heads = {qid: r.head(scored_count(last, r)) for qid, r in run.queries.items()}
    cut = [qid for qid, head in heads.items() if len(head) < len(run.queries[qid])]
    if not cut:
        return heads, None
    sizes = sorted({len(heads[qid]) for qid in cut})
    top = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    which = "each query" if len(cut) == len(heads) else f"{len(cut)} of its {len(heads)} queries"
    below = sum(len(run.queries[qid]) - len(heads[qid]) for qid in cut)
    return heads, (f"its score stage {last.get('name')} re-scored the top {top} of {which}; the "
                   f"{counted(below, 'candidate')} below, kept in their order with filler scores, "
                   f"{verb(below, 'is', 'are')} not used as targets")


def fused_filler(fuse: dict, run: Run) -> list[str]:
    """The names of the score stages among the `fuse` stage's inputs that left candidates of some query of `run` below
    their head with filler scores: they scored fewer than the stage before them handed them (as its time line says;
    without one, fewer than the fused ranking holds)."""
    from .score import handled, scored_count

    names = []
    for fused in fuse.get("inputs") or []:
        chain = fused.get("stages") if isinstance(fused, dict) and isinstance(fused.get("stages"), list) else []
        for before, stage in zip(chain, chain[1:]):
            if stage.get("stage") == "score" and any(scored_count(stage, r) < (handled(before, r) or len(r))
                                                     for r in run.queries.values()):
                names.append(str(stage.get("name")))
    return names


def read_teacher(path: str, args: TrainArgs, queries: list[JudgedQuery], training: Judged,
                 log: Callable[[str], None], dev: DevSet | None) -> Teacher:
    """Teacher scores from a run: those of the `training` queries it holds (the same id and words over the same
    documents) for their groups, and its other queries with at least a group's candidates (and a best score
    >= --teacher-min-score, to skip queries whose candidates are all off-topic) as distillation queries, except the
    `dev` set's (the same rule), which are left out with a note: a teacher run of every query of a collection is a
    normal thing to have, and distilling on its dev queries would make early stopping and the dev figures no longer
    held out. A query with a training query's id but other words or documents is another query: its scores would be
    wrong targets for the training query's groups, so it is distilled on as a query of its own, with a note. A run
    whose header names nothing to find its queries' words by (`rerank cat --trec` drops it) is told by ids alone: its
    queries with judged ids are taken as the training queries (a teacher's scores of the training candidates
    written by another tool), the others cannot be distilled on. A run that scores none of the training `queries`'
    candidates and adds no query would teach nothing."""
    from .docstore import doc_store_for, queries_for
    from .evaluate.session import some_ids

    run = run_with_records(path, "teacher run ")  # TrainArgs.check found it
    group_size, min_score, train_name = 1 + args.negatives, args.teacher_min_score, training.name
    if args.dev in dataset_names() and run.header.dataset == args.dev:
        # its queries are the dev data set's, whose judged ones would be left out below and the rest teach next to
        # nothing: said plainly
        raise UsageError(f"teacher run {path} is a run of the dev set {args.dev}: training on its queries "
                         "would leak into early stopping")
    # legitimate for unlabelled queries; fatal for a test set's. A training run file that names no data set (its
    # name is its path) has none to compare with
    if run.header.dataset not in (None, train_name) and train_name in dataset_names():
        log(f"warning: teacher run {path} is a run of {run.header.dataset}, not of {train_name}: its unjudged "
            "queries are trained on")
    scored, scored_note = teacher_scored(run)
    all_scores = {qid: dict(zip(r.docids, r.scores)) for qid, r in scored.items()}
    training_words = {q.qid: q.text for q in training.queries}  # the held-out ones too: never distilled on
    eligible = [qid for qid, r in scored.items() if len(r.docids) >= group_size
                and (min_score is None or max(r.scores) >= min_score)]
    extra: list[tuple[str, str, list[str]]] = []
    dev_left_out: list[str] = []  # the dev set's queries among them
    other: list[str] = []  # its queries under training queries' ids that are other queries
    texts: dict[str, str] = {}
    documents: dict = {}
    names_texts = any(run.header.get(key) for key in ("dataset", "topics", "index", "corpus"))
    if not names_texts and all(qid in training_words or qid in training.qrels for qid in eligible):
        same = set(run.queries) & {*training_words, *training.qrels}  # ids alone tell its queries
    else:
        # train has no --topics/--corpus: the texts of a teacher's own queries come through its header only
        remedy = (f"the teacher run {path} needs a '# ' header naming a data set known here, or its topics and "
                  "corpus files (`rerank cat --trec` drops the header)")
        topics = queries_for(run.header, remedy=remedy)
        store = doc_store_for(run.header, remedy=remedy)
        documents = ranked_over(run.header.dataset, store)
        same = same_queries(run, topics, documents, store, training_words, training.documents, training.texts)
        other = [qid for qid in run.queries if qid in training_words and qid not in same]
        dev_queries = (same_queries(run, topics, documents, store, {q.qid: q.text for q in dev.queries},
                                    dev.documents, dev.texts) if dev is not None else set())
        unjudged = [qid for qid in eligible if qid not in same]
        texts = store.texts({d for qid in unjudged for d in scored[qid].docids})
        for qid in unjudged:
            docids = [d for d in scored[qid].docids if d in texts]
            if qid in topics and len(docids) >= group_size:
                if qid in dev_queries:
                    dev_left_out.append(qid)
                else:
                    extra.append((qid, topics[qid], docids))
    scores = {qid: all_scores[qid] for qid in same}
    if not extra and not any(d in scores.get(q.qid, ()) for q in queries for d in (*q.positives, *q.negatives)):
        holds = [f"{counted(len(dev_left_out), 'dev query', 'dev queries')} of --dev {args.dev}, left out"
                 ] if dev_left_out else []
        holds += [f"{counted(len(other), 'other query', 'other queries')} under training queries' ids"] if other else []
        raise DataError(f"teacher run {path} scores none of the training candidates of {train_name} and has no "
                        f"other query with {group_size} candidates (--negatives + 1) to distil on"
                        + (" whose best score reaches --teacher-min-score" if min_score is not None else "")
                        + (f" (it holds {'; '.join(holds)})" if holds else "")
                        + (f" ({scored_note})" if scored_note else ""))
    # said after the refusal above, which then stands alone on its line
    groups = [(q, positive) for q in queries if q.negatives for positive in q.positives]  # the groups of an epoch
    covered = sum(all(d in scores.get(q.qid, ()) for d in (positive, *q.negatives)) for q, positive in groups)
    if scored_note:
        log(f"note: teacher run {path}: {scored_note}")
    log(f"teacher run {path} scores every candidate of {covered} of the {len(groups)} training groups")
    if dev_left_out:
        log(f"note: {counted(len(dev_left_out), 'query', 'queries')} of the teacher run {path} "
            f"{verb(len(dev_left_out), 'is a dev query', 'are dev queries')} (--dev {args.dev}) "
            f"{some_ids(dev_left_out)}, left out of distillation so that early stopping and the dev figures stay "
            "held out")
    trained_left_out = [qid for qid in eligible if qid in same and qid in training_words]
    if trained_left_out:
        held_out = set(trained_left_out) - {q.qid for q in queries}  # by --dev-fraction or --dev-fold
        log(f"note: {counted(len(trained_left_out), 'query', 'queries')} of the teacher run {path} "
            f"{verb(len(trained_left_out), 'is a training query', 'are training queries')} of {train_name} "
            f"{some_ids(trained_left_out)}, left out of distillation: their judgements train them"
            + (f" ({len(held_out)} held out for dev)" if held_out else ""))
    if other:
        log(f"note: {counted(len(other), 'query', 'queries')} of the teacher run {path} "
            f"{verb(len(other), 'has the id of a training query', 'have the ids of training queries')} of {train_name} "
            f"but {verb(len(other), 'is another query', 'are other queries')} (other words, or ranked over other "
            f"documents) {some_ids(other)}: {verb(len(other), 'its', 'their')} scores teach no training group")
    return Teacher(scores, extra, {qid: all_scores[qid] for qid, _, _ in extra}, texts, documents)


# --------------------------------------------------------------------------------------------- the loop

@dataclass
class DevSet:
    queries: list[JudgedQuery]
    texts: dict[str, str]
    qrels: Qrels
    measure: Any  # NamedMeasure
    source: str
    origin: str | None = None  # the data set (or run file) whose queries these are, as a checkpoint's train_source
    documents: dict = field(default_factory=dict)  # the documents they were ranked over (Judged.documents)

    def evaluate(self, model: TrainableRanker, depth: int, chunk: int = 32) -> float:
        """Re-rank the top `depth` dev candidates with `model`, the rest below them as `rerank score --depth`
        keeps them, and return the mean of the dev measure."""
        import torch

        from .evaluate.measures import evaluate
        from .score import head_over_tail

        was_training = model.training
        model.eval()
        rankings = {}
        with torch.inference_mode():
            for query in self.queries:
                docids = [d for d in query.ranking.docids[:depth] if d in self.texts]  # as score --skip-missing
                scores: list[float] = []
                for start in range(0, len(docids), chunk):
                    part = docids[start : start + chunk]
                    scores += model.score_batch([query.text], [[self.texts[d] for d in part]])[0].tolist()
                rankings[query.qid] = head_over_tail(query.ranking, dict(zip(docids, scores)))
        model.train(was_training)
        return evaluate(Run(RunHeader(), rankings, "dev"), self.qrels, [self.measure]).overall(self.measure.label)


# Dev queries are drawn with this seed, not --seed: runs with other seeds, and runs continued with --init,
# keep the same dev queries, so their dev figures compare and a continued run never tests on what it trained on.
DEV_SPLIT_SEED = 42


def _usable(queries: list[JudgedQuery]) -> list[JudgedQuery]:
    """The queries with positives: the only ones a dev measure can judge."""
    return sorted((q for q in queries if q.positives), key=lambda q: q.qid)


def _split(queries: list[JudgedQuery], fraction: float) -> tuple[list[JudgedQuery], list[JudgedQuery]]:
    """Hold out a random `fraction` of the usable queries, for early stopping."""
    usable = _usable(queries)
    size = max(1, round(len(usable) * fraction))
    if size >= len(usable):
        raise UsageError(f"--dev-fraction {fraction} holds out all {len(usable)} usable training queries; "
                         "leave some to train on")
    held = set(q.qid for q in random.Random(DEV_SPLIT_SEED).sample(usable, size))
    return [q for q in queries if q.qid not in held], [q for q in queries if q.qid in held]


def _fold(queries: list[JudgedQuery], k: int, n: int) -> tuple[list[JudgedQuery], list[JudgedQuery]]:
    """Hold out the k-th of n folds of the shuffled usable queries: the n folds cover each of them once."""
    usable = _usable(queries)
    random.Random(DEV_SPLIT_SEED).shuffle(usable)
    if len(usable) < n:
        raise UsageError(f"--dev-fold {k}/{n}: only {len(usable)} training queries have relevant candidates")
    held = {q.qid for q in usable[k - 1 :: n]}
    return [q for q in queries if q.qid not in held], [q for q in queries if q.qid in held]


def build_dev(args: TrainArgs, training: Judged,
              log: Callable[[str], None] = lambda _m: None) -> tuple[list[JudgedQuery], DevSet | None]:
    """The training queries left to train on, and the dev set (held out of them, or --dev's)."""
    from .evaluate.measures import parse_measure

    train_queries, judged = training.queries, training
    if not _usable(train_queries):  # or the splits below would blame the share or the folds
        raise DataError(f"no training query of {training.name} has a relevant candidate (grade >= {training.min_rel}"
                        f"{', --min-rel' if args.min_rel is not None else ''})")
    if args.dev_fraction:
        train_queries, dev_queries = _split(train_queries, args.dev_fraction)
        source = f"{training.name} (held-out {counted(len(dev_queries), 'query', 'queries')})"
    elif args.dev_fold:
        train_queries, dev_queries = _fold(train_queries, *args.fold())
        source = f"{training.name} (fold {args.dev_fold}, {counted(len(dev_queries), 'query', 'queries')})"
    elif args.dev:
        judged = dev_set(args, log)
        dev_queries, source = judged.queries, judged.name
        if not _usable(dev_queries):  # its measure would be 0 at every evaluation: the first would be kept as best
            raise DataError(f"--dev {args.dev}: no query of {judged.name} has a relevant candidate (grade >= "
                            f"{judged.min_rel}{', --min-rel' if args.min_rel is not None else ''}); early stopping "
                            "needs dev queries that can score above 0")
        # the same query (id and text) under another name or path: a run file of the training data set, the
        # data set of the training run file, another run of its queries
        trained = {q.qid: q.text for q in train_queries}
        shared = [q.qid for q in dev_queries if trained.get(q.qid) == q.text]
        if shared:  # early stopping would pick by the training queries, as with --dev TRAIN
            from .evaluate.session import some_ids

            split = f" (is --dev-qrels {args.dev_qrels} the dev split's?)" if args.dev_qrels else ""
            raise UsageError(f"--dev {args.dev} shares {len(shared)} of its {len(dev_queries)} queries with the "
                             f"training set {some_ids(shared)}{split}; hold queries out with --dev-fraction or "
                             "--dev-fold")
    else:
        dev_queries = None
    # said after every refusal above, which then stands alone on its line
    for note in (training.note, judged.note if judged is not training else ""):
        if note:
            log(note)
    if dev_queries is None:
        return train_queries, None
    measure = parse_measure(args.metric or judged.measures[0], judged.min_rel)
    dev_qrels = {q.qid: judged.qrels[q.qid] for q in dev_queries}  # the mean runs over the dev queries only
    return train_queries, DevSet(dev_queries, judged.texts, dev_qrels, measure, source, judged.name, judged.documents)


def resolved_run(name: str, path: str | None) -> str:
    """A training or dev set's name (`Judged.name`) with the run file `path` it names, where it names one, resolved."""
    return str(Path(path).resolve()) if path is not None and name == path else name


def init_trained_on_dev(base: str, model_name: str, dev: DevSet) -> list[str]:
    """The dev queries that the weights training starts from (--init `base`: a soup's ingredients too, as it
    recorded them; and the checkpoints they continued in turn, while their folders still hold the weights that were
    continued) were trained on: figures on them are not held out for those weights."""
    dev_qids = {q.qid for q in dev.queries}
    overlap: set[str] = set()
    hashes: set[str] = set()  # a loop of bases (a folder retrained from its own descendant) ends
    pending: list[tuple[str | None, str | None]] = [(base, None)]  # (folder, the hash it held when continued)
    while pending:
        folder, expected = pending.pop()
        if not folder:
            continue
        try:
            manifest = read_checkpoint(folder, model_name)
        except RerankError:  # an ancestor since deleted or damaged: nothing more to tell
            continue
        if (expected is not None and manifest["hash"] != expected) or manifest["hash"] in hashes:
            continue  # retrained since: these are not the weights that were continued
        hashes.add(manifest["hash"])
        for training in query_records(manifest.get("training", {})):
            seen = queries_seen(training, dev.documents, {q.qid: q.text for q in dev.queries})
            if seen is not None:
                overlap |= seen[0]
            elif dev.origin is not None and training.get("train_source") == dev.origin:  # ids name one set's queries
                overlap |= dev_qids & (trained_qids(training) or set())
            pending.append(((training.get("model_options") or {}).get("base"), training.get("init_hash")))
    return sorted(overlap)


LOSSES = ("listwise", "pairwise", "pointwise")


def group_loss(scores, loss: str):
    """Label loss for groups whose first column is the positive."""
    import torch
    import torch.nn.functional as F

    if loss == "listwise":
        return F.cross_entropy(scores, torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device))
    if loss == "pointwise":  # each pair alone: binary cross-entropy, the score a logit of relevance
        labels = torch.zeros_like(scores)
        labels[:, 0] = 1.0
        return F.binary_cross_entropy_with_logits(scores, labels)
    return F.softplus(scores[:, 1:] - scores[:, :1]).mean()  # pairwise logistic (RankNet)


def distill_loss(scores, teacher, kind: str):
    """Match the teacher's margins (MarginMSE) or its softmax over the group (KL)."""
    import torch.nn.functional as F

    if kind == "margin-mse":
        return F.mse_loss(scores[:, :1] - scores[:, 1:], teacher[:, :1] - teacher[:, 1:])
    return F.kl_div(F.log_softmax(scores, dim=1), F.log_softmax(teacher, dim=1), log_target=True,
                    reduction="batchmean")


def diverged(args: TrainArgs, step: int, best_step: int | None) -> str:
    """Why training stopped at a non-finite loss or gradient, what to lower, and what is left of it: the
    step is checked before it changes the weights, so no checkpoint ever holds a diverged model."""
    causes = "--lr, --teacher-scale or --distill-weight" if args.teacher else "--lr"
    kept = (f"{args.output} keeps the best checkpoint before it (step {best_step})" if best_step is not None
            else "no checkpoint was written")
    return f"training diverged at step {step} (the loss or its gradient is not finite); lower {causes}; {kept}"


def adamw(parameter_groups: list[dict], args: TrainArgs) -> tuple[Any, Any]:
    """Every model's optimiser: AdamW, with a linear warm-up over `warmup` of the steps and a linear decay after."""
    import torch

    optimizer = torch.optim.AdamW(parameter_groups, weight_decay=args.weight_decay)
    warmup = max(1, int(args.steps * args.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup))))
    return optimizer, schedule


def run_record(args: TrainArgs, files: list[str]) -> dict:
    """What a checkpoint records of how it was trained: the arguments, the `files` among them (keys of TrainArgs)
    and the named data sets it read by content, and the package versions and thread count it ran with."""
    import torch

    record = asdict(args)
    del record["overwrite"]  # how -o was written, not how the model was trained
    # The files it read, recorded resolved (found from any folder, as --init's base is) and by content: a run
    # file regenerated under the same name must be told from the one this checkpoint learnt from. A pipe
    # (--qrels <(zcat ...)) was read once and has no content left to hash: opening it again waits for a writer.
    record["file_sha256"] = {}
    for key in files:
        if record[key]:
            record[key] = str(Path(record[key]).resolve())
            if Path(record[key]).is_file():
                record["file_sha256"][key] = file_sha256(Path(record[key]))
    # Named data sets' files by content as well: another --data-root, or a corrected release, is other data under
    # the same name.
    record["dataset_sha256"] = {name: {part: file_sha256(path) for part, path in sorted(get_dataset(name).files.items())
                                       if path.is_file()}
                                for name in sorted({args.train, args.dev} & set(dataset_names()))}
    record["versions"] = package_versions()
    # Torch's intra-op threads split reductions differently, so the same seed trains other weights under another
    # count: without --threads it is one per core here, which a rerun on another machine would not match.
    record["torch_threads"] = torch.get_num_threads()
    return record


def save_checkpoint(output: str, model_name: str, model: Any, training: dict, written: list[dict]) -> None:
    """Write `model` (its `save(folder) -> config`) and its manifest as the checkpoint folder `output`, atomically;
    the manifest goes into `written` before the folder takes `output`'s place, so an interrupt during that can tell
    which checkpoint -o holds."""
    written.clear()
    with atomic_dir(output, CHECKPOINT_FILE) as tmp:
        written.append(write_checkpoint(tmp, model_name, model.save(tmp), training))


@dataclass
class TrainResult:
    steps: int
    best: float | None
    best_step: int | None
    history: list[dict]
    seconds: float
    stopped: str


def _nothing_written(output: str) -> str:
    """What -o holds when an interrupted run wrote nothing there: the older checkpoint that --overwrite was to
    replace is still there, which 'no checkpoint of this run was written' left the user to wonder about."""
    if (Path(output) / CHECKPOINT_FILE).is_file():
        return f"no checkpoint of this run was written: {output} still holds the checkpoint it held before"
    return f"no checkpoint of this run was written to {output}"


def train(model_name: str, args: TrainArgs, log: Callable[[str], None] = lambda _m: None) -> TrainResult:
    """Train `model_name` as `args` say and leave the best checkpoint in `args.output`."""
    check_trainable(model_name)
    kind = "cpu" if on_cpu(args.device) else device_kind(args.device)  # `--device foo`: a misspelling, said so
    if kind not in model_spec(model_name).train_devices:
        on_gpus = [name for name, spec in registered().items() if kind in spec.train_devices]
        raise UsageError(f"--device {args.device}: only {' and '.join(on_gpus)} trains on a GPU here; train "
                         f"{model_name} on --device cpu")
    args.check()  # before torch's import, which takes seconds
    # Two trainings into one folder (the same -o in two shells) each replaced the other's checkpoint at their dev
    # evaluations, and each wrote how its training ended into whichever checkpoint was there: weights of one run
    # under the other's record, both reporting success. The second is refused while the first runs.
    with exclusive(args.output, f"{args.output} is being written by another process (rerank train with the same "
                                "-o); wait for it to finish, or choose another folder"):
        return _train(model_name, args, log)


@dataclass
class Prepared:
    """The training data, read and checked before torch is imported: what a refusal of it is said without waiting for."""

    queries: list[JudgedQuery]  # the training queries (less those held out for dev)
    training: Judged
    dev: DevSet | None
    teacher: Teacher | None


def prepare(model_name: str, args: TrainArgs, log: Callable[[str], None]) -> Prepared:
    training = training_set(args, log)
    queries, dev = build_dev(args, training, log)
    base = args.model_options.get("base")
    if dev is not None and base:  # legitimate when continuing training, but its dev figures flatter the model
        seen = init_trained_on_dev(base, model_name, dev)
        if seen:
            from .evaluate.session import some_ids

            log(f"note: the dev figures are not held out for the starting weights: those of --init {base} were "
                f"trained on {len(seen)} of the {counted(len(dev.queries), 'dev query', 'dev queries')} "
                f"{some_ids(seen)}")
    if not any(q.positives and q.negatives for q in queries):
        raise DataError(f"{training.name} has no training query with both relevant and non-relevant candidates")
    one_sided = sum(1 for q in queries if not (q.positives and q.negatives))
    if one_sided:
        log(f"note: {one_sided} of the {counted(len(queries), 'training query', 'training queries')} "
            f"{verb(one_sided, 'has', 'have')} no relevant or no non-relevant candidate; skipped")
    most = max(len(q.negatives) for q in queries)
    if args.negatives > most:  # groups of repeated negatives only; a huge count would fill memory sampling them
        raise UsageError(f"--negatives {args.negatives}: no training query of {training.name} has more than "
                         f"{most} non-relevant candidates; give at most {most}")
    teacher = read_teacher(args.teacher, args, queries, training, log, dev) if args.teacher else None
    if teacher is not None and teacher.extra:
        log(f"distilling also on {len(teacher.extra)} unjudged queries of the teacher run")
    epoch_size = sum(len(q.positives) for q in queries if q.negatives) + (len(teacher.extra) if teacher else 0)
    if args.batch_groups > epoch_size:
        log(f"note: an epoch has {counted(epoch_size, 'group')}, fewer than --batch-groups {args.batch_groups}: "
            "each step trains on a whole epoch")
    return Prepared(queries, training, dev, teacher)


def optimiser(model: Any, model_name: str, args: TrainArgs) -> tuple[Any, Any]:
    """A ranker's optimiser: a freshly initialised head trains at --head-lr-scale times the rate."""
    head = list(model.head_parameters()) if hasattr(model, "head_parameters") else []
    if not head and args.head_lr_scale != 1:  # it would scale nothing, yet be recorded as the run's setting
        raise UsageError(f"--head-lr-scale: {model_name} has no freshly initialised head to train faster (a new "
                         "classifier on pretrained weights); leave it out")
    head_ids = {id(p) for p in head}
    body = [p for p in model.parameters() if p.requires_grad and id(p) not in head_ids]
    parameter_groups = [{"params": body, "lr": args.lr}]
    if head:
        parameter_groups.append({"params": head, "lr": args.lr * args.head_lr_scale})
    return adamw(parameter_groups, args)


def training_record(model_name: str, args: TrainArgs, data: Prepared) -> dict:
    """A ranker's record: the run's (`run_record`), its starting weights, and the queries it saw."""
    record = run_record(args, ["qrels", "topics", "corpus", "teacher", *(["candidates"] if args.candidate_file else []),
                               *(["dev", *(f"dev_{key}" for key in DEV_OWN)] if args.dev_file else [])])
    # --init's base by content too: its folder may be retrained later (train -o replaces a checkpoint), and the
    # path alone would then name other weights than the ones this run continued.
    base = args.model_options.get("base")
    record["init_hash"] = (read_checkpoint(base, model_name)["hash"]
                           if base and (Path(base) / CHECKPOINT_FILE).is_file() else None)
    # Which queries it trained on and chose its step by, over which documents, for `score` to say so when it
    # re-scores them (queries_seen), of a data set or of one's own collection
    training, dev, teacher = data.training, data.dev, data.teacher
    record["query_space"] = {
        "train": query_space(training.documents, {q.qid: q.text for q in training.queries}),
        "dev": query_space(dev.documents, {q.qid: q.text for q in dev.queries}) if args.dev else None,
        "distilled": query_space(teacher.documents, {qid: text for qid, text, _ in teacher.extra})
        if teacher is not None and teacher.extra else None}
    # run files by their resolved paths, as the files above: the path as typed names another file from elsewhere
    record["train_source"] = resolved_run(training.name, args.candidates if args.candidate_file else None)
    record["dev_source"] = resolved_run(dev.source, args.dev if args.dev_file else None) if dev else None
    return record


class Keeper:
    """Checkpointing and early stopping: keeps in -o the checkpoint of the best dev evaluation (of the last step
    without a dev set), and tells when patience has run out."""

    def __init__(self, model: Any, model_name: str, args: TrainArgs, data: Prepared, record: dict,
                 log: Callable[[str], None]):
        self.model, self.model_name, self.args, self.data, self.record, self.log = model, model_name, args, data, record, log
        self.began = time.perf_counter()
        self.history: list[dict] = []
        self.losses: list[float] = []
        self.best: float | None = None
        self.best_step: int | None = None
        self.since_best = 0
        self.written: list[dict] = []  # the manifest of the checkpoint being saved

    def seconds(self) -> float:
        return time.perf_counter() - self.began

    def save(self, step: int, metric: float | None) -> None:
        args, dev = self.args, self.data.dev
        save_checkpoint(args.output, self.model_name, self.model, {
            **self.record, "step": step,
            "dev_measure": dev.measure.label if dev else None, "dev_value": metric,
            # the training queries held out for dev, by id: the split is seeded, but a list needs no re-run
            "held_out_qids": sorted(q.qid for q in dev.queries) if args.dev_fraction or args.dev_fold else None,
            "history": self.history, "train_queries": len(self.data.queries),
            "seconds": round(self.seconds(), 1),
            "ended": None}, self.written)  # until training ends: an interrupted run's checkpoint keeps None

    def saved(self) -> bool:
        """Whether -o holds the checkpoint `save` wrote: an interrupt while the one it replaced is deleted comes
        after it took that one's place."""
        try:
            held = json.loads((Path(self.args.output) / CHECKPOINT_FILE).read_text())
        except (OSError, ValueError):
            return False
        return bool(self.written) and json.dumps(held, sort_keys=True) == json.dumps(self.written[0], sort_keys=True)

    def keep(self, step: int, value: float | None) -> None:
        """Save the checkpoint of `step`; best_step names what -o holds, also after an interrupt during the save."""
        try:
            self.save(step, value)
        except BaseException:
            if self.saved():  # interrupted while the checkpoint it replaced was deleted: -o holds the new one
                self.best, self.best_step = value, step
            raise
        self.best, self.best_step = value, step

    def dev_round(self, step: int) -> bool:
        """Evaluate on the dev set, keep the checkpoint if it is the best so far; False once patience runs out."""
        from tqdm import tqdm

        args, dev = self.args, self.data.dev
        value = dev.evaluate(self.model, args.dev_depth)
        recent = self.losses[-args.eval_every:]
        self.history.append({"step": step, dev.measure.label: round(value, 4),
                             "loss": round(sum(recent) / len(recent), 4) if recent else None,
                             "seconds": round(self.seconds(), 1)})
        with tqdm.external_write_mode(file=sys.stderr):  # on a terminal, a line of its own above the bar
            self.log(f"step {step}: dev {dev.measure.label} = {value:.4f} on {dev.source}")
        if self.best is None or value > self.best:
            self.keep(step, value)
            self.since_best = 0
        else:
            self.since_best += 1
        return self.since_best < args.patience

    def stop_after(self, step: int) -> str | None:
        """Why training stops after `step` (a dev evaluation when one is due, the time budget), or None to go on."""
        args = self.args
        out_of_time = args.max_minutes is not None and self.seconds() > args.max_minutes * 60
        if self.data.dev is not None and (step % args.eval_every == 0 or step == args.steps or out_of_time):
            if not self.dev_round(step):
                return "early stopping"
        return "time budget" if out_of_time else None

    def end(self, ended: str, step: int) -> None:
        """Record in the kept checkpoint how training ended (-o holds nothing of this run before its first keep)."""
        if self.best_step is not None:
            record_ending(Path(self.args.output), ended=ended, last_step=step, history=self.history,
                          total_seconds=round(self.seconds(), 1))

    def interrupted(self, step: int) -> str:
        args, dev = self.args, self.data.dev
        self.end(f"interrupted at step {step}", step)
        kept = (_nothing_written(args.output) if self.best_step is None
                else f"{args.output} holds its checkpoint of step {self.best_step}" if dev is None
                else f"{args.output} keeps the best checkpoint so far (step {self.best_step}, dev "
                     f"{dev.measure.label} {self.best:.4f})")
        return f"training interrupted at step {step}; {kept}"


def batches(data: Prepared, args: TrainArgs, rng: random.Random) -> Iterator[list[Group]]:
    """Steps' batches of groups, from epochs sampled anew (the teacher's unjudged queries among them)."""
    groups: list[Group] = []
    while True:
        if len(groups) < args.batch_groups:
            epoch = sample_groups(data.queries, data.training.texts, args.negatives, rng)
            if data.teacher is not None:
                epoch += data.teacher.groups(1 + args.negatives, rng)
            rng.shuffle(epoch)
            groups += epoch
        batch, groups = groups[: args.batch_groups], groups[args.batch_groups :]
        yield batch


def batch_loss(model: Any, batch: list[Group], args: TrainArgs, teacher: Teacher | None, device: Any) -> Any:
    """The group loss of the batch's labelled groups, plus the distillation loss where the teacher scores a group."""
    import torch

    # bf16 autocast: matmuls in bfloat16, weights, losses and optimiser state stay fp32
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        scores = model.score_batch([g.query for g in batch], [g.passages for g in batch])
    scores = scores.float()
    labelled = [i for i, g in enumerate(batch) if g.labelled]
    loss = group_loss(scores[labelled], args.loss) if labelled else scores.sum() * 0.0
    if teacher is not None:
        targets = [teacher.targets(g) for g in batch]
        rows = [i for i, t in enumerate(targets) if t is not None]
        if rows:
            target = args.teacher_scale * torch.tensor([targets[i] for i in rows], device=device)
            loss = loss + args.distill_weight * distill_loss(scores[rows], target, args.distill)
    return loss


def _train(model_name: str, args: TrainArgs, log: Callable[[str], None]) -> TrainResult:
    """train, with the output folder's lock held: the data, the model, then the loop of steps."""
    random.seed(args.seed)
    rng = random.Random(args.seed)
    data = prepare(model_name, args, log)
    # torch only now, its import taking seconds: what the training data is refused for is said without that wait
    os.environ.setdefault(*PASSIVE_THREADS)
    import torch
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    model = model_spec(model_name).new_trainable(**args.model_options)
    device = torch.device(args.device)
    model.to(device).train()
    optimizer, schedule = optimiser(model, model_name, args)
    keeper = Keeper(model, model_name, args, data, training_record(model_name, args, data), log)
    dev, step, stopped = data.dev, 0, "steps"
    if args.precision == "bf16" and device.type == "cpu" and bf16_is_emulated():
        log(f"warning: {BF16_EMULATED}")
    try:
        if dev is not None and args.eval_on_start:  # the weights it starts from compete for the best (--init's)
            keeper.dev_round(0)
        with tqdm(total=args.steps, desc=f"training {model_name}", unit="step", disable=None) as bar:
            for batch in batches(data, args, rng):
                if step >= args.steps:
                    break
                loss = batch_loss(model, batch, args, data.teacher, device)
                optimizer.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not (math.isfinite(loss.item()) and math.isfinite(norm)):  # before a step spreads it to the weights
                    if keeper.best_step is not None:  # else -o holds nothing of this run (an older checkpoint, or nothing)
                        record_ending(Path(args.output), ended=f"diverged at step {step + 1}", last_step=step,
                                      history=keeper.history)
                    raise DataError(diverged(args, step + 1, keeper.best_step))
                optimizer.step()
                schedule.step()
                step += 1
                losses = keeper.losses
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
                if bar.disable and step % 10 == 0:  # no terminal: a line now and then instead of the bar
                    log(f"step {step}/{args.steps}: mean loss of the last 10 steps {sum(losses[-10:]) / 10:.4f}, "
                        f"{keeper.seconds():.0f} s")
                stop = keeper.stop_after(step)
                if stop:
                    stopped = stop
                    break
        if dev is None:  # no dev set: the last step's weights are the checkpoint
            keeper.keep(step, None)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (a scheduler's time limit)
        log(keeper.interrupted(step))
        raise
    seconds = keeper.seconds()
    record_ending(Path(args.output), ended=stopped, last_step=step, history=keeper.history,
                  total_seconds=round(seconds, 1))
    return TrainResult(step, keeper.best, keeper.best_step, keeper.history, seconds, stopped)

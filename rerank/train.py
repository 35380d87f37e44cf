"""A model-agnostic training loop for re-rankers, and the checkpoint folder format.

A trainable model is a `torch.nn.Module` adapter (see `TrainableRanker`) that scores groups of
candidates, `score_batch(queries, docs) -> Tensor[B, n]`, and can `save(folder)` itself; models
register a factory in `TRAINABLE` (`"module:function"`, called with the model options).

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

import hashlib
import importlib
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .atomic import atomic_dir, atomic_output, check_replaceable, check_writable
from .data import dataset_names, get_dataset, unknown_dataset
from .data.formats import Qrels
from .errors import DataError, RerankError, UsageError, counted, verb
from .locks import exclusive
from .models.base import BF16_EMULATED, bf16_is_emulated, check_device, device_kind, on_cpu
from .paths import file_sha256, read_json_object
from .runs import QueryRanking, Run, RunHeader, load_run, open_run_file

if TYPE_CHECKING:
    from .docstore import DocStore

CHECKPOINT_FILE = "checkpoint.json"

# OpenMP threads that sleep rather than spin while waiting. Must be set before torch is imported. On a
# shared, oversubscribed 2-core machine spinning threads made a forward pass up to 10x slower; on an
# idle one the difference is lost in the noise for BERT-sized matrix products.
PASSIVE_THREADS = ("OMP_WAIT_POLICY", "PASSIVE")

# model name -> "module:function"; function(**options) -> TrainableRanker (fresh, untrained weights)
TRAINABLE: dict[str, str] = {
    "bert": "rerank.models.bert:new_trainable",
    "tk": "rerank.models.tk:new_tk",
    "tkl": "rerank.models.tk:new_tkl",
}


class TrainableRanker(Protocol):
    """What the loop needs from a model (an nn.Module): group scoring and saving."""

    model_name: str

    def score_batch(self, queries: list[str], docs: list[list[str]]) -> Any:
        """Scores as a Tensor[B, n]: row i scores docs[i] (all rows the same length) for queries[i]."""

    def save(self, folder: Path) -> dict:
        """Write weights (and tokenizer/vocabulary) into `folder`; return the config to record."""

    # Optional: `head_parameters() -> list[Parameter]`, freshly initialised parameters (a new scoring
    # head on pretrained weights) that train at `head_lr_scale` times the learning rate.


# ------------------------------------------------------------------------------------------- checkpoints

def checkpoint_files(folder: Path) -> list[str]:
    """Every file under a folder but checkpoint manifests, as relative paths in the order the content hash reads
    them: what a checkpoint is made of when it is written, and, for one written before checkpoints listed their
    files, what it is taken to be made of."""
    found = sorted(path.relative_to(folder) for path in Path(folder).rglob("*")
                   if path.is_file() and path.name != CHECKPOINT_FILE)
    return [path.as_posix() for path in found]


def content_hash(folder: Path, files: list[str] | None = None) -> str:
    """sha256 over the names and bytes of a checkpoint's `files` (relative paths; None: `checkpoint_files`), in
    the order of their paths. A list of the files that are there gives what hashing them all gave before
    checkpoints listed their files, so recorded hashes, and the caches keyed on them, stand."""
    digest = hashlib.sha256()
    for name in sorted(files, key=PurePosixPath) if files is not None else checkpoint_files(folder):
        digest.update(str(PurePosixPath(name)).encode() + b"\x00")
        with open(Path(folder) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def own_files(folder: Path, manifest: dict) -> list[str]:
    """The files a checkpoint was written with, as its manifest lists them, so that what a user adds to the folder
    later (a run scored with it, notes, .DS_Store) is no part of it; every file for a checkpoint written before
    manifests listed them. A listed file that is gone is an error, as a changed one is."""
    listed = manifest.get("files")
    if listed is None:
        return checkpoint_files(folder)
    if not (isinstance(listed, list) and all(isinstance(name, str) and name and not PurePosixPath(name).is_absolute()
                                             and ".." not in PurePosixPath(name).parts for name in listed)):
        raise DataError(f"checkpoint {folder}: its {CHECKPOINT_FILE} lists its files as something other than paths "
                        "inside it; retrain or copy it again")
    missing = [name for name in listed if not (Path(folder) / name).is_file()]
    if missing:
        raise DataError(f"checkpoint {folder}: {', '.join(missing)} that {CHECKPOINT_FILE} lists "
                        f"{'is' if len(missing) == 1 else 'are'} missing: changed or cut short since written; "
                        "retrain or copy it again")
    return listed


def package_versions() -> dict[str, str | None]:
    """What a rerun needs to match, besides the seed: the same data can train to other weights under another
    torch or transformers (kernels, tokenizers, initialisation order)."""
    import platform

    from . import code_version, installed_versions

    # rerank's own from the code that runs: an installed package's metadata may be another checkout's
    return {"python": platform.python_version(), "rerank": code_version(),
            **installed_versions("torch", "transformers", "tokenizers", "numpy")}


def config_hash(config: dict) -> str:
    """A digest of the config a model is built from: it lives in checkpoint.json, outside the content hash."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def write_checkpoint(folder: Path, model: str, config: dict, training: dict) -> dict:
    files = checkpoint_files(folder)
    manifest = {"model": model, "config": config, "training": training, "files": files,
                "hash": content_hash(folder, files), "config_hash": config_hash(config)}
    (Path(folder) / CHECKPOINT_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def record_ending(folder: Path, **fields: Any) -> None:
    """Add to a kept checkpoint's training record how its training ended and every dev evaluation, the ones
    after the best too (as Hugging Face's trainer_state.json keeps its log). The manifest is outside the
    content hash, so the hash, and the score cache keyed on it, stand."""
    path = Path(folder) / CHECKPOINT_FILE
    manifest = json.loads(path.read_text())
    manifest["training"].update(fields)
    with atomic_output(str(path)) as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_checkpoint(folder: str | Path, model: str | None) -> dict:
    """The manifest of a checkpoint folder made for `model` (None: for any model); anything else is a
    clear error."""
    path = Path(folder)
    how = f"train one with: rerank train {model or 'MODEL'} ..."
    if path.is_file():  # a run or weights file given for the folder: training -o onto it would be refused too
        raise UsageError(f"checkpoint {path} is a file, not a checkpoint folder; give the folder that rerank train "
                         f"{model or 'MODEL'} -o wrote")
    if not path.is_dir():
        raise UsageError(f"checkpoint {path} does not exist; {how} -o {path}")
    manifest_path = path / CHECKPOINT_FILE
    if not manifest_path.is_file():
        raise UsageError(f"{path} is not a checkpoint (no {CHECKPOINT_FILE}); {how}")
    manifest = read_json_object(manifest_path, "retrain or copy it again")
    if model is not None and manifest.get("model") != model:
        raise UsageError(f"checkpoint {path} was trained for model {manifest.get('model')!r}, not {model!r}")
    # The hash keys the score cache and goes into run headers: weights edited, copied in or cut short since it
    # was written would otherwise get another model's cached scores (or a traceback from the weights loader).
    actual = content_hash(path, own_files(path, manifest))
    if manifest.get("hash") != actual:
        raise DataError(f"checkpoint {path}: its files are not those {CHECKPOINT_FILE} describes (hash {actual}, "
                        f"recorded {manifest.get('hash')}): changed or cut short since written; retrain or copy it again")
    return _keyed_by_config(path, manifest)


_EDITS_NOTED: set[Path] = set()


def _keyed_by_config(path: Path, manifest: dict) -> dict:
    """A config edited by hand since training (TK builds its model from it: `max_doc`, `chunk`...) makes the
    same weights another model. It gets a hash of its own, so its scores and stored encodings never mix with the
    trained config's, and a note once per process. Checkpoints written before configs were hashed keep theirs."""
    recorded = manifest.get("config_hash")
    edited = config_hash(manifest.get("config", {}))
    if recorded is None or recorded == edited:
        return manifest
    keyed = hashlib.sha256(f"{manifest['hash']} {edited}".encode()).hexdigest()[:16]
    if path.resolve() not in _EDITS_NOTED:
        _EDITS_NOTED.add(path.resolve())
        print(f"rerank: note: checkpoint {path}: the config in its {CHECKPOINT_FILE} was edited since training, so "
              f"it is keyed as hash {keyed} (trained: {manifest['hash']}); its scores and encodings are kept apart",
              file=sys.stderr)
    return {**manifest, "hash": keyed}


def refuse_output_in(output: str, checkpoint: str, is_it: str) -> None:
    """An -o that is a checkpoint being read would lose the weights and record it was read for."""
    if Path(output).resolve() == Path(checkpoint).resolve():
        raise UsageError(f"{output} is {is_it}; write the result to a new folder")


def enclosing_checkpoint(path: str) -> Path | None:
    """The checkpoint folder that `path` would be written inside, if any."""
    return next((folder for folder in Path(path).resolve().parents if (folder / CHECKPOINT_FILE).is_file()), None)


def check_output(output: str, overwrite: bool) -> None:
    """A folder training may write its checkpoint to: checked now, not after the first dev evaluation."""
    check_replaceable(output, CHECKPOINT_FILE)
    refuse_output_inside_a_checkpoint(output)
    if (Path(output) / CHECKPOINT_FILE).is_file() and not overwrite:  # runs name it by its hash
        raise UsageError(f"{output} holds a checkpoint already; pass --overwrite to replace it, or choose another -o")
    check_writable(output)


def refuse_output_inside_a_checkpoint(output: str) -> None:
    """An -o inside a checkpoint folder (`-o A/soup`) is deleted with it when that checkpoint is replaced (`train -o A
    --overwrite`), and adds files to the content hash of one written before checkpoints listed their files, which
    refuses it as changed from then on: any checkpoint's, not only one being read (`rerank train tk -o CK/tk` spoiled
    CK)."""
    holder = enclosing_checkpoint(output)
    if holder is not None:
        raise UsageError(f"{output} is inside the checkpoint {holder}, which would delete it when replaced; write the "
                         "result outside it")


def refuse_spoiling_an_unlisted_checkpoint(output: str | None) -> None:
    """A file written inside a checkpoint written before checkpoints listed their files (`score -o CK/scored.run`, a
    budget report or plot there): its hash covers every file in its folder, so the file had it refused as "changed
    or cut short" from then on. One that lists its files is not changed by it, and is left alone."""
    folder = enclosing_checkpoint(output) if output not in (None, "-") else None
    if folder is None:
        return
    try:
        listed = "files" in read_json_object(folder / CHECKPOINT_FILE, "")
    except (DataError, OSError):  # not readable as one: reading it as a checkpoint will say why
        return
    if not listed:
        raise UsageError(f"{output} is inside the checkpoint {folder}, whose content hash covers every file in its "
                         "folder (it was written before checkpoints listed their files): a file written there would "
                         "make it refused as changed; write it outside")


def refuse_a_checkpoint_twice(folders: list[str], manifests: list[dict]) -> None:
    """`average CK CK` (or CK and a copy of it: the same files, by their content hash) wrote CK again as a "soup":
    averaging a checkpoint with itself changes nothing, and beside others only weighs it twice."""
    first: dict[str, int] = {}  # content hash -> where it was first given
    for i, manifest in enumerate(manifests):
        j = first.setdefault(manifest["hash"], i)
        if j == i:
            continue
        once = "give each checkpoint once (averaging one with itself changes nothing)"
        if Path(folders[j]).resolve() == Path(folders[i]).resolve():
            raise UsageError(f"checkpoint {folders[i]} is given twice; {once}")
        raise UsageError(f"checkpoints {folders[j]} and {folders[i]} are one checkpoint (the same files, hash "
                         f"{manifest['hash']}); {once}")


def average_checkpoints(folders: list[str], output: str, overwrite: bool = False) -> dict:
    """A "model soup": the uniform average of the weights of checkpoints of one model and architecture
    (e.g. continuations of one parent with other seeds), written as a checkpoint folder like a trained one.

    Children fine-tuned from one parent stay in one basin of the loss, where the average of their weights
    is a working model that can generalise better than each (Wortsman et al. 2022, "Model soups"; for the DL
    BERT here it matched its children's mean: benchmarks/results/bert_quality.md). Weight files
    are `*.safetensors` (BERT) or `*.pt` state dicts (TK); every other of the first checkpoint's own files
    (tokenizer, config) is copied from it.
    """
    import shutil

    if len(folders) < 2:
        raise UsageError("give at least two checkpoints to average")
    for folder in folders:
        refuse_output_in(output, folder, "one of the checkpoints to average")
    refuse_output_inside_a_checkpoint(output)
    if (Path(output) / CHECKPOINT_FILE).is_file() and not overwrite:  # as train -o: runs name it by its hash
        raise UsageError(f"{output} holds a checkpoint already; pass --overwrite to replace it, or choose another -o")
    manifests = [read_checkpoint(f, None) for f in folders]
    refuse_a_checkpoint_twice(folders, manifests)
    model = manifests[0]["model"]

    def architecture(manifest: dict) -> dict:  # the config less where its training started
        return {k: v for k, v in manifest["config"].items() if k != "base"}

    reference = architecture(manifests[0])
    for folder, manifest in zip(folders, manifests):
        if manifest.get("model") != model:  # said alone: every config key of one model differs from another's
            raise UsageError(f"checkpoint {folder} is a {manifest.get('model')} checkpoint, {folders[0]} a {model} "
                             "one; a soup averages checkpoints of one model")
        this = architecture(manifest)
        differ = [f"{key} {this.get(key)!r} vs {reference.get(key)!r}" for key in sorted({*reference, *this}, key=str)
                  if this.get(key) != reference.get(key)]
        if differ:  # named: a --max-length apart looked like another architecture
            raise UsageError(f"checkpoint {folder} is not the same architecture as {folders[0]} "
                             f"({', '.join(differ)})")
    first = Path(folders[0])
    # its own files at its top, as written: a run scored into its folder, or a notes.txt, is no part of the soup
    first_files = [name for name in own_files(first, manifests[0]) if "/" not in name]
    weight_files = sorted(name for name in first_files if Path(name).suffix in (".safetensors", ".pt"))
    if not weight_files:
        raise UsageError(f"{first} has no weight files (*.safetensors, *.pt) to average")
    import torch  # only now, its import taking seconds: what is refused above is said without that wait
    from safetensors.torch import load_file, save_file

    def load(path: Path) -> dict:
        if not path.is_file():
            raise UsageError(f"checkpoint {path.parent} lacks {path.name}, which {first} has")
        try:
            if path.suffix == ".safetensors":
                return load_file(path)
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # safetensors' and torch's unreadable-file errors are of many types
            raise DataError(f"cannot read the weights {path} ({type(error).__name__}); is the checkpoint damaged?") from None

    with atomic_dir(output, CHECKPOINT_FILE) as tmp:
        for name in first_files:
            if name not in weight_files:
                shutil.copy2(first / name, Path(tmp) / name)
        for name in weight_files:
            states = [load(Path(f) / name) for f in folders]
            if any(s.keys() != states[0].keys() or any(s[k].shape != states[0][k].shape for k in s) for s in states):
                raise UsageError(f"{name} differs in its tensors between the checkpoints; they are not one architecture")
            average = {k: (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
                       if states[0][k].is_floating_point() else states[0][k] for k in states[0]}
            if name.endswith(".safetensors"):
                save_file(average, Path(tmp) / name, metadata={"format": "pt"})
            else:
                torch.save(average, Path(tmp) / name)
        soup = {"soup": [{"checkpoint": str(Path(f).resolve()), "hash": m["hash"]} for f, m in zip(folders, manifests)]}
        train_sets = {m["training"].get("train") for m in manifests}
        if len(train_sets) == 1 and None not in train_sets:  # the data the ingredients share, for reports
            soup["train"] = train_sets.pop()
        soup["ingredient_queries"] = ingredient_queries(manifests)
        manifest = write_checkpoint(tmp, model, manifests[0]["config"], soup)
    return manifest


# What of a training record tells the queries a checkpoint trained on and chose its step by (`queries_seen`, and for
# checkpoints from before `query_space`, `trained_qids`), and the weights it continued (`init_trained_on_dev`)
QUERY_RECORD = ("query_space", "held_out_qids", "train_source", "dev_source", "train", "candidates", "qrels", "min_rel",
                "file_sha256", "model_options", "init_hash")


def query_records(training: dict) -> list[dict]:
    """The training records that tell which queries a checkpoint trained on and chose its step by: its own, or a
    soup's ingredients' (`ingredient_queries`); a soup from before they were recorded tells none, as before."""
    return training.get("ingredient_queries", [training])


def ingredient_queries(manifests: list[dict]) -> list[dict]:
    """The soup's record of its ingredients' queries, in the soup's own checkpoint.json so that it outlives their
    folders: each ingredient's QUERY_RECORD (a soup's, its ingredients'), once each, since children of one parent
    mostly share theirs (a digest per training query)."""
    records: list[dict] = []
    for manifest in manifests:
        for training in query_records(manifest["training"]):
            record = {key: training[key] for key in QUERY_RECORD if key in training}
            if record not in records:
                records.append(record)
    return records


def check_trainable(name: str) -> None:
    """Refuse a model with no factory in TRAINABLE (`rerank train` asks first, before any training data is read)."""
    if name not in TRAINABLE:
        raise UsageError(f"cannot train model {name!r}; trainable: {', '.join(sorted(TRAINABLE))}")


def new_trainable(name: str, **options: Any) -> TrainableRanker:
    check_trainable(name)
    module, _, function = TRAINABLE[name].partition(":")
    factory: Callable[..., TrainableRanker] = getattr(importlib.import_module(module), function)
    return factory(**options)


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
    device: str = "cpu"  # where the weights and batches live: "cuda" (bert only) trains on a GPU
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
        if self.loss not in ("listwise", "pairwise"):
            raise UsageError(f"--loss must be listwise or pairwise, not {self.loss!r}")
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


def ranked_over(dataset: str | None, store: DocStore) -> dict:
    """The documents a run's queries were ranked over, as a checkpoint's `query_space` records them and `score`
    looks them up: a known data set its header names (its ids name its queries, whatever file --corpus gave their
    texts from), else the texts' store's `origin` (an index or corpus file of one's own)."""
    from .retrieve.store import origin

    return {"dataset": dataset} if dataset in dataset_names() else origin(store.origin)


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


def trained_qids(training: dict) -> set[str] | None:
    """The ids of the judged queries a checkpoint trained on, from its checkpoint.json's `training` record: those
    of its training data less the ones it held out (`held_out_qids`); None where that data cannot be read again
    (a candidate run file, or its --qrels, since moved or changed, or read from a pipe)."""
    from .evaluate.session import judgements_for

    files = training.get("file_sha256") or {}
    candidates, name = training.get("candidates"), training.get("train")
    if "candidates" in files:
        path = Path(candidates)
        if any(not Path(training[key]).is_file() or file_sha256(Path(training[key])) != files[key]
               for key in ("candidates", "qrels") if key in files):
            return None
        with open_run_file(path) as handle:
            run = load_run(handle, str(path))
        try:  # judged as training judged it (judged_run_file): a query without judgements made no training group
            qrels = judgements_for([run], training.get("qrels"), training.get("min_rel"), fallback_dataset=name).qrels
        except RerankError:
            return None
        qids = {qid for qid in run.queries if qrels.get(qid)}
    elif name in dataset_names() and (candidates is None or candidates in get_dataset(name).run_files):
        qids = set(get_dataset(name).qrels())  # a run it ships holds its judged queries, or a subset of them
    else:
        return None
    return qids - set(training.get("held_out_qids") or ())


def resolved_run(name: str, path: str | None) -> str:
    """A training or dev set's name (`Judged.name`) with the run file `path` it names, where it names one, resolved."""
    return str(Path(path).resolve()) if path is not None and name == path else name


def query_digest(text: str) -> str:
    """A query's words by content (spacing aside), as a checkpoint records the queries it saw: an id alone names
    other words in another topics file of one's own over the same documents (both numbered from 1)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:16]


def query_space(documents: dict, queries: dict[str, str]) -> dict:
    """A checkpoint's record of a set of queries (id -> words): the documents they were ranked over, and each one's
    words by id."""
    return {"documents": documents, "text_sha256": {qid: query_digest(text) for qid, text in queries.items()}}


def queries_seen(training: dict, documents: dict, texts: dict[str, str]) -> tuple[set[str], set[str]] | None:
    """Of the queries `texts` (id -> words) ranked over `documents`, those the checkpoint whose training record is
    `training` trained on, and those its dev evaluation chose its step by (held out of them, or --dev's): the same
    id and words over the same documents, whether a data set names them or they are one's own collection's. None
    for checkpoints from before that record (`query_space`)."""
    spaces = training.get("query_space")
    if spaces is None:
        return None

    def same(space: dict | None) -> set[str]:
        if not space or not documents or space["documents"] != documents:
            return set()
        return {qid for qid, digest in space["text_sha256"].items()
                if qid in texts and query_digest(texts[qid]) == digest}

    in_training = same(spaces["train"])
    held_out = in_training & set(training.get("held_out_qids") or ())
    # a teacher run's unjudged queries were trained on too, by its scores (`distilled`: none before it was recorded)
    trained = (in_training - held_out) | same(spaces.get("distilled"))
    return trained, (held_out | same(spaces["dev"])) - trained


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


def group_loss(scores, loss: str):
    """Label loss for groups whose first column is the positive."""
    import torch
    import torch.nn.functional as F

    if loss == "listwise":
        return F.cross_entropy(scores, torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device))
    return F.softplus(scores[:, 1:] - scores[:, :1]).mean()  # pairwise logistic (RankNet)


def distill_loss(scores, teacher, kind: str):
    """Match the teacher's margins (MarginMSE) or its softmax over the group (KL)."""
    import torch.nn.functional as F

    if kind == "margin-mse":
        return F.mse_loss(scores[:, :1] - scores[:, 1:], teacher[:, :1] - teacher[:, 1:])
    return F.kl_div(F.log_softmax(scores, dim=1), F.log_softmax(teacher, dim=1), log_target=True,
                    reduction="batchmean")


def optimiser(parameter_groups: list[dict], weight_decay: float, steps: int, warmup_fraction: float) -> tuple:
    """AdamW and its schedule: linear warm-up over `warmup_fraction` of the steps, then linear decay to 0."""
    import torch

    optimizer = torch.optim.AdamW(parameter_groups, weight_decay=weight_decay)
    warmup = max(1, int(steps * warmup_fraction))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))))
    return optimizer, schedule


def diverged(args: TrainArgs, step: int, best_step: int | None) -> str:
    """Why training stopped at a non-finite loss or gradient, what to lower, and what is left of it: the
    step is checked before it changes the weights, so no checkpoint ever holds a diverged model."""
    causes = "--lr, --teacher-scale or --distill-weight" if args.teacher else "--lr"
    kept = (f"{args.output} keeps the best checkpoint before it (step {best_step})" if best_step is not None
            else "no checkpoint was written")
    return f"training diverged at step {step} (the loss or its gradient is not finite); lower {causes}; {kept}"


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
    if not on_cpu(args.device) and model_name != "bert":
        device_kind(args.device)  # `--device foo` is a misspelling, said as such, not a GPU that tk cannot use
        raise UsageError(f"--device {args.device}: only bert trains on a GPU here; train {model_name} on --device cpu")
    args.check()  # before torch's import, which takes seconds
    # Two trainings into one folder (the same -o in two shells) each replaced the other's checkpoint at their dev
    # evaluations, and each wrote how its training ended into whichever checkpoint was there: weights of one run
    # under the other's record, both reporting success. The second is refused while the first runs.
    with exclusive(args.output, f"{args.output} is being written by another process (rerank train with the same "
                                "-o); wait for it to finish, or choose another folder"):
        return _train(model_name, args, log)


def _train(model_name: str, args: TrainArgs, log: Callable[[str], None]) -> TrainResult:
    """train, with the output folder's lock held."""
    random.seed(args.seed)
    rng = random.Random(args.seed)
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
    texts = training.texts
    if not any(q.positives and q.negatives for q in queries):
        raise DataError(f"{training.name} has no training query with both relevant and non-relevant candidates")
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
    # torch only now, its import taking seconds: what the training data is refused for is said without that wait
    os.environ.setdefault(*PASSIVE_THREADS)
    import torch
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    model = new_trainable(model_name, **args.model_options)
    device = torch.device(args.device)
    model.to(device).train()
    head = list(model.head_parameters()) if hasattr(model, "head_parameters") else []
    if not head and args.head_lr_scale != 1:  # it would scale nothing, yet be recorded as the run's setting
        raise UsageError(f"--head-lr-scale: {model_name} has no freshly initialised head to train faster (bert's "
                         "classifier and pooler); leave it out")
    head_ids = {id(p) for p in head}
    body = [p for p in model.parameters() if p.requires_grad and id(p) not in head_ids]
    parameter_groups = [{"params": body, "lr": args.lr}]
    if head:
        parameter_groups.append({"params": head, "lr": args.lr * args.head_lr_scale})
    optimizer, schedule = optimiser(parameter_groups, args.weight_decay, args.steps, args.warmup)
    record = asdict(args)
    del record["overwrite"]  # how -o was written, not how the model was trained
    files = ["qrels", "topics", "corpus", "teacher", *(["candidates"] if args.candidate_file else []),
             *(["dev", *(f"dev_{key}" for key in DEV_OWN)] if args.dev_file else [])]
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
    # --init's base by content too: its folder may be retrained later (train -o replaces a checkpoint), and the
    # path alone would then name other weights than the ones this run continued.
    record["init_hash"] = (read_checkpoint(base, model_name)["hash"]
                           if base and (Path(base) / CHECKPOINT_FILE).is_file() else None)
    record["versions"] = package_versions()
    # Torch's intra-op threads split reductions differently, so the same seed trains other weights under another
    # count: without --threads it is one per core here, which a rerun on another machine would not match.
    record["torch_threads"] = torch.get_num_threads()
    # Which queries it trained on and chose its step by, over which documents, for `score` to say so when it
    # re-scores them (queries_seen), of a data set or of one's own collection
    record["query_space"] = {
        "train": query_space(training.documents, {q.qid: q.text for q in training.queries}),
        "dev": query_space(dev.documents, {q.qid: q.text for q in dev.queries}) if args.dev else None,
        "distilled": query_space(teacher.documents, {qid: text for qid, text, _ in teacher.extra})
        if teacher is not None and teacher.extra else None}
    # run files by their resolved paths, as the files above: the path as typed names another file from elsewhere
    record["train_source"] = resolved_run(training.name, args.candidates if args.candidate_file else None)
    record["dev_source"] = resolved_run(dev.source, args.dev if args.dev_file else None) if dev else None
    began = time.perf_counter()
    history: list[dict] = []
    best, best_step, since_best, stopped = None, None, 0, "steps"
    if args.precision == "bf16" and device.type == "cpu" and bf16_is_emulated():
        log(f"warning: {BF16_EMULATED}")

    written: list[dict] = []  # the manifest of the checkpoint being saved

    def save(step: int, metric: float | None) -> None:
        written.clear()
        with atomic_dir(args.output, CHECKPOINT_FILE) as tmp:
            config = model.save(tmp)
            written.append(write_checkpoint(tmp, model_name, config, {
                **record, "step": step,
                "dev_measure": dev.measure.label if dev else None, "dev_value": metric,
                # the training queries held out for dev, by id: the split is seeded, but a list needs no re-run
                "held_out_qids": sorted(q.qid for q in dev.queries) if args.dev_fraction or args.dev_fold else None,
                "history": history, "train_queries": len(queries),
                "seconds": round(time.perf_counter() - began, 1),
                "ended": None}))  # until training ends: an interrupted run's checkpoint keeps None

    def saved() -> bool:
        """Whether -o holds the checkpoint `save` wrote: an interrupt while the one it replaced is deleted comes
        after it took that one's place."""
        try:
            held = json.loads((Path(args.output) / CHECKPOINT_FILE).read_text())
        except (OSError, ValueError):
            return False
        return bool(written) and json.dumps(held, sort_keys=True) == json.dumps(written[0], sort_keys=True)

    groups: list[Group] = []
    step = 0
    losses: list[float] = []

    def dev_round(step: int) -> bool:
        """Evaluate on the dev set, keep the checkpoint if it is the best so far; False once patience runs out."""
        nonlocal since_best
        value = dev.evaluate(model, args.dev_depth)
        recent = losses[-args.eval_every:]
        history.append({"step": step, dev.measure.label: round(value, 4),
                        "loss": round(sum(recent) / len(recent), 4) if recent else None,
                        "seconds": round(time.perf_counter() - began, 1)})
        with tqdm.external_write_mode(file=sys.stderr):  # on a terminal, a line of its own above the bar
            log(f"step {step}: dev {dev.measure.label} = {value:.4f} on {dev.source}")
        if best is None or value > best:
            keep(step, value)
            since_best = 0
        else:
            since_best += 1
        return since_best < args.patience

    def keep(step: int, value: float | None) -> None:
        """Save the checkpoint of `step`; best_step names what -o holds, also after an interrupt during the save."""
        nonlocal best, best_step
        try:
            save(step, value)
        except BaseException:
            if saved():  # interrupted while the checkpoint it replaced was deleted: -o holds the new one
                best, best_step = value, step
            raise
        best, best_step = value, step

    try:
        if dev is not None and args.eval_on_start:  # the weights it starts from compete for the best (--init's)
            dev_round(0)
        with tqdm(total=args.steps, desc=f"training {model_name}", unit="step", disable=None) as bar:
            while step < args.steps:
                if len(groups) < args.batch_groups:
                    epoch = sample_groups(queries, texts, args.negatives, rng)
                    if teacher is not None:
                        epoch += teacher.groups(1 + args.negatives, rng)
                    rng.shuffle(epoch)
                    groups += epoch
                batch, groups = groups[: args.batch_groups], groups[args.batch_groups :]
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
                optimizer.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not (math.isfinite(loss.item()) and math.isfinite(norm)):  # before a step spreads it to the weights
                    if best_step is not None:  # else -o holds nothing of this run (an older checkpoint, or nothing)
                        record_ending(Path(args.output), ended=f"diverged at step {step + 1}", last_step=step,
                                      history=history)
                    raise DataError(diverged(args, step + 1, best_step))
                optimizer.step()
                schedule.step()
                step += 1
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
                if bar.disable and step % 10 == 0:  # no terminal: a line now and then instead of the bar
                    log(f"step {step}/{args.steps}: mean loss of the last 10 steps {sum(losses[-10:]) / 10:.4f}, "
                        f"{time.perf_counter() - began:.0f} s")
                out_of_time = args.max_minutes is not None and time.perf_counter() - began > args.max_minutes * 60
                if dev is not None and (step % args.eval_every == 0 or step == args.steps or out_of_time):
                    if not dev_round(step):
                        stopped = "early stopping"
                        break
                if out_of_time:
                    stopped = "time budget"
                    break
        if dev is None:  # no dev set: the last step's weights are the checkpoint
            keep(step, None)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (a scheduler's time limit)
        if best_step is not None:
            record_ending(Path(args.output), ended=f"interrupted at step {step}", last_step=step, history=history,
                          total_seconds=round(time.perf_counter() - began, 1))
        kept = (_nothing_written(args.output) if best_step is None
                else f"{args.output} holds its checkpoint of step {best_step}" if dev is None
                else f"{args.output} keeps the best checkpoint so far (step {best_step}, dev {dev.measure.label} "
                     f"{best:.4f})")
        log(f"training interrupted at step {step}; {kept}")
        raise

    seconds = time.perf_counter() - began
    record_ending(Path(args.output), ended=stopped, last_step=step, history=history, total_seconds=round(seconds, 1))
    return TrainResult(step, best, best_step, history, seconds, stopped)

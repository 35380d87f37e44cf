"""The interface every re-ranker implements, and the registry of models by name.

A re-ranker only scores (query, document) pairs, batching its own forward passes; the score stage
(rerank/score.py) does truncation to a depth, text lookup, timing, caching and the output ranking. Models are
registered by name in MODELS, each with its loader:

    "bert": "rerank.models.bert:load_bert",  # load_bert(checkpoint: str | None, **options) -> Reranker

Loaders are listed as "module:function" strings so that naming a model imports only that model.
"""

from __future__ import annotations

import abc
import collections.abc
import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ParameterError, UsageError, counted

@dataclass(frozen=True)
class Option:
    """A parameter a model declares, as ir_measures' ParamInfo: its type, default, allowed values and help."""

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    choices: tuple = ()

    def check(self, value: Any, owner: str) -> Any:
        """`value` as this option's type; a wrong type or a value outside `choices` is refused, naming both."""
        try:
            typed = value if isinstance(value, self.type) else self.type(value)
        except (TypeError, ValueError):
            raise ParameterError(self.name, f"must be {self.type.__name__}, not {value!r}", owner) from None
        if self.choices and typed not in self.choices:
            raise ParameterError(self.name, f"must be one of {', '.join(map(str, self.choices))}, not {value!r}", owner)
        return typed


@dataclass(frozen=True)
class ModelSpec:
    """Everything the CLI, pipelines, training and tests need to know of a model, declared once beside it."""

    name: str
    help: str  # one line: what it is, for `--model`'s help and `rerank models`
    loader: str  # "module:function"; function(checkpoint: str | None, **options) -> Reranker
    kind: str = "pair"  # "pair": scores (query, document) pairs; "generator": writes queries; "reader": answers
    scores_version: int = 1  # bumped when rerank computes other scores for the same checkpoint and text
    needs_checkpoint: bool = False  # its weights come from `rerank train`
    # which of the shared score-time options (SCORE_OPTIONS) it takes besides threads and batch_size
    score_options: frozenset[str] = frozenset()
    trainer: str | None = None  # "module:function"; function(**options) -> TrainableRanker with fresh weights
    lr: float = 3e-5  # default peak learning rate of `rerank train`
    train_devices: tuple[str, ...] = ("cpu",)  # device kinds it trains on
    train_options: frozenset[str] = frozenset()  # shared score options training also takes (bert: max_length)
    architecture: tuple[Option, ...] = ()  # `rerank train -O KEY=VALUE`; empty: not checked here (the trainer does)
    encodable: bool = False  # `rerank encode` stores its query-independent document encodings
    train_example: str = "--train trec-dl-2020 --dev-fraction 0.2"  # what `rerank train NAME` needs, for remedies

    def load(self, checkpoint: str | None = None, **options: Any) -> "Reranker":
        return _function(self.loader)(checkpoint, **options)

    def new_trainable(self, **options: Any) -> Any:
        if self.trainer is None:
            raise UsageError(f"cannot train model {self.name!r}; trainable: {', '.join(trainable_models())}")
        return _function(self.trainer)(**options)


def _function(path: str) -> Callable[..., Any]:
    """A "module:function" string, imported only when called: naming a model imports only that model."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """The one call that makes a model known to the CLI, pipelines, training and the scores-version test."""
    if spec.name in _REGISTRY:
        raise ValueError(f"model {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def registered() -> dict[str, ModelSpec]:
    """Every model's spec, by name (the light declaration modules listed in rerank.models import them)."""
    importlib.import_module("rerank.models")
    return dict(sorted(_REGISTRY.items()))


def model_spec(name: str) -> ModelSpec:
    specs = registered()
    if name not in specs:
        raise ParameterError("model", f"unknown model {name!r}; known: {', '.join(specs)}")
    return specs[name]


def trainable_models() -> list[str]:
    return [name for name, spec in registered().items() if spec.trainer]


# What a Hugging Face model computes with (`Reranker.packages`): the kernels, the model's code and its tokenizer
TRANSFORMER_PACKAGES = ("torch", "transformers", "tokenizers")


# bf16 pays only where the CPU computes it (AVX512 or AMX); elsewhere oneDNN emulates it, several times slower
# than fp32 (an AVX2-only EPYC scored 1,000 DL 2019 pairs in 145 s against fp32's 28 s): train and score say so.
BF16_EMULATED = ("this CPU has no bfloat16 instructions (AVX512 or AMX), so --precision bf16 runs several times "
                 "slower than fp32 here")


# OpenMP starts all of torch's intra-op threads at once, and a thread count mistyped by a few digits does not fail
# cleanly: 20,000 ended the process ("libgomp: Thread creation failed"), 100,000 in a segmentation fault. No CPU
# has this many cores, so a count above it is a mistake, refused before torch sees it.
MAX_THREADS = 1024


def check_threads(threads: Any) -> None:
    if threads is not None and not 1 <= int(threads) <= MAX_THREADS:
        raise UsageError(f"--threads must be between 1 and {MAX_THREADS}, not {threads}")


def set_threads(threads: int | None, default: int | None = None) -> None:
    """Torch's intra-op threads: `threads` if given, else `default`, else torch's own choice (one per core)."""
    check_threads(threads)
    chosen = threads or default
    if chosen:
        import torch

        torch.set_num_threads(int(chosen))


def bf16_is_emulated() -> bool:
    import torch

    # torch has no public name for this check; this private one is what its own tests and inductor use.
    return not torch.ops.mkldnn._is_mkldnn_bf16_supported()


def on_cpu(device: str) -> bool:
    """Whether --device names the CPU (`cpu`, `cpu:0`): no torch import needed to tell (`cpu:x`, which torch
    refuses, is no name of it and goes to device_kind's check, not on to a traceback where torch reads it)."""
    return re.fullmatch(r"cpu(:\d+)?", device) is not None


def device_kind(device: str) -> str:
    """cpu or cuda, as torch reads --device; a name that is neither is refused as such."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        kind = None
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda (cuda:N), not {device!r}")
    return kind


def check_device(device: str) -> None:
    """A CUDA device torch can see (or cpu), for training and scoring: refused before any data is read."""
    import torch

    if device_kind(device) == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: torch sees no CUDA GPU here (torch {torch.__version__}); "
                             "use --device cpu")
        index = torch.device(device).index
        if index is not None and index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: torch sees {counted(torch.cuda.device_count(), 'CUDA GPU')}")


class Reranker(abc.ABC):
    """Scores candidates of one query. `checkpoint_hash` keys the score cache and goes into provenance."""

    name: str = ""
    checkpoint_hash: str = ""
    # the packages (import names) its scores are computed with: their versions go into its stage entry, for a
    # reviewer whose scores differ from another machine's in the 5th decimal (another torch's kernels), and key nothing
    packages: tuple[str, ...] = ()

    @abc.abstractmethod
    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        """One score per candidate (higher is better). `docids` lets a model use stored encodings."""

    def attach(self, header: Any, store: Any) -> None:
        """Called by the score stage with the input stream's RunHeader and the DocStore its texts come from, before
        any scoring, so a model can find per-collection resources made from those documents (TK: stored
        document encodings). Default: nothing."""

    def provenance(self) -> dict[str, Any]:
        """Extra fields for the stage's `# stage:` header line (checkpoint, encodings used, ...)."""
        return {"model": self.name, "checkpoint_hash": self.checkpoint_hash}

    def encoded_with(self) -> dict | None:
        """The package versions that encoded the stored document vectors it reads (found by `attach`), as their
        build recorded them: they go into its stage entry beside `packages`, keying nothing. None where it reads
        none, or their build recorded none. Default: none."""
        return None

    @property
    def scores_version(self) -> int:
        return SCORES_VERSIONS[self.name]

    def forget(self) -> None:
        """Drop what earlier queries left in memory (embedded passages), so that the next timed pass pays for
        all of its work: the budget report scores the same candidates at several depths. Default: nothing."""


# Options that only some models take, with the value that means "not asked for". TK/TKL cap query and
# document lengths apart, as their checkpoint says, so --max-length would be ignored there.
RESTRICTED_OPTIONS = {"quantize": (("bert",), False), "precision": (("bert",), "fp32"), "compile": (("bert",), False),
                      "max_length": (("bert", "minilm-bi"), None), "device": (("bert",), "cpu"),
                      "on_the_fly": (("tk", "tkl", "minilm-bi"), False)}


def check_batch_size(value: Any, unit: str = "pairs") -> None:
    """--batch-size counts what one forward pass takes: (query, passage) pairs when scoring, documents for
    `rerank encode`, which says so."""
    if int(value) <= 0:
        raise UsageError(f"--batch-size must be a positive number of {unit}, not {value}")


def checked_model_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Options valid for model `name` (the CLI, pipelines and budget all pass them); restricted ones left at
    their defaults are dropped for the models whose loaders do not take them."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS)) or 'none yet'}")
    if options.get("batch_size") is not None:
        check_batch_size(options["batch_size"])
    check_threads(options.get("threads"))  # a pipeline's score stage: before its earlier stages run
    kept = dict(options)
    for key, (models, default) in RESTRICTED_OPTIONS.items():
        if name not in models:
            if kept.pop(key, None) not in (None, default):
                raise UsageError(f"--{key.replace('_', '-')} is an option of {' and '.join(models)} only, not {name}")
    # after the models that take it: TK asked for 0 tokens was told to ask for more, then that it takes none
    if kept.get("max_length") is not None and int(kept["max_length"]) <= 0:  # the upper bound: at load
        raise UsageError(f"--max-length must be a positive number of tokens, not {kept['max_length']}")
    return kept


TRAINED_MODELS = frozenset({"bert", "tk", "tkl", "mtn", "transformer", "seq2seq", "hred"})  # weights from `rerank train`, so a --checkpoint is needed


def check_checkpoint_given(name: str, checkpoint: str | None) -> None:
    if name in TRAINED_MODELS and not checkpoint:
        raise UsageError(f"--model {name} needs --checkpoint DIR (train one with: rerank train {name} "
                         f"{model_spec(name).train_example} -o DIR)")


def load_model(name: str, checkpoint: str | None = None, **options: Any) -> Reranker:
    options = checked_model_options(name, options)
    check_checkpoint_given(name, checkpoint)
    module, _, function = MODELS[name].partition(":")
    loader: Callable[..., Reranker] = getattr(importlib.import_module(module), function)
    return loader(checkpoint, **options)


# Transitional, until the tables' migration onto the specs lands: the old tables, derived from the specs, so that
# today's readers of them work. Drop at merge.
class _FromSpecs(collections.abc.Mapping):
    def __init__(self, field: str):
        self.field = field

    def __getitem__(self, name: str) -> Any:
        return getattr(registered()[name], self.field)

    def __iter__(self):
        return iter(registered())

    def __len__(self) -> int:
        return len(registered())


MODELS = _FromSpecs("loader")
SCORES_VERSIONS = _FromSpecs("scores_version")

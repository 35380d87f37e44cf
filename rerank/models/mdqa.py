"""Iterative multi-document neural attention for multiple answer prediction (Greco et al. 2016), as a reader.

The question and every retrieved fact are read by bidirectional GRUs over frozen GloVe vectors (words GloVe lacks:
fixed random vectors, hashed, so a rare name still matches itself); the facts' token states are stacked into one
sequence. T inference steps follow (Sordoni et al. 2016): a query attentive read conditioned on the inference
state, a document attentive read conditioned on the state and that query glimpse, gates on both glimpses, and a GRU
update of the state. The document attention of the last step gives each entity its mass in each fact; summed over
the facts and divided by the entity's frequency in the retrieved set, these scores (one per entity of the
vocabulary) go through a 2-layer feed-forward net with one sigmoid output per candidate answer. With `direct`, an
entity's score is also added to its own output logit: an entity never seen as a training answer has untrained
output weights, and 9,000 training questions leave most of them unseen.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..answer import Question, Reader
from ..errors import DataError, UsageError

OOV_BUCKETS = 20000
MAX_QUESTION = 60  # tokens read of a question (task 2's lists of liked films are long)
ENTITIES_FILE, WEIGHTS_FILE = "entities.json", "weights.pt"


@dataclass(frozen=True)
class MDQAConfig:
    steps: int = 3
    hidden: int = 64
    ffn: int = 128
    max_fact: int = 40
    direct: bool = True

    def check(self) -> "MDQAConfig":
        for name in ("steps", "hidden", "ffn", "max_fact"):
            if getattr(self, name) < 1:
                raise UsageError(f"-O {name} must be at least 1, not {getattr(self, name)}")
        return self


def config_of(options: dict) -> MDQAConfig:
    from .base import model_spec

    declared = {option.name: option for option in model_spec("mdqa").architecture}
    unknown = [key for key in options if key not in declared]
    if unknown:
        raise UsageError(f"-O {unknown[0]}: mdqa takes {', '.join(declared)}")
    return MDQAConfig(**{key: declared[key].check(value, "mdqa") for key, value in options.items()}).check()


class Words:
    """Whitespace tokens, lower-cased and stripped of end punctuation, as rows of GloVe's table or of the buckets
    past it."""

    def __init__(self):
        from .tk import GloveVocabulary  # TK's table: one copy of the GloVe reading

        glove = GloveVocabulary()
        self.index = glove.index
        self.table = np.concatenate([glove.table, glove.oov_vectors(OOV_BUCKETS)])

    def ids(self, tokens: list[str]) -> list[int]:
        out = []
        for token in tokens:
            word = token.lower().strip("?.!,;:\"") or token
            row = self.index.get(word)
            out.append(row if row is not None else len(self.table) - OOV_BUCKETS + zlib.crc32(word.encode()) % OOV_BUCKETS)
        return out


@dataclass
class Batch:
    question: torch.Tensor  # [B, Lq] word rows (0: padding)
    question_len: torch.Tensor  # [B]
    facts: torch.Tensor  # [B, D, Lf]
    fact_len: torch.Tensor  # [B, D]
    span_token: torch.Tensor  # [S] a token of an entity span, as b * D * Lf + d * Lf + position
    span_entity: torch.Tensor  # [S] that span's entity, as b * E + entity
    frequency: torch.Tensor  # [B, E] how often each entity occurs in the question's facts (1 where it does not)


class MDQANet(nn.Module):
    def __init__(self, config: MDQAConfig, entities: list[str], table: np.ndarray):
        super().__init__()
        self.config, self.entities = config, entities
        self.entity_index = {e: i for i, e in enumerate(entities)}
        h, dim = config.hidden, table.shape[1]
        self.embed = nn.Embedding.from_pretrained(torch.from_numpy(table), freeze=True, padding_idx=0)
        self.question_gru = nn.GRU(dim, h, batch_first=True, bidirectional=True)
        self.fact_gru = nn.GRU(dim, h, batch_first=True, bidirectional=True)
        self.query_read = nn.Linear(h, 2 * h)  # the state, as a query over the question's token states
        self.document_read = nn.Linear(3 * h, 2 * h)  # the state and the query glimpse, over the facts' tokens
        self.query_gate = nn.Linear(7 * h, 2 * h)  # from [state, query glimpse, document glimpse, their product]
        self.document_gate = nn.Linear(7 * h, 2 * h)
        self.state = nn.GRUCell(4 * h, h)
        self.initial_state = nn.Parameter(torch.zeros(h))
        self.hidden_layer = nn.Linear(len(entities), config.ffn)
        self.output = nn.Linear(config.ffn, len(entities))
        self.direct_weight = nn.Parameter(torch.tensor(1.0))
        # the prior of an answer among ~100 candidates: an untrained net starts at a sensible loss, not at 0.69 per
        # entity of the vocabulary, which Adam's small steps took thousands of steps to leave
        nn.init.constant_(self.output.bias, -math.log(100))

    # ------------------------------------------------------------------------------------------- batching
    def batch(self, questions: list[Question], words: Words) -> Batch:
        config, entities = self.config, len(self.entities)
        depth = max(1, max(len(q.facts) for q in questions))
        b_size = len(questions)
        question = torch.zeros(b_size, MAX_QUESTION, dtype=torch.long)
        question_len = torch.ones(b_size, dtype=torch.long)
        facts = torch.zeros(b_size, depth, config.max_fact, dtype=torch.long)
        fact_len = torch.zeros(b_size, depth, dtype=torch.long)
        frequency = torch.ones(b_size, entities)
        tokens, targets = [], []
        for b, q in enumerate(questions):
            ids = words.ids(q.text.split())[:MAX_QUESTION] or [1]
            question[b, : len(ids)] = torch.tensor(ids)
            question_len[b] = len(ids)
            counts: dict[int, int] = {}
            for d, fact in enumerate(q.facts):
                ids = words.ids(fact.tokens)[: config.max_fact]
                facts[b, d, : len(ids)] = torch.tensor(ids)
                fact_len[b, d] = len(ids)
                for start, end, entity in fact.entities:
                    e = self.entity_index.get(entity)
                    if e is None or start >= config.max_fact:
                        continue
                    counts[e] = counts.get(e, 0) + 1
                    for position in range(start, min(end, config.max_fact)):
                        tokens.append((b * depth + d) * config.max_fact + position)
                        targets.append(b * entities + e)
            for e, count in counts.items():
                frequency[b, e] = count
        return Batch(question, question_len, facts, fact_len, torch.tensor(tokens, dtype=torch.long),
                     torch.tensor(targets, dtype=torch.long), frequency)

    # ------------------------------------------------------------------------------------------- the model
    def _encode(self, gru: nn.GRU, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token states [N, L, 2h] of the rows with tokens; rows without stay zeros."""
        out = torch.zeros(ids.shape[0], ids.shape[1], 2 * self.config.hidden)
        rows = (lengths > 0).nonzero(as_tuple=True)[0]
        if len(rows):
            packed = pack_padded_sequence(self.embed(ids[rows]), lengths[rows].cpu(), batch_first=True,
                                          enforce_sorted=False)
            states, _ = pad_packed_sequence(gru(packed)[0], batch_first=True, total_length=ids.shape[1])
            out = out.index_copy(0, rows, states)
        return out

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits [B, E] over the entity vocabulary."""
        b_size, depth, length = batch.facts.shape
        question = self._encode(self.question_gru, batch.question, batch.question_len)  # [B, Lq, 2h]
        question_mask = torch.arange(batch.question.shape[1])[None, :] < batch.question_len[:, None]
        facts = self._encode(self.fact_gru, batch.facts.view(-1, length), batch.fact_len.view(-1))
        facts = facts.view(b_size, depth * length, -1)  # every fact's tokens, stacked: one document per question
        fact_mask = (torch.arange(length)[None, None, :] < batch.fact_len[:, :, None]).view(b_size, -1)
        fact_mask[:, 0] |= ~fact_mask.any(dim=1)  # a question without facts attends to one padding token
        state = self.initial_state.expand(b_size, -1)
        for _ in range(self.config.steps):
            query_weights = _attend(question, self.query_read(state), question_mask)
            glimpse = (query_weights[:, :, None] * question).sum(1)
            document_weights = _attend(facts, self.document_read(torch.cat([state, glimpse], 1)), fact_mask)
            read = (document_weights[:, :, None] * facts).sum(1)
            gate_input = torch.cat([state, glimpse, read, glimpse * read], 1)
            gated = torch.cat([torch.sigmoid(self.query_gate(gate_input)) * glimpse,
                               torch.sigmoid(self.document_gate(gate_input)) * read], 1)
            state = self.state(gated, state)
        # score(w) = (1 / π(w)) Σ_i φ(i, w): the last step's attention mass on w's tokens, over all facts
        entities = len(self.entities)
        mass = torch.zeros(b_size * entities).index_add(0, batch.span_entity,
                                                        document_weights.reshape(-1)[batch.span_token])
        # scaled by the number of fact tokens, so that attention spread evenly gives every entity present 1
        scores = mass.view(b_size, entities) / batch.frequency * fact_mask.sum(1, keepdim=True)
        logits = self.output(torch.relu(self.hidden_layer(scores)))
        return logits + self.direct_weight * torch.log(scores + 0.01) if self.config.direct else logits

    def save(self, folder: Path) -> dict:
        weights = {k: v for k, v in self.state_dict().items() if k != "embed.weight"}  # GloVe's, from its package
        torch.save(weights, Path(folder) / WEIGHTS_FILE)
        (Path(folder) / ENTITIES_FILE).write_text(json.dumps(self.entities) + "\n")
        return {**asdict(self.config), "entities": len(self.entities), "oov_buckets": OOV_BUCKETS,
                "embeddings": "glove-6b-50d"}


def _attend(states: torch.Tensor, query: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the tokens of states [B, L, 2h] of their dot products with query [B, 2h]."""
    logits = torch.einsum("blk,bk->bl", states, query).masked_fill(~mask, float("-inf"))
    return torch.softmax(logits, dim=1)


class MDQAReader(Reader):
    packages = ("torch", "numpy")

    def __init__(self, net: MDQANet, words: Words, checkpoint_hash: str = ""):
        self.name, self.net, self.words, self.checkpoint_hash = "mdqa", net, words, checkpoint_hash
        net.eval()

    def answer(self, questions: list[Question], k: int) -> list[dict[str, float]]:
        with torch.inference_mode():
            logits = self.net(self.net.batch(questions, self.words))
        out = []
        for q, row in zip(questions, logits):
            best = torch.topk(row, min(len(row), k + len(q.named)))
            out.append({self.net.entities[i]: float(s) for s, i in zip(best.values.tolist(), best.indices.tolist())})
        return out

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "checkpoint_hash": self.checkpoint_hash, "steps": self.net.config.steps}


def new_mdqa(entities: list[str], **options: Any) -> MDQAReader:
    """Fresh weights over the entity vocabulary `entities`; the trainer trains its `net`."""
    words = Words()
    return MDQAReader(MDQANet(config_of(options), entities, words.table), words)


def load_mdqa(checkpoint: str | None, **_options: Any) -> Reader:
    from ..checkpoint import read_checkpoint

    manifest = read_checkpoint(checkpoint, "mdqa")
    known = {f.name for f in fields(MDQAConfig)}
    config = MDQAConfig(**{k: v for k, v in manifest["config"].items() if k in known})
    entities = json.loads((Path(checkpoint) / ENTITIES_FILE).read_text())
    words = Words()
    net = MDQANet(config, entities, words.table)
    try:
        net.load_state_dict(torch.load(Path(checkpoint) / WEIGHTS_FILE, weights_only=True), strict=False)
    except (RuntimeError, OSError) as error:
        raise DataError(f"checkpoint {checkpoint}: its weights do not load ({str(error).splitlines()[0]})") from None
    return MDQAReader(net, words, manifest["hash"])

"""The answer stage: a reader reads each question's retrieved facts and writes a run of answer entities.

`rerank score` re-scores the documents it is given, pair by pair (its cache, interpolation and the tail below the
depth are per document). A reader's output is other documents: entities found in all the facts read together. So
it is a stage of its own, over the same run stream: a run of retrieved facts in (`rerank retrieve`), a run whose
documents are entity ids out, evaluated against the answers as qrels by `rerank eval`.

A reader (`models/base.ModelSpec` of kind "reader") implements `Reader.answer(questions)`. Entities that the
question names itself (the actor of "what movies did X act in?", the films a user liked) are never answers.
"""

from __future__ import annotations

import abc
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from .data import dataset_names, get_dataset
from .data.movie_dialog import KB_QA, entities_in
from .docstore import doc_store_for, queries_for
from .errors import DataError, counted, verb
from .progress import Progress
from .runs import QueryRanking, RunHeader, Stream, Timing, used_packages

MAX_NAME_WORDS = 12  # the longest entity name looked for in a question, in words
DEPTH = 30  # retrieved facts read per question, by default


@dataclass
class Fact:
    docid: str
    text: str
    rank: int  # 1 for the first retrieved

    @functools.cached_property
    def tokens(self) -> list[str]:
        return self.text.split()

    @functools.cached_property
    def entities(self) -> list[tuple[int, int, str]]:
        """(first token, end token, entity id) of each entity in the fact."""
        return entities_in(self.text)


@dataclass
class Question:
    qid: str
    text: str
    facts: list[Fact]
    named: frozenset[str] = field(default=frozenset())  # entities of its facts that the question names

    @classmethod
    def of(cls, qid: str, text: str, facts: list[Fact]) -> "Question":
        names = {" ".join(f.tokens[a:b]): entity for f in facts for a, b, entity in f.entities}
        return cls(qid, text, facts, frozenset(named_in(text, names)))


def named_in(text: str, names: dict[str, str]) -> list[str]:
    """The entities (of `names`: name -> id) that `text` names: longest first, whole words, not overlapping."""
    words = [w.strip("?.!,;:\"") for w in text.lower().split()]
    found, i = [], 0
    while i < len(words):
        for j in range(min(len(words), i + MAX_NAME_WORDS), i, -1):
            entity = names.get(" ".join(words[i:j]))
            if entity is not None:
                found.append(entity)
                i = j
                break
        else:
            i += 1
    return found


class Reader(abc.ABC):
    """Ranks candidate answers of questions from their retrieved facts."""

    name: str = ""
    checkpoint_hash: str = ""
    packages: tuple[str, ...] = ()

    @abc.abstractmethod
    def answer(self, questions: list[Question], k: int) -> list[dict[str, float]]:
        """Per question, entity id -> score (higher is better) of at least its best `k` entities besides those the
        question names, which may be among them."""

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "checkpoint_hash": self.checkpoint_hash}


@dataclass
class AnswerStats:
    questions: int = 0
    no_facts: int = 0  # retrieval found nothing: an empty ranking
    no_entity: int = 0  # the question names no entity of its facts: answered from the facts all the same

    def summary(self, stage: str) -> str:
        notes = []
        if self.no_facts:
            notes.append(f"{counted(self.no_facts, 'question')} with no retrieved fact got no answer")
        if self.no_entity:
            notes.append(f"{counted(self.no_entity, 'question')} {verb(self.no_entity, 'names', 'name')} no entity "
                         f"of {verb(self.no_entity, 'its', 'their')} retrieved facts (answered from them all the same)")
        return f"{stage} answered {counted(self.questions, 'question')}" + ("; " + "; ".join(notes) if notes else "")


def questions_dataset(header: RunHeader, what: str) -> str:
    """The data set of a run's questions, one whose answers are knowledge-base entities; else one line naming `what`."""
    name = header.dataset
    if name not in dataset_names() or get_dataset(name).kind != KB_QA:
        named = f"data set {name}" if name else "no data set"
        raise DataError(f"{what} holds no knowledge-base questions (its header names {named}): readers read the facts "
                        "retrieved for them, e.g. by rerank retrieve movie-dialog-qa-valid -o FILE")
    return name


def ranked(qid: str, scores: dict[str, float], named: frozenset[str], k: int, tag: str, ms: float,
           depth: int) -> QueryRanking:
    kept = sorted(((s, e) for e, s in scores.items() if e not in named), reverse=True)[:k]
    return QueryRanking.from_scores(qid, [e for _, e in kept], [s for s, _ in kept], tag=tag,
                                    timings=[Timing(tag, ms, depth)])


def answer_stream(stream: Stream, reader: Reader, depth: int = DEPTH, k: int = 100, batch: int = 32,
                  stage: str | None = None, stats: AnswerStats | None = None, total: int | None = None) -> Stream:
    """A stream of answer entities, made lazily, `batch` questions at a time, from each question's top `depth`
    facts; `k` answers each."""
    for option, value in (("depth", depth), ("k", k), ("batch_size", batch)):
        if value < 1:
            raise DataError(f"--{option.replace('_', '-')} must be at least 1, not {value}")
    stage = stage or reader.name
    questions_dataset(stream.header, "the run")
    queries = queries_for(stream.header, None, "retrieve its questions again")
    store = doc_store_for(stream.header, None, "retrieve its questions again")
    stats = stats if stats is not None else AnswerStats()
    header = stream.header.with_stage({"name": stage, "stage": "answer", "depth": depth, "k": k,
                                       **reader.provenance(), **used_packages(reader.packages)})

    def answered(pending: list[Question]) -> Iterator[QueryRanking]:
        began = time.perf_counter()
        scores = reader.answer(pending, k)
        ms = (time.perf_counter() - began) * 1000 / len(pending)  # the batch's time, shared
        for question, found in zip(pending, scores):
            stats.no_entity += bool(question.facts) and not question.named
            stats.no_facts += not question.facts
            yield ranked(question.qid, found, question.named, k, stage, ms, len(question.facts))

    def rankings() -> Iterator[QueryRanking]:
        progress = Progress(f"answering with {stage}", "question", total, units="questions")
        pending: list[Question] = []
        for ranking in stream.rankings:
            if ranking.qid not in queries:
                raise DataError(f"query {ranking.qid} has no text in the topics ({len(queries)} known)")
            docids = ranking.docids[:depth]
            texts = store.texts(docids)
            facts = [Fact(d, texts[d], rank) for rank, d in enumerate(docids, 1) if d in texts]
            pending.append(Question.of(ranking.qid, queries[ranking.qid], facts))
            stats.questions += 1
            if len(pending) == batch:
                yield from answered(pending)
                progress.update(len(pending))
                pending = []
        if pending:
            yield from answered(pending)
            progress.update(len(pending))
        progress.close()

    return Stream(header, rankings())


class FrequencyReader(Reader):
    """The retrieval-only answerer, nothing to train: an entity scores the sum over the facts that hold it of
    1/rank (how often and how highly it was retrieved), or of 1 with weighting=count."""

    packages = ()

    def __init__(self, weighting: str = "reciprocal-rank"):
        self.name, self.weighting = "frequency", weighting

    def answer(self, questions: list[Question], k: int) -> list[dict[str, float]]:
        out = []
        for question in questions:
            scores: dict[str, float] = {}
            for fact in question.facts:
                for entity in {e for _, _, e in fact.entities}:
                    scores[entity] = scores.get(entity, 0.0) + (1.0 / fact.rank if self.weighting != "count" else 1.0)
            out.append(scores)
        return out

    def provenance(self) -> dict[str, Any]:
        return {"model": self.name, "weighting": self.weighting}


def load_frequency(checkpoint: str | None = None, weighting: str = "reciprocal-rank", **_options: Any) -> Reader:
    return FrequencyReader(weighting)

"""The bAbI Movie Dialog data set (Dodge et al. 2015): knowledge-base facts as documents, tasks as QA data sets.

A knowledge-base document is one fact as the original `movie_kb.txt` lists it: a subject, a relation and all its
objects (`the inkwell | starred actors | joe morton | larenz tate`). On 1,000 training questions of task 1 a right
answer is in the top 30 as often as with one document per triple or per entity (0.564, 0.562, 0.564:
benchmarks/results/mdqa.md); a fact is the paper's document, short enough for a reader, and holds a relation's
objects together. Fields are separated by " | ", so a reader finds the entities of a text again.

A task's answers are entities: their ids are the lower-cased names with spaces as underscores (the knowledge base is
lower-cased), so an answer run's documents are entity ids and the answers are qrels over them.
"""

from __future__ import annotations

import functools
import random
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import FormatError, counted, verb
from .formats import Document, Qrels, open_text
from .registry import Dataset

FIELD = " | "  # between a fact's subject, relation and objects, in its indexed text
SPLIT_SEED = 42  # the fixed train/validation split of a dev file
VALID_FRACTION = 0.1


def entity_id(name: str) -> str:
    """An entity's id in runs and qrels: lower-cased (as the knowledge base is), whitespace as underscores."""
    return "_".join(name.lower().split())


def read_kb(path: Path) -> list[tuple[str, str, str]]:
    """`subject<TAB>relation<TAB>object` triples under a header line; a malformed line names file and line."""
    triples = []
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip("\n").split("\t")
            if number == 1 and fields == ["subject", "relation", "object"]:
                continue
            if len(fields) != 3 or not all(f.strip() for f in fields):
                raise FormatError(str(path), number, f"a fact is subject<TAB>relation<TAB>object, not {line.strip()!r}")
            triples.append((fields[0].strip(), fields[1].strip(), fields[2].strip()))
    return triples


def relation_words(relation: str) -> str:
    """A relation as words, which BM25 matches to a question's (`directed_by`: `directed by`); `!` marks a reverse
    edge (`larenz tate | !starred actors | the inkwell`)."""
    return relation.replace("_", " ")


def kb_documents(path: Path, per: str = "fact") -> Iterator[Document]:
    """The facts as documents, ids in the order of the file: `fact` (a subject, a relation and all its objects:
    what readers read), or for comparison `triple` (one object) or `entity` (a subject with all its facts)."""
    grouped: dict[tuple, list[str]] = defaultdict(list)
    for subject, relation, obj in read_kb(path):
        key = {"fact": (subject, relation), "entity": (subject,), "triple": (subject, relation, obj)}[per]
        grouped[key].append({"fact": obj, "entity": f"{relation_words(relation)}{FIELD}{obj}", "triple": ""}[per])
    for number, (key, objects) in enumerate(grouped.items(), 1):
        fields = [key[0], *(relation_words(r) for r in key[1:2]), *key[2:], *(o for o in objects if o)]
        yield Document(f"kb{number}", FIELD.join(fields))


def entities_in(text: str) -> list[tuple[int, int, str]]:
    """A fact's entities as (first token, end token, entity id) over `text.split()`: its subject and its objects,
    not its relation (the second field)."""
    spans, start = [], 0
    for number, field in enumerate(text.split(FIELD)):
        words = field.split()
        if words and number != 1:
            spans.append((start, start + len(words), entity_id(field)))
        start += len(words) + 1  # and the separator's token
    return spans


def read_entities(path: Path) -> set[str]:
    with open_text(path) as handle:
        return {line.strip() for line in handle if line.strip()}


@dataclass
class Task:
    """A task file read: question texts and answers by qid, and the answers not in the entity list."""

    topics: dict[str, str]
    answers: dict[str, list[str]]
    unlisted: int  # answers that are not in entities.txt (kept: they are the published answers)


def split_answers(field: str, entities: set[str]) -> list[str]:
    """Answers are joined by ", ", which some names hold too (Girl, Interrupted): adjacent pieces are joined again
    where together they are a listed entity."""
    pieces = [p.strip() for p in field.split(", ")]
    answers, i = [], 0
    while i < len(pieces):
        for j in range(len(pieces), i, -1):
            joined = ", ".join(pieces[i:j])
            if j == i + 1 or joined in entities:
                answers.append(joined)
                i = j
                break
    return [a for a in answers if a]


def read_task(path: Path, entities: set[str], prefix: str) -> Task:
    """A task file, `N question<TAB>answer1, answer2` a line; qids are PREFIX-LINE. A malformed line names file and
    line."""
    topics, answers, unlisted = {}, {}, 0
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            match = re.fullmatch(r"(\d+) ([^\t]+)\t([^\t]+)", line.rstrip("\n"))
            if not match or not match.group(2).strip() or not match.group(3).strip():
                raise FormatError(str(path), number, "a task line is 'N question<TAB>answer, answer', "
                                  f"not {line.strip()[:80]!r}")
            qid = f"{prefix}-{number}"
            topics[qid] = match.group(2).strip()
            answers[qid] = split_answers(match.group(3), entities)
            unlisted += sum(a not in entities for a in answers[qid])
    return Task(topics, answers, unlisted)


def split_ids(qids: list[str], part: str) -> list[str]:
    """The fixed, seeded train/validation split of a dev file's questions."""
    order = list(qids)
    random.Random(SPLIT_SEED).shuffle(order)
    cut = round(len(order) * VALID_FRACTION)
    chosen = set(order[:cut] if part == "valid" else order[cut:])
    return [q for q in qids if q in chosen]


def qrels_of(answers: dict[str, list[str]]) -> Qrels:
    return {qid: {entity_id(a): 1 for a in names} for qid, names in answers.items()}


# ------------------------------------------------------------------------------------------- data sets

TASKS = {"qa": ("task1_qa", "factoid questions (task 1)"), "recs": ("task2_recs", "recommendations (task 2)")}
PARTS = {"train": "the dev file less its validation part", "valid": "the validation part of the dev file (10%, seeded)",
         "test": "the test file"}
MEASURES = ("HITS@1", "HITS@10", "HITS@100", "MRR")
KB_INDEX = "movie-kb"
KB_QA = "kb-qa"  # the kind of data set whose questions readers answer from retrieved facts
_NOTED: set[str] = set()


class KnowledgeBase(Dataset):
    """The knowledge-base facts as documents, to index and search; it has no questions of its own."""

    def documents(self) -> Iterator[Document]:
        return kb_documents(self.require("kb").files["kb"])

    def topics(self) -> dict[str, str]:
        return {}  # its questions are the movie-dialog-qa-* and movie-dialog-recs-* data sets', which search it

    def qrels(self) -> Qrels:
        return {}


class MovieDialogTask(Dataset):
    """One part of a Movie Dialog task: its questions are topics, its answers qrels (every listed answer relevant),
    its documents the knowledge base, searched in the index movie-kb."""

    searches = KB_INDEX  # `rerank retrieve` searches this index for its questions (and `index` builds that one)

    def __init__(self, task: str, part: str, description: str, files: dict[str, Path]):
        super().__init__(f"movie-dialog-{task}-{part}", description, files, measures=MEASURES, kind=KB_QA)
        self.task, self.part = task, part

    @functools.cached_property
    def _task(self) -> Task:
        self.require("questions", "entities")
        entities = read_entities(self.files["entities"])
        # qids name the file's line, so the train and validation parts of one dev file never share one
        read = read_task(self.files["questions"], entities, f"{self.task}-{'test' if self.part == 'test' else 'dev'}")
        kept = list(read.topics) if self.part == "test" else split_ids(list(read.topics), self.part)
        unlisted = sum(a not in entities for q in kept for a in read.answers[q])
        if unlisted and self.name not in _NOTED:  # once: a command may read a data set's parts twice
            _NOTED.add(self.name)
            sys.stderr.write(f"rerank: note: {self.name}: {counted(unlisted, 'answer')} of its {len(kept)} questions "
                             f"{verb(unlisted, 'is', 'are')} not in {self.files['entities'].name} (kept as answers)\n")
        return Task({q: read.topics[q] for q in kept}, {q: read.answers[q] for q in kept}, unlisted)

    def documents(self) -> Iterator[Document]:
        return kb_documents(self.require("kb").files["kb"])

    def topics(self) -> dict[str, str]:
        return self._task.topics

    judged = True

    def qrels(self) -> Qrels:
        return qrels_of(self._task.answers)


def knowledge_base(root: Path) -> Dataset:
    return KnowledgeBase(KB_INDEX, "Movie Dialog knowledge-base facts (kb_facts.tsv): one document per subject and "
                         "relation", {"kb": root / "movie-dialog" / "kb_facts.tsv"}, kind="documents")


def task_dataset(task: str, part: str, root: Path) -> Dataset:
    stem, what = TASKS[task]
    folder = root / "movie-dialog"
    return MovieDialogTask(task, part, f"Movie Dialog {what}: {PARTS[part]}",
                           {"questions": folder / f"{stem}_{'test' if part == 'test' else 'dev'}.txt",
                            "entities": folder / "entities.txt", "kb": folder / "kb_facts.tsv"})

"""Search sessions for next-query suggestion: the AOL missions log and one's own logs.

A session is a list of queries. Each prefix of a session is a source and its next query the target, so a session of
n queries gives n-1 pairs; a prefix is a "query" of the data set, `USER-SESSION-N` (N: queries in the prefix).
Read from two layouts:
- the Webis-SMC-12 TSV of `aol-missions/missions.tsv` (`UserID Query TimeStamp ...`): users between dashed lines,
  sessions (missions) between blank lines;
- JSONL, one session a line: `{"session": ID, "queries": [...]}` (optionally `"user": ID`, else the session is
  its own user).
Successive duplicate queries are removed (after collapsing whitespace and case); a session left with one query
gives no pair and is skipped and counted. Users, never sessions, are split into train and dev, seeded.

In runs and qrels a query text is a document id: `docid(text)` percent-encodes it (spaces as `+`), so a run of
suggestions carries its texts in the docid column and `rerank eval` reads them back for BLEU (`query_text`).
Topics hold a prefix's queries joined by ` ||| `; generators split it back (`session_of`).
"""

from __future__ import annotations

import collections
import functools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import quote_plus, unquote_plus

from ..errors import DataError, FormatError, counted
from .formats import Document, Qrels, _json_records, open_text

SEPARATOR = " ||| "  # between a prefix's queries in its topic text
SPLIT_SEED = 42
DEV_FRACTION = 0.25
SPLITS = ("train", "dev")
SESSION_MEASURES = ("BLEU", "1gram", "2gram", "3gram", "4gram", "MRR", "HITS@1", "HITS@10")


def docid(text: str) -> str:
    """A query's id in runs and qrels: its text, percent-encoded (one token, and read back by `query_text`)."""
    return quote_plus(text)


def query_text(docid_: str) -> str:
    return unquote_plus(docid_)


def session_of(topic: str) -> list[str]:
    """A prefix's queries from its topic text (one query: the text itself)."""
    return [normalised(q) for q in topic.split(SEPARATOR.strip())]


def normalised(query: str) -> str:
    return " ".join(query.lower().split())


@dataclass(frozen=True)
class Session:
    user: str
    sid: str  # unique in its file: USER-K, the user's K-th session
    queries: tuple[str, ...]


@dataclass(frozen=True)
class Pair:
    qid: str
    user: str
    source: tuple[str, ...]
    target: str


@dataclass
class SessionLog:
    sessions: list[Session]
    source: str
    skipped: int = 0  # sessions of one query after duplicates were removed

    def pairs(self) -> list[Pair]:
        return [Pair(f"{s.sid}-{n}", s.user, s.queries[:n], s.queries[n])
                for s in self.sessions for n in range(1, len(s.queries))]

    def users(self) -> list[str]:
        return list(dict.fromkeys(s.user for s in self.sessions))

    def split(self, split: str, seed: int = SPLIT_SEED, dev_fraction: float = DEV_FRACTION) -> "SessionLog":
        """The sessions of the train or dev users: users shuffled with `seed`, the first `dev_fraction` dev."""
        users = sorted(self.users())
        random.Random(seed).shuffle(users)
        dev = set(users[: max(1, round(len(users) * dev_fraction))]) if len(users) > 1 else set()
        keep = dev if split == "dev" else set(users) - dev
        return SessionLog([s for s in self.sessions if s.user in keep], f"{self.source} ({split} users)", self.skipped)

    def summary(self) -> str:
        return (f"{counted(len(self.users()), 'user')}, {counted(len(self.sessions), 'session')}, "
                f"{counted(len(self.pairs()), 'pair')}"
                + (f"; {counted(self.skipped, 'one-query session')} skipped" if self.skipped else ""))


def _deduplicated(queries: list[str]) -> tuple[str, ...]:
    return tuple(q for i, q in enumerate(queries) if i == 0 or q != queries[i - 1])


def _sessions(raw: list[tuple[str, str, list[str]]], source: str) -> SessionLog:
    sessions, skipped = [], 0
    for user, sid, queries in raw:
        kept = _deduplicated(queries)
        if len(kept) < 2:
            skipped += 1
            continue
        sessions.append(Session(user, sid, kept))
    return SessionLog(sessions, source, skipped)


_DASHES = re.compile(r"^-{3,}\s*$")


def read_missions_tsv(path: Path) -> SessionLog:
    """The Webis-SMC-12 layout: a header line, users between dashed lines, sessions between blank lines."""
    raw: list[tuple[str, str, list[str]]] = []
    user, queries, count = None, [], collections.Counter()

    def close() -> None:
        nonlocal queries
        if queries:
            count[user] += 1
            raw.append((user, f"{user}-{count[user]}", queries))
        queries = []

    with open_text(path) as handle:
        for line_no, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if line_no == 1 and line.startswith("UserID\t"):
                continue
            if _DASHES.match(line):
                close()
                user = None
                continue
            if not line.strip():
                close()
                continue
            parts = line.split("\t")
            if len(parts) < 2 or not parts[0].strip():
                raise FormatError(str(path), line_no, "expected UserID<TAB>Query<TAB>... (Webis-SMC-12 layout), "
                                  f"found {line[:60]!r}")
            query = normalised(parts[1])
            if not query:
                raise FormatError(str(path), line_no, "empty query")
            if user is not None and queries and parts[0].strip() != user:
                raise FormatError(str(path), line_no, f"user {parts[0].strip()} inside user {user}'s session "
                                  "(users are separated by a dashed line, sessions by a blank one)")
            user = parts[0].strip()
            queries.append(query)
    close()
    return _sessions(raw, str(path))


def read_sessions_jsonl(path: Path) -> SessionLog:
    raw: list[tuple[str, str, list[str]]] = []
    seen: set[str] = set()
    for line_no, record in _json_records(path):
        if "session" not in record or "queries" not in record:
            raise FormatError(str(path), line_no, 'expected {"session": ID, "queries": [...]}')
        queries = record["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise FormatError(str(path), line_no, '"queries" must be a list of strings')
        if any(not normalised(q) for q in queries):
            raise FormatError(str(path), line_no, "empty query")
        sid = str(record["session"])
        if sid in seen:
            raise FormatError(str(path), line_no, f"session {sid} appears twice")
        seen.add(sid)
        raw.append((str(record.get("user", sid)), sid, [normalised(q) for q in queries]))
    return _sessions(raw, str(path))


def read_sessions(path: str | Path) -> SessionLog:
    """A session log in either layout, told by its first character that is not blank (`{`: JSONL)."""
    path = Path(path)
    with open_text(path) as handle:
        start = next((line.lstrip() for line in handle if line.strip()), "")
    if not start:
        raise DataError(f"{path} holds no sessions")
    return read_sessions_jsonl(path) if start.startswith("{") else read_missions_tsv(path)


def prefix_topics(log: SessionLog) -> dict[str, str]:
    return {p.qid: SEPARATOR.join(p.source) for p in log.pairs()}


def prefix_qrels(log: SessionLog) -> Qrels:
    return {p.qid: {docid(p.target): 1} for p in log.pairs()}


def distinct_queries(log: SessionLog) -> Iterator[Document]:
    for text in dict.fromkeys(q for s in log.sessions for q in s.queries):
        yield Document(docid(text), text)


@functools.lru_cache(maxsize=8)
def cached_log(path: str, stamp: float) -> SessionLog:
    """A log read once per file state (the registry's data set is made anew for each lookup)."""
    return read_sessions(path)

"""The session data sets as registry `Dataset`s: `aol-missions` (train users), `aol-missions-dev`, `aol-missions-test`.

Queries are session prefixes (topics: the prefix's queries joined by ` ||| `), documents the log's distinct queries,
qrels the true next query. The shipped candidate run `pool` is the ranking view's: for each prefix, the queries
that followed its last query in the training users' log, most often first (Sordoni et al. 2015 rank the 20 most
frequent followers), then the log's distinct queries (every user's) by BM25 (rank_bm25's Okapi, k1 1.2, b 0.75)
on the last query, the last query itself left out (successive duplicates are removed, so it is never the next),
POOL_SIZE in all. The training log alone is small, so BM25 fills most of the pool.
"""

from __future__ import annotations

import collections
from pathlib import Path

from .formats import Qrels
from .registry import Dataset
from .sessions import (SESSION_MEASURES, SessionLog, cached_log, distinct_queries, docid, prefix_qrels,
                       prefix_topics)

POOL_SIZE = 20


class Followers:
    """What followed each query in a training log: the co-occurrence baseline and the candidate pool."""

    def __init__(self, log: SessionLog):
        self.next: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for pair in log.pairs():
            self.next[pair.source[-1]][pair.target] += 1

    def following(self, query: str, k: int) -> list[tuple[str, float]]:
        return [(q, float(n)) for q, n in self.next.get(query, collections.Counter()).most_common(k)]


class Pool:
    """The ranking view's candidates: followers in the training log, then BM25 over `queries` on the last query."""

    def __init__(self, followers: Followers, queries: list[str]):
        from rank_bm25 import BM25Okapi

        self.followers, self.queries = followers, queries
        self.bm25 = BM25Okapi([q.split() for q in queries], k1=1.2, b=0.75)

    def __call__(self, last: str, k: int = POOL_SIZE) -> list[tuple[str, float]]:
        """Up to k candidates with descending scores: followers (counts, at least 1) above BM25's (below 0)."""
        chosen = dict(self.followers.following(last, k))
        scores = self.bm25.get_scores(last.split())
        for i in sorted(range(len(self.queries)), key=lambda i: (-scores[i], self.queries[i])):
            if len(chosen) >= k or scores[i] <= 0:
                break
            if self.queries[i] != last and self.queries[i] not in chosen:
                chosen[self.queries[i]] = float(scores[i]) - 1000.0  # below every follower, in BM25's order
        return sorted(chosen.items(), key=lambda pair: -pair[1])


class SessionDataset(Dataset):
    """Prefixes of one split's sessions as queries; `training` is the log the baselines and the pool learn from."""

    def __init__(self, name: str, description: str, path: Path, split: str | None, training: Path):
        super().__init__(name, description, {"sessions": path}, measures=SESSION_MEASURES,
                         run_files={"pool": "sessions"}, kind="sessions")
        self.split, self.training_file = split, training

    def log(self) -> SessionLog:
        path = self.require("sessions").files["sessions"]
        whole = cached_log(str(path), path.stat().st_mtime)
        return whole.split(self.split) if self.split else whole

    def training_log(self) -> SessionLog:
        whole = cached_log(str(self.training_file), self.training_file.stat().st_mtime)
        return whole.split("train")

    def topics(self) -> dict[str, str]:
        return prefix_topics(self.log())

    def qrels(self) -> Qrels:
        return prefix_qrels(self.log())

    def documents(self):
        """The log's distinct queries, of every user (the candidates a suggestion can be)."""
        path = self.require("sessions").files["sessions"]
        yield from distinct_queries(cached_log(str(path), path.stat().st_mtime))

    def _ranking(self, run: str) -> dict[str, list[tuple[str, float]]]:
        pool = Pool(Followers(self.training_log()), [d.text for d in self.documents()])
        return {p.qid: [(docid(q), s) for q, s in pool(p.source[-1])] for p in self.log().pairs()}


def aol_missions(split: str | None):
    def make(root: Path) -> Dataset:
        d = root / "aol-missions"
        if split == "test":
            return SessionDataset("aol-missions-test", "AOL missions, held-out users (missions-test.tsv)",
                                  d / "missions-test.tsv", None, d / "missions.tsv")
        name = "aol-missions" if split == "train" else f"aol-missions-{split}"
        return SessionDataset(name, f"AOL 2006 search missions, {split} users (next-query suggestion)",
                              d / "missions.tsv", split, d / "missions.tsv")

    return make


def sessions_file_dataset(path: str) -> SessionDataset:
    """One's own log (`--sessions FILE`): every session of it, the pool from the same log."""
    return SessionDataset("custom", f"sessions of {path}", Path(path), None, Path(path))


def session_dataset(header) -> SessionDataset | None:
    """The session data set a run's header names (a data set's name, or `sessions`: one's own log), if any."""
    from .registry import dataset_names, get_dataset

    if header.get("sessions"):
        return sessions_file_dataset(header.get("sessions"))
    if header.dataset in dataset_names():
        dataset = get_dataset(header.dataset)
        return dataset if isinstance(dataset, SessionDataset) else None
    return None

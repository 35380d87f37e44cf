"""Next-query suggesters: the interface, and the two baselines with nothing to train.

A suggester writes the next query of a session (`suggest`) and scores candidate next queries by how likely it finds
them (`likelihoods`); as a `Reranker` it re-scores a run of candidates whose query text is a session prefix
(`data.sessions.SEPARATOR` between its queries), so `rerank score` ranks suggestions as any other model ranks
passages. The baselines find the data set they serve through `attach` (the run's header) or `for_dataset`.
- `last-query` suggests the last query again (and scores a candidate 1 when it is the last query, else 0).
- `cooccurrence` suggests the queries that most often followed the session's last query in the training users'
  log; with none, those that followed its earlier queries (latest first); with none, the last query again. It
  scores a candidate by how often it followed the last query (0 for all where no session data set is attached).
"""

from __future__ import annotations

import abc
from typing import Any

from ..data.sessions import session_of
from ..errors import UsageError
from .base import Reranker


class Suggester(Reranker):
    """A model of the next query given the session so far."""

    truncated: int = 0  # query texts cut to the model's maximum length so far (said by the stage that ran it)

    @abc.abstractmethod
    def suggest(self, session: list[str], k: int) -> list[tuple[str, float]]:
        """Up to k distinct next queries with their scores, best first."""

    @abc.abstractmethod
    def likelihoods(self, session: list[str], candidates: list[str]) -> list[float]:
        """One score per candidate next query (higher: more likely)."""

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        return self.likelihoods(session_of(query), texts)

    def for_dataset(self, dataset: Any) -> None:
        """Learn what it needs of the data set it suggests for (the co-occurrence counts). Default: nothing."""

    def attach(self, header: Any, store: Any) -> None:
        from ..data.session_sets import session_dataset

        dataset = session_dataset(header)
        if dataset is not None:
            self.for_dataset(dataset)


class LastQuery(Suggester):
    name = "last-query"

    def suggest(self, session: list[str], k: int) -> list[tuple[str, float]]:
        return [(session[-1], 0.0)]

    def likelihoods(self, session: list[str], candidates: list[str]) -> list[float]:
        return [float(c == session[-1]) for c in candidates]


class Cooccurrence(Suggester):
    name = "cooccurrence"

    def __init__(self) -> None:
        from ..data.session_sets import Followers
        from ..data.sessions import SessionLog

        self.followers = Followers(SessionLog([], "no sessions"))  # until a session data set is attached

    def for_dataset(self, dataset: Any) -> None:
        from ..data.session_sets import Followers

        self.followers = Followers(dataset.training_log())

    def suggest(self, session: list[str], k: int) -> list[tuple[str, float]]:
        followers = self.followers
        for query in reversed(session):
            found = [(q, n) for q, n in followers.following(query, k + 1) if q != session[-1]][:k]
            if found:
                return found
        return [(session[-1], 0.0)]

    def likelihoods(self, session: list[str], candidates: list[str]) -> list[float]:
        counts = dict(self.followers.following(session[-1], 10**9))
        return [counts.get(c, 0.0) for c in candidates]


def load_last_query(checkpoint: str | None, **options: Any) -> Suggester:
    _no_checkpoint("last-query", checkpoint)
    return LastQuery()


def load_cooccurrence(checkpoint: str | None, **options: Any) -> Suggester:
    _no_checkpoint("cooccurrence", checkpoint)
    return Cooccurrence()


def _no_checkpoint(name: str, checkpoint: str | None) -> None:
    if checkpoint:
        raise UsageError(f"--checkpoint: {name} has nothing to train and reads no checkpoint; leave it out")

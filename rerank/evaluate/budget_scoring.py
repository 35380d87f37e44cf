"""Measure one re-ranker at several depths over the same candidates, for the time-budget report.

Each depth is a full pass of the score stage (cache off, so every pair is really scored), and the
resulting runs carry the score stage's per-query timings on top of the first stage's, exactly as a
`rerank score --depth D --no-cache` run file would.
"""

from __future__ import annotations

from typing import IO

from ..errors import DataError, UsageError
from ..runs import QueryRanking, Run, RunReader, Stream


def score_at_depths(handle: IO[str], source: str, model_name: str, checkpoint: str | None, depths: list[int],
                    interpolate: float | None = None, **model_options) -> list[Run]:
    """One run per depth; interpolated with the first stage, the curve is named MODEL+FIRST (e.g. tk+bm25)."""
    from ..docstore import queries_for
    from ..models.base import load_model
    from ..score import score_stream

    reader = RunReader(handle, source)
    candidates = list(reader)
    if not candidates:
        raise DataError(f"{source} holds no queries to re-rank")
    deepest = max(len(r) for r in candidates)
    if max(depths) > deepest:
        raise UsageError(f"depth {max(depths)} exceeds the {deepest} candidates per query that {source} holds; "
                         "ask for depths where candidates exist")
    topics = queries_for(reader.header)  # read once, so that a topics file edited since is said once, not per depth
    model = load_model(model_name, checkpoint, **model_options)
    label = model_name
    if interpolate is not None:
        first = reader.header.stages[-1].get("name") if reader.header.stages else None
        label = f"{model_name}+{first or 'first'}"
    runs = []
    for depth in depths:
        model.forget()  # else a deeper pass would reuse the passages a shallower one embedded, and look cheap
        copies = [QueryRanking(r.qid, list(r.docids), list(r.scores), r.tag, list(r.timings)) for r in candidates]
        stream = score_stream(Stream(reader.header, copies), model, depth, cache=False, stage=label, queries=topics,
                              interpolate=interpolate, total=len(copies), say_training_overlap=depth == depths[0])
        queries = {r.qid: r for r in stream.rankings}
        runs.append(Run(stream.header, queries, f"{label}@{depth}", label=label))
    return runs

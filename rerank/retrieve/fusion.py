"""Run fusion: combine several first-stage runs of the same topics into one ranking.

- `rrf`: reciprocal rank fusion, score(d) = sum over runs of 1 / (k + rank(d)) (Cormack et al., 2009).
- `combsum`: the sum of each run's per-query normalised scores (`minmax` to [0, 1], `zscore`, or `none`);
  a document missing from a run adds nothing from that run.

The output header keeps the data set (all inputs must share it) and the header fields the inputs agree
on, and its stage lists every input with its own header fields and stage chain. Per-query timings: the inputs' timings
are carried over unchanged (they ran one after the other, so a query's cost is their sum, which is how
`rerank budget` adds them up) and the fusion's own time is appended under the fuse stage's name.
"""

from __future__ import annotations

import json
import math
import time
from typing import Iterator

from ..errors import DataError, ParameterError, UsageError
from ..normalise import minmax, zscores
from ..params import Option
from ..runs import QueryRanking, Run, RunHeader, Stream, Timing, nested_stages
from ..stages import StageSpec, register_stage

METHODS = ("rrf", "combsum")
NORMS = ("minmax", "zscore", "none")
# must agree: the runs answer the same queries (a topics file edited between them holds others under its path)
IDENTITY_FIELDS = {"dataset": "data sets", "topics": "topics files", "topics_sha256": "topics files' contents"}


def _normalise(scores: list[float], norm: str) -> list[float]:
    if norm == "none" or not scores:
        return scores
    return minmax(scores) if norm == "minmax" else zscores(scores)


def fuse_query(rankings: list[QueryRanking], method: str, k: int, norm: str) -> dict[str, float]:
    """docid -> fused score for one query, from that query's rankings in each run (best first)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        if method == "rrf":
            contributions = [1.0 / (k + rank) for rank in range(1, len(ranking) + 1)]
        else:
            contributions = _normalise(list(ranking.scores), norm)
        for docid, value in zip(ranking.docids, contributions):
            fused[docid] = fused.get(docid, 0.0) + value
    return fused


def _header(runs: list[Run], stage: dict) -> RunHeader:
    for key in IDENTITY_FIELDS:
        values = {r.source: r.header.get(key) for r in runs if r.header.get(key) is not None}
        if len(set(map(str, values.values()))) > 1:
            listed = ", ".join(f"{source}: {value}" for source, value in values.items())
            raise UsageError(f"cannot fuse runs of different {IDENTITY_FIELDS[key]} ({listed})")
    first = runs[0].header.fields
    agreed = {key: value for key, value in first.items()
              if key != "fingerprint" and all(r.header.get(key, value) == value for r in runs[1:])}
    for key in IDENTITY_FIELDS:  # a run without the field (plain TREC) defers to one that has it
        agreed.setdefault(key, next((r.header.get(key) for r in runs if r.header.get(key) is not None), None))
    return RunHeader({k: v for k, v in agreed.items() if v is not None}).with_stage(stage)


def check_fusion(count: int, method: str, k: int | None, norm: str | None, depth: int) -> tuple[int, str]:
    """Refuse what fusion cannot do (before any run is read, in a pipeline); returns k and norm with defaults.

    `k` (RRF's constant, default 60) and `norm` (CombSUM's, default minmax) belong to one method each: given to
    the other, they are refused rather than recorded in the header as if they had acted.
    """
    if count < 2:
        raise UsageError(f"fusion needs at least two runs, got {count}")
    if method not in METHODS:
        raise UsageError(f"unknown fusion method {method!r}; known: {', '.join(METHODS)}")
    if method == "rrf" and norm is not None:
        raise ParameterError("{norm} normalises scores for {method} combsum; reciprocal rank fusion reads ranks only",
                             "norm", "method")
    if method == "combsum" and k is not None:
        raise ParameterError("{k} is reciprocal rank fusion's constant; {method} combsum has none", "k", "method")
    k, norm = 60 if k is None else k, norm or "minmax"
    if norm not in NORMS:
        raise UsageError(f"unknown score normalisation {norm!r}; known: {', '.join(NORMS)}")
    if k < 0 or depth <= 0:
        raise ParameterError(f"{{k}} must be >= 0 and {{depth}} > 0 (got k={k}, depth={depth})", "k", "depth")
    if k >= 2 ** 53:  # k + 1 and k + 2 are one float from there on (and past 1.8e308, no float: an OverflowError)
        raise ParameterError(f"{{k}} {k} is too large: from 2**53 on, 1 / (k + rank) is the same for every rank", "k")
    return k, norm


def check_fuse_stage(_dataset: str, params: dict) -> None:
    """A pipeline's fuse stage, checked before any stage runs."""
    check_fusion(len(params.get("inputs", [])), params.get("method", "rrf"), params.get("k"), params.get("norm"),
                 int(params.get("depth", 1000)))


def fuse(runs: list[Run], method: str = "rrf", k: int | None = None, norm: str | None = None, depth: int = 1000,
         name: str = "fused") -> Stream:
    """Fuse whole runs query by query; queries keep the first run's order, then any others'."""
    k, norm = check_fusion(len(runs), method, k, norm, depth)
    params = {"method": method, "depth": depth, **({"k": k} if method == "rrf" else {"norm": norm})}
    # each input's own header fields too: the fused header keeps only those they agree on, and a reviewer of it alone
    # could not tell which index, topics or cut of queries each input was of
    inputs = [{"run": r.source, "name": r.name, "header": r.header.fields, "stages": r.header.stages} for r in runs]
    header = _header(runs, {"name": name, "stage": "fuse", **params, "inputs": inputs})
    qids = list(dict.fromkeys(qid for run in runs for qid in run.queries))
    stages = [_stage_entries(run.header.stages) for run in runs]

    def rankings() -> Iterator[QueryRanking]:
        for qid in qids:
            began = time.perf_counter()
            having = [i for i, run in enumerate(runs) if qid in run.queries]
            present = [runs[i].queries[qid] for i in having]
            fused = fuse_query(present, method, k, norm)
            overflow = next((docid for docid, score in fused.items() if not math.isfinite(score)), None)
            if overflow is not None:  # raw scores near the float limit (--norm none) add up to inf, which no reader takes
                raise DataError(f"query {qid}: the scores of document {overflow} add up beyond the largest float; "
                                "normalise them first (--norm minmax or zscore)")
            ranking = QueryRanking.from_scores(qid, fused.keys(), fused.values(), tag=name).head(depth)
            spent = (time.perf_counter() - began) * 1000
            upstream = _shared_once([[((stages[i].get(t.stage), t), t) for t in runs[i].queries[qid].timings]
                                     for i in having])
            ranking.timings = [*upstream, Timing(name, spent, len(ranking))]
            yield ranking

    return Stream(header, rankings())


def _stage_entries(stages: list[dict]) -> dict[str, str | None]:
    """Stage name -> its header entry, also for the stages inside a fused input (fusing `bm25 + dense` with
    `bm25` again finds bm25 in both); a name two different entries share maps to None."""
    entries: dict[str, str | None] = {}
    for stage in nested_stages(stages):
        name, entry = str(stage.get("name")), json.dumps(stage, sort_keys=True)
        entries[name] = entry if entries.get(name, entry) == entry else None
    return entries


def _shared_once(inputs: list[list[tuple[tuple, Timing]]]) -> list[Timing]:
    """The inputs' timings with a stage upstream of several inputs (bm25 under both bm25 and bm25>bert), which
    ran once, counted once: a timing (keyed by its stage's header entry) that several inputs hold is kept as often
    as the input holding it most often does, not once per input."""
    kept: dict[tuple, int] = {}
    out = []
    for timings in inputs:
        here: dict[tuple, int] = {}
        for key, timing in timings:
            here[key] = here.get(key, 0) + 1
            if here[key] > kept.get(key, 0):
                kept[key] = here[key]
                out.append(timing)
    return out


def uneven_queries(runs: list[Run]) -> list[str]:
    """Queries that some runs answer and others do not (fused from the runs that have them, as ranx and
    PyTerrier do; worth a note, since it usually means runs of different topic sets)."""
    every = [set(run.queries) for run in runs]
    return sorted(set.union(*every) - set.intersection(*every))


def fuse_stage(dataset: str, params: dict, _input: Stream | None) -> Stream:
    """Pipeline stage `kind = "fuse"`: `inputs = ["bm25", "dense"]` names earlier stages to fuse.

    The pipeline runner hands this stage the paths of those stages' run files in `inputs`.
    """
    from ..runs import load_run

    paths = params.get("inputs") or []
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            runs.append(load_run(handle, str(path)))
    stream = fuse(runs, params.get("method", "rrf"), params.get("k"), params.get("norm"), int(params.get("depth", 1000)),
                  params["name"])
    if stream.header.dataset not in (None, dataset):
        raise UsageError(f"its inputs are runs of {stream.header.dataset}, not {dataset}")  # the pipeline names the stage
    return stream


FUSE_STAGE = register_stage(StageSpec(
    kind="fuse", run="rerank.retrieve.fusion:fuse_stage", check="rerank.retrieve.fusion:check_fuse_stage",
    parameters=(
        Option("inputs", list, None, "The earlier stages whose runs are fused."),
        Option("method", str, "rrf", "Reciprocal rank fusion, or CombSUM of normalised scores.", choices=METHODS),
        Option("k", int, None, "RRF: the constant k in 1 / (k + rank)  [default: 60]"),
        Option("norm", str, None, "CombSUM: per-query score normalisation  [default: minmax]", choices=NORMS),
        Option("depth", int, 1000, "Documents kept per query after fusion."))))

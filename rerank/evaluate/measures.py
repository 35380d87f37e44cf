"""Measures as ir_measures value objects, named the way IR people write them, computed by trec_eval's code.

Names accepted: MAP, MRR[@k], P@k (P@1), HITS@k (success at k), nDCG[@k], Recall@k — or any native
ir_measures name (AP, RR@10, Success@5, R@100, `AP(rel=2)`). Binary measures use the data set's
minimum relevant grade (TREC DL: 2) unless the name sets `rel=` itself. Values come from ir_measures'
pytrec_eval provider, i.e. trec_eval's own code; averages are taken over every judged query, a query
missing from the run counting as 0 (trec_eval -c).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ir_measures
from ir_measures import Measure

from ..data import Qrels
from ..errors import UsageError
from ..runs import Run

_ALIASES = {"MAP": "AP", "MRR": "RR", "HITS": "Success", "RECALL": "R", "NDCG": "nDCG", "P": "P"}
_DISPLAY = {"AP": "MAP", "RR": "MRR", "Success": "HITS", "R": "Recall"}
_BINARY = {"AP", "RR", "P", "Success", "R"}
_NAME = re.compile(r"^([A-Za-z_]+)(\(.*\))?(@[1-9]\d*)?$")  # cutoff >= 1: trec_eval aborts the process on @0


@dataclass(frozen=True)
class NamedMeasure:
    """An ir_measures measure plus the name a person typed (and sees in tables)."""

    label: str
    measure: Measure


def parse_measure(text: str, min_rel: int = 1) -> NamedMeasure:
    match = _NAME.match(text.strip())
    if not match:
        raise UsageError(f"cannot read measure {text!r}; try MAP, MRR@10, P@1, HITS@10, nDCG@10, Recall@100")
    family, params, cutoff = match.group(1), match.group(2) or "", match.group(3) or ""
    native = _ALIASES.get(family.upper(), family)
    if native in _BINARY and min_rel > 1 and "rel=" not in params:
        params = f"(rel={min_rel})" if not params else params[:-1] + f",rel={min_rel})"
    try:
        measure = ir_measures.parse_measure(f"{native}{params}{cutoff}")
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError):
        raise UsageError(f"unknown measure {text!r}; try MAP, MRR@10, P@1, HITS@10, nDCG@10, Recall@100") from None
    label = f"{_DISPLAY.get(native, native)}{cutoff}" if "rel=" not in (match.group(2) or "") else text.strip()
    return NamedMeasure(label, measure)


def parse_measures(names: list[str], min_rel: int) -> list[NamedMeasure]:
    measures = [parse_measure(n, min_rel) for n in names]
    labels = [m.label for m in measures]
    return [m for i, m in enumerate(measures) if m.label not in labels[:i]]


@dataclass
class Evaluation:
    """Per-query values of several measures for one run, over the judged queries."""

    run_name: str
    per_query: dict[str, dict[str, float]]  # label -> qid -> value (every judged qid present)
    missing: list[str]  # judged queries the run has no results for (they score 0)
    unjudged: list[str]  # queries in the run that the qrels do not judge (ignored)

    def mean(self, label: str) -> float:
        values = self.per_query[label]
        return sum(values.values()) / len(values) if values else 0.0


def evaluate(run: Run, qrels: Qrels, measures: list[NamedMeasure]) -> Evaluation:
    judged = set(qrels)
    unjudged = sorted(q for q in run.queries if q not in judged)
    scored = {qid: dict(zip(r.docids, r.scores)) for qid, r in run.queries.items() if qid in judged and r.docids}
    missing = sorted(q for q in judged if q not in scored)
    per_query: dict[str, dict[str, float]] = {m.label: dict.fromkeys(qrels, 0.0) for m in measures}
    by_measure = {m.measure: m.label for m in measures}
    if scored:
        for metric in ir_measures.iter_calc([m.measure for m in measures], qrels, scored):
            per_query[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    return Evaluation(run.name, per_query, missing, unjudged)

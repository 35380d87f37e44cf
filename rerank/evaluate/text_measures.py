"""Measures of suggested text against the true next query: BLEU and the 1- to 4-gram precisions (Papineni et al.
2002; as query-suggestion papers report them), computed by sacrebleu on whitespace tokens (`tokenize="none"`, the
queries being lower-cased and split on whitespace already: moses `multi-bleu` style).

A run of suggestions carries its texts as docids (`data.sessions.docid`); a query's top docid is its suggestion and
its relevant docid its reference. Per query: `BLEU` is sentence BLEU (sacrebleu's, with effective order), for
significance tests; `Ngram` (`1gram` .. `4gram`) is the clipped, position-independent n-gram precision (matches over
the suggestion's n-grams; 0 for a suggestion shorter than n). The run's figure: `BLEU` is corpus BLEU over every
judged query (a query without a suggestion counts as an empty one), not the mean of the sentence scores; the n-gram
precisions are means over the judged queries, as the paper's per-query precision scores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ir_measures.measures.base import MeanAgg

from ..data.sessions import query_text

_NGRAM = re.compile(r"^([1-4])-?gram$", re.IGNORECASE)


@dataclass(frozen=True)
class TextMeasure:
    """Stands where an ir_measures measure does in a NamedMeasure (name, parameters, aggregator)."""

    NAME: str
    order: int | None = None  # n of an n-gram precision; None: BLEU
    params: dict = field(default_factory=lambda: {"cutoff": 1}, compare=False, hash=False)  # reads rank 1 alone
    SUPPORTED_PARAMS = {}

    def aggregator(self) -> MeanAgg:
        return MeanAgg()

    def __str__(self) -> str:
        return self.NAME


def parse_text_measure(text: str) -> TextMeasure | None:
    name = text.strip()
    if name.upper() == "BLEU":
        return TextMeasure("BLEU")
    match = _NGRAM.match(name)
    return TextMeasure(f"{match.group(1)}gram", int(match.group(1))) if match else None


def _reference(grades: dict[str, int], min_rel: int) -> str:
    relevant = [d for d, g in grades.items() if g >= min_rel]
    return query_text(relevant[0]) if relevant else ""


def text_values(suggestions: dict[str, str], qrels: dict[str, dict[str, int]], measures: list[TextMeasure],
                min_rel: int = 1) -> tuple[dict[TextMeasure, dict[str, float]], dict[TextMeasure, float]]:
    """Per-query values and run figures of `measures`; `suggestions`: qid -> top suggestion (a judged query
    missing from it suggests nothing)."""
    from sacrebleu.metrics import BLEU

    qids = list(qrels)
    hypotheses = [suggestions.get(q, "") for q in qids]
    references = [_reference(qrels[q], min_rel) for q in qids]
    sentence = BLEU(tokenize="none", effective_order=True)
    per_query: dict[TextMeasure, dict[str, float]] = {}
    overall: dict[TextMeasure, float] = {}
    stats = [sentence.sentence_score(h, [r]) for h, r in zip(hypotheses, references)]
    for m in measures:
        if m.order is None:
            per_query[m] = {q: s.score / 100 for q, s in zip(qids, stats)}
            overall[m] = BLEU(tokenize="none").corpus_score(hypotheses, [references]).score / 100
        else:
            n = m.order - 1
            per_query[m] = {q: (s.counts[n] / s.totals[n] if s.totals[n] else 0.0) for q, s in zip(qids, stats)}
            overall[m] = sum(per_query[m].values()) / len(qids) if qids else 0.0
    return per_query, overall

"""Measures as ir_measures value objects, named the way IR people write them, computed by trec_eval's code.

Names accepted: MAP, MRR[@k], P@k (P@1), HITS@k (success at k), nDCG[@k], Recall@k; any native ir_measures
name (AP, RR@10, Success@5, R@100, Rprec, Bpref, `AP(rel=2)`); or trec_eval's own (`ndcg_cut.10`, `P_5`,
`recip_rank`, `bpref`, `P.5,10` for two, `official` for trec_eval's default set, in trec_eval's order).
Measures with a relevance threshold use the data set's minimum relevant grade (TREC DL: 2), as trec_eval -l
does, unless the name sets `rel=` itself. Values come from ir_measures' providers (pytrec_eval, i.e.
trec_eval's own code, wherever it computes the measure). A run's figure is the mean over the judged queries, a
query missing from the run counting as 0 (trec_eval -c); counts (NumQ, NumRel, NumRet, NumRelRet) are summed
instead, as trec_eval and ir_measures report them.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from typing import Iterator

import ir_measures
from ir_measures import Measure
from ir_measures.measures.base import SumAgg

from ..data import Qrels
from ..data.sessions import query_text
from ..errors import UsageError
from ..runs import QueryRanking, Run, collector_paused
from .text_measures import TextMeasure, parse_text_measure, text_values

_ALIASES = {"MAP": "AP", "MRR": "RR", "HITS": "Success", "RECALL": "R", "NDCG": "nDCG", "P": "P"}
_DISPLAY = {"AP": "MAP", "RR": "MRR", "Success": "HITS", "R": "Recall"}
# The measures whose relevance threshold trec_eval's -l sets (not NumRet, which counts every document). NumRel
# counts the documents relevant at that level per query, as trec_eval -q -l and ir_measures' NumRel(rel=) count
# them; trec_eval -c's `all` line alone sums its num_rel over grade >= 1, whatever -l says.
_THRESHOLDED = {"AP", "RR", "P", "Success", "R", "Rprec", "RPrec", "Bpref", "BPref", "infAP", "IPrec",
                "SetP", "SetR", "SetF", "SetAP", "NumRelRet", "NumRel"}
# Counts that the judgements alone fix: what trec_eval -c gives a query missing from the run (NumQ 1, NumRel its
# relevant documents), where every other measure gives 0.
_RUN_FREE = {"NumQ", "NumRel"}
_NOTHING_RETRIEVED = "rerank:nothing-retrieved"
_NEVER_RETRIEVED = "rerank:never-retrieved"  # judged 0 for a query judged only below 0 (see _floored_at_zero)
# A rank cutoff, or a recall level for IPrec@0.1; 0 only as IPrec's recall level (trec_eval's
# iprec_at_recall_0.00): trec_eval aborts the process on a cutoff of 0.
_NAME = re.compile(r"^([A-Za-z_]+)(\(.*\))?(@(?:[1-9]\d*|0?\.\d*[1-9]\d*|1\.0+|(?P<zero>0?\.0+)))?$")
_ZERO_ALLOWED = {"IPrec"}
# pytrec_eval holds relevance levels and grades in C ints and cutoffs in C longs: a larger one raised a TypeError,
# or a KeyError once the cutoff had wrapped, from inside the evaluator.
MAX_LEVEL = 2**31 - 1


@dataclass(frozen=True)
class NamedMeasure:
    """An ir_measures measure plus the name a person typed (and sees in tables)."""

    label: str
    measure: Measure


_HINT = "try MAP, MRR@10, P@1, HITS@10, nDCG@10, Recall@100 (or trec_eval's ndcg_cut.10, P.5, recip_rank)"


def _counted_here(measure: Measure) -> bool:
    """NumRel above grade 1, which ir_measures' providers cannot give (pytrec_eval's num_rel ignores the relevance
    level), while trec_eval -q -l counts it per query: a count of judgements, taken from the qrels here."""
    return measure.NAME == "NumRel" and measure.params.get("rel", 1) != 1


def _computable(measure: Measure) -> bool:
    try:
        return ir_measures.DefaultPipeline.supports(measure)
    except (AssertionError, ValueError, TypeError):  # a parameter left unset that the measure needs
        return False


def _parse_named(text: str, min_rel: int) -> NamedMeasure:
    match = _NAME.match(text.strip())
    if not match:
        swapped = re.fullmatch(r"([A-Za-z_]+)(@[\d.]+)(\(.*\))", text.strip())
        if swapped:  # P@5(rel=2): ir_measures reads the parameters before the cutoff
            family, cutoff, params = swapped.groups()
            raise UsageError(f"cannot read measure {text!r}: parameters go before the cutoff, {family}{params}{cutoff}")
        raise UsageError(f"cannot read measure {text!r}; {_HINT}")
    family, params, cutoff = match.group(1), match.group(2) or "", match.group(3) or ""
    native = _ALIASES.get(family.upper(), family)
    if match.group("zero") and native not in _ZERO_ALLOWED:
        raise UsageError(f"cannot read measure {text!r} (a cutoff of 0); {_HINT}")
    try:
        measure = ir_measures.parse_measure(f"{native}{params}{cutoff}")
    except (ValueError, NameError, SyntaxError, TypeError, AttributeError):
        raise UsageError(f"unknown measure {text!r}; {_HINT}") from None
    # The data set's relevance threshold, as trec_eval's -l, unless the name sets rel= itself.
    if min_rel > 1 and native in _THRESHOLDED and "rel=" not in params:
        measure = measure(rel=min_rel)
    rel, depth = measure.params.get("rel"), measure.params.get("cutoff")
    if isinstance(rel, int) and not 1 <= rel <= MAX_LEVEL:  # rel=0 would count grade-0 judgements as relevant
        raise UsageError(f"measure {text!r}: rel must be between 1 and {MAX_LEVEL}, not {rel}")
    if isinstance(depth, float):  # P@1.0 reads as IPrec@0.1 does, and was "cannot be computed", as if unsupported
        raise UsageError(f"measure {text!r}: a cutoff must be a whole number of documents, not {depth}")
    if isinstance(depth, int) and depth > MAX_LEVEL:
        raise UsageError(f"measure {text!r}: a cutoff must be at most {MAX_LEVEL}, not {depth}")
    unknown = [name for name in measure.params if name not in measure.SUPPORTED_PARAMS]
    if unknown:  # a misspelt parameter (cutof=), or one the measure has not (nDCG's gains are graded: no rel=)
        raise UsageError(f"measure {text!r}: {measure.NAME} takes no parameter {unknown[0]!r} (its parameters: "
                         f"{', '.join(measure.SUPPORTED_PARAMS)})")
    if not _computable(measure) and not _counted_here(measure):
        raise UsageError(f"measure {text!r} cannot be computed by ir_measures' providers here; {_HINT}")
    if "." in cutoff:  # a recall level spelled one way (IPrec@.5, IPrec@0.50: IPrec@0.5), as trec_eval's names read
        whole, _, fraction = cutoff[1:].partition(".")
        cutoff = f"@{whole or '0'}.{fraction.rstrip('0') or '0'}"
    label = f"{_DISPLAY.get(native, native)}{cutoff}" if not params else text.strip()
    return NamedMeasure(label, measure)


def _parse_all(text: str, min_rel: int) -> list[NamedMeasure]:
    """One name, or trec_eval's name of one or more measures (`ndcg_cut.10`, `P.5,10`), which ir_measures translates."""
    textual = parse_text_measure(text)
    if textual is not None:  # BLEU, 1gram .. 4gram: of a run of suggested queries
        return [NamedMeasure(textual.NAME, textual)]
    try:
        return [_parse_named(text, min_rel)]
    except UsageError as not_ours:
        try:
            translated = _trec_translation(text)[0]
        except ValueError as no_translation:
            if str(no_translation).startswith("known trec name"):  # gm_map, ndcg_rel, utility: not "unknown"
                raise UsageError(f"trec_eval's {text.strip()} cannot be computed by ir_measures, which rerank "
                                 f"evaluates with (trec_eval itself gives it); {_HINT}") from None
            raise _a_list(text, min_rel) or not_ours from None
        try:
            # ir_measures spells trec_eval's num_rel_ret with the grade -l would set: leave that to min_rel
            named = [_parse_named("NumRelRet" if str(m) == "NumRet(rel=1)" else str(m), min_rel) for m in translated]
        except UsageError:
            raise not_ours from None
        return sorted(named, key=trec_eval_position)  # as trec_eval prints a set: num_q, ..., map, ..., P_5, ...


def _a_list(text: str, min_rel: int) -> UsageError | None:
    """The error for several names in one (`MAP,P@5`, or ir_measures' `'AP nDCG@10'`), each readable alone: the
    usual one lists example names, which the user had typed."""
    names = [name for name in re.split(r"[\s,]+", text) if name]
    if len(names) < 2:
        return None
    try:
        for name in names:
            _parse_all(name, min_rel)
    except UsageError:
        return None
    return UsageError(f"cannot read measure {text!r}: several measures in one name; name each alone "
                      f"({' '.join(f'-m {n}' for n in names)} on the command line)")


def _trec_translation(text: str) -> tuple[list[Measure], list[str]]:
    """ir_measures' measures for a trec_eval name, and the trec_eval names in it that ir_measures cannot compute,
    which it prints (onto our output, were it not caught) instead of returning. ValueError for no trec_eval name."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        translated = ir_measures.parse_trec_measure(text.strip())
    skipped = [item.strip(" '") for found in re.findall(r"skipped \[(.*?)\]", printed.getvalue())
               for item in found.split(",")]
    return translated, skipped


def trec_names_skipped(names: list[str]) -> list[str]:
    """trec_eval measures that a set name such as `official` or `all_trec` includes and ir_measures cannot compute
    (gm_map, utility, ...): left out of the table, so said."""
    skipped = []
    for name in names:
        with contextlib.suppress(ValueError):
            skipped += _trec_translation(name)[1]
    return list(dict.fromkeys(skipped))  # each once: official and all_trec both skip gm_map


# The order of trec_eval's output (its measure table: num_q, ..., map, Rprec, bpref, recip_rank, iprec_at_recall, P,
# recall, infAP, ndcg, ndcg_cut, map_cut, success, set_*), as ir_measures names each and whether it has a cutoff
# (or recall level): nDCG is ndcg, nDCG@10 ndcg_cut_10, AP@10 map_cut_10.
_TREC_EVAL_ORDER = [("NumQ", False), ("NumRet", False), ("NumRel", False), ("NumRelRet", False), ("AP", False),
                    ("Rprec", False), ("Bpref", False), ("RR", False), ("IPrec", True), ("P", True), ("R", True),
                    ("infAP", False), ("nDCG", False), ("nDCG", True), ("AP", True), ("Success", True), ("SetP", False),
                    ("SetR", False), ("SetAP", False), ("SetF", False)]


def trec_eval_position(named: NamedMeasure) -> tuple[int, float]:
    """Where trec_eval prints a measure: by its table, then by cutoff (it prints P_5 before P_10, whichever it was
    given first); a measure trec_eval has not (MRR@10, Judged@10) goes after those it has, in the order it came
    (sorted() is stable)."""
    name, params = named.measure.NAME, named.measure.params
    level = params.get("cutoff", params.get("recall"))
    key = ("NumRelRet" if name == "NumRet" and "rel" in params else name, level is not None)  # (ir_measures: NumRet(rel=1))
    return (_TREC_EVAL_ORDER.index(key) if key in _TREC_EVAL_ORDER else len(_TREC_EVAL_ORDER)), level or 0


def is_count(measure: NamedMeasure) -> bool:
    """NumQ, NumRel, NumRet, NumRelRet: summed over queries and printed as whole numbers."""
    return isinstance(measure.measure.aggregator(), SumAgg)


def primary(measures: list[NamedMeasure]) -> NamedMeasure:
    """The measure a leaderboard sorts and counts wins by unless told: the first that is not a count (`-m official`
    starts with num_q, as trec_eval prints it, which ranks nothing)."""
    return next((m for m in measures if not is_count(m)), measures[0])


def parse_measure(text: str, min_rel: int = 1) -> NamedMeasure:
    measures = _parse_all(text, min_rel)
    if len(measures) != 1:
        raise UsageError(f"{text!r} names {len(measures)} measures; give one")
    return measures[0]


def label_among(text: str, labels: list[str]) -> str | None:
    """The label in `labels` that `text` names, spelled any way -m accepts it (`AP` or `map` for MAP, `P_5` for
    P@5, `ndcg_cut.10` for nDCG@10), or None. Labels do not depend on the relevance threshold."""
    if text in labels:
        return text
    try:
        label = parse_measure(text).label
    except UsageError:
        return None
    return label if label in labels else None


def sort_among(sort_by: str, labels: list[str], name: str = "--sort") -> str:
    """The label among a leaderboard's `labels` that `sort_by` (eval's --sort, a pipeline's `sort`) names;
    refused in one line that lists them."""
    label = label_among(sort_by, labels)
    if label is None:
        raise UsageError(f"{name} {sort_by!r} is not one of the measures: {', '.join(labels)}")
    return label


def parse_measures(names: list[str], min_rel: int) -> list[NamedMeasure]:
    measures = [m for n in names for m in _parse_all(n, min_rel)]
    labels = [m.label for m in measures]
    return [m for i, m in enumerate(measures) if m.label not in labels[:i]]


@dataclass
class Evaluation:
    """Per-query values of several measures for one run, over the judged queries."""

    run_name: str
    per_query: dict[str, dict[str, float]]  # label -> qid -> value (every judged qid present)
    missing: list[str]  # judged queries the run has no results for (they score 0)
    unjudged: list[str]  # queries in the run that the qrels do not judge (ignored)
    summed: frozenset[str] = frozenset()  # labels of counts, whose run figure is a sum
    whole: dict[str, float] = field(default_factory=dict)  # labels whose run figure is not per query (corpus BLEU)

    def overall(self, label: str) -> float:
        """The run's figure for one measure: the mean over the judged queries, or the sum of a count."""
        if label in self.whole:
            return self.whole[label]
        values = self.per_query[label]
        if label in self.summed:
            return sum(values.values())
        return sum(values.values()) / len(values) if values else 0.0


def _descending_scores(rankings: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """n, n-1, ..., 1 for each query's docids in rank order: scores that every provider orders as given. The queries
    share the floats, one per rank (a float per document was 24 bytes a line of the run, 170 MB at 7M lines)."""
    deepest = max(map(len, rankings.values()), default=0)
    descending = [float(rank) for rank in range(deepest, 0, -1)]
    return {qid: dict(zip(docids, descending[deepest - len(docids):])) for qid, docids in rankings.items()}


# Documents evaluated at a time. Every query's figures are its own, so a run is evaluated in batches of queries:
# the scores made for pytrec_eval, and what it makes of them, for a whole run at once were 70 MB per million lines
# on top of the loaded run (a 7M-line run's eval peaked there, at 1.8 GB).
BATCH_DOCUMENTS = 100_000


def _batches(rankings: dict[str, QueryRanking]) -> Iterator[list[str]]:
    """The queries in batches of about BATCH_DOCUMENTS documents (a query deeper than that is a batch of its own)."""
    batch: list[str] = []
    size = 0
    for qid, ranking in rankings.items():
        if batch and size + len(ranking) > BATCH_DOCUMENTS:
            yield batch
            batch, size = [], 0
        batch.append(qid)
        size += len(ranking)
    if batch:
        yield batch


def _floored_at_zero(qrels: Qrels) -> Qrels:
    """The judgements with a grade-0 judgement of a document no run holds added to each query judged only below 0.
    trec_eval reads every negative grade alike (pooled, unjudged) but sizes an array by a query's highest grade:
    such a query crashed pytrec_eval, and eval with it, on a segmentation fault (grades of -2 or lower, the Web
    track's junk pages), or lost its figures where pytrec_eval met it first (-1: NumRet 0). A query without a
    relevant document scores 0 in every measure either way, and the added judgement is never retrieved."""
    if all(max(grades.values(), default=0) >= 0 for grades in qrels.values()):
        return qrels
    return {qid: grades if max(grades.values(), default=0) >= 0 else {**grades, _NEVER_RETRIEVED: 0}
            for qid, grades in qrels.items()}


@collector_paused()
def evaluate(run: Run, qrels: Qrels, measures: list[NamedMeasure], min_rel: int = 1) -> Evaluation:
    qrels = _floored_at_zero(qrels)
    judged = set(qrels)
    unjudged = sorted(q for q in run.queries if q not in judged)
    retrieved = {qid: ranking for qid, ranking in run.queries.items() if qid in judged and ranking.docids}
    missing = sorted(q for q in judged if q not in retrieved)
    per_query: dict[str, dict[str, float]] = {m.label: dict.fromkeys(qrels, 0.0) for m in measures}
    # One measure can come under two labels (MAP and AP(rel=1), IPrec@0.1 and IPrec@0.10): each gets its figures.
    by_measure: dict[Measure, list[str]] = {}
    textual = [m for m in measures if isinstance(m.measure, TextMeasure)]
    whole: dict[str, float] = {}
    if textual:
        suggestions = {qid: ranking.as_trec_eval_reads().docids[0] for qid, ranking in retrieved.items()}
        values, figures = text_values({q: query_text(d) for q, d in suggestions.items()}, qrels,
                                      [m.measure for m in textual], min_rel)
        for m in textual:
            per_query[m.label] = values[m.measure]
            if m.measure.order is None:
                whole[m.label] = figures[m.measure]
    for m in measures:
        if isinstance(m.measure, TextMeasure):
            continue
        if _counted_here(m.measure):
            level = m.measure.params["rel"]
            per_query[m.label] = {qid: float(sum(grade >= level for grade in grades.values()))
                                  for qid, grades in qrels.items()}
        else:
            by_measure.setdefault(m.measure, []).append(m.label)
    for batch in _batches(retrieved) if by_measure else []:
        # Scores that encode trec_eval's order (ties, in C floats, by docid descending): pytrec_eval breaks ties that
        # way, but ir_measures' msmarco (RR@k) and judged providers by docid ascending.
        scored = _descending_scores({qid: retrieved[qid].as_trec_eval_reads().docids for qid in batch})
        for metric in ir_measures.iter_calc(list(by_measure), {qid: qrels[qid] for qid in batch}, scored):
            for label in by_measure[metric.measure]:
                per_query[label][metric.query_id] = float(metric.value)
    run_free = [measure for measure in by_measure if measure.NAME in _RUN_FREE]
    if run_free and missing:  # a one-document stand-in run: these counts read only the judgements
        stand_in = {qid: {_NOTHING_RETRIEVED: 0.0} for qid in missing}
        for metric in ir_measures.iter_calc(run_free, {qid: qrels[qid] for qid in missing}, stand_in):
            for label in by_measure[metric.measure]:
                per_query[label][metric.query_id] = float(metric.value)
    summed = frozenset(m.label for m in measures if is_count(m))
    return Evaluation(run.name, per_query, missing, unjudged, summed, whole)

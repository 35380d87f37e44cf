"""Evaluate runs end to end: load them, find their qrels and measures, evaluate each on the queries they were
made for, and collect the notes for stderr (`report.py` builds the leaderboard from the evaluations)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from ..data import dataset_names, get_dataset
from ..data.formats import read_qrels
from ..data.session_sets import session_dataset
from ..data.registry import ADHOC_MEASURES, Qrels
from ..errors import DataError, UsageError, counted, verb
from ..runs import Run, load_run, made_for_held_queries
from .measures import MAX_LEVEL, Evaluation, NamedMeasure, evaluate, parse_measures, trec_names_skipped


def some_ids(ids: list[str], shown: int = 10) -> str:
    """'(a, b, c ...)': the first few of a list of query ids, for a one-line note."""
    return f"({', '.join(ids[:shown])}{' ...' if len(ids) > shown else ''})"


def check_min_rel(min_rel: int | None, flag: str = "--min-rel") -> None:
    """A relevance level pytrec_eval takes: trec_eval -l 0 would count grade-0 judgements as relevant, and one
    above a C int was a TypeError from inside pytrec_eval."""
    if min_rel is not None and not 1 <= min_rel <= MAX_LEVEL:
        raise UsageError(f"{flag} must be between 1 and {MAX_LEVEL}, not {min_rel}: pytrec_eval takes no other "
                         "relevance level")


@dataclass
class Judgements:
    qrels: Qrels
    min_rel: int
    measures: tuple[str, ...]
    source: str
    unjudged_rule: str = ""  # the data set's reason for leaving topics out of its qrels (QA protocols)
    topics: frozenset[str] | None = None  # with a rule: the data set's query ids, to tell its unjudged from foreign ones
    note: str = ""  # said with eval's notes: how the relevance level was chosen, where it may surprise


def _level_note(qrels_path: str, level: int) -> str:
    """A header-less run judged by a data set's own qrels file counts trec_eval's default grade (>= 1): on TREC DL
    (>= 2 officially) MRR@10 0.82 where the data set's runs give 0.70, the same file and run, and nothing said why."""
    for name in dataset_names():
        try:
            dataset = get_dataset(name)
        except DataError:  # no data root here: qrels of one's own, which no data set has
            return ""
        own = dataset.files.get("qrels")
        if dataset.min_rel != level and own is not None and own.is_file() and os.path.samefile(own, qrels_path):
            return (f"{qrels_path} is {name}'s qrels, whose evaluation counts grade >= {dataset.min_rel} as relevant; "
                    f"the run's header names no data set, so binary measures count grade >= {level} (trec_eval's "
                    f"default): pass --min-rel {dataset.min_rel} for {name}'s figures")
    return ""


def judgements_for(runs: list[Run], qrels_path: str | None, min_rel: int | None,
                   fallback_dataset: str | None = None, dataset_option: str = "",
                   qrels_option: str = "--qrels") -> Judgements:
    """Qrels given explicitly, else those of the data set named in the runs' headers, else `fallback_dataset`'s
    (a pipeline's, whose runs may come from a topics file of its own; eval's `dataset_option`, which the
    messages then name: a QA set has no qrels file to pass instead). `qrels_option` names the option that gives
    the qrels file (train's dev run has --dev-qrels).

    Runs that name different data sets have no qrels in common (CACM's and Vaswani's query ids even
    overlap, so one would silently score 0 against the other's): they are refused unless --qrels says which.
    """
    check_min_rel(min_rel)
    datasets = {run.header.dataset for run in runs if run.header.dataset}
    if len(datasets) > 1 and not qrels_path:
        named = ", ".join(f"{run.source}: {run.header.dataset}" for run in runs if run.header.dataset)
        raise UsageError(f"the runs are of different data sets ({named}); evaluate them apart, or pass --qrels FILE")
    header = next((run.header for run in runs if run.header.dataset or run.header.get("qrels")), runs[0].header)
    name = header.dataset or (None if header.get("qrels") else fallback_dataset)
    dataset = get_dataset(name) if name in dataset_names() else None
    if dataset is None and header.get("sessions"):  # `suggest --sessions FILE`: the log holds each next query
        dataset, name = session_dataset(header), header.get("sessions")
    if qrels_path:
        if not Path(qrels_path).exists() and qrels_path in dataset_names():  # a name where a file belongs
            qrels_file = get_dataset(qrels_path).files.get("qrels")
            raise UsageError(f"{qrels_option} takes a file, not a data set's name"
                             + (f" ({qrels_path}'s is {qrels_file})" if qrels_file else "")
                             + f"; a run whose header names {qrels_path} needs no {qrels_option}"
                             + (f", one without a header takes {dataset_option} {qrels_path}"
                                if dataset_option else ""))
        level = min_rel if min_rel is not None else (dataset.min_rel if dataset else 1)
        qrels = read_qrels(qrels_path)  # before the note, which compares the file with the data sets' own
        note = _level_note(qrels_path, level) if min_rel is None and dataset is None else ""
        return Judgements(qrels, level, dataset.measures if dataset else ADHOC_MEASURES, qrels_path, note=note)
    if header.get("qrels"):
        return Judgements(read_qrels(header.get("qrels")), min_rel or 1, ADHOC_MEASURES, header.get("qrels"))
    if dataset is None:
        index = header.get("index")  # `retrieve vaswani --topics mine.tsv`: own topics over a data set's index
        qrels_of_index = get_dataset(index).files.get("qrels") if index in dataset_names() else None
        hint = f" (if its topics are {index}'s, its qrels are {qrels_of_index})" if qrels_of_index else ""
        remedy = f", or {dataset_option} NAME (a data set's queries)" if dataset_option else ""
        raise UsageError(f"no qrels: the run's header names no known data set; pass {qrels_option} FILE{hint}{remedy}")
    return Judgements(dataset.qrels(), min_rel if min_rel is not None else dataset.min_rel, dataset.measures, name,
                      dataset.unjudged_rule, topics=frozenset(dataset.topics()) if dataset.unjudged_rule else None)


def load_runs(inputs: list[tuple[IO[str], str]], strict: bool, labels: list[str | None] | None = None) -> list[Run]:
    """Whole runs, named by `labels` (LABEL=FILE) where given, else by their last stage; two unlabelled runs of one
    stage name are told apart by their files (a labelled one clashes with none: `A=bm25.run copy.run`)."""
    runs = []
    for i, (handle, source) in enumerate(inputs):
        run = load_run(handle, source, strict)
        if not run.queries:
            raise DataError(f"empty input: {source} holds no run records")
        run.label = labels[i] if labels else None
        runs.append(run)
    names = [r.name for r in runs]
    for run in runs:
        if names.count(run.name) > 1 and not run.label:
            run.label = f"{run.name}:{run.source}"
    return runs


def _held_runs(runs: list[Run], run_queries: bool) -> list[Run]:
    return [run for run in runs if run_queries or made_for_held_queries(run.header)]


def queries_made_for(runs: list[Run], run_queries: bool = False) -> set[str] | None:
    """The queries every run was made for, where some run was made for the queries it holds (see `_made_for`);
    None where all were made for every query of their data set."""
    held = _held_runs(runs, run_queries)
    return set.intersection(*(set(run.queries) for run in held)) if held else None


def _made_for(runs: list[Run], judgements: Judgements, warnings: list[str], run_queries: bool) -> Judgements:
    """The judgements of the queries the runs were made for. A run whose header names a topics file (`retrieve
    --topics`, `--candidates --topics`, `score --topics`) was made for the queries it holds (a stage writes every
    query it was given, those it found nothing for too), and so was one cut to its first queries (`cat --first`):
    it is evaluated on those, as trec_eval evaluates a run's queries, and a judged query it holds no result for
    counts as 0 (trec_eval -c). Other runs were made for every judged query, unless `run_queries` (eval
    --run-queries: trec_eval without -c) takes every run as made for the queries it holds.
    Runs compared on one board are evaluated on the queries all were made for, so that each row is a mean over
    the same queries and each comparison pairs them; a note says when that is fewer than are judged."""
    common = queries_made_for(runs, run_queries)
    if common is None:
        return judgements
    held = _held_runs(runs, run_queries)
    kept = {qid: grades for qid, grades in judgements.qrels.items() if qid in common}
    why = "--run-queries" if run_queries else "a run from a topics file or cut by cat --first"
    if not kept and len(held) > 1:  # one run alone: none of its queries is judged, as said below
        raise DataError(f"the runs share no judged query, and are evaluated on the queries they hold ({why}): "
                        f"{', '.join(run.source for run in held)}; evaluate them apart")
    if len(kept) < len(judgements.qrels):
        whose = "it was" if len(runs) == 1 else "every run was"
        warnings.append(f"evaluated on the {counted(len(kept), 'judged query', 'judged queries')} {whose} made for "
                        f"({why}: the queries it holds), not on all {len(judgements.qrels)} of {judgements.source}")
    return replace(judgements, qrels=kept)


def _uneven_depths(runs: list[Run], measures: list[NamedMeasure], evaluated: Qrels) -> str | None:
    """A note when runs compared are of different depths and a measure reads below the shallower one's (MAP,
    Recall@1000): a board of BM25 at k = 100 against RM3 at 1000 marked RM3 significantly better, depth for the
    most part. trec_eval's -M (here -M/--depth) evaluates each at one depth. Depths are over the `evaluated`
    queries alone: a QA set's candidate lists differ in length, so a run of its first questions was shallower than
    all of them, where both hold every candidate of the questions evaluated."""
    depths = [(run.name, max((len(ranking) for qid, ranking in run.queries.items() if qid in evaluated), default=0))
              for run in runs]
    shallowest = min(depth for _, depth in depths)
    if len({depth for _, depth in depths}) < 2 or shallowest == 0:
        return None
    deeper = [named.label for named in measures
              if named.measure.params.get("cutoff") is None or named.measure.params["cutoff"] > shallowest]
    if not deeper:
        return None
    return (f"the runs are of different depths ({', '.join(f'{name} {depth}' for name, depth in depths)}), and "
            f"{', '.join(deeper)} read{'s' if len(deeper) == 1 else ''} past rank {shallowest}, where the shallower "
            f"{'run has' if [d for _, d in depths].count(shallowest) == 1 else 'runs have'} no documents: "
            f"-M {shallowest} evaluates every run to that depth")


def evaluate_runs(runs: list[Run], judgements: Judgements, measure_names: list[str] | None,
                  compare_depths: bool = True, run_queries: bool = False
                  ) -> tuple[list[Evaluation], list[NamedMeasure], list[str]]:
    """Per-run evaluations plus warnings (missing / unjudged queries; with `compare_depths`, runs of different
    depths) for stderr. A budget report compares depths on purpose, and says so itself. `run_queries`: see
    `_made_for`."""
    measures = parse_measures(measure_names or list(judgements.measures), judgements.min_rel)
    evaluations, warnings = [], [judgements.note] if judgements.note else []
    judged_anywhere = set(judgements.qrels)
    said_before = len(warnings)
    judgements = _made_for(runs, judgements, warnings, run_queries)
    uneven = _uneven_depths(runs, measures, judgements.qrels) if compare_depths else None
    if uneven:
        warnings.insert(said_before, uneven)
    skipped = trec_names_skipped(measure_names or [])
    if skipped:
        warnings.append(f"trec_eval's {', '.join(skipped)} cannot be computed by ir_measures: left out")
    hopeless = sorted(q for q, grades in judgements.qrels.items() if max(grades.values(), default=0) < judgements.min_rel)
    if hopeless:  # trec_eval keeps them in its means too (num_q), but nothing says so
        n = len(hopeless)
        warnings.append(f"{counted(n, 'judged query', 'judged queries')} {verb(n, 'has', 'have')} no document of grade "
                        f">= {judgements.min_rel} and score{verb(n, 's', '')} 0 in most measures {some_ids(hopeless)}")
    top = max((grade for grades in judgements.qrels.values() for grade in grades.values()), default=0)
    for named in measures:  # a threshold set in the name (AP(rel=2)) above every grade: 0 everywhere, unsaid
        rel = named.measure.params.get("rel")
        if rel is not None and rel > top and rel != judgements.min_rel:
            warnings.append(f"{named.label}: no judgement has grade >= {rel} (the highest is {top}), so it is 0 "
                            "for every query")
    # a note -> the runs it is about: said once, naming them all. Keyed by every id it is about, not by its text,
    # which shows only the first few: runs alike in those may differ further on.
    per_run: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    judged_docs = {d for grades in judgements.qrels.values() for d in grades}
    for run in runs:
        if not set(run.queries) & set(judgements.qrels):
            which = "its one query is not" if len(run.queries) == 1 else f"none of its {len(run.queries)} queries is"
            raise DataError(f"{run.source}: {which} judged in {judgements.source} "
                            "(wrong qrels for this run?)")
        ev = evaluate(run, judgements.qrels, measures, judgements.min_rel)
        ev.unjudged = [q for q in ev.unjudged if q not in judged_anywhere]  # the rest: what the note above says
        # CACM's qrels over a Vaswani run (their query ids overlap): every score 0, and nothing said why. Judged
        # for any query: qrels of relevant documents alone judge none of a top 5 that misses them all.
        if (any(r.docids for r in run.queries.values())
                and judged_docs.isdisjoint(d for r in run.queries.values() for d in r.docids)):
            note = f"none of its retrieved documents is judged in {judgements.source} (wrong qrels for this run?)"
            per_run.setdefault((note, ()), []).append(ev.run_name)
        if ev.missing:
            n = len(ev.missing)
            note = (f"{counted(n, 'judged query', 'judged queries')} {verb(n, 'has', 'have')} no results and "
                    f"count{verb(n, 's', '')} as 0 {some_ids(ev.missing)}")
            per_run.setdefault((note, tuple(ev.missing)), []).append(ev.run_name)
        # a QA set leaves some of its questions unjudged on purpose; ids it does not have are another matter
        foreign = [q for q in ev.unjudged if judgements.topics is not None and q not in judgements.topics]
        for ids in ([q for q in ev.unjudged if q not in foreign], foreign):
            if not ids:
                continue
            n = len(ids)
            are = verb(n, "is", "are")
            why = (f"{verb(n, 'is not a query', 'are not queries')} of {judgements.source}" if ids is foreign
                   else f"{are} unjudged under {judgements.source}'s protocol ({judgements.unjudged_rule})"
                   if judgements.unjudged_rule else f"{are} not in the qrels")
            note = f"{counted(n, 'query', 'queries')} {why} and {are} ignored {some_ids(ids)}"
            per_run.setdefault((note, tuple(ids)), []).append(ev.run_name)
        evaluations.append(ev)
    warnings += [f"{', '.join(names)}: {note}" for (note, _), names in per_run.items()]
    return evaluations, measures, warnings

"""Time-budget curves: effectiveness reachable within a per-query time budget, for any staged run.

Input is a set of runs, each one model's output at one depth (e.g. TK re-ranking the top 10, 20,
50, 100 of the same first stage). A run's cost for a query is the sum of every stage's `# time:`
line for that query (first stage + re-ranker + ...), so the report works for any stage that records
its timings. Runs are grouped into one curve per model (the last stage's name, or a label the user
gives). What a budget buys is the deepest point of that curve whose median (or p95) per-query time
fits it — what one would deploy — or, with pick="best", the most effective fitting point (an oracle
that has seen the judgements; an upper bound).
"""

from __future__ import annotations

import csv
import io
import json
import math
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, localcontext
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from ..errors import DataError, UsageError
from ..models.base import EVERY_MODEL_TAKES, SCORE_OPTIONS
from ..runs import CUT_KEY, Run, nested_stages
from .measures import Evaluation, is_count, parse_measure
from .report import markdown_table, text_table
from .session import evaluate_runs, judgements_for, queries_made_for

STATISTICS = ("median", "p95")
PICKS = ("deepest", "best")  # within a budget: the deepest depth that fits, or the most effective (an oracle)


@dataclass(frozen=True)
class BudgetPoint:
    """One run: a model at one depth, its effectiveness (a mean over the `judged` queries) and its per-query
    cost (over the `timed` ones, which may include queries the qrels leave out)."""

    model: str
    depth: int
    judged: int
    timed: int
    effectiveness: float
    median_ms: float
    p95_ms: float
    source: str
    batch_timed: bool = False

    def cost(self, statistic: str) -> float:
        return self.median_ms if statistic == "median" else self.p95_ms


@dataclass(frozen=True)
class Crossing:
    """Budgets in [from_ms, below_ms) favour `better` (at least equal where `ties`); at `below_ms`, `other`
    takes over (at least equal from there where `ties_after`). `alone`: below it `other` has no point at all,
    so `better` is not better there but merely fits; `other_from_ms`: where `other` first fits, when that is
    within the span (below it, `better` merely fits)."""

    better: str
    other: str
    below_ms: float
    from_ms: float
    alone: bool = False
    ties: bool = False
    ties_after: bool = False
    other_from_ms: float | None = None

    def sentence(self) -> str:
        if self.alone:  # of this pair only: a third model may fit too, so never "only X fits"
            return (f"{self.better} fits from {_ms(self.from_ms)} ms per query, "
                    f"{self.other} only from {_ms(self.below_ms)}")
        how = "at least as good as" if self.ties else "better than"
        return (f"{self.better} is {how} {self.other}{_from(self.from_ms, self.other_from_ms)} to "
                f"{_ms(self.below_ms)} ms per query")

    def after(self) -> str:
        """What holds from `below_ms` on, when this is the pair's last crossing (where `alone`, at every budget
        where both fit: the order never changes there, as a lead's)."""
        how = "at least as good as" if self.ties_after else "better than"
        if self.alone:
            return (f"{self.other} is {how} {self.better} at every budget{_from(self.from_ms, self.below_ms)} "
                    "ms per query on")
        return f"{self.other} is {how} {self.better} from {_ms(self.below_ms)} ms per query on"


@dataclass(frozen=True)
class Best:
    """Budgets in [from_ms, below_ms) (from_ms on when below_ms is None) are best spent on `models` (several
    where they are equal): the frontier of every curve, the line a reader deploys from."""

    models: tuple[str, ...]
    from_ms: float
    below_ms: float | None = None

    def sentence(self) -> str:
        who = (f"{self.models[0]} is the best that fits" if len(self.models) == 1
               else f"{', '.join(self.models[:-1])} and {self.models[-1]} are the best that fit (equal)")
        where = (f"from {_ms(self.from_ms)} ms per query on" if self.below_ms is None
                 else f"from {_ms(self.from_ms)} to {_ms(self.below_ms)} ms per query")
        return f"{who} {where}"


@dataclass(frozen=True)
class Lead:
    """`better` is ahead of `other` at every budget from `from_ms` on (below it neither has a point): their
    curves never cross. `ties`: at some budgets they are equal. `other_from_ms`: where `other` fits only later
    (below it `better` merely fits)."""

    better: str
    other: str
    from_ms: float
    ties: bool
    other_from_ms: float | None = None

    def sentence(self) -> str:
        how = "at least as good as" if self.ties else "better than"
        return (f"{self.better} is {how} {self.other} at every budget{_from(self.from_ms, self.other_from_ms)} "
                "ms per query on")


def _from(from_ms: float, other_from_ms: float | None) -> str:
    """Where a pair's comparison starts: a budget within which only one of the two fits makes it not better but
    the only one of the pair that fits (what the best models say), so "better" starts where both fit."""
    return f" from {_ms(from_ms)}" if other_from_ms is None else f" where both fit, from {_ms(other_from_ms)}"


def _ms(value: float) -> str:
    """Milliseconds for a sentence: whole from 100 on, else three significant digits, never '2.1e+03'. Every
    boundary in a sentence is where something starts to fit (a point's cost; a budget fits a point its cost
    or more), so it is rounded up, not to the nearest: "fits from 1249 ms" holds at 1249, where 1248.08 rounded
    down would not. A value that rounds to itself but for float noise (12.100000000000001) is not bumped."""
    exact = Decimal(repr(value))
    unit = Decimal(1) if value >= 100 else Decimal(1).scaleb(exact.adjusted() - 2)
    # every digit down to the unit, and one more where rounding up carries: the default 28 digits refused 1e28 ms
    with localcontext(prec=max(28, exact.adjusted() + 2)):
        nearest = exact.quantize(unit, rounding=ROUND_HALF_EVEN)
        shown = nearest if math.isclose(nearest, exact, rel_tol=1e-9) else exact.quantize(unit, rounding=ROUND_CEILING)
        return f"{shown.normalize():f}"


def positive_numbers(text: str, what: str, kind: type = float) -> list:
    """Parse '5,10,20' into positive numbers (integers where `kind` is int), or say which item is wrong."""
    noun = "positive integers" if kind is int else "positive numbers"
    values = []
    for item in (part.strip() for part in str(text).split(",")):
        try:
            if "_" in item:  # Python reads 1_0 as 10; no number is written so on a command line
                raise ValueError(item)
            value = kind(item)
        except ValueError:
            raise UsageError(f"{what} must be {noun} separated by commas, not {item!r}") from None
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise UsageError(f"{what} must be {noun}, not {item!r}")
        values.append(value)
    if not values:
        raise UsageError(f"{what}: give at least one positive number")
    return sorted(set(values))


def _stage_names(run: Run) -> str:
    names = [f"'{s.get('name', '?')}' ({s.get('stage', 'stage')})" for s in run.header.stages]
    return ", ".join(names) or "none"


def stages_where(stages: list[dict], wanted: Callable[[dict], bool]) -> list[str]:
    """Names of the stages `wanted` picks, including those inside the inputs of a fusion."""
    # (a fused input's stage is named as its file had it)
    return list(dict.fromkeys(str(stage.get("name", stage.get("stage"))) for stage in nested_stages(stages)
                              if wanted(stage)))


def cached_score_stages(stages: list[dict]) -> list[str]:
    return stages_where(stages, lambda stage: stage.get("stage") == "score" and bool(stage.get("cache")))


def cached_note(run: Run) -> str | None:
    """What a run's times cannot tell where a score stage read the score cache: a query whose pairs came from it
    cost about 0 ms."""
    cached = cached_score_stages(run.header.stages)
    if not cached:
        return None
    return (f"{run.source}: stage {', '.join(cached)} ran with the score cache on, so a query whose pairs came from "
            "the cache costs about 0 ms; time it with rerank score --no-cache")


def batch_timed(run: Run) -> bool:
    """Whether every stage that timed the run timed its queries as a batch and gave each an equal share (Lucene,
    dense, Elasticsearch): its median and p95 then show no per-query spread."""
    shared = stages_where(run.header.stages, lambda stage: stage.get("timing") == "amortised")
    timed = {t.stage for ranking in run.queries.values() for t in ranking.timings}
    return bool(timed) and timed <= set(shared)


def untimed_stages(run: Run) -> list[str]:
    """Stages of a timed run that wrote no '# time:' line (replayed candidates under a re-ranker): they add
    nothing to its cost. (A run with no timings at all is refused, or free with --zero-untimed.)"""
    timed = {t.stage for ranking in run.queries.values() for t in ranking.timings}
    return stages_where(run.header.stages, lambda stage: str(stage.get("name")) not in timed) if timed else []


def query_costs(run: Run, zero_untimed: bool = False, queries: set[str] | None = None) -> dict[str, float]:
    """Milliseconds per query (of `queries` alone, where given: those the report evaluates), summed over every
    stage that timed it.

    A run with no timings at all cannot be placed on a time axis: say which stages should record
    them. `zero_untimed` counts such a run (e.g. replayed candidates, which cost nothing to fetch)
    as free.
    """
    rankings = {qid: ranking for qid, ranking in run.queries.items() if queries is None or qid in queries}
    costs = {qid: sum(t.ms for t in ranking.timings) for qid, ranking in rankings.items()}
    untimed = [qid for qid, ranking in rankings.items() if not ranking.timings]
    if untimed and not (zero_untimed and len(untimed) == len(costs)):  # a partly timed run lost some timings
        if len(untimed) == len(costs):
            raise DataError(f"{run.source}: the run has no per-query timings ('# time:' lines); the stage that "
                            f"produced it ({_stage_names(run)}) must record them, e.g. re-score it with "
                            "'rerank score' or retrieve from an index; or pass --zero-untimed to count it as 0 ms")
        raise DataError(f"{run.source}: {len(untimed)} of {len(costs)} queries have no '# time:' line "
                        f"(first: {untimed[0]}); every stage must time every query (--zero-untimed is for runs "
                        "with no timings at all)")
    return costs


def run_depth(run: Run) -> int:
    """The depth the run's last stage handled: its deepest timing (`--depth 200` over 20 candidates scores 20),
    else its `depth` parameter, else the longest ranking."""
    last = run.header.stages[-1] if run.header.stages else {}
    stage = last.get("name")
    depths = [t.depth for r in run.queries.values() for t in r.timings if t.stage == stage]
    if depths:
        return max(depths)
    if isinstance(last.get("depth"), int):
        return last["depth"]
    return max((len(r) for r in run.queries.values()), default=0)


# What a run's last stage scored with: the model, its weights, the version of rerank's computation, and the options
# that change its scores or speed (a stage writes the device only off the CPU: an option it leaves out had its default).
# Not what describes the run: the rerank and the package versions that made it (`rerank_version`, `packages`).
MODEL_IDENTITY = {"stage": None, "model": None, "checkpoint_hash": None, "scores_version": None, "interpolate": None,
                  **{option.name: option.default for option in SCORE_OPTIONS if option.name not in EVERY_MODEL_TAKES}}


def _document_vectors(stage: dict) -> str:
    """Whether a score stage read its documents' vectors from a store (TK's `encodings`, minilm-bi's `passages`) or
    computed them while timed: the same scores at another cost (wherever the store is)."""
    notes = (str(stage.get(key) or "") for key in ("encodings", "passages"))
    return "stored" if any(note.startswith("stored") for note in notes) else "on the fly"


def check_one_model_per_curve(runs: list[Run]) -> None:
    """A curve is one model at several depths; runs grouped by name alone (the last stage's, `tk`) may be of
    different checkpoints or models, whose points would be drawn as one line. Refused, naming both."""
    seen: dict[str, tuple[Run, dict]] = {}
    for run in runs:
        if (run.label or run.name) == "budget_ms":  # each budget's row keys its curves by name beside its budget_ms
            raise UsageError(f"{run.source}: a curve cannot be named 'budget_ms', the name of the budget column; "
                             "label it otherwise (LABEL=FILE)")
        last = run.header.stages[-1] if run.header.stages else {}
        identity = {key: last.get(key, default) for key, default in MODEL_IDENTITY.items()}
        identity["document vectors"] = _document_vectors(last)
        first = seen.setdefault(run.label or run.name, (run, identity))
        if first[1] != identity:
            differ = ", ".join(f"{key} {first[1][key]} vs {identity[key]}" for key in identity
                               if first[1][key] != identity[key])
            raise UsageError(f"{first[0].source} and {run.source} are both curve {run.label or run.name!r} but were "
                             f"made differently ({differ}): a curve is one model at several depths; label them "
                             "apart (LABEL=FILE)")


def _statistic(ms: float) -> float:
    """A median or p95 of times written to the microsecond, without the float noise of summing and interpolating
    them (a p95 of 2303.5469000000003 ms did not fit a budget of 2303.5469, its value worked out by hand)."""
    return round(float(ms), 6)


def measure_points(runs: list[Run], measure: str | None = None, qrels: str | None = None,
                   zero_untimed: bool = False, note: Callable[[str], None] = lambda _m: None
                   ) -> tuple[list[BudgetPoint], str]:
    """Evaluate every run with the shared evaluator and attach its per-query cost statistics; `note` hears
    what eval would print (judged queries a run lacks count as 0 in its effectiveness)."""
    if not runs:
        raise UsageError("give at least one run to the budget report")
    if measure and is_count(parse_measure(measure)):  # parse_measure refuses 'P.5,10': a curve is of one measure
        raise UsageError(f"-m {measure} is a count (summed over queries, as trec_eval's num_ fields), not an "
                         "effectiveness to spend a time budget on; give one such as nDCG@10 or MAP")
    check_one_model_per_curve(runs)
    judgements = judgements_for(runs, qrels, None)
    evaluations, named, warnings = evaluate_runs(runs, judgements, [measure] if measure else None,
                                                 compare_depths=False)
    for warning in warnings:
        note(warning)
    untimed: dict[str, list[str]] = {}
    for run in runs:
        stages = untimed_stages(run)
        if stages:
            untimed.setdefault(", ".join(stages), []).append(run.source)
    for stages, sources in untimed.items():
        note(f"{', '.join(sources)}: stage {stages} recorded no '# time:' lines (replayed candidates?), so "
             "it counts as 0 ms per query")
    label = named[0].label
    compared = queries_made_for(runs)  # timed over the queries each point is evaluated on, as eval compares them
    points = [point_of(run, evaluation, label, zero_untimed, compared) for run, evaluation in zip(runs, evaluations)]
    seen: dict[tuple[str, int], str] = {}
    cut = {run.source for run in runs if (run.header.get(CUT_KEY) or {}).get("depth") is not None}
    for p in points:
        if (p.model, p.depth) in seen:
            # a cut costs what its stage cost at the depth it ran: a shallower point is a run made that deep
            why = (f" ({' and '.join(sorted(cut & {p.source, seen[p.model, p.depth]}))}: a cut by cat --depth "
                   "keeps its stage's depth and time; for a shallower point, run the stage that deep)"
                   if cut & {p.source, seen[p.model, p.depth]} else "")
            raise UsageError(f"{p.source} and {seen[p.model, p.depth]} are both {p.model!r} at depth {p.depth}"
                             f"{why}; label one differently (LABEL=FILE)")
        seen[p.model, p.depth] = p.source
    return sorted(points, key=lambda p: (p.model, p.depth)), label


def point_of(run: Run, evaluation: Evaluation, label: str, zero_untimed: bool = False,
             compared: set[str] | None = None) -> BudgetPoint:
    """A run's point on its curve: its figure for the measure `label` and its per-query cost over the `compared`
    queries (all where None); a run without timings is refused as `query_costs` says."""
    costs = np.array(list(query_costs(run, zero_untimed, compared).values()), dtype=float)
    return BudgetPoint(run.label or run.name, run_depth(run), len(evaluation.per_query[label]), len(costs),
                       evaluation.overall(label), _statistic(np.median(costs)), _statistic(np.percentile(costs, 95)),
                       run.source, batch_timed(run))


def default_budgets(points: list[BudgetPoint], statistic: str) -> list[float]:
    """A 1-2-5 series of budgets that spans every point's cost (free points fit any budget)."""
    costs = [p.cost(statistic) for p in points if p.cost(statistic) > 0] or [1.0]
    low, high = min(costs), max(costs)
    budgets, decade = [], 10.0 ** math.floor(math.log10(low))
    while not budgets or budgets[-1] < high:
        for step in (1, 2, 5):
            value = step * decade
            if value >= low / 2 and (not budgets or budgets[-1] < high):
                budgets.append(round(value, 6))
        decade *= 10
    return budgets


def best_within(points: list[BudgetPoint], budget: float, statistic: str, pick: str = "deepest") -> BudgetPoint | None:
    """The point a budget buys: the deepest depth whose cost fits (what one would deploy), or with
    pick="best" the most effective fitting point (an oracle that has seen the judgements)."""
    fitting = [p for p in points if p.cost(statistic) <= budget]
    if not fitting:
        return None
    if pick == "best":
        return max(fitting, key=lambda p: (p.effectiveness, -p.cost(statistic)))
    return max(fitting, key=lambda p: (p.depth, -p.cost(statistic)))


def by_model(points: list[BudgetPoint]) -> dict[str, list[BudgetPoint]]:
    models: dict[str, list[BudgetPoint]] = {}
    for p in points:
        models.setdefault(p.model, []).append(p)
    return models


def compare_curves(points: list[BudgetPoint], statistic: str,
                   pick: str = "deepest") -> tuple[list[Crossing], list[Lead]]:
    """For each pair of models, every budget at which the better one changes, or, where it never
    changes, which one leads throughout.

    The curves are step functions that change only at points' costs, so comparing them on each
    interval between consecutive costs is exact. A model with nothing within a budget loses to one
    that has something.
    """
    models = by_model(points)
    names = sorted(models)
    found, leads = [], []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            times = sorted({p.cost(statistic) for p in models[a] + models[b]})
            segments: list[list] = []  # [the better model, from this budget on, equal at some budget in it]
            tied_first = False  # equal before either is ahead
            for t in times:
                best_a, best_b = best_within(models[a], t, statistic, pick), best_within(models[b], t, statistic, pick)
                ea = best_a.effectiveness if best_a else -math.inf
                eb = best_b.effectiveness if best_b else -math.inf
                winner = a if ea > eb else b if eb > ea else None
                if winner is not None and (not segments or segments[-1][0] != winner):
                    segments.append([winner, t, tied_first and not segments])
                elif winner is None and ea > -math.inf:
                    if segments:
                        segments[-1][2] = True
                    tied_first = not segments
            both = max(min(p.cost(statistic) for p in models[m]) for m in (a, b))  # below it one of them fits
            for (better, start, ties), (other, end, ties_after) in zip(segments, segments[1:]):
                found.append(Crossing(better, other, end, start, both >= end, ties, ties_after,
                                      both if start < both < end else None))
            if len(segments) == 1:
                better, start, ties = segments[0]
                leads.append(Lead(better, b if better == a else a, start, ties, both if start < both else None))
    return found, leads


def frontier(points: list[BudgetPoint], statistic: str, pick: str = "deepest") -> list[Best]:
    """Which model is best within each budget, from the cheapest point on; exact for the same reason as
    compare_curves."""
    models = by_model(points)
    spans: list[Best] = []
    for t in sorted({p.cost(statistic) for p in points}):
        fitting = {m: best_within(pts, t, statistic, pick) for m, pts in models.items()}
        top = max(p.effectiveness for p in fitting.values() if p is not None)
        best = tuple(sorted(m for m, p in fitting.items() if p is not None and p.effectiveness == top))
        if not spans or spans[-1].models != best:
            if spans:
                spans[-1] = Best(spans[-1].models, spans[-1].from_ms, t)
            spans.append(Best(best, t))
    return spans


@dataclass
class BudgetReport:
    measure: str
    statistic: str
    points: list[BudgetPoint]
    budgets: list[float]
    crossings: list[Crossing]
    leads: list[Lead]
    pick: str = "deepest"
    best: list[Best] = field(default_factory=list)

    def best_at(self, budget: float) -> tuple[str, ...]:
        """The best models within `budget`, read off the frontier so that every output names the same ones
        (none below the cheapest point)."""
        for span in self.best:
            if span.from_ms <= budget and (span.below_ms is None or budget < span.below_ms):
                return span.models
        return ()

    def budget_rows(self) -> list[dict]:
        rows = []
        for budget in self.budgets:
            row: dict = {"budget_ms": budget}
            for model, pts in by_model(self.points).items():
                best = best_within(pts, budget, self.statistic, self.pick)
                row[model] = None if best is None else {"effectiveness": best.effectiveness, "depth": best.depth}
            rows.append(row)
        return rows


def build_report(points: list[BudgetPoint], measure: str, statistic: str = "median",
                 budgets: list[float] | None = None, pick: str = "deepest") -> BudgetReport:
    if statistic not in STATISTICS:
        raise UsageError(f"statistic must be one of {', '.join(STATISTICS)}, not {statistic!r}")
    if pick not in PICKS:
        raise UsageError(f"pick must be one of {', '.join(PICKS)}, not {pick!r}")
    return BudgetReport(measure, statistic, points, budgets or default_budgets(points, statistic),
                        *compare_curves(points, statistic, pick), pick, frontier(points, statistic, pick))


def sentences(report: BudgetReport) -> list[str]:
    """What the report says in words: the best model from each budget on, then the pairs whose order changes
    where both fit, or that never change order."""
    notes = [b.sentence() for b in report.best] if len(by_model(report.points)) > 1 else []
    for i, c in enumerate(report.crossings):
        if not c.alone:  # "X fits from ..., Y only from ...": the best models above say it for every pair at once
            notes.append(c.sentence())
        following = report.crossings[i + 1] if i + 1 < len(report.crossings) else None
        if following is None or {following.better, following.other} != {c.better, c.other}:
            notes.append(c.after())
    return notes + [lead.sentence() for lead in report.leads]


def render(report: BudgetReport, fmt: str) -> str:
    """Two tables (the measured points, then what each budget buys), the best model from each budget on,
    and the pairs whose order changes where both fit, or that never change order."""
    if fmt == "json":
        return json.dumps({"measure": report.measure, "statistic": report.statistic, "pick": report.pick,
                           "points": [asdict(p) for p in report.points], "budgets": report.budget_rows(),
                           "best": [{**asdict(b), "sentence": b.sentence()} for b in report.best],
                           "crossings": [{**asdict(c), "sentence": c.sentence()} for c in report.crossings],
                           "leads": [{**asdict(lead), "sentence": lead.sentence()} for lead in report.leads]},
                          indent=2) + "\n"
    m = report.measure
    point_header = ["model", "depth", "judged", m, "timed", "median_ms", "p95_ms", "run"]
    point_rows = [[p.model, p.depth, p.judged, f"{p.effectiveness:.4f}", p.timed, f"{p.median_ms:.2f}",
                   f"{p.p95_ms:.2f}", p.source] for p in report.points]
    models = list(by_model(report.points))
    budget_header = [f"budget_ms ({report.statistic}; {report.pick} depth that fits)", *models]
    budget_rows = []
    for row in report.budget_rows():
        cells = [f"{row['budget_ms']:.15g}"]  # as given: 1556.6955 is not 1556.696, though both are 1556.7 at :g
        for model in models:
            best = row[model]
            cells.append("-" if best is None else f"{best['effectiveness']:.4f} (@{best['depth']})")
        budget_rows.append(cells)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["budget_ms", "statistic", "pick", "model", "depth", m, "best"])  # best: last, for old readers
        for row in report.budget_rows():
            top = report.best_at(row["budget_ms"])
            for model in models:
                best = row[model]
                writer.writerow([row["budget_ms"], report.statistic, report.pick, model, best["depth"] if best else "",
                                 repr(best["effectiveness"]) if best else "",  # every digit, as eval's CSV
                                 model in top])
        return buf.getvalue()
    table = markdown_table if fmt == "markdown" else text_table
    notes = sentences(report)
    bullet = "- " if fmt == "markdown" else ""
    shared = [p.source for p in report.points if p.batch_timed]
    footnote = (f"\n{bullet}{', '.join(shared)}: timed per batch of queries, each query an equal share, so median_ms "
                "and p95_ms show no per-query spread\n" if shared else "")
    return (table(point_header, point_rows) + footnote + "\n" + table(budget_header, budget_rows) + "\n"
            + "\n".join(bullet + n for n in notes) + "\n")


def plot(report: BudgetReport, path: str, title: str | None = None) -> None:
    """Effectiveness against budget (log x), one step line per model, each point marked with its depth, under the
    frontier (the best that fits) with a dotted line where its model changes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..atomic import atomic_output, plot_format

    models = by_model(report.points)
    positive = [p.cost(report.statistic) for p in report.points if p.cost(report.statistic) > 0] or [1.0]
    floor = min(positive) / 2  # free points (e.g. replayed candidates) sit at the left edge of the log axis
    right = max(positive) * 2

    def x(p: BudgetPoint) -> float:
        return max(p.cost(report.statistic), floor)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model, pts in models.items():
        steps = sorted({x(p) for p in pts}) + [right]
        values = [best_within(pts, t, report.statistic, report.pick).effectiveness for t in steps]
        line, = ax.step(steps, values, where="post", label=model)
        for p in pts:
            ax.plot(x(p), p.effectiveness, "o", color=line.get_color(), ms=4)
            free = " (0 ms)" if p.cost(report.statistic) <= 0 else ""  # drawn at `floor`, not where it costs
            ax.annotate(f"{p.depth}{free}", (x(p), p.effectiveness), fontsize=7,
                        textcoords="offset points", xytext=(3, -9), color=line.get_color())
    # what the text says, the best that fits and where it changes, not every pairwise crossing (25 lines on DL 2019)
    costs = sorted({p.cost(report.statistic) for p in report.points})
    top = [best_within(models[report.best_at(t)[0]], t, report.statistic, report.pick).effectiveness for t in costs]
    ax.step([max(t, floor) for t in costs] + [right], top + top[-1:], where="post", color="black", lw=6, alpha=0.15,
            zorder=1, label="best that fits")
    for i, span in enumerate(report.best[1:]):
        ax.axvline(span.from_ms, color="grey", lw=0.8, ls=":", label="best model changes" if i == 0 else "_nolegend_")
    ax.set_xscale("log")
    ax.set_xlim(floor / 1.2, right)
    ax.set_xlabel(f"time budget per query, ms ({report.statistic}; all stages)")
    ax.set_ylabel(f"{report.measure} within budget ({report.pick} depth that fits)")
    ax.set_title(title or f"{report.measure} reachable within a per-query time budget")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    with atomic_output(path, "wb") as handle:
        fig.savefig(handle, format=plot_format(path), dpi=120)
    plt.close(fig)

"""`rerank report`: one self-contained HTML page that compares runs.

The page shows what eval and budget compute, through their code: the leaderboard of `report.leaderboard` (figures,
marks and legend as `report.render` prints them, with W/T/L, confidence intervals and effect sizes), each query's
difference to the baseline from the same evaluations, the time-budget curves and sentences of `budget.py`, and each
run's header. The figures and tables are written here; `html_report.html` holds the styles and the script that sorts
the leaderboard and draws the per-query view from the data embedded in the page. Nothing is fetched: a
Content-Security-Policy forbids every request.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import atomic_output, check_writable
from ..errors import DataError, RerankError, UsageError, counted
from ..runs import Run, RunHeader
from . import budget as budgets
from .measures import Evaluation, NamedMeasure, is_count, label_among, primary
from .report import Row, Significance, figure, leaderboard, signed_figure, significance_mark
from .session import Judgements, queries_made_for
from .significance import Comparison

TEMPLATE = Path(__file__).with_name("html_report.html")
TEXT_CHARACTERS = 1200  # of a document's text on the page: a passage whole, a long document's start
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass
class Compared:
    """What a report compares: runs as eval read and evaluated them, and how the board is made."""

    runs: list[Run]
    judgements: Judgements
    evaluations: list[Evaluation]
    measures: list[NamedMeasure]
    base: int
    sort_by: str | None = None
    significance: Significance = field(default_factory=Significance)
    notes: list[str] = field(default_factory=list)  # eval's notes, shown on the page too
    top: int = 10  # documents of each run shown for a query
    zero_untimed: bool = False  # budget's --zero-untimed: a run without timings costs 0 ms
    dataset: str | None = None  # eval's --dataset: where texts come from for runs whose header names none


def refuse_disjoint_runs(runs: list[Run], judgements: Judgements) -> None:
    """A report compares runs query by query: runs without a judged query in common have nothing to compare (eval
    scores each one's missing queries as 0, which would make every difference a query one run lacks)."""
    held = [set(run.queries) & set(judgements.qrels) for run in runs]
    if len(runs) > 1 and not set.intersection(*held):
        counts = ", ".join(f"{run.name} {len(queries)}" for run, queries in zip(runs, held))
        raise DataError(f"the runs share no judged query (judged queries each holds: {counts}); a report compares "
                        "runs query by query: give runs of the same topics")


def check_output(path: str, option: str = "-o") -> None:
    """Refuse, before any run is read, a page that could not be written: a folder for a file, or one this process may
    not write (a folder that does not exist is refused where the option is read: cli.io.in_existing_folder)."""
    if path == "-":
        return
    if Path(path).is_dir():
        raise UsageError(f"{option} {path} is a folder; give the page a file name, e.g. {Path(path) / 'report.html'}")
    check_writable(path)


def write(compared: Compared, path: str) -> None:
    """The page, whole or not at all (a temporary sibling renamed into place)."""
    page = render(compared)
    with atomic_output(path) as handle:
        handle.write(page)


def render(compared: Compared) -> str:
    """The page, as one string."""
    c = compared
    rows = leaderboard(c.evaluations, c.measures, c.base, c.sort_by, c.significance)
    focus = _focus(c)
    baseline_name = c.evaluations[c.base].run_name
    budget_html, budget_notes = _budget_section(c, focus)
    data = {"runs": [ev.run_name for ev in c.evaluations], "baseline": baseline_name, "focus": focus.label,
            "minRel": c.judgements.min_rel, "top": c.top,
            "measures": [m.label for m in c.measures if not is_count(m)],
            **_per_query_data(c)}
    names = [ev.run_name for ev in c.evaluations]
    title = f"{', '.join(names)} on {c.judgements.source}"
    body = "\n".join([
        f"<h1>rerank report: {_e(title)}</h1>",
        f"<p class=lead>{_e(_summary(c))}</p>",
        _notes_html(c.notes + budget_notes),
        "<section id=leaderboard><h2>Leaderboard</h2>",
        _leaderboard_html(rows, c.measures, c.significance, baseline_name, _sorted_by(c)),
        "</section>",
        _per_query_html(len(names) > 1),
        budget_html,
        _provenance_html(c.runs),
    ])
    page = TEMPLATE.read_text(encoding="utf-8")
    # </script> inside a text would end the script element: '<' is written as a JSON escape
    return (page.replace("{{title}}", _e(f"rerank report: {title}")).replace("{{body}}", body)
            .replace("{{data}}", json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _sorted_by(c: Compared) -> str:
    """The label of the measure the leaderboard is sorted by, as `report.leaderboard` chooses it."""
    return label_among(c.sort_by, [m.label for m in c.measures]) if c.sort_by else primary(c.measures).label


def _focus(c: Compared) -> NamedMeasure:
    """The measure the per-query view opens on and the budget curves are of: the one the leaderboard is sorted by,
    unless it is a count (a difference in documents retrieved is no effectiveness), else the primary one."""
    return next((m for m in c.measures if m.label == _sorted_by(c) and not is_count(m)), primary(c.measures))


def _summary(c: Compared) -> str:
    queries = counted(len(c.evaluations[c.base].per_query[c.measures[0].label]), "judged query", "judged queries")
    runs = f"{len(c.runs)} runs, baseline {c.evaluations[c.base].run_name}" if len(c.runs) > 1 else "One run"
    return (f"{runs}; {queries} of {c.judgements.source}, relevant from grade {c.judgements.min_rel} on (binary "
            "measures).")


def _notes_html(notes: list[str]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{_e(note)}</li>" for note in notes)
    return f"<section id=notes><h2>Notes</h2><ul>{items}</ul></section>"


def _leaderboard_html(rows: list[Row], measures: list[NamedMeasure], significance: Significance,
                      baseline_name: str, sorted_by: str) -> str:
    """eval's leaderboard: each figure and mark as its table prints them (the exact value in `data-value`, which
    sorting reads), and under each figure of a compared run its difference to the baseline with the 95% confidence
    interval, effect size, W/T/L and the largest corrected p-value (the mark needs every one below 0.05)."""
    many = len(rows) > 1
    wtl_label = primary(measures).label
    head = ["<th>run</th>"]
    head += [f'<th class="sortable figure" title="sort by {_e(m.label)}"'
             f'{" aria-sort=descending" if m.label == sorted_by else ""}>{_e(m.label)}</th>' for m in measures]
    if many:
        head.append(f"<th class=sortable title='sort by wins'>W/T/L ({_e(wtl_label)})</th>")
    extra = [(key, title) for key, title in (("missing", "judged queries the run lacks"),
                                              ("unjudged", "queries of the run the qrels do not judge"))
             if any(getattr(r, key) for r in rows)]
    head += [f"<th class=sortable title='{_e(title)}'>{key}</th>" for key, title in extra]
    body = []
    for r in rows:
        cells = [f"<td class=run data-value='{_e(r.run)}'>{_e(r.run)}"
                 f"{' <span class=tag>baseline</span>' if many and r.versus is None else ''}</td>"]
        for m in measures:
            c = (r.versus or {}).get(m.label)
            mark = significance_mark(c, m)
            detail = _comparison_detail(c, m) if c is not None else ""
            cells.append(f"<td class=figure data-value='{float(r.means[m.label])!r}' data-measure='{_e(m.label)}'>"
                         f"<span class=value>{figure(r.means[m.label], m)}</span>"
                         f"<span class=mark data-mark='{mark}'>{mark}</span>{detail}</td>")
        if many:
            c = (r.versus or {}).get(wtl_label)
            cells.append(f"<td class=wtl data-value='{c.wins - c.losses if c else 0}'>"
                         f"{f'{c.wins}/{c.ties}/{c.losses}' if c else '-'}</td>")
        cells += [f"<td data-value='{getattr(r, key)}'>{getattr(r, key)}</td>" for key, _ in extra]
        body.append(f"<tr data-run='{_e(r.run)}'>{''.join(cells)}</tr>")
    legend = f"<p class=legend>{_e(significance.legend(baseline_name).strip())}</p>" if many else ""
    hint = ("<p class=hint>Click a column's name to sort by it. Under each figure: the difference to the baseline "
            "with its 95% confidence interval, the effect size (Cohen's d<sub>z</sub>), wins/ties/losses over the "
            "queries and the largest corrected p-value of the tests.</p>" if many else "")
    return (f"<table id=board><thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"{legend}{hint}")


def _comparison_detail(c: Comparison, m: NamedMeasure) -> str:
    """One compared run's difference on one measure, in small print under its figure."""
    delta = f"Δ {signed_figure(c.delta, m)}"
    if is_count(m):
        return f"<span class=detail>{_e(delta)}</span>"
    if c.ci95 is not None:
        delta += f" [{signed_figure(c.ci95[0], m)}, {signed_figure(c.ci95[1], m)}]"
    effect = f"d {c.effect_size:+.2f}" if c.effect_size is not None else "d –"
    rest = f"{effect} · p {max(c.corrected.values()):.3g} · {c.wins}/{c.ties}/{c.losses}"
    return f"<span class=detail>{_e(delta)}</span><span class=detail>{_e(rest)}</span>"


def _texts_header(run: Run, dataset: str | None) -> RunHeader:
    """Where a run's texts are found: its header, or for a run whose header names no data set, eval's --dataset."""
    if dataset and not run.header.dataset:
        return RunHeader({**run.header.fields, "dataset": dataset}, run.header.stages)
    return run.header


def _per_query_data(c: Compared) -> dict:
    """Every measure's value per query and run (the evaluations' own), each run's top documents of each query in the
    order trec_eval evaluates them, with their grades, and the texts of queries and documents where the runs' data
    set, index or files have them."""
    qids = list(c.evaluations[c.base].per_query[c.measures[0].label])
    per_query = {m.label: {ev.run_name: ev.per_query[m.label] for ev in c.evaluations}
                 for m in c.measures if not is_count(m)}
    rankings, shown = {}, set()
    for run, ev in zip(c.runs, c.evaluations):
        rankings[ev.run_name] = {}
        for qid in qids:
            ranking = run.queries.get(qid)
            top = ranking.as_trec_eval_reads().head(c.top) if ranking is not None else None
            rankings[ev.run_name][qid] = [[d, s] for d, s in zip(top.docids, top.scores)] if top else []
            shown.update(top.docids if top else ())
    grades = {qid: {d: g for d, g in c.judgements.qrels.get(qid, {}).items() if d in shown} for qid in qids}
    queries, texts, missing = _texts(c, set(qids), shown)
    return {"qids": qids, "perQuery": per_query, "rankings": rankings, "grades": grades, "queries": queries,
            "texts": texts, "textsMissing": missing}


def _texts(c: Compared, qids: set[str], docids: set[str]) -> tuple[dict[str, str], dict[str, str], str]:
    """Query and document texts from the first run whose header leads to them; what is missing, said once."""
    from ..docstore import doc_store_for, queries_for

    queries: dict[str, str] = {}
    texts: dict[str, str] = {}
    why = []
    for run in c.runs:
        header = _texts_header(run, c.dataset)
        try:
            if len(queries) < len(qids):
                queries.update({q: t for q, t in queries_for(header, remedy="").items() if q in qids})
            if len(texts) < len(docids):
                wanted = docids - set(texts)
                texts.update({d: _cut(t) for d, t in doc_store_for(header, remedy="").texts(wanted).items()})
        except RerankError as error:
            why.append(f"{run.name}: {str(error).rstrip('; ')}")
    missing = "" if texts else "no document texts: " + "; ".join(why or ["none of the documents has a text"])
    return queries, texts, missing


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARACTERS else text[:TEXT_CHARACTERS].rstrip() + " …"


def _per_query_html(many: bool) -> str:
    if not many:
        return ("<section id=per-query><h2>Per query</h2><p class=note>One run: no baseline to compare with. "
                "Its top documents per query are below.</p><div id=single></div><div id=detail></div></section>")
    return """<section id=per-query><h2>Per-query differences to the baseline</h2>
<div class=controls><label>Measure <select id=pq-measure></select></label>
<label>Run <select id=pq-run></select></label> <span id=pq-summary></span></div>
<div id=pq-chart></div>
<div class=columns><div><h3>Largest gains</h3><table id=gains class=queries></table></div>
<div><h3>Largest losses</h3><table id=losses class=queries></table></div></div>
<p class=hint>Click a bar or a query to see both runs' top documents side by side.</p>
<div id=detail></div></section>"""


def _budget_section(c: Compared, focus: NamedMeasure) -> tuple[str, list[str]]:
    """The time-budget curves of the runs that carry timings, with budget's sentences; a note for the others (a
    replayed candidate run records no time: with --zero-untimed it costs 0 ms, as in rerank budget)."""
    compared = queries_made_for(c.runs)
    points, timed, left_out = [], [], []
    for run, ev in zip(c.runs, c.evaluations):
        try:
            points.append(budgets.point_of(run, ev, focus.label, c.zero_untimed, compared))
            timed.append(run)
        except DataError as error:
            left_out.append(f"{run.name}: {error}".replace(f"{run.source}: ", "", 1))
    if not points:
        note = ("No time-budget section: no run carries per-query timings ('# time:' lines; a stage that re-ranks "
                "or searches an index records them, replayed candidates do not; --zero-untimed counts those as "
                "0 ms)")
        return "", [note]
    budgets.check_one_model_per_curve(timed)
    report = budgets.build_report(points, focus.label)
    notes = [f"not on the time-budget curves: {why}" for why in left_out]
    notes += [note for note in map(budgets.cached_note, timed) if note]
    sentences = "".join(f"<li>{_e(s)}</li>" for s in budgets.sentences(report))
    rows = "".join(f"<tr><td>{_e(p.model)}</td><td>{p.depth}</td><td>{p.effectiveness:.4f}</td><td>{p.judged}</td>"
                   f"<td>{p.timed}</td><td>{p.median_ms:.2f}</td><td>{p.p95_ms:.2f}</td></tr>" for p in report.points)
    table = (f"<table class=points><thead><tr><th>run</th><th>depth</th><th>{_e(focus.label)}</th><th>judged</th>"
             f"<th>timed</th><th>median ms</th><th>p95 ms</th></tr></thead><tbody>{rows}</tbody></table>")
    shared = [p.model for p in report.points if p.batch_timed]
    footnote = (f"<p class=note>{_e(', '.join(shared))}: timed per batch of queries, each query an equal share, so "
                "the median and p95 show no per-query spread.</p>" if shared else "")
    html_text = (f"<section id=budget><h2>Time budgets</h2>{_budget_svg(report)}"
                 f"<ul class=sentences>{sentences}</ul>{table}{footnote}"
                 f"<p class=hint>A query's cost is the sum of its stages' '# time:' lines; a budget buys the deepest "
                 f"run that fits it (median per-query time), as <code>rerank budget</code> reports.</p></section>")
    return html_text, notes


def _budget_svg(report: budgets.BudgetReport) -> str:
    """budget.plot's figure as SVG: effectiveness within each budget (log x), one step line per run, each point
    marked with its depth, over the best that fits (grey)."""
    width, height, left, right, top, bottom = 720, 340, 64, 150, 16, 44
    positive = [p.cost(report.statistic) for p in report.points if p.cost(report.statistic) > 0] or [1.0]
    floor, end = min(positive) / 2, max(positive) * 2
    values = [p.effectiveness for p in report.points]
    low, high = min(values), max(values)
    pad = (high - low) * 0.15 or 0.05
    low, high = max(0.0, low - pad), high + pad

    def x(ms: float) -> float:
        span = math.log10(end) - math.log10(floor / 1.2)
        return left + (math.log10(max(ms, floor)) - math.log10(floor / 1.2)) / span * (width - left - right)

    def y(value: float) -> float:
        return top + (high - value) / (high - low) * (height - top - bottom)

    parts = [f'<svg id=budget-chart viewBox="0 0 {width} {height}" role=img '
             f'aria-label="{_e(report.measure)} within a per-query time budget">']
    for tick in _log_ticks(floor / 1.2, end):
        parts.append(f'<line class=grid x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{height - bottom}"/>'
                     f'<text class=tick x="{x(tick):.1f}" y="{height - bottom + 14}" text-anchor=middle>'
                     f'{tick:g}</text>')
    ticks = _linear_ticks(low, high)
    decimals = max(2, -math.floor(math.log10(ticks[1] - ticks[0]))) if len(ticks) > 1 else 2
    for tick in ticks:
        parts.append(f'<line class=grid x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
                     f'<text class=tick x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor=end>'
                     f'{tick:.{decimals}f}</text>')
    costs = sorted({p.cost(report.statistic) for p in report.points})
    models = budgets.by_model(report.points)
    best = [budgets.best_within(models[report.best_at(t)[0]], t, report.statistic, report.pick).effectiveness
            for t in costs]
    parts.append(f'<path class=frontier d="{_steps([(x(t), y(v)) for t, v in zip(costs, best)], x(end))}"/>')
    for i, (model, pts) in enumerate(models.items()):
        colour = COLOURS[i % len(COLOURS)]
        steps = sorted({p.cost(report.statistic) for p in pts})
        line = [(x(t), y(budgets.best_within(pts, t, report.statistic, report.pick).effectiveness)) for t in steps]
        parts.append(f'<path class=curve stroke="{colour}" d="{_steps(line, x(end))}"/>')
        for p in pts:
            cost = p.cost(report.statistic)
            parts.append(f'<circle cx="{x(cost):.1f}" cy="{y(p.effectiveness):.1f}" r=4 fill="{colour}">'
                         f'<title>{_e(p.model)} at depth {p.depth}: {p.effectiveness:.4f} in {cost:.2f} ms'
                         f'</title></circle><text class=depth x="{x(cost) + 5:.1f}" y="{y(p.effectiveness) + 14:.1f}" '
                         f'fill="{colour}">{p.depth}{" (0 ms)" if cost <= 0 else ""}</text>')
        parts.append(f'<rect x="{width - right + 12}" y="{top + 18 * i}" width=12 height=12 fill="{colour}"/>'
                     f'<text class=key x="{width - right + 30}" y="{top + 18 * i + 11}">{_e(model)}</text>')
    parts.append(f'<text class=axis x="{(left + width - right) / 2}" y="{height - 8}" text-anchor=middle>time budget '
                 f'per query, ms ({report.statistic}; all stages; log scale)</text>'
                 f'<text class=axis transform="rotate(-90)" x="{-(top + height - bottom) / 2}" y="16" '
                 f'text-anchor=middle>{_e(report.measure)}</text></svg>')
    return "".join(parts)


def _steps(points: list[tuple[float, float]], end: float) -> str:
    """An SVG path through `points` as a step function held to the right until `end`."""
    path = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for (_, y0), (x1, y1) in zip(points, points[1:]):
        path.append(f"H{x1:.1f}V{y1:.1f}")
    path.append(f"H{end:.1f}")
    return "".join(path)


def _log_ticks(low: float, high: float) -> list[float]:
    ticks, decade = [], 10.0 ** math.floor(math.log10(low))
    while decade <= high:
        ticks += [step * decade for step in (1, 2, 5) if low <= step * decade <= high]
        decade *= 10
    return ticks


def _linear_ticks(low: float, high: float) -> list[float]:
    step = 10 ** math.floor(math.log10((high - low) / 4))
    step *= 2 if (high - low) / step > 8 else 1
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _provenance_html(runs: list[Run]) -> str:
    """Each run's header, folded: its fields (data set, index, files) and one table per stage."""
    blocks = []
    for run in runs:
        fields = "".join(f"<tr><th>{_e(k)}</th><td>{_value(v)}</td></tr>" for k, v in run.header.fields.items())
        stages = "".join(
            f"<h4>stage {i + 1}: {_e(stage.get('name', '?'))} ({_e(stage.get('stage', 'stage'))})</h4><table>"
            + "".join(f"<tr><th>{_e(k)}</th><td>{_value(v)}</td></tr>" for k, v in sorted(stage.items()))
            + "</table>" for i, stage in enumerate(run.header.stages))
        what = (f"{len(run.header.stages)} stage{'s' if len(run.header.stages) != 1 else ''}" if run.header.stages
                else "no header: a plain TREC run")
        blocks.append(f"<details class=provenance><summary>{_e(run.name)} <span class=hint>({_e(run.source)}; "
                      f"{what})</span></summary><table>{fields}</table>{stages}</details>")
    return f"<section id=provenance><h2>Provenance</h2>{''.join(blocks)}</section>"


def _value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return f"<code>{_e(text)}</code>"

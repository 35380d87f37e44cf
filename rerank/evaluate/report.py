"""Leaderboards and per-query tables from evaluations, rendered as text, CSV, JSON or Markdown."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, replace

import numpy as np

from .measures import Evaluation, NamedMeasure, is_count, label_among, primary, trec_eval_position
from .significance import CORRECTIONS, DEFAULT_TESTS, TESTS, Comparison, compare, correct, holm

ALPHA = 0.05
FORMATS = ("table", "csv", "json", "markdown", "latex")


@dataclass
class Row:
    run: str
    means: dict[str, float]
    versus: dict[str, Comparison] | None  # None for the baseline itself
    missing: int
    unjudged: int


@dataclass(frozen=True)
class Significance:
    """How differences to the baseline are marked: by which TESTS (all must agree) and which correction of each
    test's p-values across the runs compared on a measure."""

    tests: tuple[str, ...] = DEFAULT_TESTS
    correction: str = "holm"

    @classmethod
    def chosen(cls, tests: list[str] | tuple[str, ...], correction: str = "holm") -> Significance:
        """As eval's --test/--correction or a pipeline's keys give them: each test once, none meaning the default."""
        return cls(tuple(dict.fromkeys(tests)) or DEFAULT_TESTS, correction)

    def legend(self, baseline_name: str) -> str:
        tests = " and ".join(TESTS[t] for t in self.tests)
        corrected = (f"{CORRECTIONS[self.correction]}-corrected over the runs compared" if self.correction != "none"
                     else "uncorrected")
        each = "each " if len(self.tests) > 1 else ""
        return f"+/- : better/worse than {baseline_name} ({tests}, {corrected}, {each}p < {ALPHA})\n"


def leaderboard(evaluations: list[Evaluation], measures: list[NamedMeasure], baseline: int = 0,
                sort_by: str | None = None, significance: Significance = Significance()) -> list[Row]:
    """Rows sorted by `sort_by` (default: the first measure that is not a count; spelled any way -m takes it, `AP`
    for MAP), each compared with the baseline run.

    Each test's p-values are corrected as `significance` says across the runs compared on each measure (`holm_p`:
    the t-test's, Holm-corrected, whatever it says).
    """
    base = evaluations[baseline]
    rows = []
    for i, ev in enumerate(evaluations):
        means = {m.label: ev.overall(m.label) for m in measures}
        versus = None
        if i != baseline:
            versus = {}
            for m in measures:
                qids = list(base.per_query[m.label])
                versus[m.label] = compare(np.array([ev.per_query[m.label][q] for q in qids]),
                                          np.array([base.per_query[m.label][q] for q in qids]), significance.tests)
        rows.append(Row(ev.run_name, means, versus, len(ev.missing), len(ev.unjudged)))
    compared = [r for r in rows if r.versus is not None]
    for m in measures:
        adjusted = {test: correct([r.versus[m.label].p(test) for r in compared], significance.correction)
                    for test in significance.tests}
        for i, (row, p) in enumerate(zip(compared, holm([r.versus[m.label].t_p for r in compared]))):
            row.versus[m.label] = replace(row.versus[m.label], holm_p=p,
                                          corrected={test: ps[i] for test, ps in adjusted.items()})
    key = label_among(sort_by, [m.label for m in measures]) if sort_by else primary(measures).label
    return sorted(rows, key=lambda r: -r.means[key])


def figure(value: float, measure: NamedMeasure) -> str:
    return f"{value:.0f}" if is_count(measure) else f"{value:.4f}"


def signed_figure(value: float, measure: NamedMeasure) -> str:
    """A difference, with its sign: +0.1250, -3."""
    return f"{value:+.0f}" if is_count(measure) else f"{value:+.4f}"


def _exact(value: float, measure: NamedMeasure) -> str:
    """A CSV cell: every digit, as JSON gives it (rounded to 4, per-query deltas and ties were lost to pandas)."""
    return f"{value:.0f}" if is_count(measure) else repr(float(value))


def significance_mark(c: Comparison | None, measure: NamedMeasure) -> str:
    """'+'/'-' when better/worse than the baseline by every test asked for, each p below ALPHA after correction;
    '' when the evidence does not reach that, and for counts (NumRet, NumRel): more documents retrieved is no
    finding."""
    if c is None or is_count(measure) or any(p >= ALPHA for p in c.corrected.values()):
        return ""
    return "+" if c.delta > 0 else "-"


def render(rows: list[Row], measures: list[NamedMeasure], fmt: str, baseline_name: str,
           significance: Significance = Significance()) -> str:
    labels = [m.label for m in measures]
    if fmt == "json":
        return json.dumps([{"run": r.run, "baseline": r.versus is None, **r.means, "missing_queries": r.missing,
                            "unjudged_queries": r.unjudged,
                            "versus_baseline": {k: asdict(v) for k, v in (r.versus or {}).items()}}
                           for r in rows], indent=2) + "\n"
    if fmt == "csv":
        return _leaderboard_csv(rows, measures, significance)
    many, latex = len(rows) > 1, fmt == "latex"
    header = [latex_escape(h) if latex else h for h in ["run", *labels]]
    best = {m.label: figure(max(r.means[m.label] for r in rows), m) for m in measures if not is_count(m)}
    table = []
    for r in rows:
        cells = [r.run + (" (baseline)" if many and r.versus is None else "")]
        for m in measures:
            value, mark = figure(r.means[m.label], m), significance_mark((r.versus or {}).get(m.label), m)
            if latex:  # the best of each measure in bold, as papers print it; the mark a superscript
                value = rf"\textbf{{{value}}}" if many and value == best.get(m.label) else value
                mark = f"$^{{{mark}}}$" if mark else ""
            cells.append(value + mark)
        table.append([latex_escape(cells[0]), *cells[1:]] if latex else cells)
    if many:
        counted = primary(measures).label
        header.append(latex_escape(f"W/T/L ({counted})") if latex else f"W/T/L ({counted})")
        for r, cells in zip(rows, table):
            c = (r.versus or {}).get(counted)
            cells.append(f"{c.wins}/{c.ties}/{c.losses}" if c else "-")
    if latex:
        legend = "".join(f"% {line}\n" for line in significance.legend(baseline_name).splitlines()) if many else ""
        return latex_table(header, table) + legend
    out = markdown_table(header, table) if fmt == "markdown" else text_table(header, table)
    if many:
        out += "\n" + significance.legend(baseline_name)
    return out


_CSV_TEST_NAMES = {"t": "t-test", "randomization": "randomization", "wilcoxon": "Wilcoxon"}


def _leaderboard_csv(rows: list[Row], measures: list[NamedMeasure], significance: Significance) -> str:
    """For pandas and spreadsheets: plain numbers, the baseline as a column, and for each measure the difference
    to the baseline (of the run figures: of the sums, for counts) with its 95% confidence interval and effect size
    (of the mean per-query difference; none for counts), significance mark, each test's p-value raw and
    corrected (the mark needs every corrected one below ALPHA; none for counts, as no mark) and win/tie/loss counts
    in columns of their own; then how many judged queries each run lacks and how many of its queries are unjudged."""
    labels = [m.label for m in measures]
    base = next(r for r in rows if r.versus is None)
    p_columns = []  # (column suffix, the p-value it takes from a comparison)
    for test in significance.tests:
        name = _CSV_TEST_NAMES[test]
        p_columns.append((f"p ({name})", lambda c, test=test: c.p(test)))
        if significance.correction != "none":
            p_columns.append((f"p ({name}, {CORRECTIONS[significance.correction]})",
                              lambda c, test=test: c.corrected[test]))
    header = ["run", "baseline", *labels]
    for suffix in ("delta", "delta 95% CI low", "delta 95% CI high", "effect size (d)", "vs baseline",
                   *[suffix for suffix, _ in p_columns], "W/T/L"):
        header += [f"{label} {suffix}" for label in labels]
    header += ["missing_queries", "unjudged_queries"]  # as JSON names them
    table = []
    for r in rows:
        versus = [(r.versus or {}).get(label) for label in labels]
        cells = [r.run, str(r.versus is None).lower(), *[_exact(r.means[m.label], m) for m in measures],
                 *[_exact(r.means[m.label] - base.means[m.label], m) if c else "" for c, m in zip(versus, measures)]]
        for part in (lambda c: c.ci95 and c.ci95[0], lambda c: c.ci95 and c.ci95[1],  # of per-query differences
                     lambda c: c.effect_size):
            cells += [repr(part(c)) if c and not is_count(m) and part(c) is not None else ""
                      for c, m in zip(versus, measures)]
        cells += [significance_mark(c, m) for c, m in zip(versus, measures)]
        for _, p_of in p_columns:
            cells += [repr(p_of(c)) if c and not is_count(m) else "" for c, m in zip(versus, measures)]
        table.append([*cells, *[f"{c.wins}/{c.ties}/{c.losses}" if c else "" for c in versus], r.missing, r.unjudged])
    return _csv(header, table)


def render_per_query(evaluations: list[Evaluation], measures: list[NamedMeasure], fmt: str, baseline: int = 0,
                     sort_by: str | None = None) -> str:
    """One row per run and judged query, then the run's mean ("all"). With several runs, `LABEL delta` columns give
    each query's value minus the baseline's (empty on the baseline's own rows), which is where a re-ranker's
    gains and losses show. `sort_by` (a label) orders each run's queries by that measure's delta, largest gain
    first (the baseline's by the value itself); otherwise they come in the evaluator's query order."""
    labels = [m.label for m in measures]
    compared = len(evaluations) > 1
    base = evaluations[baseline]
    header = ["run", "qid", *labels, *([f"{label} delta" for label in labels] if compared else [])]
    values = []
    for i, ev in enumerate(evaluations):
        rows = []
        for qid in ev.per_query[labels[0]]:
            rows.append([ev.run_name, qid, *[ev.per_query[label][qid] for label in labels]])
            if compared:
                rows[-1] += [None if i == baseline else ev.per_query[label][qid] - base.per_query[label][qid]
                             for label in labels]
        if sort_by is not None:
            column = 2 + labels.index(sort_by)
            if compared and i != baseline:
                column += len(labels)
            rows.sort(key=lambda row: -row[column])
        overall = [ev.run_name, "all", *[ev.overall(label) for label in labels]]
        if compared:
            overall += [None if i == baseline else ev.overall(label) - base.overall(label) for label in labels]
        values += [*rows, overall]
    if fmt == "json":
        return json.dumps([dict(zip(header, row)) for row in values], indent=2) + "\n"
    per_column = measures * (2 if compared else 1)
    if fmt == "csv":
        return _csv(header, [[run, qid, *["" if v is None else _exact(v, m) for v, m in zip(numbers, per_column)]]
                             for run, qid, *numbers in values])
    table = [[run, qid, *[figure(v, m) for v, m in zip(numbers[:len(labels)], measures)],
              *["" if v is None else signed_figure(v, m) for v, m in zip(numbers[len(labels):], measures)]]
             for run, qid, *numbers in values]
    if fmt == "latex":
        return latex_table([latex_escape(h) for h in header], [[latex_escape(c) for c in row] for row in table], 2)
    return markdown_table(header, table) if fmt == "markdown" else text_table(header, table)


def render_trec(evaluation: Evaluation, measures: list[NamedMeasure], per_query: bool) -> str:
    """trec_eval's own lines, `measure<TAB>qid<TAB>value`, the measure padded as trec_eval pads it: with
    `per_query`, each query's measures in trec_eval's order of query ids (as strings), then `all`; for scripts
    written against trec_eval's output. Measures keep their names here (nDCG@10, not ndcg_cut_10), and come in
    trec_eval's order, not -m's (`trec_eval_position`: map before ndcg_cut_10, P_5 before P_10). A judged query
    the run lacks counts as 0 in `all` but has no lines of its own, as trec_eval -q -c prints none for it."""
    measures = sorted(measures, key=trec_eval_position)
    labels = [m.label for m in measures]
    missing = set(evaluation.missing)
    qids = sorted(q for q in evaluation.per_query[labels[0]] if q not in missing) if per_query else []
    lines = [f"{m.label:<22}\t{qid}\t{figure(evaluation.per_query[m.label][qid], m)}" for qid in qids for m in measures]
    lines += [f"{m.label:<22}\tall\t{figure(evaluation.overall(m.label), m)}" for m in measures]
    return "".join(line + "\n" for line in lines)


def _csv(header: list[str], table: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(table)
    return buf.getvalue()


def text_table(header: list, table: list[list]) -> str:
    """Columns padded to their widest cell, two spaces apart (the leaderboard's and the budget report's)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in table]
    return "\n".join(line.rstrip() for line in lines) + "\n"


_LATEX_SPECIAL = {**{c: "\\" + c for c in "&%$#_{}"}, "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\\": r"\textbackslash{}"}


def latex_escape(text: object) -> str:
    """Text in a LaTeX cell as it reads: run names and measures hold _ (ndcg_cut_10), & or %."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in str(text))


def latex_table(header: list[str], table: list[list[str]], names: int = 1) -> str:
    """A booktabs tabular (\\usepackage{booktabs}) of cells already in LaTeX: the first `names` columns left,
    the figures right."""
    rows = [" & ".join(header) + r" \\", r"\midrule"] + [" & ".join(map(str, row)) + r" \\" for row in table]
    columns = "l" * names + "r" * (len(header) - names)
    return "\n".join([rf"\begin{{tabular}}{{{columns}}}", r"\toprule", *rows, r"\bottomrule", r"\end{tabular}"]) + "\n"


def markdown_table(header: list, table: list[list]) -> str:
    """A '|' in a cell is escaped: a run labelled a|b (eval a|b=FILE) split its row into one cell too many (the
    leaderboard's and the budget report's, whose header cells name models)."""

    def cells(row: list) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |"

    lines = [cells(header), "|" + "---|" * len(header)] + [cells(row) for row in table]
    return "\n".join(lines) + "\n"

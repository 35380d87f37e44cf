"""`rerank report`: the page opened in headless Chromium (Debian's `chromium`, driven by Playwright), checked for
what a reader sees, against `rerank eval` and `rerank budget` on the same real runs of TREC DL 2019."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from in_process import score

pytestmark = pytest.mark.data

CHROMIUM = os.environ.get("RERANK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _cli(home: Path, data_root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "RERANK_HOME": str(home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "rerank", *args], capture_output=True, text=True, env=env, cwd=home)
    if check and done.returncode != 0:
        raise AssertionError(f"rerank {' '.join(args)} failed:\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def dl(tmp_path_factory, data_root, session_home, tiny_tk) -> dict[str, Path]:
    """The shipped BM25 and BM25+RM3 candidates of DL 2019, and a tiny random TK re-ranking BM25's top 10 (a real
    score stage: it records each query's time), as files."""
    folder = tmp_path_factory.mktemp("report-runs")
    runs = {}
    for name, candidates in (("bm25", "bm25"), ("rm3", "bm25-rm3")):
        runs[name] = folder / f"{name}.run"
        _cli(session_home, data_root, "retrieve", "trec-dl-2019", "--candidates", candidates, "-o", str(runs[name]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RERANK_DATA", str(data_root))
        patch.setenv("RERANK_HOME", str(session_home))
        scored, _ = score(runs["bm25"].read_text(), tiny_tk, depth=10, cache=False)
    runs["tk"] = folder / "tk.run"
    runs["tk"].write_text(scored)
    return runs


@pytest.fixture
def cli(data_root, session_home):
    return lambda *args, check=True: _cli(session_home, data_root, *args, check=check)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium, or a skip that says what is missing (scripts/setup.sh installs both where it can)."""
    if CHROMIUM is None:
        pytest.skip("no chromium here: scripts/setup.sh installs Debian's `chromium` where apt-get can run (as root "
                    "or through sudo); elsewhere set RERANK_CHROMIUM to a Chromium binary")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


class View:
    """A page open in the browser, with every console message, page error and request it made."""

    def __init__(self, browser, path: Path):
        self.url = path.resolve().as_uri()
        self.page = browser.new_page()
        self.problems: list[str] = []
        self.page.on("console", lambda message: self.problems.append(f"console {message.type}: {message.text}"))
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("request", lambda request: request.url == self.url
                     or self.problems.append(f"request: {request.url}"))
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready=true]", timeout=10_000)

    def board(self) -> list[dict]:
        """The leaderboard's rows as a reader sees them (each figure's text and mark) and the exact figure each
        holds (`data-value`, which sorting reads)."""
        return self.page.eval_on_selector_all("#board tbody tr", """rows => rows.map(row => ({
            run: row.dataset.run,
            figures: Object.fromEntries(Array.from(row.querySelectorAll("td.figure")).map(cell => [
                cell.dataset.measure,
                {shown: cell.querySelector(".value").textContent, mark: cell.querySelector(".mark").textContent,
                 exact: parseFloat(cell.dataset.value),
                 detail: Array.from(cell.querySelectorAll(".detail")).map(line => line.textContent)}])),
            wtl: row.querySelector("td.wtl") ? row.querySelector("td.wtl").textContent : null}))""")

    def clean(self) -> None:
        assert self.problems == []
        self.page.close()


def _mark(versus: dict) -> str:
    """eval's rule: '+'/'-' where every test's corrected p is below 0.05."""
    if versus is None or any(p >= 0.05 for p in versus["corrected"].values()):
        return ""
    return "+" if versus["delta"] > 0 else "-"


def test_the_leaderboard_shows_eval_json_figures_and_sorts(cli, dl, browser, tmp_path):
    runs = [f"bm25={dl['bm25']}", f"rm3={dl['rm3']}", f"tk={dl['tk']}"]
    options = ["-m", "nDCG@10", "-m", "MRR@10", "-m", "MAP", "--baseline", "bm25"]
    cli("report", *runs, *options, "-o", str(tmp_path / "report.html"))
    expected = json.loads(cli("eval", *runs, *options, "--format", "json").stdout)
    legend = cli("eval", *runs, *options).stdout.strip().splitlines()[-1]
    view = View(browser, tmp_path / "report.html")
    rows = view.board()
    assert [row["run"] for row in rows] == [row["run"] for row in expected]  # eval's order: by nDCG@10
    for seen, row in zip(rows, expected):
        for label in ("nDCG@10", "MRR@10", "MAP"):
            figure = seen["figures"][label]
            assert figure["exact"] == row[label]
            assert figure["shown"] == f"{row[label]:.4f}"
            assert figure["mark"] == _mark(row["versus_baseline"].get(label))
            versus = row["versus_baseline"].get(label)
            if versus:  # the difference, its 95% interval, effect size, largest corrected p and W/T/L, as eval's
                low, high = versus["ci95"]
                assert figure["detail"] == [
                    f"Δ {versus['delta']:+.4f} [{low:+.4f}, {high:+.4f}]",
                    f"d {versus['effect_size']:+.2f} · p {max(versus['corrected'].values()):.3g} · "
                    f"{versus['wins']}/{versus['ties']}/{versus['losses']}"]
            else:
                assert figure["detail"] == []
        versus = row["versus_baseline"].get("nDCG@10")
        assert seen["wtl"] == (f"{versus['wins']}/{versus['ties']}/{versus['losses']}" if versus else "-")
    assert view.page.text_content(".legend") == legend
    # MAP marks rm3 better than bm25: the page shows the mark eval prints
    assert any(row["figures"]["MAP"]["mark"] == "+" for row in rows)

    def order() -> list[str]:
        return view.page.eval_on_selector_all("#board tbody tr", "rows => rows.map(row => row.dataset.run)")

    by = {label: sorted(expected, key=lambda row: -row[label]) for label in ("MRR@10", "MAP")}
    view.page.click("#board th:has-text('MRR@10')")
    assert order() == [row["run"] for row in by["MRR@10"]] != [row["run"] for row in expected]
    view.page.click("#board th:has-text('MRR@10')")  # again: ascending
    assert order() == [row["run"] for row in reversed(by["MRR@10"])]
    view.page.click("#board th:has-text('MAP')")
    assert order() == [row["run"] for row in by["MAP"]]
    view.clean()


def test_clicking_a_query_shows_both_rankings_and_untimed_runs_have_no_budget(cli, dl, browser, tmp_path, data_root):
    from rerank.data.formats import read_qrels
    from rerank.runs import load_run

    cli("report", f"bm25={dl['bm25']}", f"rm3={dl['rm3']}", "--top", "5", "-o", str(tmp_path / "report.html"))
    per_query = json.loads(cli("eval", f"bm25={dl['bm25']}", f"rm3={dl['rm3']}", "-q", "-m", "nDCG@10",
                               "--format", "json").stdout)
    gains = sorted((row for row in per_query if row["run"] == "rm3" and row["qid"] != "all"),
                   key=lambda row: -row["nDCG@10 delta"])
    view = View(browser, tmp_path / "report.html")
    # neither run carries timings: no time-budget section, a note that says why
    assert view.page.query_selector("#budget") is None
    assert "No time-budget section: no run carries per-query timings" in view.page.text_content("#notes")
    shown = view.page.eval_on_selector_all("#gains tbody tr", "rows => rows.map(row => row.dataset.qid)")
    assert shown[0] == gains[0]["qid"]  # the largest gain first
    assert view.page.text_content("#gains tbody tr td.num:last-child") == f"+{gains[0]['nDCG@10 delta']:.4f}"
    assert len(view.page.query_selector_all("#pq-chart rect.bar")) == 43
    view.page.click("#gains tbody tr >> nth=0")
    qid = shown[0]
    qrels = read_qrels(str(data_root / "trec-dl/qrels/qrels.dl19-passage.txt"))[qid]
    for name in ("bm25", "rm3"):
        with open(dl[name], encoding="utf-8") as handle:
            top = load_run(handle, name).queries[qid].as_trec_eval_reads().docids[:5]
        side = f"#detail .side[data-run='{name}'] li"
        assert view.page.eval_on_selector_all(side, "items => items.map(item => item.dataset.docid)") == top
        grades = view.page.eval_on_selector_all(f"{side} .grade", "badges => badges.map(badge => badge.textContent)")
        assert grades == [f"grade {qrels[d]}" if d in qrels else "unjudged" for d in top]
        texts = view.page.eval_on_selector_all(f"{side} .text", "texts => texts.map(text => text.textContent)")
        assert len(texts) == 5 and all(len(text) > 20 for text in texts)
    assert view.page.text_content("#detail h3").startswith(f"Query {qid}: ")
    # another measure redraws the view (and keeps the chosen query open)
    view.page.select_option("#pq-measure", "MAP")
    assert "Δ MAP" in view.page.text_content("#gains thead")
    assert view.page.is_visible("#detail .side[data-run='rm3']")
    view.clean()


def test_budget_curves_and_sentences_are_budgets_and_untimed_runs_are_notes(cli, dl, browser, tmp_path):
    runs = [f"bm25={dl['bm25']}", f"rm3={dl['rm3']}", f"tk={dl['tk']}"]
    cli("report", *runs, "--zero-untimed", "-o", str(tmp_path / "zero.html"))
    said = cli("budget", *runs, "--zero-untimed").stdout
    sentences = said.rstrip("\n").rsplit("\n\n", 1)[1].splitlines()  # after the tables, budget's words
    view = View(browser, tmp_path / "zero.html")
    assert sentences and view.page.eval_on_selector_all("ul.sentences li",
                                                        "items => items.map(item => item.textContent)") == sentences
    assert len(view.page.query_selector_all("#budget-chart path.curve")) == 3
    view.clean()

    cli("report", *runs, "-o", str(tmp_path / "timed.html"))  # bm25 and rm3 carry no timings
    view = View(browser, tmp_path / "timed.html")
    assert len(view.page.query_selector_all("#budget-chart path.curve")) == 1
    notes = view.page.text_content("#notes")
    assert "not on the time-budget curves: bm25" in notes and "rm3" in notes
    # each run's provenance, folded: tk's two stages with the checkpoint it scored with
    folded = view.page.query_selector_all("details.provenance")
    assert len(folded) == 3 and not any(d.get_attribute("open") is not None for d in folded)
    tk = "details.provenance >> nth=2"
    assert not view.page.is_visible(f"{tk} >> text=checkpoint_hash")
    view.page.click(f"{tk} >> summary")
    assert view.page.is_visible(f"{tk} >> text=checkpoint_hash")
    assert "stage 2: tk (score)" in view.page.text_content(tk)
    view.clean()


def test_one_run_shows_its_queries_and_rankings(cli, dl, browser, tmp_path):
    cli("report", str(dl["rm3"]), "-o", str(tmp_path / "one.html"))
    view = View(browser, tmp_path / "one.html")
    assert len(view.page.query_selector_all("#board tbody tr")) == 1
    view.page.click("#single tbody tr >> nth=0")
    assert len(view.page.query_selector_all("#detail .side li")) == 10
    view.clean()


def test_run_pipeline_writes_the_report_of_its_leaderboard(cli, browser, tmp_path, data_root):
    pipeline = tmp_path / "dl-report.toml"
    pipeline.write_text('dataset = "trec-dl-2019"\nmeasures = ["nDCG@10", "MAP"]\nbaseline = "bm25"\n'
                        '[[stage]]\nname = "bm25"\nkind = "candidates"\nrun = "bm25"\n'
                        '[[stage]]\nname = "rm3"\nkind = "candidates"\nrun = "bm25-rm3"\n')
    missing = tmp_path / "nope" / "report.html"
    done = cli("run", str(pipeline), "--report", str(missing), check=False)
    assert done.returncode != 0 and "folder" in done.stderr and "does not exist" in done.stderr
    assert "running" not in done.stderr  # refused before any stage ran
    done = cli("run", str(pipeline), "--report", str(tmp_path / "report.html"), "--format", "json")
    expected = json.loads(done.stdout)
    view = View(browser, tmp_path / "report.html")
    rows = view.board()
    assert [(row["run"], row["figures"]["MAP"]["exact"]) for row in rows] == [(r["run"], r["MAP"]) for r in expected]
    view.clean()


def _no_output(folder: Path) -> None:
    """Nothing half-written: no page and no temporary sibling."""
    assert sorted(p.name for p in folder.iterdir() if p.suffix != ".run") == []


@pytest.mark.parametrize("args", [
    ["{missing}"],
    ["bm25={bm25}", "--baseline", "nosuch"],
    ["bm25={bm25}", "--qrels", "trec-dl-2019"],
    ["bm25={bm25}", "rm3={rm3}", "--sort", "Bogus@3"],
    ["bm25={bm25}", "bm25={rm3}"],
    ["{bm25}", "--test", "t"],
])
def test_runs_and_qrels_errors_are_evals(cli, dl, tmp_path, args):
    """The same one line as eval's, a non-zero exit, and no page."""
    filled = [a.format(missing=tmp_path / "missing.run", **dl) for a in args]
    out = tmp_path / "out"
    out.mkdir()
    evaluated = cli("eval", *filled, check=False)
    reported = cli("report", *filled, "-o", str(out / "report.html"), check=False)
    assert evaluated.returncode != 0 and reported.returncode == evaluated.returncode
    assert reported.stderr == evaluated.stderr and len(reported.stderr.splitlines()) == 1
    _no_output(out)


def test_bad_outputs_and_disjoint_runs_are_refused_without_writing(cli, dl, tmp_path):
    done = cli("report", str(dl["bm25"]), "-o", str(tmp_path / "nope" / "report.html"), check=False)
    assert done.returncode != 0 and done.stderr.startswith("rerank: error: -o ")
    assert "folder" in done.stderr and "does not exist" in done.stderr and not (tmp_path / "nope").exists()
    done = cli("report", f"bm25={dl['bm25']}", "-o", str(dl["bm25"]), check=False)
    assert done.returncode != 0 and "one of the runs to read" in done.stderr
    # the first 20 queries of one run, the other 23 of another: nothing to compare query by query
    lines = dl["bm25"].read_text().splitlines(keepends=True)
    qids = list(dict.fromkeys(line.split()[0] for line in lines if not line.startswith("#")))
    for name, kept in (("first", qids[:20]), ("rest", qids[20:])):
        (tmp_path / f"{name}.run").write_text("".join(line for line in lines
                                                      if line.startswith("#") or line.split()[0] in kept))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("an earlier page")
    done = cli("report", f"a={tmp_path / 'first.run'}", f"b={tmp_path / 'rest.run'}", "-o", str(out / "report.html"),
               check=False)
    assert done.returncode != 0 and len(done.stderr.splitlines()) == 1
    assert "share no judged query" in done.stderr and "Traceback" not in done.stderr
    assert (out / "report.html").read_text() == "an earlier page" and len(list(out.iterdir())) == 1

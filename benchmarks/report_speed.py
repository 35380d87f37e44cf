"""`rerank report` on TREC DL 2019: seconds to write the page of two runs, and ms until it is drawn in Chromium.

The runs are the shipped BM25 and BM25+RM3 candidates (43 queries x 100). The command is timed as a whole process,
start-up included (median of 5 after a warm-up), in wall time and in the CPU time it used (which other work on a
shared machine does not inflate), beside `rerank eval` of the same runs timed alike; the page is opened 5 times in headless Chromium (Debian's, through
Playwright), each in a fresh tab, and the time from navigation start to the page's `rerank-ready` mark (set once the
leaderboard, per-query chart and tables are drawn) is read from the browser's own clock.
Usage: python benchmarks/report_speed.py   (writes benchmarks/results/report.{json,md}; needs chromium)
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, write_results  # noqa: E402

OPENINGS = 5
REPEATS = 5


def timed(command: list[str]) -> tuple[float, float]:
    """Median wall and CPU seconds (user + system) of `command` as a whole process, after one warm-up run."""
    subprocess.run(command, check=True, capture_output=True)
    walls, cpus = [], []
    for _ in range(REPEATS):
        before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(time.perf_counter() - began)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def ready_ms(page_path: Path) -> list[float]:
    """Milliseconds from navigation start to the `rerank-ready` mark, once per fresh tab."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("RERANK_CHROMIUM") or shutil.which("chromium")
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(OPENINGS + 1):  # the first opening warms the browser up, and is not counted
            page = browser.new_page()
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready=true]")
            times.append(page.evaluate("performance.getEntriesByName('rerank-ready')[0].startTime"))
            page.close()
        browser.close()
    return times[1:]


def main() -> None:
    no_options(__doc__)
    work = Path(tempfile.mkdtemp(prefix="rerank-report-bench-"))
    rerank = [sys.executable, "-m", "rerank"]
    for name, candidates in (("bm25", "bm25"), ("rm3", "bm25-rm3")):
        subprocess.run([*rerank, "retrieve", "trec-dl-2019", "--candidates", candidates, "-o", str(work / f"{name}.run")],
                       check=True)
    page = work / "report.html"
    command = [*rerank, "report", f"bm25={work / 'bm25.run'}", f"rm3={work / 'rm3.run'}", "--baseline", "bm25",
               "-o", str(page)]
    seconds, cpu = timed(command)
    eval_seconds, eval_cpu = timed([*rerank, "eval", f"bm25={work / 'bm25.run'}", f"rm3={work / 'rm3.run'}"])
    opened = ready_ms(page)
    results = {"runs": 2, "queries": 43, "write_s": round(seconds, 3), "write_cpu_s": round(cpu, 3),
               "eval_s": round(eval_seconds, 3), "eval_cpu_s": round(eval_cpu, 3),
               "target_write_s": 5.0,
               "ready_ms": round(statistics.median(opened), 1), "ready_ms_each": [round(t, 1) for t in opened],
               "target_ready_ms": 1000, "page_kb": round(page.stat().st_size / 1024, 1),
               "cpus": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}
    write_results("report", results, (
        "# rerank report: speed on TREC DL 2019\n\n"
        "Two runs, the shipped BM25 and BM25+RM3 candidates (43 judged queries x 100), made and reported with:\n\n"
        "    rerank retrieve trec-dl-2019 --candidates bm25 -o bm25.run\n"
        "    rerank retrieve trec-dl-2019 --candidates bm25-rm3 -o rm3.run\n"
        "    rerank report bm25=bm25.run rm3=rm3.run --baseline bm25 -o report.html\n\n"
        "| what | measured | target |\n|---|---|---|\n"
        f"| writing the page (whole process, median of {REPEATS}: wall) | {results['write_s']} s | < 5 s |\n"
        f"| the same, CPU time (user + system) | {results['write_cpu_s']} s | |\n"
        f"| for comparison: `rerank eval` of the same runs, wall / CPU | {results['eval_s']} s / "
        f"{results['eval_cpu_s']} s | |\n"
        f"| page drawn in headless Chromium (navigation start to `rerank-ready`, median of {OPENINGS}) | "
        f"{results['ready_ms']} ms | < 1000 ms |\n\n"
        f"The page is {results['page_kb']} KB (texts of every shown document included). Each opening: "
        f"{', '.join(map(str, results['ready_ms_each']))} ms. Machine: {results['cpus']} CPUs, load average "
        f"{results['load_average']} when measured (shared with other work).\n\n"
        "Usage: `python benchmarks/report_speed.py` (Chromium from `apt-get install chromium`, Playwright from "
        "`pip install -e '.[test]'`).\n"))


if __name__ == "__main__":
    main()

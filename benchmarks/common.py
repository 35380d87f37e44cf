"""Helpers shared by the benchmark scripts: timing commands and writing results as JSON + Markdown."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def no_options(doc: str) -> None:
    """For the scripts that take no options: `--help` prints their docstring, anything else is refused (neither runs
    the benchmark, which takes minutes and rewrites its results)."""
    argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()


def time_command(args: list[str], repeats: int = 3, **kw) -> float:
    """Median wall time in seconds of a whole process (start-up included), after one warm-up run."""
    subprocess.run(args, check=True, capture_output=True, **kw)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, **kw)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def write_results(name: str, results: dict, markdown: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)

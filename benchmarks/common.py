"""Helpers shared by the benchmark scripts: timing commands and writing results as JSON + Markdown."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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


def hand_written(markdown: str) -> list[str]:
    """The `## Notes ...` sections of a results file: written by hand, not by its script."""
    sections = ("\n" + markdown).split("\n## ")[1:]
    return ["## " + part.rstrip("\n") + "\n" for part in sections if part.startswith("Notes")]


def write_results(name: str, results: dict, markdown: str) -> None:
    """Write NAME.json and NAME.md; the earlier NAME.md's hand-written notes are kept at its end (a re-run
    erased them), and said on stderr, to be checked against the new figures."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    earlier = RESULTS / f"{name}.md"
    notes = hand_written(earlier.read_text()) if earlier.exists() else []
    kept = [section for section in notes if section not in markdown]
    if kept:
        markdown = markdown.rstrip("\n") + "\n\n" + "\n".join(kept)
        print(f"kept {len(kept)} hand-written section(s) of the earlier {earlier.name}: check that they still hold",
              file=sys.stderr)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    earlier.write_text(markdown)
    print(markdown)

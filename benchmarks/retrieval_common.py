"""Shared by the retrieval benchmarks: a RERANK_HOME, the ES-compatible server, cached runs, `rerank eval`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from rerank.retrieve.es_test_server import running_server

WORK = Path(__file__).resolve().parent / "work" / "retrieval"
HOME = Path(os.environ.get("RERANK_HOME") or WORK)  # indexes and cached runs (runs/bench/)
ENV = {**os.environ, "RERANK_HOME": str(HOME), "HF_HUB_OFFLINE": "1"}


def rerank(*args: str, output: Path | None = None) -> str:
    """Run the real CLI; with `output`, only when that run is not cached yet."""
    if output is not None and output.exists():
        return ""
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        args = (*args, "-o", str(output))
    done = subprocess.run([sys.executable, "-m", "rerank", *args], capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        raise SystemExit(f"rerank {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def run_path(dataset: str, name: str) -> Path:
    return HOME / "runs" / "bench" / f"{dataset}.{name}.run"


def evaluate(dataset: str, names: list[str], measures=("MAP", "nDCG@10", "Recall@100")) -> dict[str, dict]:
    """cached run name -> {measure: value}, from `rerank eval` (the project's one evaluator)."""
    paths = [str(run_path(dataset, n)) for n in names]
    args = ["eval", *paths, "--format", "json"]
    for measure in measures:
        args += ["-m", measure]
    rows = json.loads(rerank(*args))
    out = {}
    for name, path in zip(names, paths):  # rows are labelled by stage name, or name:file when two share one
        row = next(r for r in rows if r["run"] == name or r["run"].endswith(":" + path))
        out[name] = {m: row[m] for m in measures}
    return out


@contextlib.contextmanager
def es_server():
    """$RERANK_ES_URL if set; else noida-db started on a free 127.0.0.1 port (stopped by PID afterwards)."""
    if os.environ.get("RERANK_ES_URL"):
        yield os.environ["RERANK_ES_URL"]
        return
    (WORK / "noida").mkdir(parents=True, exist_ok=True)
    with running_server(WORK / "noida") as (url, _process):
        yield url


def load_average() -> float:
    return os.getloadavg()[0]

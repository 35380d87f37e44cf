"""The reference evaluator we check ourselves against: trec_eval (Anserini's SearchCollection, the reference
retriever, is run by benchmarks/retrieve_speed.py and the Lucene back end itself).

trec_eval ships inside the Anserini fatjar (for several platforms); we extract the one for this
machine on first use. Tests and benchmarks use it; the evaluator itself does not.
"""

from __future__ import annotations

import platform
import stat
import subprocess
import zipfile
from pathlib import Path

from ..errors import BackendError
from ..paths import cache_dir
from ..retrieve.jvm import fatjar

_PLATFORMS = {("Linux", "x86_64"): "linux-amd64", ("Linux", "i386"): "linux-i386",
              ("Darwin", "x86_64"): "macosx-x86_64", ("Darwin", "arm64"): "macosx-aarch64"}


def trec_eval_binary() -> Path:
    key = _PLATFORMS.get((platform.system(), platform.machine()))
    if key is None:
        raise BackendError(f"the Anserini fatjar has no trec_eval for {platform.system()} {platform.machine()}")
    target = cache_dir() / "bin" / f"trec_eval-{key}"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(fatjar()) as jar:
            target.write_bytes(jar.read(f"trec_eval/trec_eval-{key}"))
        target.chmod(target.stat().st_mode | stat.S_IXUSR)
    return target


def trec_eval(qrels: Path, run: Path, measures: list[str], min_rel: int = 1, per_query: bool = False,
              depth: int | None = None, complete: bool = True) -> dict:
    """Run trec_eval -c (-M depth; without -c unless `complete`); returns {measure: value} (or {(measure, qid):
    value} with per_query)."""
    args = [str(trec_eval_binary()), *(["-c"] if complete else []), "-l", str(min_rel),
            *(["-M", str(depth)] if depth else [])]
    for m in measures:
        args += ["-m", m]
    if per_query:
        args.append("-q")
    done = subprocess.run([*args, str(qrels), str(run)], capture_output=True, text=True)
    if done.returncode != 0:
        raise BackendError(f"trec_eval failed: {done.stderr.strip()}")
    out = {}
    for line in done.stdout.splitlines():
        name, qid, value = line.split()
        if name == "runid":  # the run's tag (official's first line), not a figure
            continue
        if per_query:
            out[(name, qid)] = float(value)
        elif qid == "all":
            out[name] = float(value)
    return out

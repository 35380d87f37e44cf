"""The benchmark scripts answer `--help` with what they do, and nothing else: none starts its run (minutes of
work that rewrites benchmarks/results/)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.stem not in ("common", "retrieval_common"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_only_describes(script, tmp_path):
    env = {**os.environ, "RERANK_HOME": str(tmp_path), "TMPDIR": str(tmp_path)}  # a run that starts stays here
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
    summary = ast.get_docstring(ast.parse((BENCHMARKS / script).read_text())).splitlines()[0]
    assert summary in done.stdout  # what it does, from its header
    assert not any(tmp_path.iterdir())


def test_a_rerun_keeps_the_hand_written_notes(tmp_path, monkeypatch, capsys):
    """eval_speed.py and bert_speed.py rewrote their .md whole on every run, erasing the notes added by hand."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write_results("speed", {"ratio": 1.5}, "# Speed\n\nratio 1.5\n")
    with open(tmp_path / "speed.md", "a") as notes:
        notes.write("\n## Notes (added by hand)\n\nMeasured on a busy machine.\n")
    common.write_results("speed", {"ratio": 1.4}, "# Speed\n\nratio 1.4\n")
    assert (tmp_path / "speed.md").read_text() == ("# Speed\n\nratio 1.4\n\n## Notes (added by hand)\n\n"
                                                   "Measured on a busy machine.\n")
    assert "kept 1 hand-written section(s) of the earlier speed.md" in capsys.readouterr().err
    common.write_results("speed", {"ratio": 1.4}, "# Speed\n\nratio 1.4\n")  # kept once, not twice
    assert (tmp_path / "speed.md").read_text().count("## Notes") == 1
    (tmp_path / "top.md").write_text("## Notes (added by hand)\n\nAt the very top.\n")
    common.write_results("top", {}, "# Top\n")
    assert (tmp_path / "top.md").read_text() == "# Top\n\n## Notes (added by hand)\n\nAt the very top.\n"

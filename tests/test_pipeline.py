"""Pipelines run every stage, write runs/, reuse unchanged runs and print the leaderboard."""

import pytest

pytestmark = pytest.mark.data


def test_dl19_candidates_pipeline_reuses_runs(rerank, session_home):
    from pathlib import Path

    spec = Path(__file__).resolve().parent.parent / "pipelines" / "trec-dl-2019-candidates.toml"
    first = rerank("run", str(spec))
    assert "bm25 (baseline)" in first.stdout and "0.5058" in first.stdout
    run_file = session_home / "runs" / "trec-dl-2019-candidates" / "bm25.run"
    stamp = run_file.stat().st_mtime_ns
    second = rerank("run", str(spec))
    assert "up to date" in second.stderr and run_file.stat().st_mtime_ns == stamp
    assert second.stdout == first.stdout


def test_changed_stage_is_recomputed(rerank, session_home, tmp_path):
    spec = tmp_path / "p.toml"
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 5\n')
    rerank("run", str(spec))
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 3\n')
    again = rerank("run", str(spec))
    assert "running candidates" in again.stderr
    assert again.stdout.splitlines()[1].startswith("c ")  # the stage's name labels its row, not the shipped run's


def test_replayed_candidates_take_a_name(rerank):
    named = rerank("retrieve", "trecqa-dev", "--candidates", "--k", "2", "--name", "first").stdout
    assert '"name": "first"' in named and '"run": "candidates"' in named
    assert {line.split()[-1] for line in named.splitlines() if not line.startswith("#")} == {"first"}

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


def test_a_topics_file_is_followed_and_scored_against_the_pipeline_data_set(rerank, session_home, tmp_path):
    """Editing a topics file the pipeline names recomputes its stage (the path alone did not change), and runs
    from it are judged by the pipeline's data set (they named none, and the leaderboard failed)."""
    import os

    topics = tmp_path / "topics.tsv"
    topics.write_text("1\tmeasurement of dielectric constant of liquids\n2\tmathematical analysis\n")
    spec = tmp_path / "mine.toml"
    spec.write_text(f'dataset = "vaswani"\n[index]\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\n'
                    f'topics = "{topics}"\n')
    first = rerank("run", str(spec))
    assert first.stdout.splitlines()[1].startswith("bm25 ")
    topics.write_text("1\tmeasurement of dielectric constant of liquids\n")
    os.utime(topics, ns=(topics.stat().st_atime_ns, topics.stat().st_mtime_ns + 10**9))  # a later edit, surely
    again = rerank("run", str(spec))
    assert "running retrieve" in again.stderr
    run = (session_home / "runs" / "mine" / "bm25.run").read_text()
    assert {line.split()[0] for line in run.splitlines() if not line.startswith("#")} == {"1"}


def test_replayed_candidates_take_a_name(rerank):
    named = rerank("retrieve", "trecqa-dev", "--candidates", "--k", "2", "--name", "first").stdout
    assert '"name": "first"' in named and '"run": "candidates"' in named
    assert {line.split()[-1] for line in named.splitlines() if not line.startswith("#")} == {"first"}

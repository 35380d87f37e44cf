"""--sort (and a pipeline's `sort`) accept a measure spelled any way -m / `measures` accept it: `-m AP --sort AP`
was refused ("--sort 'AP' is not one of the measures: MAP"), as were R@100, RR, P_5 and ndcg_cut.10."""

import subprocess
import sys

import pytest

# a retrieves more (NumRet, the first measure, puts it on top) but b ranks the relevant documents higher.
RUN_A = "1 Q0 d2 1 3.0 a\n1 Q0 d1 2 2.0 a\n1 Q0 d5 3 1.0 a\n2 Q0 d4 1 3.0 a\n2 Q0 d6 2 2.0 a\n2 Q0 d7 3 1.0 a\n"
RUN_B = "1 Q0 d1 1 3.0 b\n1 Q0 d2 2 2.0 b\n2 Q0 d3 1 3.0 b\n2 Q0 d4 2 2.0 b\n"
QRELS = "1 0 d1 1\n2 0 d3 1\n"


@pytest.mark.parametrize("measure, sort", [("AP", "AP"), ("AP", "map"), ("R@100", "R@100"), ("RR", "RR"),
                                           ("P_5", "P_5"), ("nDCG@10", "ndcg_cut.10"), ("MAP", "AP")])
def test_eval_sort_takes_the_measure_as_spelled(tmp_path, measure, sort):
    (tmp_path / "a.run").write_text(RUN_A)
    (tmp_path / "b.run").write_text(RUN_B)
    (tmp_path / "qrels").write_text(QRELS)
    done = subprocess.run([sys.executable, "-m", "rerank", "eval", "a.run", "b.run", "--qrels", "qrels",
                           "-m", "NumRet", "-m", measure, "--sort", sort], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("b.run ") and lines[2].startswith("a.run (baseline)"), done.stdout


def test_eval_sort_still_refuses_a_measure_not_asked_for(tmp_path):
    (tmp_path / "a.run").write_text(RUN_A)
    (tmp_path / "qrels").write_text(QRELS)
    done = subprocess.run([sys.executable, "-m", "rerank", "eval", "a.run", "--qrels", "qrels", "-m", "AP",
                           "--sort", "P_5"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "--sort 'P_5' is not one of the measures: MAP" in done.stderr


@pytest.mark.parametrize("sort", ["AP", "R@100", "P_5", "MAP"])
def test_pipeline_sort_takes_the_measure_as_spelled(tmp_path, sort):
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "p.toml"
    spec.write_text(f'dataset = "vaswani"\nmeasures = ["AP", "R@100", "P_5"]\nsort = "{sort}"\n'
                    '[[stage]]\nname = "bm25"\nkind = "retrieve"\n')
    load_pipeline(spec)

"""`rerank eval` against trec_eval on one 1,000-query x 1,000-document run (time ratio, same files).

Both are timed as whole processes from the shell, start-up included, on the same run and qrels, for
the same measures. The run and qrels are generated (seeded), since only their size matters here.
Usage: python benchmarks/eval_speed.py   (writes benchmarks/results/eval_speed.{json,md})
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, time_command, write_results  # noqa: E402

from rerank.evaluate.reference import trec_eval_binary  # noqa: E402

QUERIES, DEPTH = 1000, 1000
MEASURES = [("MAP", "map"), ("MRR", "recip_rank"), ("P@1", "P.1"), ("nDCG@10", "ndcg_cut.10")]


def main() -> None:
    no_options(__doc__)
    rng = random.Random(0)
    work = Path(tempfile.mkdtemp(prefix="rerank-eval-bench-"))
    run, qrels = work / "run.txt", work / "qrels.txt"
    with open(run, "w") as r, open(qrels, "w") as q:
        for qid in range(QUERIES):
            docs = rng.sample(range(100_000), DEPTH)
            for rank, doc in enumerate(docs, 1):
                r.write(f"{qid} Q0 D{doc} {rank} {DEPTH - rank + rng.random():.6f} bench\n")
            for doc in set(rng.sample(docs, 20) + rng.sample(range(100_000), 20)):
                q.write(f"{qid} 0 D{doc} {rng.randint(0, 3)}\n")
    ours = [sys.executable, "-m", "rerank", "eval", str(run), "--qrels", str(qrels)]
    for label, _ in MEASURES:
        ours += ["-m", label]
    reference = [str(trec_eval_binary()), "-c"]
    for _, name in MEASURES:
        reference += ["-m", name]
    reference += [str(qrels), str(run)]
    t_ours, t_ref = time_command(ours, repeats=5), time_command(reference, repeats=5)
    results = {"queries": QUERIES, "depth": DEPTH, "lines": QUERIES * DEPTH, "measures": [m for m, _ in MEASURES],
               "rerank_eval_s": round(t_ours, 3), "trec_eval_s": round(t_ref, 3), "ratio": round(t_ours / t_ref, 2),
               "target_ratio": 1.5}
    write_results("eval_speed", results, (
        "# rerank eval vs trec_eval\n\n"
        f"Run of {QUERIES} queries x {DEPTH} documents ({QUERIES * DEPTH:,} lines), measures "
        f"{', '.join(results['measures'])}; whole processes, median of 5 after a warm-up.\n\n"
        "| tool | seconds |\n|---|---|\n"
        f"| rerank eval | {results['rerank_eval_s']} |\n| trec_eval (Anserini fatjar) | {results['trec_eval_s']} |\n\n"
        f"Ratio: **{results['ratio']}x** (target: within 1.5x).\n"))


if __name__ == "__main__":
    main()

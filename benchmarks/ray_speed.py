"""Scoring throughput on Ray workers (`rerank score --ray`) against one process, on the same pairs and threads.

The same (query, passage) pairs of the TREC DL 2019 BM25 candidates (the first --queries queries, --depth deep)
are scored by the code path of `rerank score --no-cache` (score_stream) in this process, and with its model work on
1 and 2 workers of a local Ray instance (score_stream with a scaleout.RayEngine, as `--ray` runs it), at
the same total torch threads (2: one process of 2 threads, 1 worker of 2, 2 workers of 1; and 1: one process of 1
thread, 1 worker of 1). Rounds alternate between the set-ups so that load from other processes hits all alike; each
round starts from an empty passage cache (the model's `forget`); the best and the median round are reported, and
the scores must agree to < 1e-5. Ray's start and the workers' model loading are timed apart, not in the rounds.

Usage: nice -n 5 python benchmarks/ray_speed.py [--model minilm-bi] [--checkpoint DIR] [--queries 8] [--depth 50]
[--rounds 3]   (writes benchmarks/results/ray.{json,md})
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_results  # noqa: E402

SETUPS = (("one process", 0, 2), ("ray", 1, 2), ("ray", 2, 1), ("one process", 0, 1), ("ray", 1, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm-bi")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import ray

    from rerank.docstore import doc_store_for
    from rerank.models.base import load_model
    from rerank.retrieve.api import candidates
    from rerank.runs import RunReader, Stream
    from rerank.scaleout import RayEngine, RayOptions
    from rerank.score import score_stream

    text = io.StringIO()
    run = candidates("trec-dl-2019", "bm25")
    Stream(run.header, itertools.islice(run.rankings, args.queries)).write(text)
    stream_text = text.getvalue()
    header = RunReader(io.StringIO(stream_text), "bm25").header
    attached = (header, doc_store_for(header).origin)
    pairs = sum(min(len(r), args.depth) for r in RunReader(io.StringIO(stream_text), "bm25"))

    began = time.perf_counter()
    # every set-up's pool is loaded once and stays; Ray's CPUs are accounting (a pool holds its own while idle), so
    # the instance counts theirs all, and only one set-up runs at a time on the 2 real cores
    pooled = sum(workers * threads for kind, workers, threads in SETUPS if kind == "ray")
    ray.init(num_cpus=pooled, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith(("RERANK_", "HF_"))
                                       or k == "PYTHONPATH"}})
    ray_start = time.perf_counter() - began

    models, engines, loading = {}, {}, {}
    for kind, workers, threads in SETUPS:
        began = time.perf_counter()
        if kind == "ray":
            engine = RayEngine(RayOptions("auto", workers=workers, threads=threads))
            models[kind, workers, threads] = engine.load(args.model, args.checkpoint, {"threads": threads}, attached)
            engines[kind, workers, threads] = engine
        else:
            models[kind, workers, threads] = load_model(args.model, args.checkpoint, threads=threads)
        loading[kind, workers, threads] = time.perf_counter() - began

    def one_round(setup) -> tuple[float, list]:
        import torch

        model = models[setup]
        model.forget()
        if setup[0] != "ray":
            torch.set_num_threads(setup[2])  # each loaded model set it; the last one loaded would win
        began = time.perf_counter()
        reader = RunReader(io.StringIO(stream_text), "bm25")
        scored = score_stream(Stream(reader.header, iter(reader)), model, args.depth, cache=False,
                              engine=engines.get(setup))
        scores = [s for ranking in scored.rankings for s in ranking.scores[: args.depth]]
        return time.perf_counter() - began, scores

    seconds = {setup: [] for setup in SETUPS}
    reference = None
    worst = 0.0
    for _ in range(args.rounds):
        for setup in SETUPS:
            took, scores = one_round(setup)
            seconds[setup].append(took)
            reference = reference or scores
            worst = max(worst, max(abs(a - b) for a, b in zip(scores, reference)))
    for engine in engines.values():
        engine.close()
    ray.shutdown()
    assert worst < 1e-5, f"scores differ by {worst}"

    def label(setup) -> str:
        kind, workers, threads = setup
        return f"one process, {threads} thread(s)" if kind != "ray" else f"ray, {workers} worker(s) x {threads} thread(s)"

    rows = []
    for setup in SETUPS:
        best, median = min(seconds[setup]), statistics.median(seconds[setup])
        alone = min(seconds["one process", 0, setup[1] * setup[2] if setup[0] == "ray" else setup[2]])
        rows.append({"setup": label(setup), "total_threads": setup[2] * max(setup[1], 1), "best_s": round(best, 3),
                     "median_s": round(median, 3), "pairs_per_s": round(pairs / best, 1),
                     "vs_one_process": round(best / alone, 3), "load_s": round(loading[setup], 1)})
    results = {"model": args.model, "checkpoint": args.checkpoint, "queries": args.queries, "depth": args.depth,
               "pairs": pairs, "rounds": args.rounds, "ray_version": ray.__version__, "ray_start_s": round(ray_start, 1),
               "max_score_difference": worst, "cpus": os.cpu_count(), "machine": platform.processor() or
               platform.machine(), "setups": rows}
    command = (f"nice -n 5 python benchmarks/ray_speed.py --model {args.model}"
               f"{f' --checkpoint {args.checkpoint}' if args.checkpoint else ''} --queries {args.queries} "
               f"--depth {args.depth} --rounds {args.rounds}")
    lines = [
        "# Ray scale-out: scoring throughput (`rerank score --ray`)", "",
        f"`{command}` (Ray {ray.__version__}): {pairs} pairs of TREC DL 2019's BM25 candidates ({args.queries} "
        f"queries, top {args.depth}) scored by {args.model} with --no-cache; best of {args.rounds} rounds "
        "(median beside it). **This machine has 2 cores shared with about five other developers' jobs**: the "
        "figures are noisy, and 2 workers cannot show a cluster's scaling here, only the overhead of Ray's path.", "",
        "| set-up | total threads | best s | median s | pairs/s | time vs one process, same threads | model load s |",
        "|---|---|---|---|---|---|---|",
        *[f"| {r['setup']} | {r['total_threads']} | {r['best_s']} | {r['median_s']} | {r['pairs_per_s']} | "
          f"{r['vs_one_process']} | {r['load_s']} |" for r in rows], "",
        f"Ray's local instance took {ray_start:.1f} s to start; each set-up's workers load the model once (model "
        f"load, not in the rounds). Scores of every set-up agree to {worst:.1e}.", "",
    ]
    write_results("ray", results, "\n".join(lines))


if __name__ == "__main__":
    main()

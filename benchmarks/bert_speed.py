"""BERT cross-encoder inference speed on CPU: `rerank score` against sentence-transformers, and latency by depth.

1. Throughput: the same (query, passage) pairs of the TREC DL 2019 BM25 top-100, scored by the code
   path of `rerank score --model bert --no-cache` (score_stream: per query, length-sorted batches,
   inference_mode), the same with `--runtime onnx` (ONNX Runtime), and by sentence-transformers'
   `CrossEncoder.predict` loading the same checkpoint (identity activation, same max_length, batch 32).
   Rounds alternate between the three so that load from other processes hits all alike; the best
   round of each is reported, and the median. Scores must agree to < 1e-4.
2. Latency: per-query milliseconds (the Timing the score stage writes) at depth 10, 20, 50, 100, both runtimes.
3. Optional int8 (dynamic quantisation): throughput and nDCG@10 against fp32.

Usage: python benchmarks/bert_speed.py --checkpoint DIR [--queries 43] [--rounds 2] [--int8]
(writes benchmarks/results/bert_speed.{json,md}). Process start-up and model loading are excluded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_results  # noqa: E402

import torch  # noqa: E402

from rerank.data import get_dataset  # noqa: E402
from rerank.evaluate.measures import evaluate, parse_measure  # noqa: E402
from rerank.models.base import load_model  # noqa: E402
from rerank.retrieve.api import candidates  # noqa: E402
from rerank.runs import Run, RunHeader, Stream  # noqa: E402
from rerank.score import score_stream  # noqa: E402


def rerank_run(model, rankings, depth: int) -> tuple[list, float]:
    """Score through the score stage (no cache); returns rankings and wall seconds."""
    stream = Stream(RunHeader({"dataset": "trec-dl-2019"}), [r.head(depth) for r in rankings])
    began = time.perf_counter()
    out = list(score_stream(stream, model, depth, cache=False).rankings)
    return out, time.perf_counter() - began


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--queries", type=int, default=43, help="first N of the 43 judged DL 2019 queries")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sentence_transformers import CrossEncoder

    dataset = get_dataset("trec-dl-2019")
    rankings = list(candidates("trec-dl-2019", "bm25").rankings)[: args.queries]
    topics, texts = dataset.topics(), dataset.doc_texts()
    ours = load_model("bert", args.checkpoint, batch_size=32)
    onnx = load_model("bert", args.checkpoint, batch_size=32, runtime="onnx")
    torch.set_num_threads(args.threads)
    reference = CrossEncoder(args.checkpoint, device="cpu", max_length=ours.max_length,
                             activation_fn=torch.nn.Identity(), local_files_only=True)
    pairs = [(topics[r.qid], texts[d]) for r in rankings for d in r.docids]
    seconds: dict[str, list[float]] = {"torch": [], "onnx": [], "crossencoder": []}
    for _ in range(args.rounds):  # alternate, so that load from other processes hits all three alike
        scored, spent = rerank_run(ours, rankings, 100)
        seconds["torch"].append(spent)
        onnx_scored, spent = rerank_run(onnx, rankings, 100)
        seconds["onnx"].append(spent)
        began = time.perf_counter()
        ref_scores = reference.predict(pairs, batch_size=32, show_progress_bar=False)
        seconds["crossencoder"].append(time.perf_counter() - began)

    def flat(rs):
        by_pair = {(r.qid, d): s for r in rs for d, s in zip(r.docids, r.scores)}
        return [by_pair[(r.qid, d)] for r in rankings for d in r.docids]

    n = len(pairs)
    throughput = {"pairs": n, "queries": len(rankings), "rounds": args.rounds, "threads": args.threads,
                  "load_average_1min": os.getloadavg()[0]}
    for name, spent in seconds.items():
        throughput[f"{name}_pairs_per_s_best"] = n / min(spent)
        throughput[f"{name}_pairs_per_s_median"] = n / statistics.median(spent)
    for name, scores in (("torch", flat(scored)), ("onnx", flat(onnx_scored))):
        throughput[f"{name}_ratio_best"] = min(seconds["crossencoder"]) / min(seconds[name])
        throughput[f"{name}_ratio_median"] = statistics.median(seconds["crossencoder"]) / statistics.median(seconds[name])
        throughput[f"{name}_max_abs_score_difference"] = max(abs(a - float(b)) for a, b in zip(scores, ref_scores))

    latency: dict[str, dict] = {"torch": {}, "onnx": {}}
    for runtime, model in (("torch", ours), ("onnx", onnx)):
        for depth in (10, 20, 50, 100):
            out, _ = rerank_run(model, rankings, depth)
            ms = [r.timings[-1].ms for r in out]
            latency[runtime][depth] = {"median_ms": statistics.median(ms), "p95_ms": percentile(ms, 0.95),
                                       "queries": len(ms)}

    results = {"checkpoint": str(Path(args.checkpoint).resolve()), "checkpoint_hash": ours.checkpoint_hash,
               "max_length": ours.max_length, "throughput": throughput, "latency": latency}
    if args.int8:
        measure = parse_measure("nDCG@10", dataset.min_rel)
        qrels = dataset.qrels()

        def ndcg(rs):
            return evaluate(Run(RunHeader(), {r.qid: r for r in rs}, "x"), qrels, [measure]).mean(measure.label)

        quantised = load_model("bert", args.checkpoint, batch_size=32, quantize=True)
        q_scored, q_seconds = rerank_run(quantised, rankings, 100)
        qrels = {q: v for q, v in qrels.items() if q in {r.qid for r in rankings}}
        results["int8"] = {"pairs_per_s": n / q_seconds, "fp32_pairs_per_s": n / min(seconds["torch"]),
                           "ndcg10_fp32": ndcg(scored), "ndcg10_int8": ndcg(q_scored)}
        results["int8"]["ndcg10_difference"] = results["int8"]["ndcg10_int8"] - results["int8"]["ndcg10_fp32"]

    t = throughput
    lines = ["# BERT (MiniLM-L6 cross-encoder) inference speed, CPU", "",
             f"Checkpoint `{results['checkpoint']}` (hash {ours.checkpoint_hash}), max_length {ours.max_length}, "
             f"{args.threads} torch threads, {t['pairs']} pairs = TREC DL 2019 BM25 top-100 of {t['queries']} queries, "
             f"{args.rounds} alternating rounds. 1-min load average at the end: {t['load_average_1min']:.1f} "
             "(the 2-core machine is shared; absolute figures move with the load, the ratio much less).", "",
             "| scorer | pairs/s (best round) | pairs/s (median) | vs CrossEncoder (best / median) | max abs score diff |",
             "|---|---|---|---|---|"]
    for name, label in (("torch", "`rerank score --model bert` (PyTorch)"),
                        ("onnx", "`rerank score --model bert --runtime onnx`")):
        lines.append(f"| {label} | {t[name + '_pairs_per_s_best']:.1f} | {t[name + '_pairs_per_s_median']:.1f} | "
                     f"**{t[name + '_ratio_best']:.2f}x** / {t[name + '_ratio_median']:.2f}x | "
                     f"{t[name + '_max_abs_score_difference']:.1e} |")
    lines += [f"| sentence-transformers `CrossEncoder.predict` | {t['crossencoder_pairs_per_s_best']:.1f} | "
              f"{t['crossencoder_pairs_per_s_median']:.1f} | 1x | - |", "",
              "## Per-query latency of the score stage (no cache)", "",
              "| depth | torch median ms | torch p95 ms | onnx median ms | onnx p95 ms |", "|---|---|---|---|---|"]
    lines += [f"| {d} | {v['median_ms']:.0f} | {v['p95_ms']:.0f} | {latency['onnx'][d]['median_ms']:.0f} | "
              f"{latency['onnx'][d]['p95_ms']:.0f} |" for d, v in latency["torch"].items()]
    if args.int8:
        q = results["int8"]
        lines += ["", "## Dynamic int8 quantisation", "",
                  f"{q['pairs_per_s']:.1f} pairs/s (fp32 {q['fp32_pairs_per_s']:.1f}); nDCG@10 {q['ndcg10_int8']:.4f} "
                  f"vs fp32 {q['ndcg10_fp32']:.4f} (difference {q['ndcg10_difference']:+.4f}; offered only if within 0.005)."]
    write_results("bert_speed", results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""BERT cross-encoder inference speed on CPU: `rerank score` against sentence-transformers, and latency by depth.

1. Throughput: the same (query, passage) pairs of the TREC DL 2019 BM25 top-100, scored by the code
   path of `rerank score --model bert --no-cache` (score_stream: per query, length-sorted batches,
   inference_mode, `cls_logits`), the same with `--compile`, and by sentence-transformers' `CrossEncoder.predict`
   loading the same checkpoint (identity activation, same max_length, its default batch 32). Rounds
   alternate between the scorers so that load from other processes hits all alike; the best round of
   each is reported, and the median. Scores must agree to < 1e-4. Compiling happens at load, untimed.
2. Latency: per-query milliseconds (the Timing the score stage writes) at depth 10, 20, 50, 100, eager
   and compiled.
3. Reduced precision (`--precision bf16`, alone and compiled; `--quantize` int8): throughput on the same
   pairs, and nDCG@10 on all 43 queries against fp32 (offered as a default only if within 0.005).

Usage: python benchmarks/bert_speed.py --checkpoint DIR [--queries 43] [--rounds 2] [--reduced] [--results NAME]
(writes benchmarks/results/NAME.{json,md}, default bert_speed). Process start-up and model loading are excluded.
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--queries", type=int, default=43, help="first N of the 43 judged DL 2019 queries")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reduced", action="store_true", help="also bf16 and int8")
    parser.add_argument("--results", default="bert_speed",
                        help="name of the result files (another CPU's figures go beside, not over, the others)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sentence_transformers import CrossEncoder

    dataset = get_dataset("trec-dl-2019")
    rankings = list(candidates("trec-dl-2019", "bm25").rankings)[: args.queries]
    topics, texts = dataset.topics(), dataset.doc_texts()
    ours = {"eager": load_model("bert", args.checkpoint), "compiled": load_model("bert", args.checkpoint, compile=True)}
    torch.set_num_threads(args.threads)
    reference = CrossEncoder(args.checkpoint, device="cpu", max_length=ours["eager"].max_length,
                             activation_fn=torch.nn.Identity(), local_files_only=True)
    pairs = [(topics[r.qid], texts[d]) for r in rankings for d in r.docids]
    seconds: dict[str, list[float]] = {"crossencoder": [], **{name: [] for name in ours}}
    scored = {}
    for _ in range(args.rounds):
        for name, model in ours.items():
            scored[name], spent = rerank_run(model, rankings, 100)
            seconds[name].append(spent)
        began = time.perf_counter()
        ref_scores = reference.predict(pairs, batch_size=32, show_progress_bar=False)
        seconds["crossencoder"].append(time.perf_counter() - began)
    n = len(pairs)
    throughput = {"pairs": n, "queries": len(rankings), "rounds": args.rounds, "threads": args.threads,
                  "batch_size": ours["eager"].batch_size}
    for name, spent in seconds.items():
        throughput[name] = {"pairs_per_s_best": n / min(spent), "pairs_per_s_median": n / statistics.median(spent)}
        if name in ours:
            by_pair = {(r.qid, d): s for r in scored[name] for d, s in zip(r.docids, r.scores)}
            mine = [by_pair[(r.qid, d)] for r in rankings for d in r.docids]
            throughput[name].update(
                ratio_best=min(seconds["crossencoder"]) / min(spent),
                ratio_median=statistics.median(seconds["crossencoder"]) / statistics.median(spent),
                max_abs_score_difference=max(abs(a - float(b)) for a, b in zip(mine, ref_scores)))
    throughput["load_average_1min"] = os.getloadavg()[0]

    latency = {}
    for depth in (10, 20, 50, 100):
        latency[depth] = {}
        for name, model in ours.items():
            out, _ = rerank_run(model, rankings, depth)
            ms = [r.timings[-1].ms for r in out]
            latency[depth][name] = {"median_ms": statistics.median(ms), "p95_ms": percentile(ms, 0.95), "queries": len(ms)}

    eager = ours["eager"]
    results = {"checkpoint": str(Path(args.checkpoint).resolve()), "checkpoint_hash": eager.checkpoint_hash,
               "max_length": eager.max_length, "cpu": cpu_name(), "throughput": throughput, "latency": latency}
    if args.reduced:
        results["reduced"] = reduced_precision(args, eager, rankings, n / min(seconds["eager"]))
    write_results(args.results, results, markdown(results, args))


def cpu_name() -> str:
    """The CPU model and the widest vector instructions torch uses on it: speed ratios depend on both."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
              if line.startswith("model name")] if cpuinfo.exists() else []
    return f"{models[0] if models else 'unknown CPU'}, torch uses {torch.backends.cpu.get_cpu_capability()}"


def reduced_precision(args, eager, rankings, fp32_pairs_per_s: float) -> dict:
    """Throughput and nDCG@10 (all 43 queries) of bf16 (eager and compiled) and int8 against fp32."""
    dataset = get_dataset("trec-dl-2019")
    measure = parse_measure("nDCG@10", dataset.min_rel)
    qrels = dataset.qrels()
    every = list(candidates("trec-dl-2019", "bm25").rankings)
    n = sum(len(r.docids) for r in rankings)

    def ndcg(rs):
        return evaluate(Run(RunHeader(), {r.qid: r for r in rs}, "x"), qrels, [measure]).overall(measure.label)

    full_fp32, _ = rerank_run(eager, every, 100)
    fp32_scores = {(r.qid, d): v for r in full_fp32 for d, v in zip(r.docids, r.scores)}
    reduced = {"fp32": {"pairs_per_s": fp32_pairs_per_s, "ndcg10": ndcg(full_fp32)}}
    variants = (("bf16", {"precision": "bf16"}), ("bf16-compiled", {"precision": "bf16", "compile": True}),
                ("int8", {"quantize": True}))
    for name, options in variants:
        model = load_model("bert", args.checkpoint, **options)
        spent = [rerank_run(model, rankings, 100)[1] for _ in range(args.rounds)]
        full, _ = rerank_run(model, every, 100)
        diff = max(abs(v - fp32_scores[(r.qid, d)]) for r in full for d, v in zip(r.docids, r.scores))
        reduced[name] = {"pairs_per_s": n / min(spent), "ndcg10": ndcg(full),
                         "ndcg10_difference": ndcg(full) - reduced["fp32"]["ndcg10"], "max_abs_score_difference": diff}
    return reduced


def markdown(results: dict, args) -> str:
    t, latency = results["throughput"], results["latency"]
    lines = ["# BERT (MiniLM-L6 cross-encoder) inference speed, CPU", "",
             f"CPU: {results.get('cpu', 'not recorded')}. "
             f"Checkpoint `{results['checkpoint']}` (hash {results['checkpoint_hash']}), max_length "
             f"{results['max_length']}, {args.threads} torch threads, {t['pairs']} pairs = TREC DL 2019 BM25 top-100 of "
             f"{t['queries']} queries, {args.rounds} alternating rounds, our batch size {t['batch_size']}. 1-min load "
             f"average at the end: {t['load_average_1min']:.1f} (absolute figures move with the machine's load, "
             "the ratios much less).", "",
             "| scorer | pairs/s (best round) | pairs/s (median) | vs CrossEncoder (best / median) | max abs score diff |",
             "|---|---|---|---|---|"]
    labels = (("eager", "`rerank score --model bert` (default)"), ("compiled", "`rerank score --model bert --compile`"),
              ("crossencoder", "sentence-transformers `CrossEncoder.predict`"))
    for name, label in labels:
        r = t[name]
        ratio = f"**{r['ratio_best']:.2f}x** / {r['ratio_median']:.2f}x" if "ratio_best" in r else "1"
        diff = f"{r['max_abs_score_difference']:.1e}" if "max_abs_score_difference" in r else ""
        lines.append(f"| {label} | {r['pairs_per_s_best']:.1f} | {r['pairs_per_s_median']:.1f} | {ratio} | {diff} |")
    lines += ["", "## Per-query latency of the score stage (no cache)", "",
              "| depth | median ms | p95 ms | median ms `--compile` | p95 ms `--compile` |", "|---|---|---|---|---|"]
    lines += [f"| {d} | {v['eager']['median_ms']:.0f} | {v['eager']['p95_ms']:.0f} | {v['compiled']['median_ms']:.0f} | "
              f"{v['compiled']['p95_ms']:.0f} |" for d, v in latency.items()]
    if "reduced" in results:
        reduced = results["reduced"]
        lines += ["", "## Reduced precision (opt-in)", "",
                  f"Throughput on the same {t['pairs']} pairs (best of {args.rounds} rounds); nDCG@10 on all 43 DL 2019 "
                  "queries, BM25 top-100 re-ranked.", "",
                  "| scorer | pairs/s | vs fp32 | nDCG@10 | vs fp32 |", "|---|---|---|---|---|"]
        base = reduced["fp32"]
        for name, label in (("fp32", "fp32 (default)"), ("bf16", "`--precision bf16`"),
                            ("bf16-compiled", "`--precision bf16 --compile`"), ("int8", "`--quantize` (int8)")):
            r = reduced[name]
            lines.append(f"| {label} | {r['pairs_per_s']:.1f} | {r['pairs_per_s'] / base['pairs_per_s']:.2f}x | "
                         f"{r['ndcg10']:.4f} | {r['ndcg10'] - base['ndcg10']:+.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

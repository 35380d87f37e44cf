"""TK with stored encodings vs on the fly vs the BERT cross-encoder: per-query time at one depth, side by side.

    python benchmarks/tk_speed.py --tk CK_TK --bert CK_BERT [--queries 10] [--depth 100] [--report tk_speed]

For every query of TREC DL 2019 (the first --queries of them), each scorer re-scores the same top-depth
BM25 candidates in turn (interleaved, so all three see the same machine load); time is measured around
`Reranker.score`, exactly what the score stage times (texts are fetched before, as there). Stored
encodings are built first (as `rerank encode` does) if missing. TK runs on 1 thread (its default);
BERT on 2 and on 1 thread, and the faster of the two per query is compared. Also records bytes per
stored token.
Results: benchmarks/results/REPORT.json and REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent


def main() -> None:
    import numpy as np
    import torch

    from rerank.data import get_dataset
    from rerank.docstore import doc_store_for, queries_for
    from rerank.encodings import encode_collection, store_folder
    from rerank.models.base import load_model
    from rerank.runs import RunHeader

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tk", required=True)
    parser.add_argument("--bert", required=True)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--report", default="tk_speed", help="results file name (without .json / .md)")
    args = parser.parse_args()

    header = RunHeader({"dataset": "trec-dl-2019"})
    topics, docs = queries_for(header, None), doc_store_for(header)
    candidates = get_dataset("trec-dl-2019").candidates("bm25")[: args.queries]
    tk_stored = load_model("tk", args.tk)
    folder = store_folder("trec-dl-2019", "tk", tk_stored.checkpoint_hash)
    dataset = get_dataset("trec-dl-2019")
    manifest = encode_collection("trec-dl-2019", lambda: ((d.docid, d.contents) for d in dataset.documents()),
                                 sum(1 for _ in dataset.documents()), tk_stored, progress=False)
    tk_stored.attach(header, docs)
    tk_fly = load_model("tk", args.tk)
    bert = load_model("bert", args.bert)
    scorers = {"tk (stored encodings)": (tk_stored, 1), "tk (on the fly)": (tk_fly, 1),
               "bert (2 threads)": (bert, 2), "bert (1 thread)": (bert, 1)}
    times: dict[str, list[float]] = {name: [] for name in scorers}
    for ranking in candidates:
        docids = ranking.docids[: args.depth]
        texts = docs.texts(docids)
        for name, (model, threads) in scorers.items():
            torch.set_num_threads(threads)
            began = time.perf_counter()
            model.score(topics[ranking.qid], docids, [texts[d] for d in docids])
            times[name].append((time.perf_counter() - began) * 1000)
    stats = {name: {"median_ms": round(statistics.median(v), 2), "p95_ms": round(float(np.percentile(v, 95)), 2),
                    "mean_ms": round(statistics.mean(v), 2)} for name, v in times.items()}
    best_bert = [min(a, b) for a, b in zip(times["bert (2 threads)"], times["bert (1 thread)"])]
    per_query_speedup = [b / s for b, s in zip(best_bert, times["tk (stored encodings)"])]
    fly_speedup = [f / s for f, s in zip(times["tk (on the fly)"], times["tk (stored encodings)"])]
    folder_bytes = sum(p.stat().st_size for p in folder.iterdir())
    result = {
        "queries": len(candidates), "depth": args.depth, "tk_checkpoint": args.tk, "bert_checkpoint": args.bert,
        "load_average_1min_end": round(os.getloadavg()[0], 2), "scorers": stats,
        "faster_bert_over_tk_stored_median_of_per_query_ratios": round(statistics.median(per_query_speedup), 1),
        "tk_fly_over_stored_median_of_per_query_ratios": round(statistics.median(fly_speedup), 1),
        "encodings": {"folder": str(folder), "documents": manifest["documents"], "tokens": manifest["tokens"],
                      "dim": manifest["dim"], "vector_bytes_per_token": manifest["dim"] * 2,
                      "all_files_bytes_per_token": round(folder_bytes / manifest["tokens"], 2)},
    }
    (HERE / "results" / f"{args.report}.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = "\n".join(f"| {name} | {s['median_ms']} | {s['p95_ms']} | {s['mean_ms']} |" for name, s in stats.items())
    enc = result["encodings"]
    (HERE / "results" / f"{args.report}.md").write_text(f"""# TK with stored encodings vs BERT, per query at depth {args.depth}

TREC DL 2019 BM25 candidates, first {len(candidates)} queries, scorers interleaved query by query on the
shared 2-core machine (1-min load average at the end: {result['load_average_1min_end']}; absolute times move
with the load, the ratios much less). Command: `python benchmarks/tk_speed.py --tk {args.tk} --bert {args.bert}
--queries {args.queries} --depth {args.depth} --report {args.report}`.

| scorer | median ms/query | p95 ms/query | mean ms/query |
|---|---|---|---|
{rows}

- BERT (the faster of its two thread settings, per query) / TK-stored, median of per-query ratios:
  **{result['faster_bert_over_tk_stored_median_of_per_query_ratios']}x**
- TK on the fly / TK stored, median of per-query ratios: **{result['tk_fly_over_stored_median_of_per_query_ratios']}x**
- Stored encodings of DL 2019 ({enc['documents']} passages, {enc['tokens']} tokens, {enc['dim']}-d float16):
  {enc['vector_bytes_per_token']} bytes per token for the vectors, {enc['all_files_bytes_per_token']} bytes per token
  with lengths, docids and manifest.
""")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

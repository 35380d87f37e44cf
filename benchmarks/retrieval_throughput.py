"""Queries per second of the first stages on Vaswani at k = 100 and 1,000: Elasticsearch vs Lucene (and dense).

Each back end's index is opened once and the same queries are searched in-process through the
back end's `search` (what `rerank retrieve` runs, without process start-up); the figure is queries
divided by wall time, after one warm-up query. Elasticsearch is the noida-db test server unless
$RERANK_ES_URL points at a real cluster; noida-db scores every document for every query, so it is
given the first QUERIES topics only. The machine's load average is recorded: on this shared 2-core
machine other jobs ran at the same time, so compare rows of one run, not across runs.
Usage: python benchmarks/retrieval_throughput.py   (writes benchmarks/results/retrieval_throughput.{json,md})
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, write_results  # noqa: E402
from retrieval_common import HOME, es_server, load_average, rerank  # noqa: E402

os.environ["RERANK_HOME"] = str(HOME)
from rerank.data import get_dataset  # noqa: E402
from rerank.retrieve import api  # noqa: E402

DATASET, QUERIES, DEPTHS = "vaswani", 16, (100, 1000)


def queries_per_second(index, topics: dict[str, str], k: int) -> float:
    list(index.search(dict([next(iter(topics.items()))]), k=k))  # warm-up: JVM JIT, connections, model load
    began = time.perf_counter()
    found = list(index.search(topics, k=k))
    elapsed = time.perf_counter() - began
    assert len(found) == len(topics)
    return len(topics) / elapsed


def main() -> None:
    no_options(__doc__)
    topics = dict(list(get_dataset(DATASET).topics().items())[:QUERIES])
    rows, load_before = [], load_average()
    with es_server() as url:
        if not (HOME / "indexes" / DATASET / "elasticsearch").is_dir():
            rerank("index", DATASET, "--backend", "elasticsearch", "--es-url", url)
        for backend_name, options in (("lucene", {}), ("elasticsearch", {"es_url": url}), ("dense", {})):
            if backend_name != "elasticsearch" and not (HOME / "indexes" / DATASET / backend_name).is_dir():
                rerank("index", DATASET, "--backend", backend_name)
            index = api.backend(backend_name).open_index(DATASET, **options)
            for k in DEPTHS:
                rows.append({"backend": backend_name, "k": k, "queries": len(topics),
                             "queries_per_second": queries_per_second(index, topics, k)})
    results = {"dataset": DATASET, "rows": rows, "load_average": [load_before, load_average()], "cpus": os.cpu_count()}
    lines = [f"# First-stage throughput on {DATASET} ({len(topics)} queries, in-process search)", "",
             "| back end | k | queries/s |", "|---|---|---|"]
    lines += [f"| {r['backend']} | {r['k']} | {r['queries_per_second']:.2f} |" for r in rows]
    lines += ["", f"Load average during the run: {load_before:.1f} -> {load_average():.1f} on {os.cpu_count()} CPUs "
              "(other jobs shared the machine). Elasticsearch = noida-db 0.2.3, an ES-API test server that scores "
              "every document per query: these numbers say nothing about a real Elasticsearch cluster. "
              "`python benchmarks/retrieval_throughput.py`.", ""]
    write_results("retrieval_throughput", results, "\n".join(lines))


if __name__ == "__main__":
    main()

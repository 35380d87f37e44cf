"""`rerank retrieve` against Anserini's SearchCollection: 1,000 queries at k = 1,000 on the same index.

Corpus: every passage of the TREC DL 2019 and 2020 candidate pools (12.5k MS MARCO passages); queries:
the first 1,000 of an MS MARCO train-query sample (same domain). Both tools run as whole processes
(JVM start included), BM25 k1=0.9 b=0.4, 2 threads, and their rankings are checked to be identical.
Usage: python benchmarks/retrieve_speed.py   (writes benchmarks/results/retrieve_speed.{json,md})
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, time_command, write_results  # noqa: E402

from rerank.data import get_dataset  # noqa: E402
from rerank.paths import data_root  # noqa: E402
from rerank.retrieve.jvm import fatjar, java_home  # noqa: E402
from rerank.runs import load_run  # noqa: E402

WORK = Path(__file__).resolve().parent / "work" / "retrieve_speed"
QUERIES, K = 1000, 1000


def at_printed_precision(ranking) -> list:
    """trec_eval's order once scores are printed with 6 decimals, as SearchCollection prints them."""
    return sorted(zip((round(s, 6) for s in ranking.scores), ranking.docids), reverse=True)


def main() -> None:
    no_options(__doc__)
    WORK.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RERANK_HOME": str(WORK)}
    corpus, topics = WORK / "pool.jsonl", WORK / "queries.tsv"
    if not corpus.exists():
        seen = {}
        for name in ("trec-dl-2019", "trec-dl-2020"):
            for doc in get_dataset(name).documents():
                seen.setdefault(doc.docid, doc.contents)
        corpus.write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in seen.items()))
    with gzip.open(data_root() / "msmarco-train-queries" / "msmarco-passage.train.sample10k-1.tsv.gz", "rt") as src:
        topics.write_text("".join(src.readline() for _ in range(QUERIES)))
    if not (WORK / "indexes" / "pool" / "lucene").is_dir():
        subprocess.run([sys.executable, "-m", "rerank", "index", "pool", "--corpus", str(corpus)], check=True, env=env)
    ours_out, ref_out = WORK / "ours.run", WORK / "anserini.run"
    ours = [sys.executable, "-m", "rerank", "retrieve", "pool", "--topics", str(topics), "--k", str(K), "-o", str(ours_out)]
    reference = [str(java_home() / "bin" / "java"), "-cp", str(fatjar()),
                 f"-Dlog4j2.configurationFile={Path('rerank/retrieve/log4j2.xml').resolve()}",
                 "io.anserini.search.SearchCollection", "-index", str(WORK / "indexes" / "pool" / "lucene"),
                 "-topics", str(topics), "-topicReader", "TsvString", "-output", str(ref_out), "-bm25",
                 "-hits", str(K), "-threads", "2"]
    t_ours, t_ref = time_command(ours, env=env), time_command(reference, env=env)
    with open(ours_out) as a, open(ref_out) as b:
        mine, theirs = load_run(a, "ours"), load_run(b, "anserini")
    identical = set(mine.queries) == set(theirs.queries) and all(
        at_printed_precision(mine.queries[q]) == at_printed_precision(r) for q, r in theirs.queries.items())
    docs = sum(1 for _ in open(corpus))
    results = {"documents": docs, "queries": QUERIES, "k": K, "rerank_retrieve_s": round(t_ours, 2),
               "anserini_search_collection_s": round(t_ref, 2), "ratio": round(t_ours / t_ref, 2),
               "target_ratio": 1.2, "identical_rankings": identical,
               "result_lines": sum(len(r) for r in mine.queries.values())}
    write_results("retrieve_speed", results, (
        "# rerank retrieve vs Anserini SearchCollection\n\n"
        f"{QUERIES} MS MARCO train queries, k = {K}, over {docs:,} passages (the TREC DL 2019+2020 pools); "
        "BM25 k1=0.9 b=0.4, 2 threads; whole processes (JVM start included), median of 3 after a warm-up.\n\n"
        "| tool | seconds |\n|---|---|\n"
        f"| rerank retrieve | {results['rerank_retrieve_s']} |\n| SearchCollection | {results['anserini_search_collection_s']} |\n\n"
        f"Ratio: **{results['ratio']}x** (target: within 1.2x). Identical rankings (at the 6 decimals "
        f"SearchCollection prints): {identical}. "
        f"Result lines: {results['result_lines']:,}.\n"))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The main job, set-up included: BM25 on Vaswani and CACM through the embedded Lucene index, evaluated by
# the shared evaluator, a leaderboard of lexical first stages on Vaswani (RM3, query likelihood), then TREC DL 2019: the shipped BM25 and BM25+RM3 candidates and a zero-shot MiniLM
# re-ranking of the BM25 top-100, as a leaderboard with significance tests, and its HTML report beside the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
rerank data list
for collection in vaswani cacm; do
    [ -f "${RERANK_HOME:-.}/indexes/$collection/lucene/rerank-index.json" ] || rerank index "$collection"
    echo "== BM25 on $collection"
    rerank retrieve "$collection" | rerank eval -m MAP -m MRR -m P@1 -m nDCG@10
done
echo "== Vaswani: BM25 settings, BM25+RM3 and query likelihood (pipelines/vaswani-bm25.toml)"
rerank run pipelines/vaswani-bm25.toml
echo "== TREC DL 2019: BM25, BM25+RM3 and MiniLM re-ranking (pipelines/trec-dl-2019-candidates.toml)"
report="${RERANK_HOME:-.}/runs/trec-dl-2019-candidates/report.html"
mkdir -p "$(dirname "$report")"
rerank run pipelines/trec-dl-2019-candidates.toml --report "$report"

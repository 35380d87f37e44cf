#!/usr/bin/env bash
# Teacher run for distillation beyond the 54 judged TREC DL 2020 queries: the 48,794 unlabelled MS MARCO
# train queries (shared/data/msmarco-train-queries) against the only MS MARCO passages we have, the TREC DL
# 2020 candidate pool (7,042 passages; DL 2019's pool is left out, it is the test collection), scored by
# the zero-shot MiniLM bi-encoder: its dense top-30 per query, cosine scores.
#
#   benchmarks/distill_teacher.sh [OUT]      (default benchmarks/work/distill/teacher-msmarco-dl20pool.run)
#
# About 5 minutes on 2 cores. Most queries find nothing on their topic in so small a pool: the trainers
# take --teacher-min-score 0.5 (5,288 queries keep a passage with cosine >= 0.5). Use the run with
#   rerank train bert|tk|tkl --train trec-dl-2020 --teacher OUT --teacher-min-score 0.5 --distill kl --teacher-scale 20 ...
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-"$HERE/work/distill/teacher-msmarco-dl20pool.run"}
DATA=${RERANK_DATA:-"$HERE/../../shared/data"}
W=$(dirname "$OUT"); mkdir -p "$W"
export HF_HUB_OFFLINE=1
zcat "$DATA"/msmarco-train-queries/*.tsv.gz | sort -u > "$W/msmarco-train-queries.tsv"
# Lucene keeps the raw passages the trainer reads; the dense index holds the teacher's embeddings.
IDX=${RERANK_HOME:-.}/indexes/trec-dl-2020
[ -f "$IDX/lucene/rerank-index.json" ] || rerank index trec-dl-2020
[ -f "$IDX/dense/rerank-index.json" ] || rerank index trec-dl-2020 --backend dense
rerank retrieve trec-dl-2020 --backend dense --topics "$W/msmarco-train-queries.tsv" --k 30 -o "$OUT"
echo "teacher run: $OUT"

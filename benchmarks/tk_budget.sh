#!/usr/bin/env bash
# Time-budget report for BM25 / BERT / TK / TKL on TREC DL 2019 top-100 (the documented command chain).
#
#   [REPORT=tk_budget] benchmarks/tk_budget.sh BERT_CK TK_CK TKL_CK [DEPTHS]     (BERT_CK "-": no BERT curve)
#
# Every re-ranker re-scores the BM25 candidates at each depth with the cache off (real per-query times);
# TK/TKL read stored encodings (built here with `rerank encode` if missing) on 1 thread (their default);
# BERT runs on BERT_THREADS (default 1: faster than 2 on this shared, overloaded 2-core machine, see
# tk_speed.md), eager and with --compile (curve bert-compiled: same scores, less time). The replayed BM25
# candidates carry no timings, so the first stage counts as 0 ms for every model (--zero-untimed).
# TK and TKL also run interpolated with BM25 (`--interpolate 0.5`: equal weights of the z-scored
# model and BM25 scores, fixed a priori, not tuned on DL 2019) as the curves tk+bm25 and tkl+bm25.
# Writes benchmarks/results/$REPORT.{md,json,png}, ${REPORT}_p95.md, ${REPORT}_oracle.md and, for tk_budget,
# tk_quality.md (else ${REPORT}_quality.md): depth 100, significance against BM25; runs go to benchmarks/work/$REPORT/.
set -euo pipefail
BERT_CK=$1; TK_CK=$2; TKL_CK=$3; DEPTHS=${4:-"5 10 20 50 100"}
HERE=$(cd "$(dirname "$0")" && pwd)
REPORT=${REPORT:-tk_budget}; QUALITY=${REPORT}_quality; [ "$REPORT" = tk_budget ] && QUALITY=tk_quality
W="$HERE/work/$REPORT"; R="$HERE/results"; mkdir -p "$W" "$R"
export HF_HUB_OFFLINE=1
rerank retrieve trec-dl-2019 --candidates bm25 -o "$W/bm25.run"
rerank encode trec-dl-2019 --model tk --checkpoint "$TK_CK"
rerank encode trec-dl-2019 --model tkl --checkpoint "$TKL_CK"
for d in $DEPTHS; do
  rerank score --model tk --checkpoint "$TK_CK" --depth "$d" --no-cache -o "$W/tk-$d.run" < "$W/bm25.run"
  rerank score --model tkl --checkpoint "$TKL_CK" --depth "$d" --no-cache -o "$W/tkl-$d.run" < "$W/bm25.run"
  rerank score --model tk --checkpoint "$TK_CK" --depth "$d" --no-cache --interpolate 0.5 --name tk+bm25 \
    -o "$W/tk+bm25-$d.run" < "$W/bm25.run"
  rerank score --model tkl --checkpoint "$TKL_CK" --depth "$d" --no-cache --interpolate 0.5 --name tkl+bm25 \
    -o "$W/tkl+bm25-$d.run" < "$W/bm25.run"
  if [ "$BERT_CK" != "-" ]; then
    rerank score --model bert --checkpoint "$BERT_CK" --threads "${BERT_THREADS:-1}" --depth "$d" --no-cache \
      -o "$W/bert-$d.run" < "$W/bm25.run"
    rerank score --model bert --checkpoint "$BERT_CK" --threads "${BERT_THREADS:-1}" --depth "$d" --no-cache \
      --compile --name bert-compiled -o "$W/bert-compiled-$d.run" < "$W/bm25.run"
  fi
done
runs=("bm25=$W/bm25.run")
models="tk tkl tk+bm25 tkl+bm25"; [ "$BERT_CK" != "-" ] && models="bert bert-compiled $models"
for m in $models; do for d in $DEPTHS; do runs+=("$W/$m-$d.run"); done; done
rerank budget --zero-untimed "${runs[@]}" --format markdown -o "$R/$REPORT.md" --plot "$R/$REPORT.png" \
  --title "TREC DL 2019 top-100: nDCG@10 within a per-query time budget"
rerank budget --zero-untimed "${runs[@]}" --format json -o "$R/$REPORT.json"
rerank budget --zero-untimed "${runs[@]}" --statistic p95 --format markdown -o "$R/${REPORT}_p95.md"
rerank budget --zero-untimed "${runs[@]}" --pick best --format markdown -o "$R/${REPORT}_oracle.md"
deepest=${DEPTHS##* }
top=("$W/bm25.run"); for m in ${models/bert-compiled /}; do top+=("$W/$m-$deepest.run"); done  # compiled: same scores
rerank eval "${top[@]}" -m nDCG@10 -m RR@10 -m MAP --format markdown > "$R/$QUALITY.md.tmp"
mv "$R/$QUALITY.md.tmp" "$R/$QUALITY.md"
ROOT=$(dirname "$HERE")
sed -i "s|$ROOT/||g" "$R/$REPORT".{md,json} "$R/${REPORT}"_{p95,oracle}.md   # repository-relative run paths
cat "$R/$REPORT.md" "$R/$QUALITY.md"

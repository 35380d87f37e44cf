#!/usr/bin/env bash
# The BERT cross-encoder trained on a CUDA GPU (`rerank train bert --device cuda`), TREC DL 2020 only, with the
# fused teacher of bert_dl_chain.sh: three recipes trained at once for MINUTES each, each keeping its best step by
# the held-out DL 2020 queries (the chain's 10), then DL 2019's BM25 top-100 re-scored by each on the CPU, and the
# recipe with the best held-out dev named as this script's choice (bert_quality.md, twelfth session).
#
#   benchmarks/bert_gpu.sh TEACHER [WORK] [MINUTES]   (default WORK benchmarks/work/gpu, MINUTES 5.47)
#
# TEACHER is the chain's benchmarks/work/distill/teacher-tk-nodev-fused.run. Its texts come through its header: the
# Lucene index trec-dl-2020 where it is built, else a `# corpus:` line naming the DL 2020 pool as JSONL (what the run
# of bert_quality.md used on a GPU machine without Java: benchmarks/lent_gpu.sh writes it). On one H200 the three
# runs took 2,055-2,066 steps in 5.5 minutes (bf16; 1,973-2,030 in the rerun of 2026-11-27); the GPU was 7-46 % busy,
# so the CPU side (tokenising, Python) set the pace.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bert_gpu.sh TEACHER [WORK] [MINUTES]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
TEACHER=$1; W=${2:-"$HERE/work/gpu"}; MINUTES=${3:-5.47}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$W"
COMMON=(--train trec-dl-2020 --dev-fraction 0.2 --dev-depth 30 --loss listwise --max-length 128 --teacher "$TEACHER"
        --distill kl --teacher-scale 0.6 --distill-weight 1.0 --head-lr-scale 20 --device cuda --threads 4
        --precision bf16 --max-minutes "$MINUTES" --steps 4000 --eval-every 200 --patience 6)
declare -A RECIPE=(
    [A]="--batch-groups 32 --negatives 7 --lr 1e-4 --seed 42"
    [B]="--batch-groups 32 --negatives 7 --lr 3e-5 --seed 43"
    [C]="--batch-groups 16 --negatives 15 --lr 5e-5 --seed 44")
pids=()
for r in A B C; do
    # shellcheck disable=SC2086  # the recipe is a list of options
    rerank train bert "${COMMON[@]}" ${RECIPE[$r]} -o "$W/$r" > "$W/$r.log" 2>&1 &
    pids+=($!)
done
wait "${pids[@]}"
rerank retrieve trec-dl-2019 --candidates bm25 -o "$W/dl19-bm25.run"
pids=()
for r in A B C; do
    rerank score --model bert --checkpoint "$W/$r" --no-cache --threads 5 -o "$W/dl19-$r.run" < "$W/dl19-bm25.run" &
    pids+=($!)
done
wait "${pids[@]}"
rerank eval "$W/dl19-bm25.run" "$W/dl19-A.run" "$W/dl19-B.run" "$W/dl19-C.run" -m nDCG@10 -m MRR@10 -m MAP
python - "$W" <<'EOF'
import json, sys
dev = {r: json.load(open(f"{sys.argv[1]}/{r}/checkpoint.json"))["training"]["dev_value"] for r in "ABC"}
print(f"chosen by held-out dev: {max(dev, key=lambda r: (dev[r], -ord(r)))} {dev}")
EOF

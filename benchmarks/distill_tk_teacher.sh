#!/usr/bin/env bash
# A stronger teacher for the BERT cross-encoder: the minilm-context TK (tk_notes.md; 0.671 nDCG@10
# cross-validated on DL 2020 against the bi-encoder's 0.608) re-scores the bi-encoder teacher run of
# distill_teacher.sh, over the same queries: those with a passage of cosine >= 0.5 (5,288 of 48,794),
# their top 30 each. TK reads stored encodings of the DL 2020 pool (built here if missing).
#
#   benchmarks/distill_tk_teacher.sh TK_CK DENSE_RUN [OUT]   (default OUT: DENSE_RUN's folder/teacher-tk.run)
#
# About 5 minutes on 2 cores. Over these dense top-30 lists TK's scores spread about 3x as widely as the
# bi-encoder's cosines x 20 (median per-query std 3.26 against 1.13), so the softness the BERT student
# learnt from before is --teacher-scale 0.35:
#   rerank train bert --train trec-dl-2020 --teacher OUT --distill kl --teacher-scale 0.35 ...
# It also writes OUT's CombSUM with the bi-encoder (per-query z-scores; median std 1.87, so --teacher-scale 0.60)
# as ${OUT%.run}-fused.run: the ninth session's teacher (bert_quality.md), with TK_CK trained without the
# BERT held-out queries (rerank train tk ... --dev-fraction 0.2 --eval-every 50).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: distill_tk_teacher.sh TK_CK DENSE_RUN [OUT]" >&2; exit 2; }
TK_CK=$1; DENSE=$2; OUT=${3:-"$(dirname "$DENSE")/teacher-tk.run"}
KEPT="${OUT%.run}-queries.run"
[ -f "$DENSE" ] || { echo "distill_tk_teacher.sh: no teacher run $DENSE (make it with benchmarks/distill_teacher.sh)" >&2; exit 2; }
[ -f "$TK_CK/checkpoint.json" ] || { echo "distill_tk_teacher.sh: $TK_CK is not a checkpoint (rerank train tk ...)" >&2; exit 2; }
export HF_HUB_OFFLINE=1
python - "$DENSE" "$KEPT" <<'EOF'
import os, sys
from rerank.runs import RunReader, RunWriter
source, target = sys.argv[1:]
with open(source, encoding="utf-8") as handle, open(target + ".tmp", "w", encoding="utf-8") as out:
    reader = RunReader(handle, source)
    writer = RunWriter(out, reader.header)
    kept = writer.write_all(r for r in reader if max(r.scores) >= 0.5)
os.replace(target + ".tmp", target)
print(f"{kept} queries with a passage of cosine >= 0.5", file=sys.stderr)
EOF
rerank encode trec-dl-2020 --model tk --checkpoint "$TK_CK"
rerank score --model tk --checkpoint "$TK_CK" --depth 30 --no-cache -o "$OUT" < "$KEPT"
rerank fuse --method combsum --norm zscore --depth 30 --name bi+tk -o "${OUT%.run}-fused.run" "$KEPT" "$OUT"
echo "teacher runs: $OUT ${OUT%.run}-fused.run"

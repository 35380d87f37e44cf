#!/usr/bin/env bash
# The main job, set-up included: BM25 on Vaswani and CACM through the embedded Lucene index, evaluated by
# the shared evaluator, a leaderboard of lexical first stages on Vaswani (RM3, query likelihood), then TREC DL 2019: the shipped BM25 and BM25+RM3 candidates and a zero-shot MiniLM
# re-ranking of the BM25 top-100, as a leaderboard with significance tests, and its HTML report beside the runs;
# last, a TK trained by its recipe, its stored encodings, the bi-encoder at two depths, their leaderboard and the
# time-budget report with its plot (runs/main/).
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
echo "== TREC DL 2019: TK, trained on DL 2020 by its recipe (docs/models.md), against BM25 and the bi-encoder, in time budgets"
out="${RERANK_HOME:-.}/runs/main"
ck="${RERANK_HOME:-.}/checkpoints/tk-main"
mkdir -p "$out"
if [ ! -f "$ck/checkpoint.json" ]; then
    rerank retrieve trec-dl-2020 --candidates bm25 | rerank score --model minilm-bi -o "$out/bi-dl20.run"  # the teacher
    rerank train tk --train trec-dl-2020 --steps 50 --lr 5e-4 --threads 2 --teacher "$out/bi-dl20.run" --distill kl \
        --teacher-scale 20 -O embeddings=minilm-context -o "$ck"
fi
rerank encode trec-dl-2019 --model tk --checkpoint "$ck"  # stored document encodings (a complete store is kept)
rerank retrieve trec-dl-2019 --candidates bm25 -o "$out/bm25.run"
rerank score --model tk --checkpoint "$ck" --no-cache "$out/bm25.run" -o "$out/tk.run"
for depth in 10 30; do
    rerank score --model minilm-bi --no-cache --depth "$depth" "$out/bm25.run" -o "$out/bi$depth.run"
done
rerank eval BM25="$out/bm25.run" TK="$out/tk.run" BI30="$out/bi30.run" --baseline BM25 -m nDCG@10 -m MRR@10 -m MAP
rerank retrieve trec-dl-2019 --candidates bm25 | rerank budget --zero-untimed BM25="$out/bm25.run" BI10="$out/bi10.run" \
    BI30="$out/bi30.run" --model tk --checkpoint "$ck" --depths 10,30,100 --plot "$out/budget.png"
echo "the time-budget plot: $out/budget.png"

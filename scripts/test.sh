#!/usr/bin/env bash
# The test suite, set-up included. Needs the data sets at ../shared/data (or $RERANK_DATA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
exec python -m pytest -q -p no:cacheprovider tests "$@"

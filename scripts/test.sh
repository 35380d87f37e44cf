#!/usr/bin/env bash
# The test suite, set-up included. Needs the data sets at ../shared/data (or $RERANK_DATA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
# Two workers, one test file each at a time: most tests drive one single-threaded `rerank` process, so two
# keep both cores busy (on 2 cores the suite takes about 60% of its one-worker time).
exec python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests "$@"

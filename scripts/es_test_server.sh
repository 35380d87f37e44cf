#!/usr/bin/env bash
# Starts the Elasticsearch-API test server the test suite uses (noida-db, installed by scripts/setup.sh) on
# 127.0.0.1, prints its URL for --es-url, and serves until Ctrl-C. Options: --port N (default 9200), --data-dir DIR.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f "$repo/.venv/bin/activate" ]; then
    . "$repo/.venv/bin/activate"
fi
exec python -m rerank.retrieve.es_test_server "$@"

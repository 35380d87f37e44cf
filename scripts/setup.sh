#!/usr/bin/env bash
# Creates .venv (if missing) and installs rerank into it. torch==2.13.0 goes first: it is a CPU wheel
# here, and letting pip pick torch for the other packages would pull gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
. .venv/bin/activate
if [ "$(python -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" != "2.13.0" ]; then
    pip install -q --upgrade pip
    pip install -q torch==2.13.0
fi
stamp=.venv/.rerank-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    pip install -q -e ".[test]"
    touch "$stamp"
fi
# The report's browser tests drive Debian's Chromium (Playwright cannot download its own browser here).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null || echo "setup: could not install chromium" >&2
fi

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
# The report's browser tests drive Debian's Chromium through Playwright, which cannot download its own browser here.
# Installed where apt-get can run (as root, or through sudo without a password); elsewhere those tests say why they
# are skipped.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    as_root=""
    [ "$(id -u)" = 0 ] || as_root="sudo -n"
    { $as_root apt-get update -qq && $as_root apt-get install -y -qq chromium >/dev/null; } \
        || echo "setup: could not install chromium (apt-get); the report's browser tests will be skipped" >&2
fi

"""Signalling a `rerank` subprocess once it has reached a given point, as a user's Ctrl-C or a scheduler's
SIGTERM would."""

import signal
import subprocess
import time

import pytest


def signal_when_ready(process: subprocess.Popen, ready, signal_name: str, what: str) -> str:
    """Wait (at most 2 minutes) until `ready()` or the process has ended, send it `signal_name`, and return its
    stderr once it exits (failing the test if it still runs 120 s later)."""
    for _ in range(600):
        if process.poll() is not None or ready():
            break
        time.sleep(0.2)
    process.send_signal(getattr(signal, signal_name))
    try:
        return process.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"{what} still runs 120 s after {signal_name}")

"""Shared fixtures. Tests marked `data` read the real data sets and fail loudly when they are absent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _data_root() -> Path | None:
    explicit = os.environ.get("RERANK_DATA")
    root = Path(explicit) if explicit else REPO.parent / "shared" / "data"
    return root if root.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def interruptible_children():
    """Subprocesses a test interrupts must take SIGINT as Ctrl-C. A process started with SIGINT ignored (an xdist
    worker, nohup, a background job) passes that on to its children, whose Python then never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The shared data sets. Missing data is a failure, not a skip: CI must have them."""
    root = _data_root()
    if root is None:
        pytest.fail("tests need the shared data sets: put them at ../shared/data or set RERANK_DATA", pytrace=False)
    return root


@pytest.fixture(scope="session")
def session_home(tmp_path_factory) -> Path:
    """A RERANK_HOME shared by the whole session, so an index is built once and reused by many tests."""
    return tmp_path_factory.mktemp("rerank-home")


@pytest.fixture
def home(session_home, monkeypatch) -> Path:
    monkeypatch.setenv("RERANK_HOME", str(session_home))
    return session_home


@pytest.fixture
def rerank(data_root, session_home):
    """Run the real `rerank` CLI in a subprocess; returns the CompletedProcess (text)."""

    def run(*args: str, input: str | None = None, check: bool = True, env: dict | None = None, cwd=None):
        full_env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root),
                    "HF_HUB_OFFLINE": "1", **(env or {})}
        done = subprocess.run([sys.executable, "-m", "rerank", *args], input=input, capture_output=True,
                              text=True, env=full_env, cwd=cwd or session_home)
        if check and done.returncode != 0:
            raise AssertionError(f"rerank {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    return run


@pytest.fixture(scope="session")
def vaswani_index(data_root, session_home) -> str:
    """Build the Vaswani Lucene index once per session (about 5 s)."""
    if not (session_home / "indexes" / "vaswani" / "lucene").is_dir():
        env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root)}
        subprocess.run([sys.executable, "-m", "rerank", "index", "vaswani"], check=True, env=env,
                       capture_output=True, cwd=session_home)
    return "vaswani"


@pytest.fixture(scope="session")
def vaswani_bm25_run(vaswani_index, data_root, session_home) -> str:
    """The stream of `rerank retrieve vaswani` (BM25, k = 1000, all 93 topics), searched once per session for the
    tests that compare other runs or files with it (each search starts a JVM: 3 to 6 s)."""
    env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root)}
    return subprocess.run([sys.executable, "-m", "rerank", "retrieve", vaswani_index], check=True, env=env,
                          capture_output=True, text=True, cwd=session_home).stdout


@pytest.fixture(scope="session")
def tiny_tk(tmp_path_factory) -> str:
    """A randomly initialised one-layer TK checkpoint over GloVe: a real model whose `rerank score` starts in half
    the time minilm-bi's does (torch without transformers, no MiniLM), for tests of the score stage's own handling
    of runs, texts and files."""
    import torch

    from rerank.models.tk import TKConfig, TKModule
    from rerank.checkpoint import write_checkpoint

    folder = tmp_path_factory.mktemp("tiny-tk")
    torch.manual_seed(0)
    module = TKModule(TKConfig.from_dict({"variant": "tk", "layers": 1, "heads": 2, "feedforward": 16}))
    write_checkpoint(folder, "tk", module.save(folder), {})
    return str(folder)


@pytest.fixture
def tensor_checkpoints(tmp_path):
    """Make checkpoint folders under tmp_path without training, NAME=VALUE: a tk "model" of one tensor filled with
    VALUE, which is all `rerank average` reads and computes with."""

    def make(**values: float) -> None:
        import torch

        from rerank.checkpoint import write_checkpoint

        for name, value in values.items():
            (tmp_path / name).mkdir()
            torch.save({"w": torch.full((2,), value)}, tmp_path / name / "weights.pt")
            write_checkpoint(tmp_path / name, "tk", {"variant": "tk"}, {})

    return make

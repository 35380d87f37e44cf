"""Fixtures shared by the first-stage tests: a small real corpus slice and a module-scoped CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SLICE_DOCS, SLICE_TOPICS = 300, 8


@pytest.fixture(scope="module")
def rerank_module(data_root, session_home):
    """The `rerank` CLI runner for module-scoped fixtures (conftest's `rerank` is function-scoped)."""

    def run(*args, check=True, env=None, input=None, cwd=None):
        full = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root),
                "HF_HUB_OFFLINE": "1", **(env or {})}
        done = subprocess.run([sys.executable, "-m", "rerank", *args], capture_output=True, text=True, env=full,
                              input=input, cwd=cwd or session_home)
        if check and done.returncode != 0:
            raise AssertionError(f"rerank {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    return run


@pytest.fixture(scope="session")
def cacm_slice(data_root, tmp_path_factory):
    """corpus.jsonl: the first 300 real CACM documents; topics.tsv: the first 8 real CACM topics."""
    from rerank.data import get_dataset

    cacm = get_dataset("cacm", data_root)
    folder = tmp_path_factory.mktemp("cacm-slice")
    docs = []
    for doc in cacm.documents():
        docs.append({"id": doc.docid, "contents": doc.contents})
        if len(docs) == SLICE_DOCS:
            break
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    topics = list(cacm.topics().items())[:SLICE_TOPICS]
    (folder / "topics.tsv").write_text("".join(f"{q}\t{' '.join(t.split())}\n" for q, t in topics))
    return folder

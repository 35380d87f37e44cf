"""A pytest fixture that runs the Elasticsearch-compatible test server (noida-db) on a free local port, and the
helpers that look at what it holds.

CI tests the Elasticsearch back end against noida-db 0.2.3 (PyPI), which speaks the Elasticsearch 8
REST API; a missing binary fails the tests loudly, it does not skip them. Import `es_server` into a
test module to use it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from importlib.resources import files
from pathlib import Path
from typing import Iterator

import pytest


def noida_binary() -> Path:
    try:
        binary = Path(str(files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError:
        pytest.fail("the Elasticsearch tests need noida-db==0.2.3: pip install 'rerank[test]'", pytrace=False)
    if not binary.is_file():
        pytest.fail(f"noida-db is installed but its server binary is missing at {binary}", pytrace=False)
    binary.chmod(0o755)
    return binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_server(data: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """noida-db (Elasticsearch API only) on a free port of 127.0.0.1: its URL and process; stopped on exit."""
    port = free_port()
    log = open(data.parent / f"noida-{port}.log", "w")
    process = subprocess.Popen([str(noida_binary()), "start", "--only", "elasticsearch", "--host", "127.0.0.1",
                                "--elasticsearch-port", str(port), "--data-dir", str(data)],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(f"noida-db did not start on {url}: {Path(log.name).read_text()[-500:]}", pytrace=False)
                time.sleep(0.1)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, 9)
            process.wait()
        log.close()


@pytest.fixture(scope="session")
def es_server(tmp_path_factory) -> Iterator[str]:
    """One server for the session's tests; yields its URL."""
    with running_server(tmp_path_factory.mktemp("noida")) as (url, _process):
        yield url


def es_client(url: str):
    """The official client, for what a test sets up or looks at on the server itself."""
    from elasticsearch import Elasticsearch

    return Elasticsearch(url)


def es_indexes(url: str, prefix: str) -> dict[str, list[str]]:
    """The indexes on the server whose names start with `prefix`, each with its aliases."""
    return {index: sorted(body["aliases"])
            for index, body in es_client(url).indices.get_alias(index=f"{prefix}*").body.items()}

"""A pytest fixture that runs the Elasticsearch-compatible test server (noida-db) on a free local port, and the
helpers that look at what it holds.

CI tests the Elasticsearch back end against noida-db 0.2.3 (PyPI), which speaks the Elasticsearch 8
REST API; a missing binary fails the tests loudly, it does not skip them. Import `es_server` into a
test module to use it.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from rerank.errors import RerankError
from rerank.retrieve import es_test_server


@contextlib.contextmanager
def running_server(data: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """The server on a free port of 127.0.0.1 (`rerank.retrieve.es_test_server`, which users start by hand): its
    URL and process; stopped on exit. A server that cannot start fails the test."""
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(es_test_server.running_server(data))
        except RerankError as error:
            pytest.fail(str(error), pytrace=False)
        yield started


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

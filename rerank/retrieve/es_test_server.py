"""The Elasticsearch-API test server the suite uses (noida-db), started on 127.0.0.1 to try the back end locally.

    python -m rerank.retrieve.es_test_server [--port 9200] [--data-dir DIR]     # or: bash scripts/es_test_server.sh

It prints the URL to give `rerank index/retrieve --backend elasticsearch --es-url`, then serves until Ctrl-C.
noida-db comes with `pip install -e '.[test]'`. It speaks the Elasticsearch 8 REST API but always scores BM25 with
k1 = 1.2 and b = 0.75 (rerank notes it); a real server is the official image (docs/elasticsearch.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.resources import files
from pathlib import Path
from typing import Iterator

from ..errors import RerankError

PACKAGE = "noida-db==0.2.3"


def noida_binary() -> Path:
    try:
        binary = Path(str(files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError:
        raise RerankError(f"the Elasticsearch test server needs {PACKAGE}: pip install -e '.[test]'") from None
    if not binary.is_file():
        raise RerankError(f"noida-db is installed but its server binary is missing at {binary}")
    binary.chmod(0o755)
    return binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_server(data: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """noida-db (Elasticsearch API only) on 127.0.0.1 (a free port unless given): its URL and process; stopped on
    exit. Its log goes beside `data`."""
    port = port or free_port()
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
                    raise RerankError(f"noida-db did not start on {url}: {Path(log.name).read_text()[-500:]}")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rerank.retrieve.es_test_server",
                                     description="Start the Elasticsearch-API test server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=9200, help="port (default 9200, rerank's default URL; 0: a free one)")
    parser.add_argument("--data-dir", type=Path, help="where it keeps its indexes (default: a new temporary folder)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server on `kill` as on Ctrl-C
    with contextlib.ExitStack() as stack:
        data = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rerank-es-"))) / "data"
        data.mkdir(parents=True, exist_ok=True)
        try:
            url, process = stack.enter_context(running_server(data.resolve(), args.port or None))
        except RerankError as error:
            print(f"es_test_server: {error}", file=sys.stderr)
            return 1
        print(url, flush=True)
        print(f"Elasticsearch-API test server (noida-db) on {url}; stop it with Ctrl-C. Try:\n"
              f"  rerank index vaswani --backend elasticsearch --es-url {url}\n"
              f"  rerank retrieve vaswani --backend elasticsearch --es-url {url} | rerank eval",
              file=sys.stderr, flush=True)
        try:
            process.wait()
        except KeyboardInterrupt:
            return 0
    return process.returncode or 0


if __name__ == "__main__":
    sys.exit(main())

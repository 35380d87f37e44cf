"""`bash scripts/es_test_server.sh`, as docs/elasticsearch.md has a user start it: it prints a URL that answers as
Elasticsearch 8 does, and stopping it stops the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.elasticsearch
def test_the_script_prints_a_url_that_answers_and_stops_the_server_with_it(tmp_path):
    process = subprocess.Popen(["bash", str(REPO / "scripts" / "es_test_server.sh"), "--port", "0",
                                "--data-dir", str(tmp_path / "data")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read()
        about = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert about["version"]["number"].startswith("8.")
        assert f"--es-url {url}" in process.stderr.readline() + process.stderr.readline() + process.stderr.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    with pytest.raises(OSError):  # the server went with it
        urllib.request.urlopen(url, timeout=2)
    assert (tmp_path / "data").is_dir() and list(tmp_path.glob("noida-*.log"))  # its data and log stay where asked


def test_a_noida_db_without_its_server_is_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    (tmp_path / "noida_db").mkdir()  # a package that shadows noida-db and holds no server binary
    (tmp_path / "noida_db" / "__init__.py").write_text("")
    done = subprocess.run(["bash", str(REPO / "scripts" / "es_test_server.sh"), "--port", "0"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("es_test_server: noida-db is installed but its server binary is missing at")

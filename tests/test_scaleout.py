"""`--ray`: score and encode on Ray workers give what one process gives, on TREC DL 2019 through the CLI; a worker
Ray restarts mid-run changes nothing; bad input is one line. One local Ray instance serves the module (it takes
15 to 20 s to start here); the commands connect to it by its address, as to a user's cluster."""

from __future__ import annotations

import io
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from in_process import in_process_home  # noqa: F401  (fixture)
from rerank.runs import RunReader, Stream, load_run

ray = pytest.importorskip("ray", reason="the ray extra: pip install 'rerank[ray]'")

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def ray_address(data_root, session_home):
    """A local Ray instance of two CPUs whose workers see the session's home and data, as `--ray` forwards them."""
    env = {"RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    yield context.address_info["gcs_address"]
    ray.shutdown()


@pytest.fixture(scope="module")
def dl19_bm25(data_root, session_home) -> str:
    """The stream of `rerank retrieve trec-dl-2019 --candidates bm25`."""
    env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root)}
    return subprocess.run([sys.executable, "-m", "rerank", "retrieve", "trec-dl-2019", "--candidates", "bm25"],
                          check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def dl19_slice(rerank, dl19_bm25) -> str:
    """Its first three queries, 30 deep."""
    return rerank("cat", "--first", "3", "--depth", "30", input=dl19_bm25).stdout


def _records(text: str) -> list[tuple[str, str, float]]:
    run = load_run(io.StringIO(text), "run")
    return [(q, d, s) for q, r in run.queries.items() for d, s in zip(r.docids, r.scores)]


def _score_stage(text: str) -> dict:
    return [json.loads(line.split(":", 1)[1]) for line in text.splitlines() if line.startswith("# stage:")][-1]


def _cached(home: Path) -> dict[bytes, float]:
    with sqlite3.connect(home / ".cache" / "scores.sqlite") as db:
        return dict(db.execute("SELECT key, score FROM scores"))


def test_score_on_ray_workers_is_the_single_process_run(rerank, ray_address, tiny_tk, dl19_slice, tmp_path):
    alone_home, ray_home = tmp_path / "alone", tmp_path / "ray"
    command = ("score", "--model", "tk", "--checkpoint", tiny_tk, "--depth", "20")
    alone = rerank(*command, input=dl19_slice, env={"RERANK_HOME": str(alone_home)})
    spread = rerank(*command, "--ray", ray_address, "--workers", "2", input=dl19_slice,
                    env={"RERANK_HOME": str(ray_home)})
    a, b = _records(alone.stdout), _records(spread.stdout)
    assert len(a) == 90 and [r[:2] for r in a] == [r[:2] for r in b]  # the same order
    assert max(abs(x[2] - y[2]) for x, y in zip(a, b)) < 1e-5
    stage = _score_stage(spread.stdout)
    assert (stage.pop("engine"), stage.pop("workers")) == ("ray", 2)
    assert stage == _score_stage(alone.stdout)
    timings = [line.split() for line in spread.stdout.splitlines() if line.startswith("# time:") and " tk " in line]
    assert [t[2] for t in timings] == list(dict.fromkeys(r[0] for r in b)) and all(t[5] == "20" for t in timings)
    assert all(float(t[4]) > 0 for t in timings)
    assert spread.stderr.endswith("scored 60 pairs over 3 queries (0 from the cache); 3 queries had candidates "
                                  "below the top 20, left unscored in their order (--depth to score more)\n")
    made_alone, made_spread = _cached(alone_home), _cached(ray_home)  # the same cache entries
    assert len(made_alone) == 60 and made_alone.keys() == made_spread.keys()
    assert max(abs(made_alone[k] - made_spread[k]) for k in made_alone) < 1e-5
    again = rerank(*command, input=dl19_slice, env={"RERANK_HOME": str(ray_home)})  # one process, Ray's cache
    assert "(60 from the cache)" in again.stderr


def _slice_corpus(path: Path, count: int) -> Path:
    from rerank.data import get_dataset

    with path.open("w") as out:
        for position, document in enumerate(get_dataset("trec-dl-2019").documents()):
            if position == count:
                break
            out.write(json.dumps({"id": document.docid, "contents": document.contents}) + "\n")
    return path


def test_encode_on_ray_workers_stores_what_one_process_stores_and_resumes(rerank, ray_address, tiny_tk, tmp_path,
                                                                          in_process_home, monkeypatch):
    """Two chunks of 256 documents and one of 88, the first stored by a run on one worker stopped by Ctrl-C while
    reading the third (its second, in flight, is lost), the rest by a resumed `encode --ray`: the store one process
    writes in one run, byte for byte."""
    from rerank.encodings import encode_collection, store_folder
    from rerank.scaleout import RayEngine, RayOptions

    corpus = _slice_corpus(tmp_path / "dl19-600.jsonl", 600)
    alone_home, ray_home = tmp_path / "alone", tmp_path / "ray"
    command = ("encode", "dl19-600", "--model", "tk", "--checkpoint", tiny_tk, "--corpus", str(corpus))
    rerank(*command, env={"RERANK_HOME": str(alone_home)})

    monkeypatch.setenv("RERANK_HOME", str(ray_home))
    engine = RayEngine(RayOptions("auto", workers=1))
    model = engine.load("tk", tiny_tk, {"batch_size": 64})
    documents = [(d, text) for d, text in (json.loads(line).values() for line in corpus.read_text().splitlines())]

    def stopped():
        for position, document in enumerate(documents):
            if position == 550:
                raise KeyboardInterrupt
            yield document

    with pytest.raises(KeyboardInterrupt):
        encode_collection("dl19-600", stopped, 600, model, progress=False, engine=engine,
                          source={"corpus": str(corpus.resolve())})
    engine.close()
    folder = store_folder("dl19-600", "tk", model.checkpoint_hash)
    assert json.loads((folder / "manifest.json").read_text())["documents"] == 256
    resumed = rerank(*command, "--ray", ray_address, "--workers", "2", env={"RERANK_HOME": str(ray_home)})
    assert f"resuming {folder}: 256 of 600 documents are encoded already" in resumed.stderr
    alone = alone_home / folder.relative_to(ray_home)
    for name in ("vectors.f16", "lengths.i32", "docids.txt", "manifest.json"):
        assert (folder / name).read_bytes() == (alone / name).read_bytes(), name


def test_a_worker_ray_restarts_mid_run_changes_nothing(rerank, ray_address, tiny_tk, dl19_bm25, in_process_home,
                                                      capfd):
    """A worker killed mid-stream (a node lost), with queries queued on it, is started again by Ray, which runs
    them again there: the same run; what Ray says of it goes to stderr, not into the stream on stdout."""
    from rerank.docstore import doc_store_for
    from rerank.models.base import load_model
    from rerank.scaleout import RayEngine, RayOptions
    from rerank.score import score_stream

    eight = rerank("cat", "--first", "8", "--depth", "10", input=dl19_bm25).stdout

    def scored(engine=None) -> list[tuple]:
        reader = RunReader(io.StringIO(eight), "<stdin>")
        rankings = iter(reader)
        first = next(rankings)  # the header is read with it
        attached = (reader.header, doc_store_for(reader.header).origin)
        model = load_model("tk", tiny_tk) if engine is None else engine.load("tk", tiny_tk, {}, attached)
        stream = score_stream(Stream(reader.header, itertools.chain([first], rankings)), model, 10, cache=False,
                              engine=engine)
        out = []
        for position, ranking in enumerate(stream.rankings):
            if position == 0 and engine is not None:  # queries 1 to 3 are queued on the workers now
                ray.kill(engine.actors[1], no_restart=False)
            out.append((ranking.qid, ranking.docids, ranking.scores))
        return out

    engine = RayEngine(RayOptions("auto", workers=2))
    try:
        spread = scored(engine)
    finally:
        engine.close()
    alone = scored()
    assert "(raylet)" not in capfd.readouterr().out
    assert len(alone) == 8 and [r[:2] for r in spread] == [r[:2] for r in alone]
    assert max(abs(x - y) for s, a in zip(spread, alone) for x, y in zip(s[2], a[2])) < 1e-5


def test_bad_ray_input_is_one_line(rerank, ray_address, tiny_tk, dl19_slice, tmp_path):
    score = ("score", "--model", "tk", "--checkpoint", tiny_tk)
    zero = rerank(*score, "--ray", "--workers", "0", input=dl19_slice, check=False)
    assert zero.returncode == 2 and zero.stderr == "rerank: error: --workers must be at least 1, not 0\n"
    alone = rerank(*score, "--workers", "2", input=dl19_slice, check=False)
    assert alone.returncode == 2 and alone.stderr == "rerank: error: --workers: options of --ray, which was not given\n"
    nowhere = rerank(*score, "--ray", "127.0.0.1:1", input=dl19_slice, check=False)
    assert nowhere.returncode == 1 and nowhere.stderr.startswith(
        "rerank: error: cannot reach the Ray cluster at 127.0.0.1:1: ConnectionRefusedError") and \
        nowhere.stderr.count("\n") == 1
    # no Ray here: a `ray` package that fails to import as an absent one does
    absent = tmp_path / "no-ray" / "ray"
    absent.mkdir(parents=True)
    (absent / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    unready = rerank(*score, "--ray", input=dl19_slice, check=False,
                     env={"PYTHONPATH": os.pathsep.join([str(absent.parent), str(REPO)])})
    assert unready.returncode == 2 and unready.stderr == ("rerank: error: --ray needs Ray, which is not installed "
                                                          "here: pip install 'rerank[ray]'\n")
    gone = str(tmp_path / "gone")
    lost = rerank("score", "--model", "tk", "--checkpoint", gone, "--ray", ray_address, "--workers", "1",
                  input=dl19_slice, check=False)
    assert lost.returncode == 2 and lost.stderr.startswith("rerank: error: ray worker 0 (on ") and \
        "cannot load tk: " in lost.stderr and gone in lost.stderr and lost.stderr.count("\n") == 1, lost.stderr
    assert not lost.stdout

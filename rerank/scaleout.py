"""Ray workers for the score stage's model scores and `rerank encode`'s document vectors (`--ray`).

The work is split (by query, or by chunk of documents), each worker (a Ray actor) loads the model once, and the
answers come back to this process in order. Everything else stays here, as when it runs alone: the texts, the score
cache, the rankings and their timings (`score.Rescoring.ask` and `answer`), the stored files and their manifest
(`encodings.encode_collection`). So the outputs are those of one process by construction; a query's `Timing` counts
its cache look-ups here and its model time on the worker, not the time its texts spent in transit.

Workers see the driver's `RERANK_*`, `HF_HUB_OFFLINE` and `PYTHONPATH` variables: on a cluster, checkpoints and
stored vectors must be at the same paths on every node. Ray is imported only here, when `--ray` is given.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .errors import BackendError, ParameterError, RerankError, UsageError
from .models.base import Reranker

INSTALL = "pip install 'rerank[ray]'"
RETRIES = 3  # a worker that dies (a node lost, out of memory) is restarted, and its tasks run again, this often
CONNECT_TIMEOUT_S = 10
IN_FLIGHT = 2  # tasks queued per worker, so that none waits while this process merges an answer
FORWARDED = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONPATH")  # besides every RERANK_* variable


@dataclass
class RayOptions:
    """`--ray [ADDRESS]`, `--workers`, `--gpus-per-worker`; `threads`: each worker's torch threads, its CPUs."""

    address: str  # "local" (a new local instance), "auto", "ray://HOST:PORT" or a head's HOST:PORT
    workers: int | None = None  # None: as many as the cluster's CPUs (GPUs) hold
    gpus_per_worker: float = 0.0
    threads: int | None = None

    def check(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ParameterError(f"{{workers}} must be at least 1, not {self.workers}", "workers")
        if self.gpus_per_worker < 0:
            raise ParameterError(f"{{gpus_per_worker}} must be 0 or more, not {self.gpus_per_worker:g}",
                                 "gpus_per_worker")
        if self.address not in ("local", "auto") and not self.address.startswith("ray://") \
                and ":" not in self.address:
            raise ParameterError(f"{{ray}} {self.address!r} is no Ray address: give auto, ray://HOST:PORT or HOST:PORT "
                                 "(or --ray alone, after the run file, for a local Ray instance)", "ray")

    @property
    def cpus(self) -> int:
        return int(self.threads or 1)

    @property
    def cluster(self) -> str:
        """The cluster in words, for messages."""
        return "the local Ray instance" if self.address == "local" else f"the Ray cluster at {self.address}"


def _one_line(exc: BaseException) -> str:
    """An exception as one line: a RerankError's message as it is; anything else with its type."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, RerankError) else f"{type(exc).__name__}: {text}"


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    return ray


def _forwarded() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("RERANK_") or k in FORWARDED}


def _check_reachable(address: str) -> None:
    """A HOST:PORT nothing answers on: Ray waits for it for many minutes (13 measured), so it is tried first."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot reach the Ray cluster at {address}: {_one_line(exc)}") from None


def connect(options: RayOptions):
    """The ray module, connected to the cluster `options` names (or to a new local instance)."""
    ray = _ray()
    if not ray.is_initialized():  # else a caller (a test, a notebook) connected already
        _init(ray, options)
    _failures_to_stderr()
    return ray


def _init(ray: Any, options: RayOptions) -> None:
    import logging

    local = options.address == "local"
    if not local and options.address != "auto":
        _check_reachable(options.address)
    sized = {"num_cpus": options.workers * options.cpus} if local and options.workers else {}
    try:
        ray.init(address=options.address, include_dashboard=False if local else None, log_to_driver=False,
                 logging_level=logging.ERROR, runtime_env={"env_vars": _forwarded()}, **sized)
    except Exception as exc:  # ConnectionError, TimeoutError, ValueError (ray:// without ray[client]), ...
        raise BackendError(f"cannot reach {options.cluster}: {_one_line(exc)}") from None


def _failures_to_stderr() -> None:
    """Ray prints what its raylets report (a task retried, a worker restarted) on the driver's stdout, where the run
    stream goes; they go to stderr instead. Its printer is private: where it is not found, nothing is changed."""
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is not None and not getattr(printer, "to_stderr", False):
        def to_stderr(data: dict, **options: Any) -> None:
            printer({**data, "is_err": True}, **options)

        to_stderr.to_stderr = True
        worker.print_to_stdstream = to_stderr


class Worker:
    """One model, loaded once in a Ray worker, and attached to the stream's documents where it scores them. A
    failure to load is kept and told by `describe`, in one line, rather than a dead actor's traceback."""

    def __init__(self, model: str, checkpoint: str | None, options: dict, attached: tuple | None):
        try:
            from .models.base import load_model

            self.model = load_model(model, checkpoint, **options)
            if attached is not None:  # here, so that a worker Ray restarts attaches again
                header, origin = attached
                self.model.attach(header, _Documents(origin))
            self.error = None
        except Exception as exc:  # any of them is told, naming this worker, by the process that started it
            self.model, self.error = None, _one_line(exc)

    def describe(self) -> dict:
        """What the driver's stand-in knows the model by (or the error that kept it from loading)."""
        import socket

        from . import code_version

        if self.error is not None:
            return {"error": self.error, "node": socket.gethostname()}
        model = self.model
        return {"node": socket.gethostname(), "rerank_version": code_version(), "name": model.name,
                "checkpoint_hash": model.checkpoint_hash, "folder": str(getattr(model, "folder", "")),
                "packages": tuple(model.packages), "provenance": model.provenance(),
                "encoded_with": model.encoded_with(), "width": getattr(model, "width", None)}

    def score(self, query: str, docids: list[str], texts: list[str]) -> tuple[list[float], float]:
        """The model's scores of one query's candidates, and the milliseconds they took."""
        began = time.perf_counter()
        scores = [float(s) for s in self.model.score(query, docids, texts)]
        return scores, (time.perf_counter() - began) * 1000

    def forget(self) -> None:
        self.model.forget()

    def encode(self, texts: list[str]) -> list[Any]:
        """Document vectors as float16 arrays (as they are stored: half the bytes in transit)."""
        import numpy as np

        return [np.asarray(matrix, dtype=np.float16) for matrix in self.model.encode_texts(texts)]


@dataclass
class _Documents:
    """A worker's stand-in for the stream's document store: `attach` reads its origin alone."""

    origin: dict


class RemoteModel(Reranker):
    """This process's stand-in for the model the workers hold: what the score stage and encode read of it (its
    name, checkpoint, provenance, packages), as worker 0 describes it. Its own `score` asks worker 0."""

    def __init__(self, engine: "RayEngine", described: dict):
        self.engine, self.described = engine, described
        self.name, self.checkpoint_hash = described["name"], described["checkpoint_hash"]
        self.folder, self.width = Path(described["folder"]), described["width"]
        self.packages = described["packages"]

    def attach(self, header: Any, store: Any) -> None:
        """The workers attached when they started (`RayEngine.load`), to the same stream."""

    def provenance(self) -> dict[str, Any]:
        return dict(self.described["provenance"])

    def encoded_with(self) -> dict | None:
        return self.described["encoded_with"]

    def score(self, query: str, docids: list[str], texts: list[str]) -> list[float]:
        return self.engine.answer(0, self.engine.actors[0].score.remote(query, docids, texts), "scoring")[0]

    def forget(self) -> None:
        for i, actor in enumerate(self.engine.actors):
            self.engine.answer(i, actor.forget.remote(), "forgetting")


class RayEngine:
    """A pool of workers holding one model; `rescored` and `encoded` map the work over them, in order."""

    def __init__(self, options: RayOptions):
        options.check()
        self.options = options
        self.ray = _ray()  # said at once where it is not installed; connected when the workers start
        self.actors: list[Any] = []

    def provenance(self) -> dict[str, Any]:
        """For the stage's header entry: which engine scored, with how many workers."""
        gpus = {"gpus_per_worker": self.options.gpus_per_worker} if self.options.gpus_per_worker else {}
        return {"engine": "ray", "workers": len(self.actors), **gpus}

    def _pool_size(self) -> int:
        if self.options.workers is not None:
            return self.options.workers
        resources = self.ray.cluster_resources()
        size = int(resources.get("CPU", 1) // self.options.cpus)
        if self.options.gpus_per_worker:
            size = min(size, int(resources.get("GPU", 0) // self.options.gpus_per_worker))
        return max(size, 1)

    def _check_room(self, workers: int) -> None:
        """A pool the cluster cannot hold would wait for its workers forever: refused, saying what it has."""
        resources = self.ray.cluster_resources()
        wanted = {"CPU": workers * self.options.cpus, "GPU": workers * self.options.gpus_per_worker}
        short = [f"{have:g} {kind}s of the {need:g} asked for" for kind, need in wanted.items()
                 if need > (have := resources.get(kind, 0))]
        if short:
            raise UsageError(f"{self.options.cluster} has {' and '.join(short)} (--workers "
                             f"{workers}, --threads {self.options.cpus}, --gpus-per-worker "
                             f"{self.options.gpus_per_worker:g}); ask for fewer")

    def load(self, model: str, checkpoint: str | None, options: dict, attached: tuple | None = None) -> RemoteModel:
        """Start the workers, each loading `model` (and attaching to `attached`: a stream's header and the origin of
        its documents); a worker that cannot is named with its error."""
        from . import code_version

        connect(self.options)
        workers = self._pool_size()
        self._check_room(workers)
        remote = self.ray.remote(num_cpus=self.options.cpus, num_gpus=self.options.gpus_per_worker,
                                 max_restarts=RETRIES, max_task_retries=RETRIES)(Worker)
        self.actors = [remote.remote(model, checkpoint, options, attached) for _ in range(workers)]
        described = [self.answer(i, actor.describe.remote(), "starting") for i, actor in enumerate(self.actors)]
        for i, worker in enumerate(described):
            if "error" in worker:
                raise UsageError(f"ray worker {i} (on {worker['node']}) cannot load {model}: {worker['error']}")
            if worker["rerank_version"] != code_version():
                raise UsageError(f"ray worker {i} (on {worker['node']}) runs rerank {worker['rerank_version']}, this "
                                 f"process {code_version()}: install the same rerank on the nodes")
        return RemoteModel(self, described[0])

    def answer(self, worker: int, ref: Any, doing: str) -> Any:
        """A task's result; its failure (after Ray's retries) in one line naming the worker."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            raise BackendError(f"ray worker {worker} failed {doing}: "
                               f"{_one_line(cause) if isinstance(cause, BaseException) else _one_line(exc)}") from None

    def _ordered(self, items: Iterable[Any], submit: Callable[[Any, Any], Any], doing: str) -> Iterator[tuple]:
        """(item, answer) for each item in order; each goes to the worker with the fewest tasks queued. `submit`
        returns None for an item that needs no work (its answer is None)."""
        in_flight: collections.deque = collections.deque()
        queued = [0] * len(self.actors)

        def oldest() -> tuple:
            item, worker, ref = in_flight.popleft()
            queued[worker] -= 1
            return item, None if ref is None else self.answer(worker, ref, doing)

        for item in items:
            worker = min(range(len(self.actors)), key=queued.__getitem__)
            in_flight.append((item, worker, submit(self.actors[worker], item)))
            queued[worker] += 1
            if len(in_flight) >= IN_FLIGHT * len(self.actors):
                yield oldest()
        while in_flight:
            yield oldest()

    def rescored(self, rescoring: Any, queries: Iterable[tuple]) -> Iterator[Any]:
        """`score.Rescoring.all` with the model's scores computed by the workers: each query asked of the cache
        here, its misses scored there, its ranking made here, in the stream's order."""
        def submit(actor: Any, asked: Any) -> Any:  # a query the cache answered whole asks nothing, as alone
            return actor.score.remote(asked.query, asked.todo, [asked.texts[d] for d in asked.todo]) \
                if asked.todo else None

        asked = (rescoring.ask(*query) for query in queries)
        for query, answer in self._ordered(asked, submit, "scoring"):
            yield rescoring.answer(query, *(answer or ([], 0.0)))

    def encoded(self, batches: Iterable[list[tuple[str, str]]]) -> Iterator[tuple[list, list]]:
        """(batch, its documents' vectors) for each batch of (docid, text), in order, encoded by the workers."""
        return self._ordered(batches, lambda actor, batch: actor.encode.remote([text for _, text in batch]),
                             "encoding")

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []

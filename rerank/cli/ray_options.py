"""`--ray [ADDRESS]`, `--workers`, `--gpus-per-worker`: the options of the commands whose model work scales out on
Ray workers (score, encode), said once. Ray itself is imported only when `--ray` is given (`scaleout.py`)."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import click

from ..errors import UsageError


def ray_options(command: Callable) -> Callable:
    command = click.option("--gpus-per-worker", type=float, default=None,
                           help="GPUs each Ray worker holds (with --ray; pair it with --device cuda).")(command)
    command = click.option("--workers", type=int, default=None,
                           help="Ray workers, each loading the model once (with --ray; default: as many as the "
                                "cluster's CPUs, or GPUs, hold).")(command)
    return click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                        help="Compute the model's work on Ray workers: alone (put it after the run file), a new "
                             "local Ray instance; auto, ray://HOST:10001 or HOST:PORT, a running cluster. Needs "
                             "pip install 'rerank[ray]'.")(command)


@contextlib.contextmanager
def ray_engine(address: str | None, workers: int | None, gpus_per_worker: float | None,
               threads: int | None) -> Iterator[object | None]:
    """The Ray engine the options ask for (None without --ray), its workers stopped when the command ends."""
    if address is None:
        given = [flag for flag, value in (("--workers", workers), ("--gpus-per-worker", gpus_per_worker))
                 if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: options of --ray, which was not given")
        yield None
        return
    from ..scaleout import RayEngine, RayOptions

    engine = RayEngine(RayOptions(address, workers, gpus_per_worker or 0.0, threads))
    try:
        yield engine
    finally:
        engine.close()

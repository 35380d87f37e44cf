"""Progress of long loops on stderr: tqdm's bar on a terminal, and where stderr is a file or a pipe (a log, a
batch job, CI) a plain line now and then instead, so a long run says it is alive without filling a log with
bar redraws (tqdm alone says nothing there)."""

from __future__ import annotations

import sys
import time


class Progress:
    """Count `unit`s of work; `every` seconds at most between lines when there is no terminal."""

    def __init__(self, what: str, unit: str, total: int | None = None, initial: int = 0, every: float = 60.0,
                 enabled: bool = True, units: str | None = None):
        from tqdm import tqdm

        self.what, self.units, self.total, self.every = what, units or unit + "s", total, every
        self.bar = tqdm(total=total, initial=initial, desc=what, unit=unit, disable=None if enabled else True)
        self.lines = enabled and self.bar.disable
        self.done, self.began = initial, time.monotonic()
        self.said = self.began

    def update(self, count: int = 1) -> None:
        self.done += count
        self.bar.update(count)
        now = time.monotonic()
        if self.lines and now - self.said >= self.every:
            self.said = now
            of = f"/{self.total}" if self.total is not None else ""
            print(f"rerank: {self.what}: {self.done}{of} {self.units} in {now - self.began:.0f} s", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

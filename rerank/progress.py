"""Progress of long loops on stderr: tqdm's bar on a terminal (with the total and the time left, where the total is
known), and where stderr is a file or a pipe (a log, a batch job, CI) plain lines instead: one once it has run a few
seconds, one a minute and one at the end, each with the count so far, the total and the time left, so a long run says
it is alive without filling a log with bar redraws (tqdm alone says nothing there)."""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator


class Counted:
    """Items that know how many they are, without being held in memory: what a Progress counts up to."""

    def __init__(self, items: Iterable, total: int):
        self.items, self.total = items, total

    def __iter__(self) -> Iterator:
        return iter(self.items)

    def __len__(self) -> int:
        return self.total


def total_of(items: Any) -> int | None:
    """How many `items` are, where they say (a list, a Counted); None for a generator."""
    return len(items) if hasattr(items, "__len__") else None


class Progress:
    """Count `unit`s of work; `every` seconds at most between lines when there is no terminal, the first once the
    work has run DELAY seconds (as tqdm's `delay`): a quick command, or a mistake found in its first seconds, says
    nothing more than its own lines."""

    DELAY = 5.0

    def __init__(self, what: str, unit: str, total: int | None = None, initial: int = 0, every: float = 60.0,
                 enabled: bool = True, units: str | None = None):
        from tqdm import tqdm

        self.what, self.units, self.total, self.every = what, units or unit + "s", total, every
        self.bar = tqdm(total=total, initial=initial, desc=what, unit=unit, disable=None if enabled else True)
        self.lines = enabled and self.bar.disable
        self.initial = self.done = initial
        self.said_done: int | None = None  # the count the last line said
        self.began = self.said = time.monotonic()
        self.closed = False

    def update(self, count: int = 1) -> None:
        """`count` more done; off a terminal, the first line comes with the first of them after DELAY seconds (with
        a rate, so the time left), then one a minute."""
        self.done += count
        self.bar.update(count)
        now = time.monotonic()
        if self.lines and (now - self.said >= self.every or self.said_done is None and now - self.began >= self.DELAY):
            self._say(now)

    def _say(self, now: float) -> None:
        self.said, self.said_done = now, self.done
        of = f"/{self.total}" if self.total is not None else ""
        spent = now - self.began
        line = f"rerank: {self.what}: {self.done}{of} {self.units} in {spent:.0f} s"
        left = self.seconds_left(now)
        if left is not None and not self.closed:
            line += f", about {left:.0f} s left"
        print(line, file=sys.stderr, flush=True)

    def seconds_left(self, now: float) -> float | None:
        """The time the rest takes at the rate so far (this run's: a resumed run's earlier work took no time here)."""
        done_here = self.done - self.initial
        if self.total is None or done_here <= 0 or self.done >= self.total:
            return None
        return (now - self.began) / done_here * (self.total - self.done)

    def close(self, said: bool = True) -> None:
        """The bar's end; off a terminal, the last line (once; not `said` after an error, which is the last word)."""
        if self.closed:
            return
        self.closed = True
        self.bar.close()
        now = time.monotonic()  # (a quick run's own lines say it all; a minute's line may have said the last count)
        if self.lines and said and self.said_done != self.done \
                and (self.said_done is not None or now - self.began >= self.DELAY):
            self._say(now)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        self.close(said=exc_type is None)

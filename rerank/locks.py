"""Locks between rerank processes that share a RERANK_HOME (several jobs, two shells): one writer per output.

Outputs that a process writes piece by piece over minutes (an index build's shards, stored encodings appended
chunk by chunk, a checkpoint rewritten at every better dev evaluation) cannot be made safe by a final rename
alone: two writers mix their pieces. The second writer is refused at once, with one line, instead.

The lock is the kernel's `flock` on a dot-file beside the output: the kernel drops it when its holder exits,
however it ends (crash, kill -9), so no stale lock outlives a process and none needs clearing by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from .atomic import make_parents, remove_empty
from .errors import BusyError


def lock_file(output: Path) -> Path:
    """The lock of `output` (a file or folder): `.NAME.lock` beside it, which survives the output's replacement."""
    output = Path(output).resolve()
    return output.parent / f".{output.name}.lock"


@contextlib.contextmanager
def exclusive(output: str | os.PathLike, busy: str) -> Iterator[None]:
    """Hold `output`'s lock for the block; raise BusyError(`busy`) at once if another process holds it.

    Folders made for the lock file, and the file itself, are removed on the way out (an output that failed
    leaves nothing behind). Removing it is safe because a process that got the lock checks that the file it
    locked is still the one at the path (else it was removed by the previous holder as it opened it: try again).
    """
    path = lock_file(Path(output))
    created = make_parents(path.parent)
    try:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise BusyError(busy) from None
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # while still held: nobody can lock this file once it is gone from the path
            os.close(fd)
    finally:
        remove_empty(created)

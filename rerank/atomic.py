"""Outputs that appear whole or not at all: write to a temporary sibling, then rename."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

from .errors import UsageError


PLOT_FORMATS = ("png", "pdf", "svg")


def plot_format(path: str) -> str:
    """The image format a plot's file name asks for (PNG without a suffix); the atomic write's temporary name has
    none for matplotlib to go by, so `m.pdf` used to get PNG bytes."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix and suffix not in PLOT_FORMATS:
        raise UsageError(f"--plot {path}: cannot write .{suffix} images; name a .png, .pdf or .svg file")
    return suffix or "png"


def make_parents(folder: Path) -> list[Path]:
    """Create `folder` and its missing ancestors; return those created (deepest first) to take back on failure."""
    created = []
    while not folder.exists():
        created.append(folder)
        folder = folder.parent
    for missing in reversed(created):
        missing.mkdir(exist_ok=True)
    return created


def _umask_mode(full: int) -> int:
    """The mode a plain `open`/`mkdir` would give: mkstemp/mkdtemp make owner-only files (0600/0700),
    which would leave a run or an index on a shared lab server unreadable to the rest of the group."""
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask


def _share_like_plain_files(folder: Path) -> None:
    """Give a finished folder, and what writers left owner-only inside it (safetensors writes its weights
    through a temporary file, 0600), the modes plain writes would have."""
    os.chmod(folder, _umask_mode(0o777))
    for path in folder.rglob("*"):
        if not path.is_symlink() and not path.stat().st_mode & 0o077:
            os.chmod(path, _umask_mode(0o777 if path.is_dir() else 0o666))


def _host() -> str:
    """This machine, as temporary names carry it (a short digest: host names hold dots and can be long)."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _temporary_prefix(target: Path) -> str:
    """The start of a temporary sibling's name: the output's, and the pid and host of the process writing it, which
    tell `remove_stale_temporaries` whether that process still runs."""
    return f".{target.name}.{os.getpid()}-{_host()}."


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary siblings of `target` left by writers killed outright (kill -9, the OOM killer), which
    no unwinding removed: hidden `.NAME.PID-HOST.xxxx.tmp` folders of up to a checkpoint's size each, left beside
    the output for good. Only those of this host whose process no longer runs: a live writer's (two `average -o
    SOUP` at once), another machine's on a shared disk, or one named before names carried their writer, is left
    alone."""
    stale = re.compile(rf"\.{re.escape(target.name)}\.(\d+)-{_host()}\.[a-z0-9_]+\.tmp")
    try:
        siblings = list(target.parent.iterdir())
    except OSError:  # unreadable: the write itself will say why
        return
    for sibling in siblings:
        found = stale.fullmatch(sibling.name)
        if found is None or int(found.group(1)) == 0 or _running(int(found.group(1))):
            continue
        if sibling.is_dir() and not sibling.is_symlink():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                sibling.unlink()


def remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty (something else wrote there) or already gone
            folder.rmdir()


def _not_a_file(path: str | os.PathLike) -> bool:
    """A device, FIFO or descriptor alias (`/dev/stdout`, even when the shell sent it to a file): a stream, not a
    file to replace. (A file in /dev/shm is a file.)"""
    if os.path.abspath(path).startswith(("/dev/std", "/dev/fd/", "/proc/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # missing (to be created), or a dangling link
        return False


@contextlib.contextmanager
def _opened(fd: int, mode: str, target: Path) -> Iterator[IO]:
    """The temporary file to write, gzip-compressed where the output's name ends in .gz, as the readers take such a
    name (`cat -o run.gz` wrote plain text there, which eval then refused as "not a gzipped file"). The header
    names the output less .gz, as gzip's does, and no time, so the same text gives the same bytes; level 6, gzip's
    own default (Python's 9 took 1.4x as long on a 2 MB run file, for 1% fewer bytes)."""
    if target.suffix != ".gz" or "b" in mode:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        return
    with os.fdopen(fd, "wb") as raw, \
            gzip.GzipFile(target.name, "wb", compresslevel=6, fileobj=raw, mtime=0) as compressed, \
            io.TextIOWrapper(compressed, encoding="utf-8") as handle:
        yield handle


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike | None, mode: str = "w") -> Iterator[IO]:
    """Yield a file to write; on success it replaces `path`, on error it vanishes.

    `path` None or "-" means stdout, which is written directly (a pipe cannot be rolled back), as are
    devices and FIFOs.
    """
    if path is None or str(path) == "-":
        yield sys.stdout if "b" not in mode else sys.stdout.buffer
        sys.stdout.flush()
        return
    if not str(path):
        raise UsageError("the output path is empty")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder; give the output a file name")
    if str(path).endswith(os.sep):  # `-o runs/` for a folder yet to be made: it wrote a file named `runs`
        raise UsageError(f"{path} names a folder (it ends in {os.sep}); give the output a file name")
    if _not_a_file(path):  # /dev/null, /dev/stdout, a FIFO: written to, never replaced
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        return
    target = Path(os.path.realpath(path))  # through a symlink: replace the file it points to, keep the link
    created: list[Path] = []
    try:  # errors name the output, not the temporary sibling that met them
        created = make_parents(target.parent)
        remove_stale_temporaries(target)
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as exc:
        remove_empty(created)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with _opened(fd, mode, target) as handle:
            yield handle
        os.chmod(tmp, _umask_mode(0o666))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        remove_empty(created)
        raise


def check_replaceable(path: str | os.PathLike, marker: str) -> None:
    """Refuse a target folder that holds anything but an earlier output of the same kind (one with `marker`).

    Replacing a folder deletes it: `-o ~/thesis` must not take a user's files with it.
    """
    if not str(path):  # Path("") is the working directory, which it was then taken for
        raise UsageError("the output path is empty")
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is a file, not a folder")
    if target.is_dir() and not (target / marker).is_file() and any(target.iterdir()):
        raise UsageError(f"{target} is a folder with other files in it (no {marker}); refusing to replace it: "
                         "choose a new or empty folder")


def check_writable(path: str | os.PathLike) -> None:
    """Refuse an output that could not be written, before hours of work go into it: make and remove a
    temporary folder where it would go (permission bits alone do not tell, e.g. for root or read-only mounts)."""
    folder = Path(path).resolve().parent
    while not folder.exists():
        folder = folder.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rerank-probe.", dir=folder))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror} in {folder}") from None


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, marker: str) -> Iterator[Path]:
    """Yield a temporary folder that replaces `path` only when the block succeeds.

    `path` may already hold an earlier output of the same kind (it holds the file `marker`) or be empty;
    anything else is refused (`check_replaceable`).
    """
    check_replaceable(path, marker)
    target = Path(path).resolve()  # `-o .` too: its temporary sibling goes in the parent folder
    created: list[Path] = []
    try:  # errors name the output, not the temporary sibling that met them (as atomic_output's)
        created = make_parents(target.parent)
        remove_stale_temporaries(target)
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent))
    except OSError as exc:
        remove_empty(created)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        yield tmp
        _share_like_plain_files(tmp)
        replace_folder(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(created)
        raise


def replace_folder(new: Path, target: Path) -> None:
    """Move the folder `new` to `target`, replacing an earlier one there.

    The earlier one moves aside before the new one moves in, and is deleted only then: deleting it first left,
    when interrupted there, half an old output and no new one, and a reader opening it meanwhile (a search
    while its index is rebuilt) found half of one.
    """
    old = target.with_name(f".{target.name}.old")
    replacing = target.exists()
    try:
        if replacing:
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(new, target)
    except BaseException:
        if replacing and old.exists() and not target.exists():  # interrupted between the two renames
            os.replace(old, target)
        raise
    if replacing:
        shutil.rmtree(old, ignore_errors=True)

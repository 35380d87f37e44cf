"""Where things live: the data root, the project's indexes/ and runs/ folders."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .errors import DataError

DATA_ROOT_ENV = "RERANK_DATA"
HOME_ENV = "RERANK_HOME"


def read_json_object(path: Path, remedy: str) -> dict:
    """A manifest rerank wrote (a checkpoint's, an index's, stored encodings'): one damaged or replaced (not UTF-8,
    not JSON, not an object) is named with `remedy`, not a traceback from the code that reads its fields."""
    try:
        manifest = json.loads(path.read_text())
    except ValueError:  # JSON's errors and UnicodeDecodeError
        raise DataError(f"{path} is corrupt (not JSON); {remedy}") from None
    if not isinstance(manifest, dict):
        raise DataError(f"{path} is corrupt (not a JSON object); {remedy}")
    return manifest


def project_home() -> Path:
    """Folder that holds indexes/, runs/ and the score cache: RERANK_HOME or the working directory."""
    return Path(os.environ.get(HOME_ENV) or Path.cwd())


def indexes_dir() -> Path:
    return project_home() / "indexes"


def runs_dir() -> Path:
    return project_home() / "runs"


def cache_dir() -> Path:
    return project_home() / ".cache"


def _sibling_shared_data() -> Path | None:
    """The `../shared/data` folder beside the checkout (or beside the working directory)."""
    for base in (Path(__file__).resolve().parent.parent, Path.cwd()):
        candidate = base.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data root: explicit option, then $RERANK_DATA, then ../shared/data."""
    chosen = explicit or os.environ.get(DATA_ROOT_ENV)
    if chosen:
        root = Path(chosen).expanduser()
        if not root.is_dir():
            raise DataError(f"data root {root} is not a folder (set --data-root or {DATA_ROOT_ENV})")
        return root
    root = _sibling_shared_data()
    if root is None:
        raise DataError(
            f"no data root: pass --data-root or set {DATA_ROOT_ENV} to a folder of data sets "
            "in the layout described in docs (the sibling ../shared/data was not found)"
        )
    return root


DIGESTS_FILE = "file-digests.json"  # in .cache/: content digests by (path, size, modification time)
_digests: dict[Path, dict[str, str]] = {}  # each digest file as this process has read and extended it


def _read_digests(where: Path) -> dict[str, str]:
    """The digest file's entries; none where there is none yet, or it is damaged (its digests are computed again,
    and it is written anew with the next one)."""
    try:
        loaded = json.loads(where.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _known_digests(where: Path) -> dict[str, str]:
    if where not in _digests:
        _digests[where] = _read_digests(where)
    return _digests[where]


def _remember_digest(where: Path, key: str, digest: str) -> None:
    """Add a digest to the file, merged with what other processes wrote there since it was read (a lost race
    loses a digest, which is computed again). Only the digests of files as they are now are kept: one whose file was
    edited, touched or removed since would never be looked up again, and the file kept one per edit, for good."""
    known = _known_digests(where)
    known[key] = digest
    current = {entry: value for entry, value in {**_read_digests(where), **known}.items()
               if _names_the_file_as_it_is(entry)}
    _digests[where] = current  # else this process would write back what it read before another one dropped it
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        partial = where.with_name(f".{where.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(current))
        os.replace(partial, where)
    except OSError:  # a read-only home: digests are computed again next time
        pass


def _names_the_file_as_it_is(key: str) -> bool:
    """Whether a digest's key (`path:size:mtime_ns`, where the path may hold ':') is its file's size and modification
    time now (one stat)."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3:  # not a key file_state writes (a damaged or foreign file)
        return False
    path, size, mtime_ns = parts
    try:
        now = os.stat(path)
    except (OSError, ValueError):  # gone (ValueError: a path holding NUL)
        return False
    return (str(now.st_size), str(now.st_mtime_ns)) == (size, mtime_ns)


def file_state(path: Path) -> str:
    """A file's identity for 'has it changed?': its path, size and a digest of its content. The digest is computed
    once per size and modification time, as make would look, and remembered under .cache/ (a corpus is too large
    to hash on every run): a file copied, downloaded again or touched with the same bytes is the same file, which a
    state of size and time (make's) took for an edit and rebuilt everything made from it."""
    resolved = path.resolve()
    before = resolved.stat()
    key = f"{resolved}:{before.st_size}:{before.st_mtime_ns}"
    where = cache_dir() / DIGESTS_FILE
    digest = _known_digests(where).get(key)
    if digest is None:
        digest = file_sha256(resolved)[:16]
        after = resolved.stat()
        if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):  # not written meanwhile
            _remember_digest(where, key, digest)
    return f"{resolved}:{before.st_size}:{digest}"


def file_digest(path: Path) -> str:
    """The digest `file_state` remembers of a file's content (the first 16 hex digits of its sha256)."""
    return file_state(path).rsplit(":", 1)[1]


def state_path(state: str) -> str:
    """The path a `file_state` names (paths may hold ':')."""
    return state.rsplit(":", 2)[0]


def file_sha256(path: Path) -> str:
    """A file's content digest, for what must be recognised byte for byte (stored vectors, a checkpoint's
    training files), where file_state's size and time would not do."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()

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


def file_state(path: Path) -> str:
    """A file's identity for 'has it changed?': path, size and modification time, as make uses (corpora are
    too large to hash on every run)."""
    status = path.stat()
    return f"{path.resolve()}:{status.st_size}:{status.st_mtime_ns}"


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

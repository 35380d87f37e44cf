"""Where built indexes live (indexes/NAME/BACKEND/) and the manifest each one carries."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import MissingIndexError
from ..paths import indexes_dir

MANIFEST = "rerank-index.json"


def index_folder(name: str) -> Path:
    return indexes_dir() / name


@dataclass
class IndexInfo:
    """What an index holds and where it came from; written last, so its presence means 'complete'."""

    name: str
    backend: str
    documents: int
    source: dict = field(default_factory=dict)  # data set name or corpus path, and build options
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def read(cls, folder: Path, name: str, backend: str) -> "IndexInfo":
        path = folder / MANIFEST
        if not path.is_file():
            raise MissingIndexError(f"{folder} is not a complete {backend} index (no {MANIFEST}); "
                                    f"rebuild it with: rerank index {name} --backend {backend} --overwrite")
        return cls(**json.loads(path.read_text()))

"""Where built indexes live (indexes/NAME/BACKEND/) and the manifest each one carries."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import DataError, MissingIndexError, UsageError
from ..locks import exclusive
from ..paths import file_state, indexes_dir, read_json_object, state_path
from ..progress import total_of

MANIFEST = "rerank-index.json"
EMPTY_SKIPPED = "empty_documents_skipped"
BUILD_KEY = "index_build"  # a manifest's source, and a retrieve stage's header entry: which build was searched
REUSED = "reused_vectors"  # a dense build that took the vectors of the index it replaced (same documents and encoder)


def index_folder(name: str) -> Path:
    """indexes/NAME: the name is one plain folder name, so no index lands outside indexes/ ('../x', '/x') or
    inside another (''), and none hides among the build's own dot-folders."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or name != name.strip():
        raise UsageError(f"index name {name!r} must be a plain folder name (no '/', not starting with '.')")
    return indexes_dir() / name


def build_lock(name: str, backend: str, folder: Path | None = None, index_name: str | None = None):
    """Held while indexes/NAME/BACKEND (or `folder`, the back end's place for `index_name`) is built: two builds of
    one index at once (two shells, parallel jobs) shared the dense back end's partial shards and moved each other's
    folders away, and the one that lost said only 'No such file or directory'. The second is refused at once
    instead; builds of two index names of one back end go ahead side by side."""
    which = backend if index_name is None else f"{backend} index name {index_name!r}"
    return exclusive(folder or index_folder(name) / backend, f"index {name!r} ({which}) is being built by another "
                                                             "process; wait for it to finish")


def build_command(name: str, options: str = "") -> str:
    """The `rerank index` command that builds NAME: an index of one's own needs its documents named."""
    from ..data import dataset_names

    corpus = "" if name in dataset_names() else " --corpus FILE"
    return f"rerank index {name}{corpus}{options}"


def source_state(source: dict, skip: tuple[str, ...] = ("qrels",)) -> list[str]:
    """The files of a data set (but its `skip` parts: judgements change no run, and topics no index), or a
    corpus file, as `paths.file_state` sees them: what a run or a resumed build was made from."""
    from ..data import dataset_names, get_dataset

    paths = [Path(source["corpus"])] if "corpus" in source else []
    if source.get("dataset") in dataset_names():
        paths += [path for part, path in get_dataset(source["dataset"]).files.items() if part not in skip]
    return [file_state(path) for path in paths if path.is_file()]


def origin(source: dict) -> dict:
    """Which documents a build's `source` names: {"dataset": NAME} or {"corpus": PATH} (build options left out)."""
    return {key: source[key] for key in ("dataset", "corpus") if key in source}


def described(documents: dict) -> str:
    """An `origin` in words: 'data set NAME' or the corpus file's path."""
    return (f"data set {documents['dataset']}" if "dataset" in documents else documents["corpus"]
            if "corpus" in documents else "unrecorded documents")


def outdated(index: str, documents: dict, backend: str = "lucene", build_options: str | None = None) -> str | None:
    """Why the texts Lucene index `index` stores (`documents`: its recorded origin), or the documents another
    `backend`'s build of it searches, are not those documents as they are now, with the command that rebuilds it
    (`build_options`: that command's options where `--backend` alone would not find it again, an Elasticsearch
    index name's); None where they are, or where its build recorded no file states. Vectors encoded from the file
    now would not be of the texts a stream from the index is scored with."""
    corpus = documents.get("corpus")
    which = build_options if build_options is not None else "" if backend == "lucene" else f" --backend {backend}"
    if corpus and not Path(corpus).is_file():
        return (f"{corpus}, which index {index} was built from, is gone; rebuild the index from where it is now "
                f"(rerank index {index}{which} --corpus FILE --overwrite)")
    now = source_state(documents, skip=("qrels", "topics"))
    if "files" in documents and documents["files"] != now:
        rebuild = f"rerank index {index}{which}{f' --corpus {corpus}' if corpus else ''} --overwrite"
        then_paths, now_paths = ([state_path(state) for state in states] for states in (documents["files"], now))
        if then_paths != now_paths:  # another copy of the data set (another --data-root), not an edit
            return (f"{described(documents)} is read from other files than index {index} was built from "
                    f"({', '.join(now_paths)}; built from {', '.join(then_paths)}); if their documents differ, "
                    f"rebuild it ({rebuild})")
        return f"{described(documents)} has changed since index {index} was built; rebuild it ({rebuild})"
    return None


def recorded_origin(name: str, backends: tuple[str, ...] | None = None) -> dict:
    """Which documents the index NAME built here was built from, as the manifest of the first of `backends` built
    says (default: Lucene's, else another back end's, an Elasticsearch index name's among them), with their files'
    states then where it records them (the texts a Lucene index stores are of that state); {} when none is built,
    or its manifest is unreadable."""
    folder = index_folder(name)
    return origin_recorded_in([folder / backend for backend in backends] if backends else _built_folders(folder), name)


def _built_folders(folder: Path) -> list[Path]:
    """The folders under indexes/NAME with a manifest: a back end's (Lucene's first; a named dense index's,
    dense-INDEX_NAME, among them), then those one level further down (Elasticsearch keeps one per index name); not
    a build's dot-folders."""
    def found(pattern: str) -> list[Path]:
        return [path.parent for path in folder.glob(pattern)
                if not any(part.startswith(".") for part in path.parent.relative_to(folder).parts)]

    return sorted(found(f"*/{MANIFEST}"), key=lambda path: (path.name != "lucene", path.name)) + sorted(
        found(f"*/*/{MANIFEST}"))


def origin_recorded_in(folders: list[Path], name: str) -> dict:
    """`recorded_origin` as the first of `folders` with a readable manifest records it."""
    for path in folders:
        try:
            return documents_recorded(IndexInfo.read(path, name, path.name).source)
        except (MissingIndexError, OSError, DataError):  # not built, or its manifest unreadable
            continue
    return {}


def documents_recorded(source: dict) -> dict:
    """A manifest `source`'s documents: their `origin`, with the states (path, size, digest) of their files when the
    build read them, where it records them."""
    return {**origin(source), **({"files": source["files"]} if "files" in source else {})}


def build_id() -> str:
    """Which build of an index a run searched (its header's `index_build`, as Elasticsearch's names its build):
    the time it finished and a random part, since two builds of a small corpus may finish within a second."""
    return f"{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"


def searched_build(info: "IndexInfo") -> str:
    """The `index_build` a search of this manifest's index records: the build's id, or for a build from before ids
    were recorded, its manifest's time (a rebuild under the same name searches other documents or vectors)."""
    return info.source.get(BUILD_KEY, info.created)


def made_from(recorded: dict, documents: dict) -> bool:
    """Whether vectors recorded as made from `recorded` (a dense index's or stored encodings' source, with the
    `files` states of its build) were made from the texts of `documents` (a text store's `origin`): the same data
    set or file, in the state its texts were read in (its `files`: a Lucene index's snapshot), else as it is now.
    Vectors are found by docid, and those of another collection, or of other versions of its texts, silently score
    other texts under the same docids."""
    texts_state = documents["files"] if "files" in documents else source_state(recorded, skip=("qrels", "topics"))
    return bool(origin(documents)) and origin(recorded) == origin(documents) and recorded.get("files") == texts_state


class WithText:
    """The documents that have text, counting the others (`skipped`): Anserini leaves out a document with nothing
    left after Java's String.trim() (which strips characters up to ' '), and every back end does the same, so all
    hold the same documents (a dense index that held them ranked an empty document first for a query of
    punctuation, which `rerank score` of the run over the Lucene index's texts then could not find)."""

    def __init__(self, documents):
        self.documents, self.skipped = documents, 0
        self.total = total_of(documents)  # with those without text, where known: what a build's progress counts to

    def __iter__(self):
        for doc in self.documents:
            if any(character > " " for character in doc.contents):
                yield doc
            else:
                self.skipped += 1


def empty_skipped(count: int) -> dict:
    """The manifest's record of documents without text left out of an index, as Anserini leaves them out
    (no record when there were none)."""
    return {EMPTY_SKIPPED: count} if count else {}


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
    def read(cls, folder: Path, name: str, backend: str, build_options: str | None = None) -> "IndexInfo":
        """The manifest in `folder`; `build_options`: the rebuild command's options where `--backend` alone would
        not find this index again (a dense index name's)."""
        path = folder / MANIFEST
        rebuild = build_command(name, f" --backend {backend}" if build_options is None else build_options)
        if not path.is_file():
            raise MissingIndexError(f"{folder} is not a complete {backend} index (no {MANIFEST}: not built, or not "
                                    f"finished, by rerank); remove it and rebuild it with: {rebuild}")
        remedy = f"remove {folder} and rebuild it with: {rebuild}"
        fields = read_json_object(path, remedy)
        try:
            return cls(**fields)
        except TypeError:  # keys this rerank does not know
            raise DataError(f"{path} is not an index manifest this rerank wrote; {remedy}") from None

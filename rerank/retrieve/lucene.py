"""BM25 over an embedded Lucene index (Anserini, the engine inside Pyserini): build, search, fetch text.

The index keeps raw documents, positions and document vectors, so later stages can read text back.
Searching uses Anserini's `SimpleSearcher.batch_search`, which searches on Java threads; results are
then ordered as trec_eval orders them. Per-query times are the batch's wall time shared out evenly
over its queries (the header says `"timing": "amortised"`): what a query costs at this throughput.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable, Iterator

from tqdm import tqdm

from ..atomic import atomic_dir
from ..data import Document
from ..errors import BackendError, MissingIndexError
from ..runs import QueryRanking, Timing
from . import jvm
from .store import IndexInfo, index_folder

BACKEND = "lucene"
DEFAULT_K1, DEFAULT_B = 0.9, 0.4  # Anserini's defaults
BATCH = 64  # queries handed to Java at once: large enough to use its threads, small enough to stream


def build(name: str, documents: Iterable[Document], total: int | None, source: dict,
          threads: int = 2, overwrite: bool = False, **_options) -> IndexInfo:
    """Index `documents` into indexes/NAME/lucene/ (built aside, then moved into place)."""
    target = index_folder(name) / BACKEND
    if target.exists() and not overwrite:
        raise BackendError(f"index {target} exists; pass --overwrite to rebuild it")
    indexer_class = jvm.autoclass("io.anserini.index.SimpleIndexer")
    count = 0
    with atomic_dir(target) as tmp:
        indexer = indexer_class(["-index", str(tmp), "-storePositions", "-storeDocvectors", "-storeRaw",
                                 "-input", "", "-collection", "JsonCollection", "-threads", str(threads)])
        batch: list[str] = []
        with tqdm(total=total, unit="doc", desc=f"indexing {name}", disable=None) as bar:
            for doc in documents:
                batch.append(json.dumps({"id": doc.docid, "contents": doc.contents}))
                if len(batch) == 1000:
                    count += indexer.addRawDocuments(batch)
                    bar.update(len(batch))
                    batch = []
            if batch:
                count += indexer.addRawDocuments(batch)
                bar.update(len(batch))
        indexer.close()
        info = IndexInfo(name, BACKEND, count, source)
        info.write(tmp)
    if total is not None and count != total:
        raise BackendError(f"indexed {count} of {total} documents into {target}")
    return info


class LuceneIndex:
    """An open index: BM25 search and raw-document lookup."""

    def __init__(self, name: str):
        self.path = index_folder(name) / BACKEND
        self.info = IndexInfo.read(self.path, name, BACKEND)
        searcher_class = jvm.autoclass("io.anserini.search.SimpleSearcher")
        self.searcher = searcher_class(str(self.path))
        self._jlist = jvm.autoclass("java.util.ArrayList")

    def search(self, topics: dict[str, str], k: int = 1000, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
               threads: int = 2, stage: str = "bm25", **_options) -> Iterator[QueryRanking]:
        self.searcher.set_bm25(float(k1), float(b))
        items = list(topics.items())
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            began = time.perf_counter()
            queries, qids = self._jlist(), self._jlist()
            for qid, text in chunk:
                queries.add(text)
                qids.add(qid)
            found = self.searcher.batch_search(queries, qids, int(k), int(threads))
            rankings = []
            for qid, _ in chunk:
                hits = found.get(qid) or []
                rankings.append(QueryRanking.from_scores(qid, [h.docid for h in hits], [h.score for h in hits], tag=stage))
            share = (time.perf_counter() - began) * 1000 / len(chunk)
            for ranking in rankings:
                ranking.timings.append(Timing(stage, share, k))
                yield ranking

    def texts(self, docids: Iterable[str]) -> dict[str, str]:
        """docid -> stored contents (documents not in the index are left out)."""
        out = {}
        for docid in docids:
            raw = self.searcher.doc_raw(docid)
            if raw is not None:
                out[docid] = json.loads(raw).get("contents", "")
        return out


def open_index(name: str, **_options) -> LuceneIndex:
    """Open indexes/NAME/lucene (options meant for other back ends are not needed here)."""
    path = index_folder(name) / BACKEND
    if not path.is_dir():
        raise MissingIndexError(f"no Lucene index {name!r} at {path}; build it with: rerank index {name}")
    return LuceneIndex(name)


def anserini_search_collection(index: Path, topics_tsv: Path, output: Path, k: int = 1000,
                               k1: float = DEFAULT_K1, b: float = DEFAULT_B, threads: int = 2) -> None:
    """Run Anserini's own batch searcher (the reference we test and benchmark against)."""
    jvm.autoclass("io.anserini.search.SearchCollection").main(
        ["-index", str(index), "-topics", str(topics_tsv), "-topicReader", "TsvString", "-output", str(output),
         "-bm25", "-bm25.k1", str(k1), "-bm25.b", str(b), "-hits", str(k), "-threads", str(threads)])

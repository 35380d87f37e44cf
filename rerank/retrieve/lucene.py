"""BM25 or query likelihood, optionally with RM3 feedback, over an embedded Lucene index (Anserini, the engine
inside Pyserini): build, search, fetch text.

The index keeps raw documents, positions and document vectors, so later stages can read text back.
Searching runs Anserini's own SearchCollection (so rankings are Anserini's, by construction), on Java
threads. Per-query times are the batch's wall time shared out evenly over its queries (the header says
`"timing": "amortised"`): what a query costs at this throughput, in a warm JVM (a one-query search first
takes the JVM's start and class loading, ~1.5 s, which would otherwise be charged to a small batch's queries).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator

from ..atomic import atomic_dir
from ..data import Document
from ..errors import BackendError, MissingIndexError, UsageError
from ..progress import Progress, total_of
from ..runs import QueryRanking, Timing, load_run
from . import jvm
from .api import JAVA_FLOAT_MAX, option_flag
from .store import (BUILD_KEY, MANIFEST, IndexInfo, build_command, build_id, empty_skipped, index_folder,
                    searched_build, source_state)

BACKEND = "lucene"
INDEX_OPTIONS: frozenset[str] = frozenset()  # besides threads and overwrite, which every back end takes
SEARCH_OPTIONS = frozenset({"k1", "b", "qld", "mu", "threads", "rm3", "fb_terms", "fb_docs", "original_query_weight"})
DEFAULT_K1, DEFAULT_B, DEFAULT_MU = 0.9, 0.4, 1000.0  # Anserini's defaults
RM3_DEFAULTS = {"fb_terms": 10, "fb_docs": 10, "original_query_weight": 0.5}  # Anserini's and Pyserini's
RERANK_CUTOFF = 50  # Anserini's -rerankCutoff: the depth of the first search that RM3 takes its feedback from
_jvm_is_warm = False  # set once this process's JVM has run a search
MAX_QUERY_TERMS = 1 << 20


def build(name: str, documents: Iterable[Document], source: dict,
          threads: int = 2, overwrite: bool = False, **_options) -> IndexInfo:
    """Index `documents` into indexes/NAME/lucene/ (built aside, then moved into place)."""
    target = index_folder(name) / BACKEND
    if target.exists() and not overwrite:
        raise BackendError(f"index {target} exists; pass --overwrite to rebuild it")
    indexer_class = jvm.autoclass("io.anserini.index.SimpleIndexer")
    files = source_state(source, skip=("qrels", "topics"))  # as read: the texts it stores stay so if they change
    count = fed = 0
    with atomic_dir(target, MANIFEST) as tmp, jvm.java_errors(f"indexing {name}"):
        indexer = indexer_class(["-index", str(tmp), "-storePositions", "-storeDocvectors", "-storeRaw",
                                 "-input", "", "-collection", "JsonCollection", "-threads", str(threads)])
        batch: list[str] = []
        with Progress(f"indexing {name}", "doc", total_of(documents)) as bar:
            for doc in documents:
                fed += 1
                batch.append(json.dumps({"id": doc.docid, "contents": doc.contents}))
                if len(batch) == 1000:
                    count += indexer.addRawDocuments(batch)
                    bar.update(len(batch))
                    batch = []
            if batch:
                count += indexer.addRawDocuments(batch)
                bar.update(len(batch))
        indexer.close()
        # Anserini skips documents without text (its 'empty' counter): say so rather than lose them quietly
        info = IndexInfo(name, BACKEND, count, {**source, "files": files, **empty_skipped(fed - count),
                                                BUILD_KEY: build_id()})
        info.write(tmp)
    return info


def check_search_options(k1: float | None = None, b: float | None = None, qld: bool | None = None,
                         mu: float | None = None, rm3: bool | None = None, **feedback) -> None:
    """Each model's parameters only with that model, in Anserini's ranges (it takes others without a word)."""
    if mu is not None and not qld:
        raise UsageError("--mu sets query likelihood's Dirichlet smoothing: add --qld")
    if qld and (k1 is not None or b is not None):
        raise UsageError("--k1 and --b are BM25's; --qld scores by query likelihood instead")
    if mu is not None and not 0 < mu <= JAVA_FLOAT_MAX:  # Anserini reads it as a Java float: 1e39 is Infinity
        raise UsageError(f"--mu must be a positive number (at most {JAVA_FLOAT_MAX:.4g}), not {mu}")
    given = [option_flag(key) for key in RM3_DEFAULTS if feedback.get(key) is not None]
    if given and not rm3:
        raise UsageError(f"{', '.join(given)} set RM3 feedback: add --rm3")
    for key in ("fb_terms", "fb_docs"):
        if feedback.get(key) is not None and not 0 < feedback[key] < 2**31:  # a Java int, as --k
            raise UsageError(f"{option_flag(key)} must be a positive number below 2^31, not {feedback[key]}")
    weight = feedback.get("original_query_weight")
    if weight is not None and not 0 <= weight <= 1:
        raise UsageError(f"--original-query-weight must be in [0, 1], not {weight}")


def ranking_flags(k1: float | None = None, b: float | None = None, qld: bool | None = None, mu: float | None = None,
                  rm3: bool | None = None, **feedback) -> tuple[list[str], dict]:
    """SearchCollection's flags for the scoring model (BM25, or query likelihood) and RM3 feedback, and the
    parameters they mean, defaults too: a header naming them stays true if defaults change."""
    if qld:
        said: dict = {"qld": True, "mu": DEFAULT_MU if mu is None else mu}
        flags = ["-qld", "-qld.mu", str(said["mu"])]
    else:
        said = {"k1": DEFAULT_K1 if k1 is None else k1, "b": DEFAULT_B if b is None else b}
        flags = ["-bm25", "-bm25.k1", str(said["k1"]), "-bm25.b", str(said["b"])]
    if rm3:
        said.update(rm3=True, **{key: default if feedback.get(key) is None else feedback[key]
                                 for key, default in RM3_DEFAULTS.items()})
        flags += ["-rm3", "-rm3.fbTerms", str(said["fb_terms"]), "-rm3.fbDocs", str(said["fb_docs"]),
                  "-rm3.originalQueryWeight", str(said["original_query_weight"])]
        if said["fb_docs"] > RERANK_CUTOFF:  # feedback reads the first search's results, only this many by default
            flags += ["-rerankCutoff", str(said["fb_docs"])]
    return flags, said


class LuceneIndex:
    """An open index: BM25 or query-likelihood search (with RM3 feedback if asked) and raw-document lookup."""

    def __init__(self, name: str, **ranking):
        self.path = index_folder(name) / BACKEND
        self.info = IndexInfo.read(self.path, name, BACKEND)
        self._searcher = None
        self.flags, said = ranking_flags(**ranking)
        # which build was searched, and by which Anserini: its BM25, analyzer and RM3 have changed between versions
        self.provenance = {**said, BUILD_KEY: searched_build(self.info), "anserini_version": jvm.anserini_version()}
        self.default_stage = ("qld" if ranking.get("qld") else "bm25") + ("+rm3" if ranking.get("rm3") else "")

    def search(self, topics: dict[str, str], k: int = 1000, threads: int = 2, stage: str = "bm25",
               **_options) -> Iterator[QueryRanking]:
        """All topics in one call of Anserini's SearchCollection, in this process's JVM, run before this returns
        (not lazily), so a failure comes before the stream's header is written.

        Why not one `search` call per query from Python: turning ~1,000 Java hit objects per query into
        Python values through jnius costs more than the search itself; SearchCollection stays in Java and
        writes a run file, which the pyarrow loader reads back in about a second per million lines.
        """
        global _jvm_is_warm
        with tempfile.TemporaryDirectory(prefix="rerank-lucene-") as tmp:
            topics_tsv, output = Path(tmp) / "topics.tsv", Path(tmp) / "run.txt"
            lines = [f"{qid}\t{' '.join(text.split())}\n" for qid, text in topics.items()]
            topics_tsv.write_text("".join(lines), encoding="utf-8")
            if lines and not _jvm_is_warm:
                warm_up = Path(tmp) / "warm-up.tsv"
                warm_up.write_text(lines[0], encoding="utf-8")
                anserini_search_collection(self.path, warm_up, Path(tmp) / "warm-up.txt", 1, 1, self.flags)
                _jvm_is_warm = True
            began = time.perf_counter()
            anserini_search_collection(self.path, topics_tsv, output, k, threads, self.flags)
            share = (time.perf_counter() - began) * 1000 / max(len(topics), 1)
            if not output.is_file():
                raise BackendError(f"Anserini's SearchCollection wrote no run for index {self.path} (see its log above)")
            with open(output, encoding="utf-8") as handle:
                found = load_run(handle, "SearchCollection").queries if output.stat().st_size else {}
        rankings = []
        for qid in topics:  # a query that matched nothing still gets its (empty) ranking and its time
            ranking = found.get(qid) or QueryRanking(qid, [], [])
            ranking.tag, ranking.timings = stage, [Timing(stage, share, len(ranking))]  # found, not asked for
            rankings.append(ranking)
        return iter(rankings)

    def texts(self, docids: Iterable[str]) -> dict[str, str]:
        """docid -> stored contents (documents not in the index are left out)."""
        if self._searcher is None:
            with jvm.java_errors(f"opening index {self.path}"):
                self._searcher = jvm.autoclass("io.anserini.search.SimpleSearcher")(str(self.path))
        out = {}
        for docid in docids:
            raw = self._searcher.doc_raw(docid)
            if raw is not None:
                out[docid] = json.loads(raw).get("contents", "")
        return out


def open_index(name: str, **options) -> LuceneIndex:
    """Open indexes/NAME/lucene to search with the ranking options among `options` (threads, k and other back
    ends' options are not the index's)."""
    path = index_folder(name) / BACKEND
    if not path.is_dir():
        raise MissingIndexError(f"no Lucene index {name!r} at {path}; build it with: {build_command(name)}")
    return LuceneIndex(name, **{key: value for key, value in options.items() if key in SEARCH_OPTIONS - {"threads"}})


def anserini_search_collection(index: Path, topics_tsv: Path, output: Path, k: int = 1000, threads: int = 2,
                               flags: list[str] | None = None) -> None:
    """Run Anserini's own batch searcher (the reference we test and benchmark against) with the scoring
    `flags` of `ranking_flags` (default BM25 with Anserini's k1 and b). RM3 reads the doc vectors `build` stores."""
    # One clause per distinct query term: Lucene's default cap of 1,024 left a longer query (a whole document
    # as the query) with no results and a Java stack trace on stderr.
    jvm.autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_QUERY_TERMS)
    with jvm.java_errors(f"searching index {index}"):
        jvm.autoclass("io.anserini.search.SearchCollection").main(
            ["-index", str(index), "-topics", str(topics_tsv), "-topicReader", "TsvString", "-output", str(output),
             *(flags or ranking_flags()[0]), "-hits", str(k), "-threads", str(threads)])

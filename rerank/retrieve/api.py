"""First stages behind one interface: build an index, retrieve a run stream, or replay shipped candidates.

A back end is a module registered by name in BACKENDS that provides
`build(name, documents, source, **options) -> IndexInfo` and
`open_index(name, k=..., **options)` whose `.search(topics, k, **options)` yields QueryRankings (`k` comes
to open_index too, for provenance that depends on it and limits to check before searching), and whose
`default_stage` names the run when --name is not given. The run's header
records the options a back end names in SEARCH_OPTIONS; one that refuses some of them together provides
`check_search_options(**options)`, called before any index opens.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..data import Dataset, dataset_names, files_dataset, get_dataset, unknown_dataset
from ..data.formats import distinct_ids, read_topics
from ..errors import DataError, MissingIndexError, ParameterError, UsageError, flag
from ..params import Option
from ..progress import Counted
from ..runs import RunHeader, Stream, file_fields
from ..stages import StageSpec, register_stage
from .store import IndexInfo, build_lock, documents_recorded, index_folder, origin_recorded_in, outdated

JAVA_FLOAT_MAX = 3.4028234663852886e38  # Lucene and Anserini read k1, b and mu as Java floats: above, Infinity

BACKENDS = {"lucene": "rerank.retrieve.lucene", "elasticsearch": "rerank.retrieve.elastic",
            "dense": "rerank.retrieve.dense"}


def backend(name: str):
    if name not in BACKENDS:
        raise UsageError(f"unknown back end {name!r}; known: {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name])


def _collection(name: str, corpus: str | None, topics: str | None) -> Dataset | None:
    """The registered data set NAME, or files named on the command line; None if neither applies."""
    if corpus or topics:
        return files_dataset(corpus=corpus, topics=topics)
    return get_dataset(name) if name in dataset_names() else None


def _check_k(k: int) -> None:
    if not 0 < k < 2**31:  # Anserini reads it as a Java int
        raise ParameterError(f"{{k}} must be a positive number of documents below 2^31, not {k}", "k")


# Anserini searches in a Java ForkJoinPool, whose parallelism stops here: above it SearchCollection wrote no run and
# said why only in the log rerank keeps quiet.
MAX_THREADS = 32767
SEARCH_THREADS = 2  # rerank retrieve's --threads default, and a pipeline stage's without `threads`: one header for both


def manifest_folder(name: str, backend_name: str, options: dict) -> Path:
    """The folder of this machine's manifest of the index that a search of NAME with these options opens, or a
    build with them makes: indexes/NAME/BACKEND, or where the back end keeps one per --index-name (Elasticsearch's,
    dense's)."""
    module = backend(backend_name)
    if hasattr(module, "manifest_folder"):  # a pipeline's stage table has other keys (its name among them)
        return module.manifest_folder(name, **{key: value for key, value in options.items()
                                               if key in module.SEARCH_OPTIONS})
    return index_folder(name) / backend_name


def _check_options(options: dict) -> None:
    """BM25's k1 >= 0, b in [0, 1] and threads >= 1: Lucene refuses other values with a Java stack trace."""
    k1, b, threads = options.get("k1"), options.get("b"), options.get("threads")
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise ParameterError(f"{{threads}} must be between 1 and {MAX_THREADS}, not {threads}", "threads")
    if k1 is not None and not 0 <= k1 <= JAVA_FLOAT_MAX:
        raise ParameterError(f"{{k1}} must be >= 0 and at most {JAVA_FLOAT_MAX:.4g}, not {k1}", "k1")
    if b is not None and not 0 <= b <= 1:
        raise ParameterError(f"{{b}} must be in [0, 1], not {b}", "b")


def option_flag(key: str) -> str:
    """The command-line flag of a back-end option (its name, but --es-insecure sets es_verify_certs)."""
    declared = {option.name: option for option in RETRIEVE_STAGE.parameters}
    return declared[key].flag if key in declared else flag(key)


def _check_backend_options(backend_name: str, options: dict, allowed: frozenset[str]) -> None:
    """Options of another back end would be ignored, yet recorded in the run's header as if they had acted."""
    foreign = [key for key, value in options.items()
               if value is not None and key not in allowed and key not in ("threads", "overwrite")]
    if foreign:
        raise UsageError(f"--backend {backend_name} does not take {', '.join(map(option_flag, foreign))}")


def pool_note(name: str, source: dict) -> str | None:
    """What a user searching a candidates or QA data set's own documents should know: they are the pool of its
    shipped candidate runs (TREC DL's 5,492 passages of 8.8 million), where BM25 finds other passages, and scores
    otherwise, than the published first stage it is easily taken for; a QA set's are every question's candidate
    sentences, where answer selection ranks each question's own."""
    dataset = get_dataset(name) if "corpus" not in source and name in dataset_names() else None
    if dataset is not None and dataset.kind == "qa":
        return (f"{name}'s documents are the candidate sentences of all its questions: a search over them ranks other "
                f"questions' sentences too, where answer selection, and its published figures, rank each question's "
                f"own (rerank retrieve {name} --candidates, then score)")
    if dataset is None or dataset.kind != "candidates":
        return None
    runs = ", ".join(dataset.run_files)
    return (f"{name}'s documents are the passages of its candidate runs ({runs}), not the whole collection they "
            f"came from: a search over them is not comparable with those runs or a published first stage (replay "
            f"one: rerank retrieve {name} --candidates)")


def build_index(name: str, backend_name: str = "lucene", corpus: str | None = None, **options) -> IndexInfo:
    _check_options(options)
    collection = _collection(name, corpus, None)
    if collection is None:
        raise unknown_dataset(name, "; give the documents with --corpus FILE")
    module = backend(backend_name)
    _check_backend_options(backend_name, options, module.INDEX_OPTIONS)
    source = {"dataset": name} if corpus is None else {"corpus": str(Path(corpus).resolve())}
    # read once through first: its ids checked before a build begins, and the total its progress counts up to
    total = sum(1 for _ in distinct_ids(collection.documents(), corpus or f"data set {name}"))
    documents = Counted(collection.documents(), total)
    with build_lock(name, backend_name, manifest_folder(name, backend_name, options), options.get("index_name")):
        return module.build(name, documents, source, **options)


def check_retrieve(name: str, backend_name: str, k: int, topics: str | None, options: dict):
    """Everything retrieval can refuse before it searches: returns the back end's module and the topics' source."""
    _check_k(k)
    _check_options(options)
    module = backend(backend_name)
    _check_backend_options(backend_name, options, module.SEARCH_OPTIONS)
    if hasattr(module, "check_search_options"):
        module.check_search_options(**options)
    collection = _collection(name, None, topics)
    if collection is None:
        raise unknown_dataset(name, own_index="pass --topics FILE")
    return module, collection


def _not_of(name: str, queries: dict[str, str]) -> str | None:
    """The first of `queries` that is not one of data set NAME's (its id, the same words), if any."""
    known = get_dataset(name).topics()
    return next((q for q, text in queries.items() if q not in known or known[q].split() != text.split()), None)


def _run_fields(name: str, topics: str | None, queries: dict[str, str]) -> dict:
    """The header's data set and topics file. Topics that are some of data set NAME's queries keep the data set:
    eval finds its qrels and evaluates the queries the run holds (`session._made_for`). Other topics, one's own
    queries, whose ids may be the set's by chance, name their file alone, and eval asks for --qrels."""
    if topics is None:
        return {"dataset": name}
    fields = file_fields(topics=topics)
    if name in dataset_names() and _not_of(name, queries) is None:
        return {"dataset": name, **fields}
    return fields


def _builds_itself(name: str, backend_name: str) -> bool:
    """Whether a missing index is built on first use, as Pyserini fetches its prebuilt ones: a Lucene index of an
    ad hoc data set's documents. A candidates or QA set's documents are a pool, whose search is not the published
    first stage (its shipped runs are: `pool_note`); other back ends' builds take options or a server."""
    return backend_name == "lucene" and name in dataset_names() and get_dataset(name).kind == "adhoc"


def _build_first(name: str, threads: int) -> None:
    import click

    click.echo(f"rerank: note: index {name!r} is not built here yet; building it first from data set {name} "
               f"(rerank index {name}; --no-build fails instead)", err=True)
    info = build_index(name, "lucene", threads=threads)
    click.echo(f"rerank: note: indexed {info.documents} documents into {index_folder(name) / 'lucene'}", err=True)


def retrieve(name: str, backend_name: str = "lucene", k: int = 1000, topics: str | None = None,
             stage_name: str | None = None, build: bool = False, **options) -> Stream:
    """A run stream of NAME's topics (or `topics`) searched in its index; `build`: build a missing index first
    where one can be (`_builds_itself`)."""
    options = {"threads": SEARCH_THREADS, **options}
    module, collection = check_retrieve(name, backend_name, k, topics, options)
    queries = collection.topics()
    if build and _builds_itself(name, backend_name) and not (index_folder(name) / backend_name).exists():
        _build_first(name, options["threads"])
    try:
        index = module.open_index(name, k=k, **options)
    except MissingIndexError as missing:
        shipped = get_dataset(name).run_files if name in dataset_names() else ()  # --topics: `collection` is the file
        if not shipped:
            raise
        raise MissingIndexError(f"{missing}; or replay a candidate run shipped with {name} "
                                f"({', '.join(shipped)}): rerank retrieve {name} --candidates"
                                f"{f' --topics {topics}' if topics else ''}") from None
    note = pool_note(name, index.info.source)
    stale = outdated(name, origin_recorded_in([manifest_folder(name, backend_name, options)], name), backend_name,
                     getattr(index, "build_options", None))
    if note or stale:
        import click

        if note:
            click.echo(f"rerank: note: {note}", err=True)
        if stale:  # an edited corpus, or another --data-root: the index answers for the documents of its build
            click.echo(f"rerank: warning: {stale}; until then it searches the documents as they were", err=True)
    stage = index.default_stage if stage_name is None else stage_name  # '' is refused as a name
    # Only the options this back end uses: every one is given threads, which Elasticsearch has no use for.
    params = {k_: v for k_, v in options.items() if v is not None and k_ in module.SEARCH_OPTIONS}
    header = RunHeader(_run_fields(name, topics, queries))
    fields = {"index": name, **({"corpus": index.info.source["corpus"]} if "corpus" in index.info.source else {})}
    # the documents the index was built from, as its manifest records them: a reviewer holding the run alone can tell
    header = header.with_stage({"name": stage, "stage": "retrieve", "backend": backend_name, "k": k,
                                "timing": "amortised", "queries": len(queries), **params,
                                **getattr(index, "provenance", {}),
                                "index_documents": documents_recorded(index.info.source)}, **fields)
    return Stream(header, index.search(queries, k=k, stage=stage, **options))


def _subset_topics(name: str, topics: str) -> dict[str, str]:
    """A topics file's queries, refused unless each is one of data set NAME's: its candidates are for those alone."""
    queries = read_topics(topics)
    stranger = _not_of(name, queries)
    if stranger is not None:
        raise DataError(f"{topics}: query {stranger} is not one of {name}'s (its id with the same words); "
                        f"--candidates replays {name}'s run for some of its own queries: search an index for others")
    return queries


def candidates(name: str, run: str | None = None, k: int | None = None, stage_name: str | None = None,
               topics: str | None = None) -> Stream:
    """Replay a candidate run shipped with the data set (TREC DL top-100, QA candidate lists), tagged with
    `stage_name` (default: the run's own name); with `topics`, some of the data set's queries, for those alone."""
    dataset = get_dataset(name)
    run = dataset.candidate_run(run)
    queries = _subset_topics(name, topics) if topics else None
    rankings = [r for r in dataset.candidates(run) if queries is None or r.qid in queries]
    if k is not None:
        _check_k(k)
        rankings = [r.head(k) for r in rankings]
    if stage_name is not None:
        for ranking in rankings:
            ranking.tag = stage_name
    fields = {"dataset": name, **file_fields(topics=topics)}  # checked: NAME's queries
    header = RunHeader(fields).with_stage({"name": run if stage_name is None else stage_name, "stage": "candidates",
                                           "source": name, "run": run, "k": k,  # k null: every candidate
                                           "queries": len(rankings)})
    return Stream(header, rankings)


def _retrieve_arguments(params: dict) -> tuple[str, int, dict]:
    """A pipeline stage's table as `retrieve`'s back end, k and options (topics among them)."""
    options = {k: v for k, v in params.items() if k not in ("backend", "k", "name")}
    return params.get("backend", "lucene"), params.get("k", 1000), options


def refuse_threads_for_a_server(backend_name: str, given: bool) -> None:
    """Elasticsearch indexes and searches with its own threads: threads given for it were ignored without a word,
    where every other option a back end does not take is refused."""
    if backend_name == "elasticsearch" and given:
        raise ParameterError("{backend} elasticsearch does not take {threads}: the server indexes and searches with "
                             "its own threads", "backend", "threads")


def check_retrieve_stage(dataset: str, params: dict) -> None:
    backend_name, k, options = _retrieve_arguments(params)
    refuse_threads_for_a_server(backend_name, "threads" in params)
    check_retrieve(dataset, backend_name, k, options.pop("topics", None), options)


def retrieve_stage(dataset: str, params: dict, _input: Stream | None) -> Stream:
    """Pipeline stage `kind = "retrieve"`: parameters as for `rerank retrieve`."""
    backend_name, k, options = _retrieve_arguments(params)
    return retrieve(dataset, backend_name, k, stage_name=params["name"], **options)


def check_candidates_stage(dataset: str, params: dict) -> None:
    if params.get("k") is not None:
        _check_k(params["k"])
    get_dataset(dataset).candidate_run(params.get("run"))
    if params.get("topics"):
        _subset_topics(dataset, params["topics"])


def candidates_stage(dataset: str, params: dict, _input: Stream | None) -> Stream:
    """Pipeline stage `kind = "candidates"`: replay the data set's run `run` (for the queries of `topics`, some of
    the data set's), cut at `k`, tagged with the stage's name."""
    return candidates(dataset, params.get("run"), params.get("k"), params.get("name"), params.get("topics"))


TOPICS_HELP = ("Topics file (TSV, TREC <top> or <topic> XML, SGML, or JSONL: BEIR queries.jsonl, ir_datasets, "
               "PyTerrier); default: the data set NAME's topics.")

# Options of the Elasticsearch and dense back ends, which `rerank index` takes too. Credentials are none of them:
# they come from RERANK_ES_API_KEY or RERANK_ES_USER/RERANK_ES_PASSWORD.
BACKEND_OPTIONS = (
    Option("es_url", str, None, "Elasticsearch URL (default: $RERANK_ES_URL or http://127.0.0.1:9200)."),
    Option("index_name", str, None, "Elasticsearch index name (default: rerank-NAME). Dense: one of several dense "
           "indexes of NAME kept side by side, e.g. one per encoder (indexes/NAME/dense-INDEX_NAME; default: the "
           "unnamed indexes/NAME/dense)."),
    Option("es_ca_certs", str, None, "Elasticsearch: CA bundle for TLS.", path="file"),
    Option("es_verify_certs", bool, None, "Elasticsearch: do not verify the server's TLS certificate.",
           cli_flag="--es-insecure", flag_value=False),
    Option("encoder", str, None, "Dense: sentence-transformers-style model folder (index: default the packaged "
           "all-MiniLM-L6-v2; retrieve: default the one the index was built with).", path="folder"),
)

RETRIEVE_STAGE = register_stage(StageSpec(
    kind="retrieve", run="rerank.retrieve.api:retrieve_stage", check="rerank.retrieve.api:check_retrieve_stage",
    parameters=(
        Option("backend", str, "lucene", "Index back end."),
        Option("k", int, 1000, "Documents per query."),
        Option("k1", float, None, "BM25 k1 (Anserini default 0.9)."),
        Option("b", float, None, "BM25 b (Anserini default 0.4)."),
        Option("qld", bool, None, "Lucene: score by query likelihood with Dirichlet smoothing instead of BM25."),
        Option("mu", float, None, "Query likelihood: Dirichlet mu (Anserini default 1000)."),
        Option("rm3", bool, None, "Lucene: expand each query with RM3 pseudo-relevance feedback."),
        Option("fb_terms", int, None, "RM3: expansion terms (default 10)."),
        Option("fb_docs", int, None, "RM3: feedback documents (default 10)."),
        Option("original_query_weight", float, None, "RM3: weight of the original query (default 0.5)."),
        Option("topics", str, None, TOPICS_HELP, path="file"),
        Option("threads", int, SEARCH_THREADS, "Search threads."),
        Option("ef_search", int, None, "Dense HNSW: candidates explored per query (faiss efSearch; at least --k)."),
        Option("exact", bool, None, "Dense: compare every stored vector, also in an index built with --hnsw (its "
               "exact reference)."),
        *BACKEND_OPTIONS)))

register_stage(StageSpec(
    kind="candidates", run="rerank.retrieve.api:candidates_stage", check="rerank.retrieve.api:check_candidates_stage",
    parameters=(Option("run", str, None, "The data set's candidate run to replay (default: its first)."),
                Option("k", int, None, "Candidates kept per query (default: all)."),
                Option("topics", str, None, "Some of the data set's queries, whose candidates alone are replayed.",
                       path="file"))))

"""`rerank encode` (store a model's document encodings) and `rerank explain` (why TK/TKL scored a document)."""

from __future__ import annotations

from pathlib import Path

import click

from ..atomic import plot_format
from ..errors import DataError, MissingIndexError, UsageError
from ..models.base import registered
from . import cli
from .io import in_existing_folder
from .ray_options import ray_engine, ray_options


def encodable() -> list[str]:
    """The models whose document encodings `rerank encode` stores (and `rerank explain` takes apart)."""
    return [name for name, spec in registered().items() if spec.stored_vectors == "encode"]


def _load(model_name: str, checkpoint: str | None, threads: int | None, batch_size: int = 32, engine=None):
    """The model here, or (with an `engine`: --ray) a stand-in for the one its workers load."""
    from ..models.base import check_checkpoint_given, checked_model_options, load_model

    if model_name not in encodable():
        raise UsageError(f"--model {model_name!r} has no query-independent document encodings; use one of "
                         f"{', '.join(encodable())}")
    if engine is None:
        return load_model(model_name, checkpoint, threads=threads, batch_size=batch_size)
    check_checkpoint_given(model_name, checkpoint)
    return engine.load(model_name, checkpoint, checked_model_options(model_name, {"threads": threads,
                                                                                  "batch_size": batch_size}))


def _collection(name: str, corpus: str | None):
    """The documents `rerank encode NAME` stores, and their origin (the store's `source`): --corpus FILE's, else
    those a stream from `rerank retrieve NAME` is scored against (docstore's choice), so that score uses them."""
    from ..data import dataset_names, files_dataset, get_dataset
    from ..docstore import collection_header, doc_store_for
    from ..retrieve.store import build_command, described, origin, outdated, recorded_origin

    if corpus:
        source = {"corpus": str(Path(corpus).resolve())}
        built = origin(recorded_origin(name))
        if built and built != source:  # encodings are used for the texts they were made from, not by name
            click.echo(f"rerank: note: index {name} is built from {described(built)}: a stream from it is scored "
                       f"with those texts, so these encodings serve it once the index is rebuilt from {corpus} "
                       f"(rerank index {name} --corpus {corpus} --overwrite), and streams scored with --corpus "
                       f"{corpus}", err=True)
        return files_dataset(corpus=corpus), source
    header = collection_header(name)
    documents = doc_store_for(header).origin
    stale = outdated(name, documents)
    if stale:  # encoded from the file as it is, they would not be of the texts the index gives a stream from it
        raise DataError(f"{stale}; then encode it")
    if "dataset" in documents:
        return get_dataset(documents["dataset"]), documents
    if "corpus" in documents:
        return files_dataset(corpus=documents["corpus"]), documents
    raise DataError(f"{name!r} is neither a known data set ({', '.join(dataset_names())}) nor an index built here; "
                    f"build it with: {build_command(name)}, or give the documents with --corpus FILE")


@cli.command()
@click.argument("name")
@click.option("--model", "model_name", required=True, help="tk or tkl.")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint folder (from rerank train).")
@click.option("--corpus", type=click.Path(dir_okay=False),
              help="Documents file (default: what the index NAME was built from, else the data set NAME's documents).")
@click.option("--overwrite", is_flag=True, help="Replace existing encodings instead of resuming them.")
@click.option("--batch-size", default=64, show_default=True, help="Documents per forward pass.")
@click.option("--threads", type=int, default=None, help="Torch threads (default 1, as for TK scoring).")
@ray_options
def encode(name, model_name, checkpoint, corpus, overwrite, batch_size, threads, ray_address, workers,
           gpus_per_worker) -> None:
    """Store every document's contextualised term vectors of NAME for fast TK/TKL scoring (resumable).

    NAME is a data set or an index built here (its documents: those it was built from). They go to
    indexes/NAME/MODEL-HASH/ under $RERANK_HOME, where score, budget and explain look for them.
    """
    from ..encodings import encode_collection, store_folder
    from ..data.formats import distinct_ids
    from ..models.base import check_batch_size
    from ..retrieve.store import index_folder

    check_batch_size(batch_size, "documents")  # before load_model, whose check counts scoring's pairs
    index_folder(name)  # its name checked before a model loads (store_folder checks it too, for every caller)
    if registered().get(model_name) and registered()[model_name].stored_vectors == "dense":  # Pyserini's `encode`
        raise UsageError(f"--model {model_name}'s passage vectors are stored by a dense index: rerank index {name} "
                         f"--backend dense (score --model {model_name} and retrieve --backend dense use them); "
                         f"encode stores those of {', '.join(encodable())}")
    collection, source = _collection(name, corpus)
    with ray_engine(ray_address, workers, gpus_per_worker, threads) as engine:
        reranker = _load(model_name, checkpoint, threads, batch_size, engine)
        folder = store_folder(name, reranker.name, reranker.checkpoint_hash)
        # `rerank index`'s id check, before anything is encoded: a repeated id's later vectors stood for both texts
        described = source.get("corpus") or f"data set {source.get('dataset')}"
        total = sum(1 for _ in distinct_ids(collection.documents(), described))

        def documents():
            return ((d.docid, d.contents) for d in collection.documents())

        manifest = encode_collection(name, documents, total, reranker, folder, overwrite=overwrite, source=source,
                                     log=lambda message: click.echo(f"rerank: {message}", err=True), engine=engine)
    # the store's whole count: a resumed or complete store's documents were not all encoded by this run (said above)
    click.echo(f"rerank: {manifest['documents']} documents, {manifest['tokens']} tokens encoded in {folder} "
               f"({manifest['dim']}-d float16, {manifest['dim'] * 2} bytes per token)", err=True)


def _explained(dataset: str | None, index: str | None, corpus: str | None):
    """The header explain finds its texts by, as a stream from that data set or index would name them."""
    from ..data import dataset_names, unknown_dataset
    from ..docstore import collection_header
    from ..retrieve.store import build_command, recorded_origin
    from ..runs import RunHeader

    if dataset is not None and index is not None:
        raise UsageError("give --dataset or --index, not both")
    if dataset is not None:
        if dataset not in dataset_names():
            raise unknown_dataset(dataset, own_index="give --index NAME")
        return RunHeader({"dataset": dataset})
    if index is not None:
        if not recorded_origin(index):
            raise MissingIndexError(f"no index {index!r} is built here; build it with: {build_command(index)}")
        return collection_header(index)
    if corpus is None:
        raise UsageError("say where the document is: --dataset NAME, --index NAME or --corpus FILE")
    return RunHeader({})


@cli.command()
@click.option("--model", "model_name", required=True, type=click.Choice(encodable()),
              help="The model whose score to take apart.")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint folder.")
@click.option("--dataset", default=None, help="Data set that holds the query and the document.")
@click.option("--index", "index_name", default=None,
              help="Index built here (rerank index NAME) that holds the document (its stored texts).")
@click.option("--topics", type=click.Path(dir_okay=False), default=None,
              help="Query texts for --qid (default: the data set's).")
@click.option("--corpus", type=click.Path(dir_okay=False), default=None,
              help="Document texts (default: the data set's or index's).")
@click.option("--qid", default=None, help="Query id in the topics.")
@click.option("--query", "query_text", default=None, help="Query text instead of --qid.")
@click.option("--docid", required=True, help="Document id.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=in_existing_folder,
              help="Write a heat map here (.png, .pdf or .svg).")
@click.option("--top", default=3, show_default=True, type=click.IntRange(min=1),
              help="Best-matching document terms to list per query term (text format).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: every part of the score (term weights, kernel sums and weights, regions) and the cosine "
                   "matrix, as one JSON object.")
def explain(model_name, checkpoint, dataset, index_name, topics, corpus, qid, query_text, docid, plot_path,
            top, output_format) -> None:
    """Show how TK/TKL matched one query and one document: term matches, contributions, TKL regions."""
    from ..docstore import doc_store_for, queries_for
    from ..models import tk_explain

    if (qid is None) == (query_text is None):
        raise UsageError("give exactly one of --qid and --query")
    if query_text is not None and not query_text.strip():
        raise UsageError("--query is empty")
    if query_text is not None and topics is not None:  # a file never read, even one that is not there
        raise UsageError("--topics gives the texts of --qid; with --query, leave it out")
    if plot_path:
        from ..checkpoint import refuse_spoiling_an_unlisted_checkpoint

        plot_format(plot_path)  # before the model loads
        refuse_spoiling_an_unlisted_checkpoint(plot_path)
    header = _explained(dataset, index_name, corpus)
    if query_text is None:
        if topics is None and header.dataset is None:
            raise UsageError("--qid needs the query texts: give --topics FILE, or --query TEXT")
        queries = queries_for(header, topics)
        if qid not in queries:
            raise DataError(f"query {qid} is not in the topics of {topics or header.dataset}")
        query_text = queries[qid]
    store = doc_store_for(header, corpus)
    texts = store.texts([docid])
    if docid not in texts:
        raise DataError(f"document {docid} is not in {store.source}")
    reranker = _load(model_name, checkpoint, None)
    reranker.attach(header, store)  # stored encodings of the very documents the text comes from
    explanation = reranker.explain(query_text, docid, texts[docid])
    if output_format == "json":
        click.echo(tk_explain.render_json(explanation, qid=qid, query=query_text, docid=docid,
                                          checkpoint=str(reranker.folder), checkpoint_hash=reranker.checkpoint_hash),
                   nl=False)
    else:
        click.echo(tk_explain.render_text(explanation, top), nl=False)
    if plot_path:
        tk_explain.plot(explanation, plot_path, f"{model_name}: q {qid or ''} {query_text!r} / doc {docid}")
        click.echo(f"rerank: wrote heat map {plot_path}", err=True)

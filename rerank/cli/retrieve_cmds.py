"""`rerank index`, `rerank retrieve` and `rerank cat`: first stages and stream plumbing."""

from __future__ import annotations

import itertools

import click

from ..errors import DataError, UsageError, counted, verb
from ..retrieve import api
from ..retrieve.store import EMPTY_SKIPPED, REUSED
from ..runs import RunReader, Stream, cut_stream
from . import cli
from .io import (declared_options, in_existing_folder, open_run_input, refuse_replacing_an_input, run_output_options,
                 typed, write_no_queries, write_stream)


backend_options = declared_options(api.BACKEND_OPTIONS)  # `index` and `retrieve` take them


def _with_candidates(option) -> str:
    return " With --candidates, some of NAME's queries, whose candidates alone are replayed." \
        if option.name == "topics" else ""


@cli.command()
@click.argument("name")
@click.option("--backend", "backend_name", default="lucene", show_default=True, help="Index back end.")
@click.option("--corpus", type=click.Path(dir_okay=False), help="Documents file (JSONL, TREC SGML, SMART or docid<TAB>text TSV); default: the data set NAME's corpus.")
@click.option("--threads", default=2, show_default=True, help="Indexing threads.")
@click.option("--overwrite", is_flag=True, help="Rebuild an index that already exists.")
@backend_options
@click.option("--shards", type=int, default=None, help="Elasticsearch: primary shards of the new index (default 1).")
@click.option("--k1", type=float, default=None, help="Elasticsearch: BM25 k1 of the index's similarity (default 0.9).")
@click.option("--b", type=float, default=None, help="Elasticsearch: BM25 b of the index's similarity (default 0.4).")
@click.option("--hnsw", type=int, default=None, metavar="M",
              help="Dense: approximate HNSW graph with M links per node instead of exact inner product.")
def index(name: str, backend_name: str, corpus: str | None, threads: int, overwrite: bool, **backend_args) -> None:
    """Build the index NAME under indexes/NAME/ from a data set or a corpus file."""
    api.refuse_threads_for_a_server(backend_name, typed("threads"))
    options = {key: value for key, value in backend_args.items() if value is not None}
    info = api.build_index(name, backend_name, corpus=corpus, threads=threads, overwrite=overwrite, **options)
    skipped = info.source.get(EMPTY_SKIPPED)
    # a server's index has its own name and place (--index-name, --es-url): the one searched later, the one to check
    named = f" index name {info.source['index_name']!r}" if "index_name" in info.source else ""
    into = (f"Elasticsearch index {info.source['index_name']!r} at {info.source['es_url']} (rerank name {name!r})"
            if backend_name == "elasticsearch" else f"index {name!r} ({backend_name}{named})")
    click.echo(f"indexed {info.documents} documents into {into}"
               + (f"; {counted(skipped, 'document')} without text {verb(skipped, 'was', 'were')} skipped, as Anserini "
                  "does" if skipped else "")
               + ("; the vectors of the index it replaces were reused (same documents, same encoder)"
                  if info.source.get(REUSED) else ""), err=True)
    note = api.pool_note(name, info.source)
    if note:
        click.echo(f"rerank: note: {note}", err=True)


@cli.command()
@click.argument("name")
@declared_options([option for option in api.RETRIEVE_STAGE.parameters if option not in api.BACKEND_OPTIONS],
                  _with_candidates)
@click.option("--candidates", "candidate_run", is_flag=False, flag_value="", default=None, metavar="[RUN]",
              help="Replay a candidate run shipped with the data set (bm25, bm25-rm3; default its first) instead of searching.")
@click.option("--no-build", is_flag=True,
              help="Fail if NAME's Lucene index is not built, instead of building it first (an ad hoc data set's).")
@click.option("--name", "stage_name", default=None,
              help="Run tag for this stage (default bm25, bm25+rm3, qld or qld+rm3; dense for --backend dense; "
                   "the candidate run's name for --candidates).")
@run_output_options
@backend_options
def retrieve(name, backend, k, topics, candidate_run, threads, no_build, stage_name, output, trec_only,
             **search_args) -> None:
    """Retrieve candidates for every topic of NAME and write a run stream."""
    refuse_replacing_an_input("-o", output, "run", [("the --topics file", topics),
                                                    ("the --es-ca-certs file", search_args.get("es_ca_certs"))])
    if candidate_run is not None:
        given = {"backend": backend != "lucene" or None, "threads": typed("threads") or None, **search_args}
        ignored = [api.option_flag(key) for key, value in given.items() if value is not None]
        if ignored:
            raise UsageError(f"--candidates replays the run shipped with {name}; {', '.join(ignored)} "
                             "would be ignored: drop them, or search instead")
        stream = api.candidates(name, candidate_run or None, k if k != 1000 else None, stage_name, topics)
    else:
        api.refuse_threads_for_a_server(backend, typed("threads"))
        options = {key: value for key, value in search_args.items() if value is not None}
        stream = api.retrieve(name, backend, k=k, topics=topics, stage_name=stage_name, build=not no_build,
                              threads=threads, **options)
    write_stream(stream, output, trec_only)


@cli.command()
@click.argument("run", required=False)
@click.option("--trec", "trec_only", is_flag=True, help="Drop every # line: strictly trec_eval-compatible output.")
@click.option("--strict", is_flag=True, help="Also insist that ranks agree with scores.")
@click.option("--first", "first_queries", type=click.IntRange(min=1), metavar="N",
              help="Keep the stream's first N queries (a quick test; eval then counts those alone).")
@click.option("--depth", type=click.IntRange(min=1), metavar="K", help="Keep each query's top K documents.")
@click.option("--msmarco", is_flag=True,
              help="RUN is an MS MARCO run, 'qid<TAB>docid<TAB>rank' lines (Pyserini's --output-format msmarco; "
                   "PyTerrier's 'minimal', ranked from 0): write it as TREC lines, each document scored 1/rank, as "
                   "Pyserini's converter scores it.")
@click.option("--ranx", is_flag=True,
              help="RUN is ranx's JSON run, one object {qid: {docid: score}} (Run.save('run.json'); pytrec_eval's run "
                   "dict, json.dump'ed): write it as TREC lines.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), callback=in_existing_folder,
              help="Write here instead of stdout.")
def cat(run: str | None, trec_only: bool, strict: bool, first_queries: int | None, depth: int | None,
        msmarco: bool, ranx: bool, output: str | None) -> None:
    """Validate a run stream and write it out again (normalised order and ranks), whole or cut (--first,
    --depth: a run cut with head lacks its end line, and the next stage refuses it); or convert an MS MARCO
    run (--msmarco) or ranx's JSON run (--ranx)."""
    if msmarco and ranx:
        raise UsageError("--msmarco and --ranx are two layouts of RUN: give the one it has")
    with open_run_input(run) as (handle, source):
        reader = RunReader(handle, source, strict, "msmarco" if msmarco else "ranx" if ranx else "trec")
        rankings = iter(reader)
        first = next(rankings, None)
        if first is None and not (reader.header.fields or reader.header.stages):  # as eval refuses it
            raise DataError(f"empty input: {source} holds no run (did the stage before it fail?)")
        if first is None:  # a stage that found nothing: its header, whole
            write_no_queries(reader, source, output, trec_only, "nothing to write")
            return
        stream = Stream(reader.header, itertools.chain([first], rankings))
        if first_queries is not None or depth is not None:
            stream = cut_stream(reader.header, stream.rankings, first_queries, depth)
        write_stream(stream, output, trec_only)

"""BM25 over an Elasticsearch 8 index: for collections that outgrow one machine.

Building creates the index with an explicit mapping (one `contents` text field, English analyzer:
standard tokenizer, possessive and Porter stemming, Lucene's English stop words — the same chain as
Anserini's default) and a BM25 similarity with the given k1/b, bulk-loads with the client's
`streaming_bulk` (documents without text are skipped, as Anserini skips them), refreshes and checks the
count. Each build goes into a new index of its own (`<index name>-<time>-<random>`), and the index name is an
alias that moves to it only once it is complete, deleting the build before in the same atomic step: a build
that fails leaves the index name searching what it searched before, as Lucene's folder swap does; the aliases
someone gave the build before move to the new one in that step. A loading build records signs of life, and the
next build of the index name deletes its builds that stopped before the name was pointed at them (a killed
process, a lost server) once an hour has passed without one (`_clear_leftovers`); a build of a new index name
that another build took meanwhile is refused, or, pointed at the same moment, left to the newer (`_settle`). The
NAME it was built for and whether the build finished are recorded in the index's own mapping `_meta` (so any
machine that searches it can tell, and an index without that record, or built for another NAME, is
refused), and a copy of the manifest is kept under indexes/NAME/elasticsearch/<index name>/ for the record
(pipelines fingerprint their stages with it).

Searching sends queries in `msearch` batches; per-query times are the batch's wall time shared out
evenly, as for Lucene. Credentials come from RERANK_ES_API_KEY, or RERANK_ES_USER and
RERANK_ES_PASSWORD, or the URL's user:password@ (one of these), and never reach the run's provenance.

What differs between servers lives in `server_profile` only. CI tests against noida-db, an
Elasticsearch-REST-compatible server; point `--es-url` at a real cluster for production.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit, urlunsplit

from ..atomic import atomic_dir
from ..data import Document
from ..errors import BackendError, MissingIndexError, RerankError, UsageError
from ..progress import Progress
from ..runs import QueryRanking, Timing
from .store import MANIFEST, IndexInfo, WithText, build_command, empty_skipped, index_folder

BACKEND = "elasticsearch"
_CONNECTION = {"es_url", "index_name", "es_ca_certs", "es_verify_certs"}
INDEX_OPTIONS = frozenset(_CONNECTION | {"shards", "k1", "b"})
SEARCH_OPTIONS = frozenset(_CONNECTION | {"k1", "b"})  # k1/b only to say they belong to `rerank index`
DEFAULT_URL = "http://127.0.0.1:9200"
URL_ENV, API_KEY_ENV, USER_ENV, PASSWORD_ENV = "RERANK_ES_URL", "RERANK_ES_API_KEY", "RERANK_ES_USER", "RERANK_ES_PASSWORD"
DEFAULT_K1, DEFAULT_B = 0.9, 0.4  # Anserini's, so the two BM25 back ends agree by default
FIELD = "contents"
BULK_CHUNK = 500  # documents per bulk request
BATCH = 16  # queries per msearch request: a few seconds' work on a busy test server, well inside the timeout
MAX_NAME_BYTES = 255  # Elasticsearch's longest index name
MAX_RESULT_WINDOW = 10_000  # Elasticsearch's default index.max_result_window: the most hits one search returns
BUILD_SUFFIX = re.compile(r"-\d{14}-[0-9a-f]{4}")  # what `_build_name` adds to the index name
HEARTBEAT_EVERY = 60  # seconds between a loading build's signs of life (`_Heartbeat`)
# A build its index name does not find, silent this long, has stopped: a live one records a sign of life at least
# once between two bulk requests, and a request gives up after 10 minutes (a bulk request after 30, with the
# client's two retries), so a live build's latest is never much more than 40 minutes old.
STOPPED_AFTER = 3600
ANALYSIS = {
    "filter": {
        "rerank_possessive": {"type": "stemmer", "language": "possessive_english"},
        "rerank_stop": {"type": "stop", "stopwords": "_english_"},
        "rerank_porter": {"type": "stemmer", "language": "porter"},
    },
    "analyzer": {"rerank_english": {"type": "custom", "tokenizer": "standard",
                                    "filter": ["rerank_possessive", "lowercase", "rerank_stop", "rerank_porter"]}},
}


def public_url(url: str) -> str:
    """The URL without any user:password@ part, for messages and provenance."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def server_profile(info: dict) -> dict:
    """What this server is and which of its behaviours differ from Elasticsearch 8 (the one place for that).

    noida-db 0.2.3 accepts a BM25 similarity with k1/b in the index settings but always scores with
    Elasticsearch's defaults k1=1.2, b=0.75 (and reports Lucene's score times k1+1).
    """
    version = info.get("version", {})
    if version.get("build_hash") == "noida" or info.get("name") == "noida-db":
        return {"server": f"noida-db (Elasticsearch {version.get('number')} API)", "fixed_bm25": (1.2, 0.75)}
    number = str(version.get("number", "?"))
    if not number.startswith("8."):
        raise BackendError(f"this client speaks Elasticsearch 8; the server says it is version {number}")
    return {"server": f"Elasticsearch {number}", "fixed_bm25": None}


class Connection:
    """A checked client: reachable, credentials accepted, an Elasticsearch 8 API."""

    def __init__(self, es_url: str | None = None, es_ca_certs: str | None = None, es_verify_certs: bool | None = None):
        from elasticsearch import Elasticsearch

        if es_url is not None and not es_url.strip():  # `--es-url "$UNSET_VARIABLE"`: not the default server's
            raise UsageError(f"--es-url is empty; give the server's URL, or leave the option out for ${URL_ENV} "
                             f"or {DEFAULT_URL}")
        self.url = es_url or os.environ.get(URL_ENV) or DEFAULT_URL
        given = "--es-url" if es_url else f"${URL_ENV}"
        try:  # the client says no more than that it cannot parse the URL, and quotes it, password and all
            parts = urlsplit(self.url)
            parts.port  # out of range: ValueError
        except ValueError as exc:
            raise UsageError(f"{given} is not a usable URL ({exc})") from None
        self.shown = public_url(self.url)
        if parts.scheme not in ("http", "https"):  # the client speaks plain HTTP to any other, 'htps' included
            raise UsageError(f"{given} {self.shown!r} is not a usable URL (it must start with http:// or https://)")
        tls = [flag for flag, value in (("--es-ca-certs", es_ca_certs), ("--es-insecure", es_verify_certs is False))
               if value]
        if tls and parts.scheme != "https":
            raise UsageError(f"TLS options ({', '.join(tls)}) need an https URL, not {self.shown}")
        if es_ca_certs and not os.path.isfile(es_ca_certs):  # the client would say the server cannot be reached
            raise UsageError(f"--es-ca-certs {es_ca_certs}: no such file")
        # No retry on timeout: a slow server would get the same work twice.
        kwargs: dict = {"request_timeout": 600, "max_retries": 1, "retry_on_timeout": False}
        if os.environ.get(API_KEY_ENV) and os.environ.get(USER_ENV):  # which one the server sees would be a guess
            raise UsageError(f"both ${API_KEY_ENV} and ${USER_ENV} are set: unset one of them")
        if os.environ.get(PASSWORD_ENV) and not os.environ.get(USER_ENV):  # else it would go unsent
            raise UsageError(f"${PASSWORD_ENV} is set without ${USER_ENV}")
        if os.environ.get(USER_ENV) and not os.environ.get(PASSWORD_ENV):  # an empty one is no Elasticsearch password
            raise UsageError(f"${USER_ENV} is set without ${PASSWORD_ENV}")
        from_env = next((name for name in (API_KEY_ENV, USER_ENV) if os.environ.get(name)), None)
        if from_env and "@" in parts.netloc:  # the client sends the environment's and drops the URL's, unsaid
            raise UsageError(f"{given} {self.shown!r} names a user and ${from_env} is set too: give the credentials "
                             "one way")
        if os.environ.get(API_KEY_ENV):
            kwargs["api_key"] = os.environ[API_KEY_ENV]
        elif os.environ.get(USER_ENV):
            kwargs["basic_auth"] = (os.environ[USER_ENV], os.environ[PASSWORD_ENV])
        if es_ca_certs:
            kwargs["ca_certs"] = es_ca_certs
        if es_verify_certs is False:
            kwargs.update(verify_certs=False, ssl_show_warn=False)
        try:
            self.client = Elasticsearch(self.url, **kwargs)
        except ValueError as exc:
            reason = str(exc).replace(self.url, self.shown)
            raise UsageError(f"{given} {self.shown!r} is not a usable URL ({reason})") from None
        self.profile = server_profile(self.call("connect to", self._info).body)

    def _info(self):
        """The server's answer to `GET /`, which Elasticsearch gives every client it lets in: an HTTP error there
        (other than for credentials, which `call` words) is another server's. It said "failed to connect to (HTTP
        404)"."""
        import elasticsearch

        try:
            return self.client.info()
        except elasticsearch.ApiError as exc:
            if exc.meta.status in (401, 403):
                raise
            raise BackendError(f"{self.shown} does not answer as Elasticsearch (HTTP {exc.meta.status} to GET /); "
                               "give the URL of an Elasticsearch server") from None

    def call(self, doing: str, function, *args, **kwargs):
        """Run one client call; turn transport and HTTP failures into one-line BackendErrors."""
        import elastic_transport
        import elasticsearch

        try:
            return function(*args, **kwargs)
        except (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout) as exc:
            raise BackendError(f"cannot reach Elasticsearch at {self.shown}: {_reason(exc)}") from None
        except elasticsearch.AuthenticationException:
            raise BackendError(f"Elasticsearch at {self.shown} rejected the credentials (HTTP 401); set "
                               f"{API_KEY_ENV}, or {USER_ENV} and {PASSWORD_ENV}") from None
        except elasticsearch.AuthorizationException as exc:
            raise BackendError(f"Elasticsearch at {self.shown} refused to {doing} with these credentials"
                               f"{_api_reason(exc)} (HTTP 403)") from None
        except elasticsearch.UnsupportedProductError:
            raise BackendError(f"{self.shown} does not answer as Elasticsearch") from None
        except elasticsearch.ApiError as exc:
            raise BackendError(f"Elasticsearch at {self.shown} failed to {doing}{_api_reason(exc)} "
                               f"(HTTP {exc.meta.status})") from None

    def exists(self, index_name: str) -> bool:
        return bool(self.call(f"look up index {index_name}", self.client.indices.exists, index=index_name))


def _api_reason(exc) -> str:
    """': ' and the reason an error response gives (the client's message is only the error's type), or nothing
    for a response without a body (HEAD requests)."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    return f": {_error_reason(error)}" if error else ""


# What Python's ssl says when an https URL reaches a server that answers in plain HTTP
PLAIN_HTTP_ANSWERS = ("[SSL: UNEXPECTED_EOF_WHILE_READING]", "[SSL: WRONG_VERSION_NUMBER]", "[SSL: RECORD_LAYER_FAILURE]")


def _reason(exc: Exception) -> str:
    text = str(getattr(exc, "message", "") or exc)
    if any(marker in text for marker in PLAIN_HTTP_ANSWERS):
        return "the TLS handshake failed; if the server speaks plain HTTP, give an http:// URL"
    for marker in ("Connection refused", "Name or service not known", "timed out", "certificate verify failed",
                   "Connection reset by peer", "Remote end closed connection without response"):  # (lost mid-run)
        if marker in text:
            return marker
    return text.splitlines()[0][:200]


def default_index_name(name: str) -> str:
    return f"rerank-{name}".lower()


FORBIDDEN = '\\/*?"<>| ,#:'  # characters Elasticsearch refuses in index names


def _index_name(name: str, given: str | None) -> str:
    """--index-name, or the default for NAME."""
    return default_index_name(name) if given is None else _checked_index_name(given)


def _checked_index_name(given: str) -> str:
    """--index-name, checked before the server is asked: its refusal of a look-up is a bare HTTP 400, a wildcard
    or a comma names several indexes, and its refusal of an uppercase name lists forbidden characters without
    saying so. A folder of that name keeps this machine's record of the index (`manifest_folder`)."""
    bad = " ".join(repr(character) for character in sorted(set(given) & set(FORBIDDEN)))
    why = ("cannot be empty, '.' or '..'" if given in ("", ".", "..") else f"cannot contain {bad}" if bad
           else f"cannot start with {given[0]!r}" if given[0] in "-_+" else None)
    if why:
        raise UsageError(f"--index-name {given!r}: Elasticsearch index names {why}")
    if given != given.lower():
        raise UsageError(f"--index-name {given!r}: Elasticsearch index names are lowercase; try {given.lower()!r}")
    return given


def check_search_options(index_name: str | None = None, **_options) -> None:
    """The index name, before any stage of a pipeline runs (its fingerprint reads a folder named after it)."""
    if index_name is not None:
        _checked_index_name(index_name)


def manifest_folder(name: str, index_name: str | None = None, **_options) -> Path:
    """Where this machine keeps its record of the index `index_name` built for NAME: indexes/NAME/elasticsearch/
    INDEX_NAME/, one per index name, since several may hold one data set (other BM25 parameters, another corpus)
    and rebuilding one must not change the record, and so the pipeline fingerprints, of the others. An older
    rerank kept one manifest in indexes/NAME/elasticsearch/, for whichever index name it built last: it stands
    for the index name it records until that one is rebuilt."""
    index_name = _index_name(name, index_name)
    folder = index_folder(name) / BACKEND
    if not (folder / index_name / MANIFEST).is_file() and _older_manifest_of(folder) == index_name:
        return folder
    return folder / index_name


def _older_manifest_of(folder: Path) -> str | None:
    """The index name that an older rerank's one manifest in `folder` records, if there is one."""
    try:
        return json.loads((folder / MANIFEST).read_text())["source"]["index_name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _resolved(connection: Connection, index_name: str) -> tuple[str, dict] | None:
    """The index `index_name` names and its mappings (its fields, and the `_meta` where rerank records what it
    built); None where nothing has that name. The name is an alias of one of rerank's builds, or the index itself
    (built by an older rerank, or another application's); the server answers by the index's own name."""
    if not connection.exists(index_name):
        return None
    answer = connection.call(f"read the mapping of {index_name}", connection.client.indices.get_mapping,
                             index=index_name).body
    if len(answer) != 1:
        raise UsageError(f"Elasticsearch index name {index_name!r} at {connection.shown} is an alias of "
                         f"{len(answer)} indexes ({', '.join(sorted(answer))}), not of one built by `rerank index`; "
                         "it is left alone: choose another --index-name")
    built, body = next(iter(answer.items()))
    return built, body.get("mappings", {})


def _check_built_for(name: str, where: str, record: dict) -> None:
    """An index holds the documents of the NAME it was built for; default index names are lowercased, so
    'SMALL' and 'small' would share one."""
    if record.get("name") != name:
        raise UsageError(f"{where} was built for {record.get('name')!r}, not {name!r}; "
                         f"give {name!r} an index of its own with --index-name")


def _build_options(name: str, connection: Connection, index_name: str) -> str:
    """The options of the `rerank index` command that builds `index_name` for NAME at this server."""
    extra = "" if index_name == default_index_name(name) else f" --index-name {index_name}"
    return f" --backend elasticsearch --es-url {connection.shown}{extra}"


def _build_command(name: str, connection: Connection, index_name: str) -> str:
    return build_command(name, _build_options(name, connection, index_name))


def _build_name(index_name: str) -> str:
    """A new index for one build of `index_name`: the time it began, in UTC (machines in other time zones build one
    name, and `_settle` keeps the newest by it), and a random part (two machines may build the same name at once).
    Checked before the server is asked, which refuses names over 255 bytes."""
    built = f"{index_name}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"
    if len(built.encode()) > MAX_NAME_BYTES:
        raise UsageError(f"--index-name {index_name!r} is too long: each build is an index named after it with "
                         f"{len(built) - len(index_name)} characters more, and Elasticsearch index names are at most "
                         f"{MAX_NAME_BYTES} bytes")
    return built


def _build_replaced(connection: Connection, name: str, index_name: str, where: str, overwrite: bool) -> str | None:
    """The index a new build of `index_name` replaces, None where the name is free; refused unless it is rerank's
    build for NAME under this index name (another application's data, or a build that another name, or someone's
    alias, finds, is not for --overwrite to delete) and --overwrite is given."""
    found = _resolved(connection, index_name)
    if found is None:
        return None
    replaced, mappings = found
    record = mappings.get("_meta", {}).get("rerank")
    if not record:
        raise UsageError(f"{where} exists and was not built by `rerank index`; it is left alone: choose "
                         "another --index-name, or delete it yourself")
    _check_built_for(name, where, record)
    built_as = record.get("index_name", replaced)  # an older rerank built an index of that name itself
    if built_as != index_name:
        raise UsageError(f"{where} is {replaced!r}, which `rerank index` built for the index name {built_as!r}; it "
                         f"is left alone: rebuild {built_as!r}, or choose another --index-name")
    if not overwrite:
        raise BackendError(f"{where} exists; pass --overwrite to rebuild it")
    return replaced


def build(name: str, documents: Iterable[Document], source: dict, overwrite: bool = False,
          es_url: str | None = None, index_name: str | None = None, shards: int | None = None,
          k1: float | None = None, b: float | None = None, es_ca_certs: str | None = None,
          es_verify_certs: bool | None = None, **_options) -> IndexInfo:
    """Create a new index with an explicit mapping, bulk-load `documents`, refresh, check the count, then point the
    index name at it (`_point`), keep it the only build the name finds (`_settle`) and delete the builds of the name
    that stopped before they were pointed at (`_clear_leftovers`); a build that fails is deleted, and the index name
    finds what it found before."""
    index_name = _index_name(name, index_name)
    build_name = _build_name(index_name)
    shards = 1 if shards is None else shards
    if shards < 1:  # before connecting: a mistake in the command, whether or not the server is up
        raise UsageError(f"--shards must be at least 1, not {shards}")
    connection = Connection(es_url, es_ca_certs, es_verify_certs)
    k1 = DEFAULT_K1 if k1 is None else k1
    b = DEFAULT_B if b is None else b
    where = f"Elasticsearch index {index_name!r} at {connection.shown}"
    replaced = _build_replaced(connection, name, index_name, where, overwrite)
    similarity = {"k1": k1, "b": b}
    if connection.profile["fixed_bm25"]:
        fixed_k1, fixed_b = connection.profile["fixed_bm25"]
        similarity["applied"] = {"k1": fixed_k1, "b": fixed_b}
        import click

        click.echo(f"rerank: note: {connection.profile['server']} ignores BM25 parameters and scores with "
                   f"k1={fixed_k1} b={fixed_b}", err=True)
    meta = {"rerank": {"name": name, "index_name": index_name, "complete": False, "heartbeat": 0, "source": source,
                       "similarity": similarity}}
    texts = WithText(documents)  # documents without text are skipped and counted, as Anserini skips them
    created = False
    life = _Heartbeat(connection, build_name, meta)
    try:
        connection.call(f"create index {build_name} (a new build of {index_name})", connection.client.indices.create,
                        index=build_name,
                        settings={"number_of_shards": shards, "number_of_replicas": 0, "refresh_interval": "-1",
                                  "analysis": ANALYSIS,
                                  "similarity": {"rerank_bm25": {"type": "BM25", "k1": k1, "b": b}}},
                        mappings={"_meta": meta, "dynamic": "strict",
                                  "properties": {FIELD: {"type": "text", "analyzer": "rerank_english",
                                                         "similarity": "rerank_bm25"}}})
        created = True
        loaded = _load(connection, build_name, texts, where, life.beat)
        source = {**source, **empty_skipped(texts.skipped)}
        meta["rerank"].update(complete=True, documents=loaded, source=source)
        life.write(f"finish {build_name}")
        # the bulk-load settings (no refreshes, no replicas, as Elasticsearch's indexing-speed guide advises) go
        # back to the cluster's defaults: a production cluster keeps its copies
        connection.call(f"finish {build_name}", connection.client.indices.put_settings, index=build_name,
                        settings={"index": {"refresh_interval": None, "number_of_replicas": None}})
        replaced = _replaced_now(connection, name, index_name, where, overwrite)
    except BaseException as error:  # Ctrl-C and SIGTERM too
        if created:
            _discard(connection, build_name, error)
        raise
    _point(connection, index_name, build_name, replaced)
    _settle(connection, index_name, build_name, where)
    info = IndexInfo(name, BACKEND, loaded, {**source, "es_url": connection.shown, "index_name": index_name,
                                             "index_build": build_name, "shards": shards, "similarity": similarity,
                                             "server": connection.profile["server"]})
    folder = index_folder(name) / BACKEND
    with atomic_dir(folder / index_name, MANIFEST) as tmp:
        info.write(tmp)
    if _older_manifest_of(folder) == index_name:  # an older rerank's record of the index just replaced
        (folder / MANIFEST).unlink()
    _clear_leftovers(connection, index_name, life, where)
    return info


class _Heartbeat:
    """A build's signs of life, by which a later build of its index name, on any machine, tells one that stopped
    from one still loading (`_clear_leftovers`): `heartbeat` in its `_meta` record, the seconds from its creation to
    its latest sign, rewritten at most once a minute while it loads. Seconds since its creation, on this machine's
    steady clock, since the server's `creation_date` then dates it without comparing two machines' clocks."""

    def __init__(self, connection: Connection, build_name: str, meta: dict):
        self.connection, self.build_name, self.meta = connection, build_name, meta
        self.began = self.written = time.monotonic()  # just before the server creates the index: never later

    def since_creation(self) -> float:
        return round(time.monotonic() - self.began, 3)

    def beat(self) -> None:
        """A sign of life, if the latest is a minute old."""
        if time.monotonic() - self.written >= HEARTBEAT_EVERY:
            self.write(f"record that {self.build_name} is loading")

    def write(self, doing: str) -> None:
        """The `_meta` record, with this moment as its latest sign of life."""
        self.meta["rerank"]["heartbeat"] = self.since_creation()
        self.connection.call(doing, self.connection.client.indices.put_mapping, index=self.build_name, meta=self.meta)
        self.written = time.monotonic()


def _load(connection: Connection, build_name: str, texts: WithText, where: str, alive: Callable[[], None]) -> int:
    """Bulk-load the documents into the new build (saying it is `alive` as they go), refresh it and check its count:
    how many it holds."""
    from elasticsearch import helpers

    def actions() -> Iterator[dict]:
        for doc in texts:
            yield {"_index": build_name, "_id": doc.docid, "_source": {FIELD: doc.contents}}

    def load() -> tuple[int, int, list[str]]:
        loaded, failed, reasons = 0, 0, []
        with Progress(f"loading {build_name}", "doc", texts.total) as bar:
            results = helpers.streaming_bulk(connection.client, actions(), chunk_size=BULK_CHUNK, raise_on_error=False,
                                             raise_on_exception=False, max_retries=2)
            for ok, item in results:  # a document's failure comes back as an item; a lost server raises
                if ok:
                    loaded += 1
                else:
                    failed += 1
                    if len(reasons) < 3:
                        reasons.append(_bulk_reason(item))
                bar.update(1)
                alive()
        return loaded, failed, reasons

    loaded, failed, reasons = connection.call(f"load documents into {build_name}", load)
    connection.call(f"refresh {build_name}", connection.client.indices.refresh, index=build_name)
    kept = "the build is deleted and the index name left as it was"
    if failed:
        raise BackendError(f"{failed} of {loaded + failed} documents failed to load into a new build of {where}, "
                           f"e.g. {'; '.join(reasons)}; {kept}: fix the documents and build it again")
    counted = connection.call(f"count {build_name}", connection.client.count, index=build_name)["count"]
    if counted != loaded:
        raise BackendError(f"a new build of {where} holds {counted} documents after loading {loaded}; {kept}: build "
                           "it again")
    return loaded


def _discard(connection: Connection, build_name: str, error: BaseException) -> None:
    """Delete a build that failed; nothing finds it, since the index name moves to a build only once it is complete.
    Best effort: a server that is gone keeps it, and the error says so."""
    import elastic_transport
    import elasticsearch

    try:  # not the 600 s a search may take: an interrupted user waits for this
        connection.client.options(request_timeout=30).indices.delete(index=build_name)
    except (elastic_transport.TransportError, elasticsearch.ApiError):
        if isinstance(error, RerankError):
            error.args = (f"{error}; its unfinished build, index {build_name!r}, is left on the server: delete it "
                          "once the server answers, or a build of the index name an hour from now will",)


def _replaced_now(connection: Connection, name: str, index_name: str, where: str, overwrite: bool) -> str | None:
    """What the new build replaces once it is complete: another build of the index name may have finished while it
    loaded. With --overwrite that one is replaced, so the build that finishes last keeps the name, as when one
    machine builds twice; without, the name it has taken is refused (it was free when this build began)."""
    replaced = _build_replaced(connection, name, index_name, where, overwrite=True)
    if replaced is not None and not overwrite:
        raise BackendError(f"another build of {where}, {replaced!r}, finished while this one loaded; this one is "
                           "deleted: pass --overwrite to replace that one")
    return replaced


def _point(connection: Connection, index_name: str, build_name: str, replaced: str | None) -> None:
    """Make `index_name` an alias of the finished build, in one request that the server applies whole or not at
    all: searches find the build before until then and this one after, and `remove_index` deletes the build before
    in the same step, so none is left behind. An older rerank's build, an index named `index_name` itself, is
    replaced the same way and without a moment in which the name finds nothing: no alias can take a name that an
    index holds, and deleting that index first would leave one. The aliases someone gave the index replaced, which
    `remove_index` would drop with it, move to the new build in that request, as they were (filter, routing)."""
    import elasticsearch

    moved: list[str] = []

    def point():
        actions = [{"add": {"index": build_name, "alias": index_name}}]
        try:
            if replaced is not None:
                aliases = connection.client.indices.get_alias(index=replaced).body[replaced]["aliases"]
                moved.extend(sorted(set(aliases) - {index_name}))
                actions += [{"add": {"index": build_name, "alias": alias, **aliases[alias]}} for alias in moved]
                actions.append({"remove_index": {"index": replaced}})
            return connection.client.indices.update_aliases(actions=actions)
        except elasticsearch.ApiError as refused:  # nothing moved (another build replaced `replaced` meanwhile)
            _discard(connection, build_name, refused)
            raise

    connection.call(f"point {index_name} at its new build {build_name}", point)
    if moved:
        import click

        click.echo(f"rerank: note: the build replaced had other aliases too, now the new build's: {', '.join(moved)}",
                   err=True)


def _is_build_of(index_name: str, index: str) -> bool:
    return index.startswith(index_name) and BUILD_SUFFIX.fullmatch(index[len(index_name):]) is not None


def _settle(connection: Connection, index_name: str, build_name: str, where: str) -> None:
    """Make sure the index name finds this build alone. Two new builds of a name that no index held, pointed at it at
    the same moment, each add it as an alias (neither has a build before to remove, whose absence would refuse the
    second), and searches then refuse the name. Of the builds that it finds, the newest by its name (the time it
    began, then its random part) keeps it, as every machine that looks decides alike, and the others are deleted,
    alias and index in one request, by whichever of their machines gets there first (the second finds nothing left
    to delete); a build that loses says so and fails."""
    holders = connection.call(f"look up the indexes {index_name} finds",
                              connection.client.options(ignore_status=404).indices.get_alias, name=index_name).body
    builds = [index for index in holders if _is_build_of(index_name, index)]  # a 404 answer names none
    newest = max(builds, default=None)
    losers = [build for build in builds if build != newest] if newest == build_name else [build_name]
    for loser in losers:
        connection.call(f"delete {loser}, a build that lost {index_name} to {newest}",
                        connection.client.options(ignore_status=404).indices.update_aliases,
                        actions=[{"remove_index": {"index": loser}}])
    if newest != build_name:
        raise BackendError(f"another build of {where} took the index name as this one, {build_name!r}, did, and the "
                           f"name finds {newest or 'no build'}: this build is deleted; build again with --overwrite "
                           "to replace it")
    if losers:
        import click

        click.echo(f"rerank: note: another build of {where}, {', '.join(losers)}, took the index name as this one "
                   "did; the newest build keeps it and the other is deleted", err=True)


def _clear_leftovers(connection: Connection, index_name: str, life: _Heartbeat, where: str) -> None:
    """Delete the builds of `index_name` that stopped before they were pointed at (a lost server, a killed process):
    those the name does not find, with no alias at all, whose latest sign of life is over an hour old by the
    server's clock (`STOPPED_AFTER`). Those silent for less may be loading on another machine, and an older rerank's
    record no sign of life: they are named in a warning line, with the command that deletes them. Best effort: the
    index is built, and a server that refuses to list or delete them is a warning too."""
    import click

    try:
        found = connection.call(f"list the builds of {index_name}", connection.client.indices.get,
                                index=f"{index_name}-*").body
        if life.build_name not in found:  # replaced already, by a build after this one: it clears them
            return
        created = {index: int(body["settings"]["index"]["creation_date"]) / 1000 for index, body in found.items()}
        now = created[life.build_name] + life.since_creation()  # the server's clock
        stopped, left = [], {}
        for index, body in sorted(found.items()):
            record = body.get("mappings", {}).get("_meta", {}).get("rerank", {})
            if (index == life.build_name or body.get("aliases") or not _is_build_of(index_name, index)
                    or record.get("index_name") != index_name):
                continue
            if "heartbeat" not in record:
                left[index] = "an older rerank's, which records no sign of life"
                continue
            silent = now - created[index] - record["heartbeat"]
            if silent > STOPPED_AFTER:
                stopped.append(index)
            else:
                left[index] = (f"last alive {max(silent, 0):.0f} s ago: loading elsewhere, or stopped lately, and "
                               "then a build an hour after it stopped deletes it")
        if stopped:
            connection.call(f"delete the builds of {index_name} that stopped", connection.client.indices.delete,
                            index=",".join(stopped), ignore_unavailable=True)  # another build may delete them too
            click.echo(f"rerank: note: deleted {len(stopped)} build(s) of {where} that stopped over an hour ago "
                       f"before the index name was pointed at them: {', '.join(stopped)}", err=True)
    except BackendError as error:
        click.echo(f"rerank: warning: {where} is built, but its builds that stopped before it were not cleared: "
                   f"{error}", err=True)
        return
    if left:
        named = "; ".join(f"{index} ({why})" for index, why in left.items())
        click.echo(f"rerank: warning: {where} has builds it does not find: {named}; once no build of it is loading, "
                   f"delete them with: curl -X DELETE '{connection.shown.rstrip('/')}/{','.join(left)}'", err=True)


def _bulk_reason(item: dict) -> str:
    detail = next(iter(item.values()), {}) if isinstance(item, dict) else {}
    error = detail.get("error", item)
    reason = str(error.get("reason", error) if isinstance(error, dict) else error)
    docid = str(detail.get("_id", "?"))
    if len(docid) > 40:  # ids are quoted back in reasons: keep the line readable
        short = f"{docid[:20]}...({len(docid)} characters)"
        reason, docid = reason.replace(docid, short), short
    return f"document {docid}: {reason[:200]}"


def _error_reason(error) -> str:
    """The most specific reason in an Elasticsearch error object ('all shards failed' says little)."""
    if not isinstance(error, dict):
        return str(error)
    root = (error.get("root_cause") or [{}])[0]
    return str(root.get("reason") or error.get("caused_by", {}).get("reason") or error.get("reason") or error)


class ElasticIndex:
    """An open, complete Elasticsearch index, searched with msearch BM25. It searches the build its index name
    found when opened (`build`), not the name: a run that a rebuild overtakes would hold some queries' rankings
    from each build, under the header of the first."""

    default_stage = "bm25"  # the run tag when --name is not given

    def __init__(self, name: str, connection: Connection, index_name: str):
        self.connection = connection
        self.where = where = f"Elasticsearch index {index_name!r} at {connection.shown}"
        found = _resolved(connection, index_name)
        if found is None:
            raise MissingIndexError(f"no {where}; build it with: {_build_command(name, connection, index_name)}")
        self.build, mappings = found
        self.build_options = _build_options(name, connection, index_name)  # for a rebuild command that finds it
        meta = mappings.get("_meta", {}).get("rerank")
        if not meta or mappings.get("properties", {}).get(FIELD, {}).get("type") != "text":
            raise UsageError(f"{where} was not built by `rerank index` (its mapping lacks rerank's _meta record or "
                             f"the text field {FIELD!r}); name one that was with --index-name")
        _check_built_for(name, where, meta)
        if not meta.get("complete"):
            raise MissingIndexError(f"{where} is incomplete (its build failed part-way); rebuild it with: "
                                    f"{_build_command(name, connection, index_name)} --overwrite")
        settings = connection.call(f"read the settings of {self.build}", connection.client.indices.get_settings,
                                   index=self.build)
        index_settings = next(iter(settings.body.values()))["settings"]["index"]
        self.shards = int(index_settings.get("number_of_shards", 1))
        self.max_window = int(index_settings.get("max_result_window", MAX_RESULT_WINDOW))
        self.info = IndexInfo(name, BACKEND, int(meta.get("documents", 0)), meta.get("source", {}))
        similarity = meta.get("similarity", {})
        self.provenance = {"es_url": connection.shown, "index_name": index_name, "index_build": self.build,
                           "server": connection.profile["server"], **({"similarity": similarity} if similarity else {})}

    def search(self, topics: dict[str, str], k: int = 1000, stage: str = "bm25", **_options) -> Iterator[QueryRanking]:
        # Several shards each keep their own term statistics; dfs_ makes BM25 use the global ones.
        head = {"index": self.build, **({"search_type": "dfs_query_then_fetch"} if self.shards > 1 else {})}
        items = list(topics.items())
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            began = time.perf_counter()
            searches = []
            for _, text in chunk:
                searches += [head, {"query": {"match": {FIELD: text}}, "size": int(k), "_source": False,
                                    "track_total_hits": False}]
            found = self.connection.call(f"search {self.build}", self.connection.client.msearch,
                                         searches=searches)["responses"]
            rankings = []
            for (qid, _), answer in zip(chunk, found):
                error = answer.get("error")
                if isinstance(error, dict) and error.get("type") == "index_not_found_exception":
                    raise BackendError(f"{self.where} was rebuilt or deleted while this search ran (the build it "
                                       f"searched, {self.build!r}, is gone); search again")
                if error:
                    raise BackendError(f"Elasticsearch at {self.connection.shown} failed on query {qid}: "
                                       f"{_error_reason(error)[:200]}")
                hits = answer["hits"]["hits"]
                rankings.append(QueryRanking.from_scores(qid, [h["_id"] for h in hits], [h["_score"] for h in hits],
                                                         tag=stage))
            share = (time.perf_counter() - began) * 1000 / len(chunk)
            for ranking in rankings:
                ranking.timings.append(Timing(stage, share, len(ranking)))  # what it handled, not what was asked
                yield ranking


def open_index(name: str, es_url: str | None = None, index_name: str | None = None, es_ca_certs: str | None = None,
               es_verify_certs: bool | None = None, k1: float | None = None, b: float | None = None,
               k: int = 1000, **_options) -> ElasticIndex:
    """Open the index and check `k` against its result window before searching: the server's own refusal
    would come with the first batch, after the run's header has gone out."""
    if k1 is not None or b is not None:
        # a command line, whose flags a pipeline's error keeps ("pass k1/b to rerank index" named its own keys)
        raise UsageError(f"Elasticsearch fixes BM25 k1/b when the index is built (rerank index {name} --backend "
                         "elasticsearch --k1 K1 --b B), not when it is searched")
    index_name = _index_name(name, index_name)
    connection = Connection(es_url, es_ca_certs, es_verify_certs)
    index = ElasticIndex(name, connection, index_name)
    if k > index.max_window:
        raise UsageError(f"--k {k} is more than {index.where} returns for one query: its setting "
                         f"index.max_result_window is {index.max_window}; lower --k, or raise that setting")
    return index

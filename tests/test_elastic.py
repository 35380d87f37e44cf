"""The Elasticsearch back end against a real ES-API server (noida-db, started by the es_server fixture).

Small real data (the first 300 CACM abstracts, 8 topics) keeps these tests to seconds; the full
Vaswani/CACM parity figures are in benchmarks/results/retrieval_compare.md.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading

import pytest

from es_server import es_client, es_indexes, es_server, running_server  # noqa: F401  (fixture)
from retrieval_fixtures import cacm_slice, rerank_module  # noqa: F401  (fixtures)
from rerank.retrieve.elastic import public_url
from rerank.runs import load_run

pytestmark = [pytest.mark.data, pytest.mark.elasticsearch]


@pytest.fixture(scope="module")
def es_slice(rerank_module, cacm_slice, es_server):  # noqa: F811
    rerank_module("index", "slice", "--backend", "elasticsearch", "--es-url", es_server,
                  "--corpus", str(cacm_slice / "corpus.jsonl"), "--overwrite")
    return "slice"


def _run(text, source="run"):
    import io

    return load_run(io.StringIO(text), source)


def _rankings(text):
    """Each query's docids and scores (not its timings)."""
    return {qid: (ranking.docids, ranking.scores) for qid, ranking in _run(text).queries.items()}


def test_ranks_like_lucene_with_the_same_bm25(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    """Same analyzer chain, same BM25: the rankings agree (noida scores = Lucene's x (k1 + 1))."""
    topics = str(cacm_slice / "topics.tsv")
    es = _run(rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server,
                     "--topics", topics, "--k", "100").stdout)
    rerank("index", "slice", "--corpus", str(cacm_slice / "corpus.jsonl"), "--overwrite")
    lucene = _run(rerank("retrieve", "slice", "--topics", topics, "--k", "100", "--k1", "1.2", "--b", "0.75").stdout)
    assert set(es.queries) == set(lucene.queries) and len(es.queries) == 8
    overlaps = []
    for qid, theirs in lucene.queries.items():
        ours = es.queries[qid]
        assert set(ours.docids) == set(theirs.docids), qid  # the same matching documents
        overlaps.append(len(set(ours.docids[:10]) & set(theirs.docids[:10])) / 10)
        ratio = ours.scores[0] / theirs.scores[0]
        assert ratio == pytest.approx(2.2, rel=0.05), qid  # (k1 + 1), up to Lucene's 1-byte length norms
    assert sum(overlaps) / len(overlaps) >= 0.9


def test_provenance_names_the_index_never_credentials(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    done = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--k", "5",
                  "--topics", str(cacm_slice / "topics.tsv"),
                  env={"RERANK_ES_USER": "alice", "RERANK_ES_PASSWORD": "s3cret-pw"})
    run = _run(done.stdout)
    stage = run.header.stages[-1]
    assert stage["backend"] == "elasticsearch" and stage["es_url"] == es_server
    assert stage["index_name"] == "rerank-slice" and "noida-db" in stage["server"]
    assert "threads" not in stage  # the CLI passes it to every back end; Elasticsearch has no use for it
    assert "s3cret-pw" not in done.stdout and "alice" not in done.stdout
    assert all(len(r) == 5 and [t.stage for t in r.timings] == ["bm25"] for r in run.queries.values())


def test_public_url_drops_user_and_password():
    assert public_url("https://bob:pw@es.example.org:9243/x") == "https://es.example.org:9243/x"
    assert public_url("http://127.0.0.1:9200") == "http://127.0.0.1:9200"


def test_existing_index_needs_overwrite(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    done = rerank("index", es_slice, "--backend", "elasticsearch", "--es-url", es_server,
                  "--corpus", str(cacm_slice / "corpus.jsonl"), check=False)
    assert done.returncode != 0 and "exists; pass --overwrite" in done.stderr


def test_unreachable_server_is_one_line_naming_the_url(rerank, cacm_slice):
    from rerank.retrieve.es_test_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", url,
                  "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"rerank: error: cannot reach Elasticsearch at {url}: Connection refused"]


def test_missing_index_says_how_to_build_it(rerank, es_server, cacm_slice):  # noqa: F811
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "nothing-here",
                  "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert (f"build it with: rerank index slice --corpus FILE --backend elasticsearch --es-url {es_server} "
            "--index-name nothing-here"
            in done.stderr)


def test_a_rebuild_that_fails_leaves_the_index_as_it_was(rerank, es_server, cacm_slice, tmp_path):  # noqa: F811
    """--overwrite deleted the index before loading the new build: a document the server refused (or a lost server,
    or Ctrl-C) left no index, or an incomplete one, where a complete one had answered."""
    lines = (cacm_slice / "corpus.jsonl").read_text().splitlines()[:50]
    (tmp_path / "good.jsonl").write_text("\n".join(lines) + "\n")
    lines.insert(20, json.dumps({"id": "x" * 600, "contents": "an id longer than Elasticsearch allows"}))
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    search = ("retrieve", "broken", "--backend", "elasticsearch", "--es-url", es_server,
              "--topics", str(cacm_slice / "topics.tsv"))
    rerank("index", "broken", "--backend", "elasticsearch", "--es-url", es_server, "--corpus", str(tmp_path / "good.jsonl"))
    before, built = rerank(*search).stdout, es_indexes(es_server, "rerank-broken")
    done = rerank("index", "broken", "--backend", "elasticsearch", "--es-url", es_server,
                  "--corpus", str(tmp_path / "bad.jsonl"), "--overwrite", check=False)
    assert done.returncode != 0
    assert "1 of 51 documents failed to load into a new build of" in done.stderr and "too long" in done.stderr
    assert "the build is deleted and the index name left as it was" in done.stderr and "indexed" not in done.stderr
    assert es_indexes(es_server, "rerank-broken") == built  # one build, the one before, under the index name
    assert list(built.values()) == [["rerank-broken"]]
    assert _rankings(rerank(*search).stdout) == _rankings(before)


def test_an_incomplete_index_is_refused(rerank, es_server, cacm_slice):  # noqa: F811
    """An older rerank's build that failed part-way: it is refused, and --overwrite replaces it."""
    es_client(es_server).indices.create(index="rerank-half", mappings={
        "_meta": {"rerank": {"name": "half", "complete": False, "source": {}}},
        "properties": {"contents": {"type": "text"}}})
    search = ("retrieve", "half", "--backend", "elasticsearch", "--es-url", es_server,
              "--topics", str(cacm_slice / "topics.tsv"))
    again = rerank(*search, check=False)
    assert again.returncode != 0 and "is incomplete" in again.stderr and "--overwrite" in again.stderr
    rerank("index", "half", "--backend", "elasticsearch", "--es-url", es_server,
           "--corpus", str(cacm_slice / "corpus.jsonl"), "--overwrite")
    assert len(_run(rerank(*search).stdout).queries) == 8


def test_a_server_lost_while_loading_is_one_error(tmp_path, home):
    """The bulk helper raises (it does not report items) when the server goes away mid-load: a traceback before.
    And --overwrite had deleted the index before: the server, back, had none."""
    from rerank.data.formats import Document
    from rerank.errors import BackendError
    from rerank.retrieve import elastic

    with running_server(tmp_path / "data") as (url, _process):  # stopped whole: noida-db keeps what it held
        elastic.build("lost", [Document("d1", "the build before")], {}, es_url=url)
    with running_server(tmp_path / "data") as (url, process):
        def documents():
            for i in range(20 * elastic.BULK_CHUNK):
                if i == 2 * elastic.BULK_CHUNK:
                    process.kill()
                    process.wait()
                yield Document(f"d{i}", f"document number {i}")

        with pytest.raises(BackendError, match=f"cannot reach Elasticsearch at {url}: .*; its unfinished build, "
                                               "index 'rerank-lost-.*', is left on the server: delete it once"):
            elastic.build("lost", documents(), {}, es_url=url, overwrite=True)
    with running_server(tmp_path / "data") as (url, _process):  # back, with the data it kept
        index = elastic.open_index("lost", es_url=url)
        assert [ranking.docids for ranking in index.search({"1": "before"})] == [["d1"]]


@pytest.mark.parametrize("cause, says", [
    ("ConnectionResetError(104, 'Connection reset by peer')", "Connection reset by peer"),
    ("RemoteDisconnected('Remote end closed connection without response')",
     "Remote end closed connection without response"),
])
def test_a_server_lost_mid_run_is_said_in_words(cause, says):
    """A server stopped during `rerank retrieve` was reported as Python's repr of the client's exception tuple."""
    import elastic_transport

    from rerank.retrieve.elastic import _reason

    assert _reason(elastic_transport.ConnectionError(f"('Connection aborted.', {cause})")) == says


def test_a_failing_query_is_named_and_nothing_is_written(es_slice, es_server, cacm_slice, tmp_path):  # noqa: F811
    """The server refuses a query (open_index would have refused this --k up front, so the index is opened
    directly)."""
    from rerank.cli.io import write_stream
    from rerank.errors import BackendError
    from rerank.retrieve import elastic
    from rerank.runs import RunHeader, Stream

    index = elastic.ElasticIndex(es_slice, elastic.Connection(es_server), "rerank-slice")
    first = (cacm_slice / "topics.tsv").read_text().split("\t")[0]
    out = tmp_path / "out.run"
    with pytest.raises(BackendError, match=f"failed on query {first}: Result window"):
        write_stream(Stream(RunHeader({}), index.search({first: "computer", "2": "language"}, k=20000)), str(out))
    assert not out.exists()


def test_k_beyond_the_result_window_is_refused_before_searching(rerank, es_slice, es_server, cacm_slice,  # noqa: F811
                                                               tmp_path):
    """The server's own refusal came per query, cut at 200 characters before it named the setting."""
    out = tmp_path / "out.run"
    done = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--k", "20000",
                  "--topics", str(cacm_slice / "topics.tsv"), "-o", str(out), check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--k 20000 is more than" in done.stderr and "index.max_result_window is 10000" in done.stderr
    assert not out.exists()


def test_bm25_parameters_belong_to_the_index(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    done = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--k1", "2",
                  "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode == 2 and done.stderr == (
        f"rerank: error: Elasticsearch fixes BM25 k1/b when the index is built (rerank index {es_slice} --backend "
        "elasticsearch --k1 K1 --b B), not when it is searched\n")


class _Secured(http.server.BaseHTTPRequestHandler):
    """What a secured Elasticsearch 8 cluster answers to bad credentials (noida-db has no security)."""

    def do_GET(self):
        body = json.dumps({"error": {"type": "security_exception", "reason": "unable to authenticate user [alice]"},
                           "status": 401}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("WWW-Authenticate", 'Basic realm="security"')
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _fake_server(handler):
    """A local HTTP server answering with `handler` (what noida cannot play: auth, refusals); yields its URL."""
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_wrong_credentials_are_one_line(rerank, cacm_slice):
    with _fake_server(_Secured) as url:
        done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", url,
                      "--topics", str(cacm_slice / "topics.tsv"), check=False,
                      env={"RERANK_ES_USER": "alice", "RERANK_ES_PASSWORD": "wrong"})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert f"Elasticsearch at {url} rejected the credentials (HTTP 401)" in done.stderr
    assert "wrong" not in done.stderr


def _only(answer):
    """The one index's part of an answer about an index name (keyed by the build the name is an alias of)."""
    (body,) = answer.body.values()
    return body


def test_an_index_not_built_by_rerank_is_refused(rerank, es_server, cacm_slice):  # noqa: F811
    """Searching another application's index (no `contents` field) gave an empty run and exit 0."""
    es_client(es_server).indices.create(index="foreign", mappings={"properties": {"title": {"type": "text"}}})
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "foreign",
                  "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert "'foreign'" in done.stderr and "was not built by `rerank index`" in done.stderr
    rebuild = rerank("index", "slice", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "foreign",
                     "--overwrite", "--corpus", str(cacm_slice / "corpus.jsonl"), check=False)
    assert rebuild.returncode == 2 and "exists and was not built by `rerank index`; it is left alone" in rebuild.stderr
    assert es_client(es_server).indices.exists(index="foreign")  # --overwrite deleted another application's index


def test_a_built_index_gets_the_cluster_default_replicas_back(es_slice, es_server):
    """Replicas are off while bulk loading and stayed off: a production cluster kept one copy of the index."""
    settings = _only(es_client(es_server).indices.get_settings(index="rerank-slice"))["settings"]["index"]
    assert str(settings.get("number_of_replicas", "1")) != "0" and str(settings.get("refresh_interval", "1s")) != "-1"


def test_an_index_built_for_another_name_is_refused(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    """Another NAME's documents came under this NAME's header; default index names are lowercased, so SLICE
    searched, and with --overwrite would have deleted, the index of slice."""
    topics = str(cacm_slice / "topics.tsv")
    other = rerank("retrieve", "other", "--backend", "elasticsearch", "--es-url", es_server,
                   "--index-name", "rerank-slice", "--topics", topics, check=False)
    assert other.returncode == 2 and other.stdout == "" and "was built for 'slice', not 'other'" in other.stderr
    upper = rerank("retrieve", "SLICE", "--backend", "elasticsearch", "--es-url", es_server, "--topics", topics,
                   check=False)
    assert upper.returncode == 2 and "was built for 'slice', not 'SLICE'" in upper.stderr
    assert "--index-name" in upper.stderr
    rebuild = rerank("index", "SLICE", "--backend", "elasticsearch", "--es-url", es_server, "--overwrite",
                     "--corpus", str(cacm_slice / "corpus.jsonl"), check=False)
    assert rebuild.returncode == 2 and len(rebuild.stderr.strip().splitlines()) == 1
    assert "was built for 'slice', not 'SLICE'" in rebuild.stderr
    meta = _only(es_client(es_server).indices.get_mapping(index="rerank-slice"))["mappings"]["_meta"]
    assert meta["rerank"]["name"] == "slice" and meta["rerank"]["complete"]


@pytest.mark.parametrize("given, env, named", [
    (["--es-url", "http://[::1"], {}, "--es-url"),
    ([], {"RERANK_ES_URL": "http://u:s3cret@127.0.0.1:99999"}, "$RERANK_ES_URL"),
])
def test_a_malformed_url_is_one_line(rerank, cacm_slice, given, env, named):  # noqa: F811
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", *given, "--topics", str(cacm_slice / "topics.tsv"),
                  env=env, check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"rerank: error: {named} is not a usable URL") and "s3cret" not in done.stderr


@pytest.mark.parametrize("url", ["htps://u:s3cret@127.0.0.1:9200", "ftp://127.0.0.1:9200", "localhost:9200"])
def test_a_url_that_is_not_http_or_https_is_refused(rerank, cacm_slice, url):
    """The client spoke plain HTTP to any scheme: a mistyped 'htps://' sent the credentials unencrypted, and the
    run's header recorded the URL as given."""
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", url,
                  "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("rerank: error: --es-url ") and "not a usable URL" in done.stderr
    assert "s3cret" not in done.stderr


def test_an_https_url_at_a_plain_http_server_says_so(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    """It said "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol (_ssl.c:1006)"."""
    url = es_server.replace("http://", "https://")
    done = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", url, "--topics",
                  str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr == (f"rerank: error: cannot reach Elasticsearch at {url}: the TLS handshake failed; if the "
                           "server speaks plain HTTP, give an http:// URL\n")


@pytest.mark.parametrize("given, env, says", [
    (["--es-url", ""], {}, "--es-url is empty; give the server's URL, or leave the option out for $RERANK_ES_URL"),
    ([], {"RERANK_ES_API_KEY": "k3y", "RERANK_ES_USER": "alice", "RERANK_ES_PASSWORD": "s3cret"},
     "both $RERANK_ES_API_KEY and $RERANK_ES_USER are set: unset one of them"),
    ([], {"RERANK_ES_PASSWORD": "s3cret"}, "$RERANK_ES_PASSWORD is set without $RERANK_ES_USER"),
    ([], {"RERANK_ES_USER": "alice"}, "$RERANK_ES_USER is set without $RERANK_ES_PASSWORD"),  # sent '' as one
    (["--threads", "4"], {}, "--backend elasticsearch does not take --threads"),  # ignored, unsaid
    (["--es-url", "http://bob:s3cret@127.0.0.1:9"], {"RERANK_ES_API_KEY": "k3y"},
     "--es-url 'http://127.0.0.1:9' names a user and $RERANK_ES_API_KEY is set too: give the credentials one way"),
    ([], {"RERANK_ES_URL": "http://bob:s3cret@127.0.0.1:9", "RERANK_ES_USER": "alice", "RERANK_ES_PASSWORD": "pw"},
     "$RERANK_ES_URL 'http://127.0.0.1:9' names a user and $RERANK_ES_USER is set too: give the credentials one way"),
])
def test_connection_settings_that_would_be_ignored_are_refused(rerank, cacm_slice, given, env, says):
    """An empty --es-url (an unset shell variable) searched the default server; an API key silently won over a user
    and password, a password without a user went unsent, and credentials from the environment silently replaced a
    URL's user:password@ (the server's 401 then blamed credentials the user had not meant to send)."""
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", *given, "--topics", str(cacm_slice / "topics.tsv"),
                  env=env, check=False)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert says in done.stderr and "s3cret" not in done.stderr and "k3y" not in done.stderr


@pytest.mark.parametrize("url, ca_file, says", [
    ("http://127.0.0.1:9", "ca.pem", "TLS options (--es-ca-certs) need an https URL, not http://127.0.0.1:9"),
    ("https://127.0.0.1:9", "missing.pem", "missing.pem: no such file"),
])
def test_tls_option_problems_are_not_blamed_on_the_url(rerank, cacm_slice, tmp_path, url, ca_file, says):  # noqa: F811
    (tmp_path / "ca.pem").write_text("")
    done = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", url, "--es-ca-certs",
                  str(tmp_path / ca_file), "--topics", str(cacm_slice / "topics.tsv"), check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and says in done.stderr


def test_the_build_message_names_the_server_index(rerank, es_server, cacm_slice):  # noqa: F811
    """It named the local name alone: with --index-name and --es-url, not the index that was written, nor where."""
    done = rerank("index", "named", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "named-here",
                  "--corpus", str(cacm_slice / "corpus.jsonl"), "--overwrite")
    assert (f"indexed 300 documents into Elasticsearch index 'named-here' at {es_server} (rerank name 'named')\n"
            in done.stderr)


def test_documents_without_text_are_skipped_as_lucene_skips_them(rerank, es_server, tmp_path):  # noqa: F811
    """Both back ends hold the same documents and say how many were left out (a no-break space is text to Anserini)."""
    texts = {"a": "alpha beta", "b": "", "c": " \t\n", "d": "\u00a0"}
    (tmp_path / "blank.jsonl").write_text("".join(json.dumps({"id": i, "contents": t}) + "\n" for i, t in texts.items()))
    said = {}
    for backend, options in (("lucene", []), ("elasticsearch", ["--es-url", es_server])):
        done = rerank("index", "blank", "--backend", backend, *options, "--corpus", str(tmp_path / "blank.jsonl"))
        said[backend] = done.stderr.strip().splitlines()[-1]
    assert said["lucene"].endswith("; 2 documents without text were skipped, as Anserini does")
    assert said["elasticsearch"].startswith("indexed 2 documents into Elasticsearch index 'rerank-blank' at ")
    assert said["elasticsearch"].endswith(said["lucene"].partition(" (lucene)")[2])
    assert es_client(es_server).count(index="rerank-blank")["count"] == 2


def test_an_uppercase_index_name_is_named_as_such(rerank, es_server, cacm_slice):  # noqa: F811
    """An uppercase name, the usual mistake, is named as such before the server is asked (its refusal lists
    characters, not case)."""
    for command in ("index", "retrieve"):
        upper = rerank(command, "slice", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "Small",
                       "--corpus" if command == "index" else "--topics",
                       str(cacm_slice / ("corpus.jsonl" if command == "index" else "topics.tsv")), check=False)
        assert upper.returncode == 2 and upper.stderr.strip() == ("rerank: error: --index-name 'Small': Elasticsearch "
                                                                  "index names are lowercase; try 'small'")


@pytest.mark.parametrize("given, says", [
    ("_bad", "cannot start with '_'"),
    ("+small", "cannot start with '+'"),
    ("rerank-c*", "cannot contain '*'"),
    ("a,b", "cannot contain ','"),
    ("Bad Name", "cannot contain ' '"),
    (".", "cannot be empty, '.' or '..'"),
])
def test_an_index_name_elasticsearch_cannot_hold_is_refused_before_asking(rerank, cacm_slice, given, says):
    """A look-up of such a name was a bare 'failed to look up index _bad (HTTP 400)', a wildcard was 'no index
    ...; build it with: ... --index-name rerank-c*' (a name no index can have), and 'Bad Name' suggested 'bad
    name'. The server is not asked: the URL here has none."""
    for command, option, file in (("index", "--corpus", "corpus.jsonl"), ("retrieve", "--topics", "topics.tsv")):
        done = rerank(command, "slice", "--backend", "elasticsearch", "--es-url", "http://127.0.0.1:9",
                      "--index-name", given, option, str(cacm_slice / file), check=False)
        assert done.returncode == 2 and done.stderr.strip() == (
            f"rerank: error: --index-name {given!r}: Elasticsearch index names {says}"), command


class _Restricted(http.server.BaseHTTPRequestHandler):
    """An Elasticsearch 8 cluster whose user may connect but neither look up 'forbidden' nor create indexes."""

    def _answer(self, status, body=None):
        data = json.dumps(body).encode() if body else b""
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._answer(200, {"name": "es", "version": {"number": "8.15.0", "build_flavor": "default"},
                           "tagline": "You Know, for Search"})

    def do_HEAD(self):
        self._answer(403 if self.path.startswith("/forbidden") else 404)

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._answer(403, {"error": {"type": "security_exception",
                                     "reason": "action [indices:admin/create] is unauthorized for user [alice]"},
                           "status": 403})

    def log_message(self, *args):
        pass


def test_refusals_say_why_or_nothing(rerank, cacm_slice):
    """A 403 said '(HTTP 403: None)' for a HEAD request and only 'security_exception' for others."""
    with _fake_server(_Restricted) as url:
        look = rerank("retrieve", "slice", "--backend", "elasticsearch", "--es-url", url, "--index-name", "forbidden",
                      "--topics", str(cacm_slice / "topics.tsv"), check=False)
        create = rerank("index", "slice", "--backend", "elasticsearch", "--es-url", url,
                        "--corpus", str(cacm_slice / "corpus.jsonl"), check=False)
    assert look.returncode == 1 and look.stderr.strip().splitlines() == [
        f"rerank: error: Elasticsearch at {url} refused to look up index forbidden with these credentials (HTTP 403)"]
    assert create.returncode == 1 and re.search(
        r"refused to create index rerank-slice-\d{14}-[0-9a-f]{4} \(a new build of rerank-slice\) with these "
        r"credentials: action \[indices:admin/create\] is unauthorized for user \[alice\] \(HTTP 403\)$",
        create.stderr.strip())


def test_an_older_reranks_index_is_searched_and_replaced_by_an_alias(rerank, es_server, cacm_slice):  # noqa: F811
    """rerank built the index under the index name itself: it is searched as before, and --overwrite moves the name
    to a new build, as an alias, in the request that deletes it."""
    client = es_client(es_server)
    client.indices.create(index="rerank-older", mappings={
        "_meta": {"rerank": {"name": "older", "complete": True, "documents": 1, "source": {},
                             "similarity": {"k1": 0.9, "b": 0.4}}},
        "properties": {"contents": {"type": "text"}}})
    client.index(index="rerank-older", id="old-1", document={"contents": "compilers for algebraic languages"},
                 refresh=True)
    search = ("retrieve", "older", "--backend", "elasticsearch", "--es-url", es_server,
              "--topics", str(cacm_slice / "topics.tsv"))
    assert {docid for ranking in _run(rerank(*search).stdout).queries.values() for docid in ranking.docids} == {"old-1"}
    rerank("index", "older", "--backend", "elasticsearch", "--es-url", es_server,
           "--corpus", str(cacm_slice / "corpus.jsonl"), "--overwrite")
    (build, aliases), = es_indexes(es_server, "rerank-older").items()
    assert build.startswith("rerank-older-") and aliases == ["rerank-older"]
    found = {docid for ranking in _run(rerank(*search).stdout).queries.values() for docid in ranking.docids}
    assert "old-1" not in found and len(found) > 8


def test_a_search_while_rebuilding_finds_the_build_before(es_server, home):
    """A search during a rebuild found no index, or half of one; one interrupted there (Ctrl-C) kept neither."""
    from rerank.data.formats import Document
    from rerank.retrieve import elastic

    elastic.build("rebuilt", [Document("d1", "the build before"), Document("d2", "before again")], {}, es_url=es_server)

    def searched() -> list[list[str]]:
        return [ranking.docids for ranking in elastic.open_index("rebuilt", es_url=es_server).search({"1": "before"})]

    before, during = searched(), []

    def documents():
        for i in range(3 * elastic.BULK_CHUNK):
            if i == 2 * elastic.BULK_CHUNK:  # the first 1,000 documents of the new build are loaded
                during.append(searched())
                raise KeyboardInterrupt
            yield Document(f"n{i}", f"before the new build {i}")

    built = es_indexes(es_server, "rerank-rebuilt")
    with pytest.raises(KeyboardInterrupt):
        elastic.build("rebuilt", documents(), {}, es_url=es_server, overwrite=True)
    assert sorted(before[0]) == ["d1", "d2"] and during == [before]
    assert es_indexes(es_server, "rerank-rebuilt") == built  # the unfinished build is deleted


def test_a_search_that_a_rebuild_overtakes_stops(es_server, home):
    """It went on in the new build: one run held rankings from two indexes under the header of the first."""
    from rerank.data.formats import Document
    from rerank.errors import BackendError
    from rerank.retrieve import elastic

    elastic.build("overtaken", [Document("d1", "first build")], {}, es_url=es_server)
    index = elastic.open_index("overtaken", es_url=es_server)
    assert [ranking.docids for ranking in index.search({"1": "build"})] == [["d1"]]
    elastic.build("overtaken", [Document("d2", "second build")], {}, es_url=es_server, overwrite=True)
    with pytest.raises(BackendError, match="'rerank-overtaken' at .* was rebuilt or deleted while this search ran"):
        list(index.search({"1": "build"}))
    assert [r.docids for r in elastic.open_index("overtaken", es_url=es_server).search({"1": "build"})] == [["d2"]]


def test_aliases_rerank_did_not_make_are_left_alone(rerank, es_slice, es_server, cacm_slice):  # noqa: F811
    """An alias of several indexes was searched as its first; someone's alias of rerank's build of another index
    name was taken for that name's, and --overwrite deleted the build that other name searches."""
    client = es_client(es_server)
    (build,) = es_indexes(es_server, "rerank-slice-")
    client.indices.put_alias(index=build, name="mine")
    client.indices.create(index="foreign-two", mappings={"properties": {"contents": {"type": "text"}}})
    client.indices.update_aliases(actions=[{"add": {"index": index, "alias": "both"}} for index in (build, "foreign-two")])
    corpus, topics = str(cacm_slice / "corpus.jsonl"), str(cacm_slice / "topics.tsv")
    for index_name, says in (("mine", f"is {build!r}, which `rerank index` built for the index name 'rerank-slice'; "
                                      "it is left alone"),
                             ("both", "is an alias of 2 indexes")):
        done = rerank("index", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--index-name", index_name,
                      "--corpus", corpus, "--overwrite", check=False)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
    refused = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "both",
                     "--topics", topics, check=False)
    assert refused.returncode == 2 and "is an alias of 2 indexes" in refused.stderr
    mine = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "mine",
                  "--topics", topics)
    ours = rerank("retrieve", es_slice, "--backend", "elasticsearch", "--es-url", es_server, "--topics", topics)
    assert _rankings(mine.stdout) == _rankings(ours.stdout)
    assert sorted(es_indexes(es_server, build)[build]) == ["both", "mine", "rerank-slice"]


def test_a_long_index_name_leaves_room_for_its_builds(rerank, cacm_slice):
    done = rerank("index", "slice", "--backend", "elasticsearch", "--es-url", "http://127.0.0.1:9", "--index-name",
                  "x" * 240, "--corpus", str(cacm_slice / "corpus.jsonl"), check=False)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"rerank: error: --index-name {'x' * 240!r} is too long: each build is an index named after it with 20 "
        "characters more, and Elasticsearch index names are at most 255 bytes")


def test_each_index_name_keeps_its_own_manifest(rerank, es_server, cacm_slice, tmp_path, session_home):  # noqa: F811
    """Building a data set's second Elasticsearch index name replaced the local manifest of the first: a pipeline
    that searched the first ran it again, as if it had been rebuilt. (Two of CACM's queries: noida-db takes most
    of a second for each over all 3,204 documents.)"""
    topics = tmp_path / "two.tsv"
    topics.write_text("".join((cacm_slice / "topics.tsv").read_text().splitlines(keepends=True)[:2]))
    spec = tmp_path / "two-names.toml"
    stages = "".join(f'[[stage]]\nname = "{name}"\nkind = "retrieve"\nbackend = "elasticsearch"\nes_url = "{es_server}"\n'
                     f'index_name = "cacm-{name}"\nk = 10\ntopics = "{topics}"\n' for name in ("a", "b"))
    spec.write_text(f'dataset = "cacm"\nmeasures = ["MAP"]\n{stages}')
    for name in ("a", "b"):
        rerank("index", "cacm", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", f"cacm-{name}")
    rerank("run", str(spec))
    rerank("index", "cacm", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", "cacm-b", "--overwrite")
    again = rerank("run", str(spec))
    assert "a: up to date" in again.stderr and "b: running retrieve" in again.stderr
    folder = session_home / "indexes" / "cacm" / "elasticsearch"
    assert sorted(path.parent.name for path in folder.glob("*/rerank-index.json")) == ["cacm-a", "cacm-b"]
    assert json.loads((folder / "cacm-a" / "rerank-index.json").read_text())["source"]["index_name"] == "cacm-a"


def test_an_older_reranks_one_manifest_stands_for_the_index_name_it_records(es_server, home):
    """rerank kept one manifest in indexes/NAME/elasticsearch/ for the index name built last: it is still that
    index name's record (a pipeline's saved runs of it stay up to date) until that index name is rebuilt."""
    from rerank.data.formats import Document
    from rerank.retrieve import api, elastic
    from rerank.retrieve.store import recorded_origin

    folder = home / "indexes" / "kept" / "elasticsearch"
    folder.mkdir(parents=True)
    older = {"name": "kept", "backend": "elasticsearch", "documents": 1, "created": "2024-01-01T00:00:00",
             "source": {"corpus": "/x.jsonl", "index_name": "kept-one"}}
    (folder / "rerank-index.json").write_text(json.dumps(older))
    assert api.manifest_folder("kept", "elasticsearch", {"index_name": "kept-one"}) == folder
    assert api.manifest_folder("kept", "elasticsearch", {"index_name": "kept-two"}) == folder / "kept-two"
    corpus = {"corpus": "/x.jsonl"}
    elastic.build("kept", [Document("d1", "text")], corpus, es_url=es_server, index_name="kept-two")
    assert (folder / "rerank-index.json").is_file()  # another index name's
    elastic.build("kept", [Document("d1", "text")], corpus, es_url=es_server, index_name="kept-one", overwrite=True)
    assert not (folder / "rerank-index.json").exists()
    assert api.manifest_folder("kept", "elasticsearch", {"index_name": "kept-one"}) == folder / "kept-one"
    assert recorded_origin("kept") == corpus  # what encode and explain find an index's documents by


def test_the_stale_index_check_reads_the_searched_index_names_manifest(rerank, es_server, cacm_slice, tmp_path):  # noqa: F811
    """The one manifest was the index name built last: a search of another said that name's corpus file was gone."""
    kept, gone = tmp_path / "kept.jsonl", tmp_path / "gone.jsonl"
    for corpus in (kept, gone):
        corpus.write_text((cacm_slice / "corpus.jsonl").read_text())
    for index_name, corpus in (("stale-kept", kept), ("stale-gone", gone)):
        rerank("index", "stale", "--backend", "elasticsearch", "--es-url", es_server, "--index-name", index_name,
               "--corpus", str(corpus))
    gone.unlink()
    said = {index_name: rerank("retrieve", "stale", "--backend", "elasticsearch", "--es-url", es_server, "--index-name",
                               index_name, "--topics", str(cacm_slice / "topics.tsv")).stderr
            for index_name in ("stale-kept", "stale-gone")}
    assert "is gone" not in said["stale-kept"]
    assert f"rerank: warning: {gone}, which index stale was built from, is gone" in said["stale-gone"]
    # the command it gives rebuilds the index searched, not the default index name at $RERANK_ES_URL
    assert (f"(rerank index stale --backend elasticsearch --es-url {es_server} --index-name stale-gone --corpus FILE "
            "--overwrite)") in said["stale-gone"]


def test_a_pipeline_whose_elasticsearch_index_is_missing_stops_before_any_stage(rerank, es_server, tmp_path,  # noqa: F811
                                                                               session_home):
    """A stage searching an Elasticsearch index that is not there (a misspelt index name, a server that does not
    answer) failed only when it ran, after the stages before it: its server is asked before any stage runs."""
    spec = tmp_path / "missing-es.toml"
    spec.write_text(f'dataset = "cacm"\nmeasures = ["MAP"]\n[index]\nbackend = "lucene"\n[[stage]]\nname = "bm25"\n'
                    'kind = "retrieve"\n'
                    f'[[stage]]\nname = "es"\nkind = "retrieve"\nbackend = "elasticsearch"\nes_url = "{es_server}"\n'
                    'index_name = "no-such-index"\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode != 0
    assert done.stderr.startswith("rerank: error: stage 'es': no Elasticsearch index 'no-such-index'")
    assert "Traceback" not in done.stderr and "running" not in done.stderr
    assert not (session_home / "runs" / "missing-es" / "bm25.run").exists()
    spec.write_text(spec.read_text().replace(es_server, "http://127.0.0.1:9"))  # nothing answers there
    done = rerank("run", str(spec), check=False)
    assert done.returncode != 0 and done.stderr.startswith("rerank: error: stage 'es': ") and "running" not in done.stderr


def test_a_pipeline_whose_elasticsearch_runs_are_up_to_date_needs_no_server(rerank, cacm_slice, tmp_path):  # noqa: F811
    """The server is asked for the indexes of the stages that will run: a pipeline whose Elasticsearch runs are
    saved gives its leaderboard with the server away, as it did before it was asked at all."""
    topics = tmp_path / "two.tsv"
    topics.write_text("".join((cacm_slice / "topics.tsv").read_text().splitlines(keepends=True)[:2]))
    spec = tmp_path / "kept-es.toml"
    with running_server(tmp_path / "data") as (url, _process):
        rerank("index", "cacm", "--backend", "elasticsearch", "--es-url", url, "--index-name", "kept")
        spec.write_text(f'dataset = "cacm"\nmeasures = ["MAP"]\n[[stage]]\nname = "es"\nkind = "retrieve"\n'
                        f'backend = "elasticsearch"\nes_url = "{url}"\nindex_name = "kept"\nk = 10\ntopics = "{topics}"\n')
        rerank("run", str(spec))
    again = rerank("run", str(spec))  # the server stopped
    assert "es: up to date" in again.stderr and "MAP" in again.stdout
    forced = rerank("run", "--force", str(spec), check=False)
    assert forced.returncode != 0 and forced.stderr.startswith("rerank: error: stage 'es': ")

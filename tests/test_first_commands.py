"""A newcomer's first commands: outputs go into folders that exist, an empty input and a broken header are refused
(one line, a non-zero exit, nothing written)."""

from __future__ import annotations

import pytest

RUN = "1 Q0 a 1 2.0 t\n1 Q0 b 2 1.0 t\n"


def test_an_output_into_a_folder_that_does_not_exist_is_an_error(rerank, tmp_path):
    """`-o rusn/bm25.run` made the folder rusn/ and put the run there, where nobody looked."""
    (tmp_path / "a.run").write_text(RUN)
    missing = tmp_path / "rusn"
    for args in (("cat", str(tmp_path / "a.run"), "-o", str(missing / "x.run")),
                 ("score", "--model", "tk", str(tmp_path / "a.run"), "-o", str(missing / "x.run")),
                 ("budget", str(tmp_path / "a.run"), "--plot", str(missing / "x.png"))):
        done = rerank(*args, check=False)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"{missing} does not exist; make it first (mkdir -p {missing})" in done.stderr, args
        assert not missing.exists()
    done = rerank("cat", str(tmp_path / "a.run"), "-o", str(tmp_path / "a.run" / "x.run"), check=False)
    assert done.returncode == 2 and f"{tmp_path / 'a.run'} is not a folder" in done.stderr
    rerank("cat", str(tmp_path / "a.run"), "-o", "b.run", cwd=tmp_path)  # a plain file name: the folder it is in
    assert (tmp_path / "b.run").read_text().count(" Q0 ") == 2


BROKEN = ['# dataset: "vaswani', '# cut: {"queries": 2', '# stage: {"name": "bm25"']


def test_a_broken_header_line_is_refused_by_every_reader():
    """A value cut short was taken as a string: eval then looked for a data set named '"vaswani'."""
    import io

    from rerank.errors import FormatError
    from rerank.runs import RunReader, load_run

    for line in BROKEN:
        said = f"h.run:2: a broken header line: '# {line[2:].split(':')[0]}:' holds no JSON value"
        for read in (lambda text: load_run(io.StringIO(text), "h.run"),
                     lambda text: list(RunReader(io.StringIO(text), "h.run"))):
            with pytest.raises(FormatError, match=said):
                read(f"# rerank-run: 2\n{line}\n{RUN}# end of run\n")


def test_eval_and_cat_say_a_broken_header_line_in_one_line(rerank, tmp_path):
    (tmp_path / "h.run").write_text(f"# rerank-run: 2\n{BROKEN[0]}\n{RUN}# end of run\n")
    for command in ("eval", "cat"):
        done = rerank(command, str(tmp_path / "h.run"), check=False)
        assert done.returncode == 1 and not done.stdout and done.stderr == (
            f"rerank: error: {tmp_path / 'h.run'}:2: a broken header line: '# dataset:' holds no JSON value "
            "(column 2: unterminated string)\n")


def test_a_bare_word_and_a_free_comment_stay_readable():
    """What people write by hand: a data set's name without quotes, and comments of their own."""
    import io

    from rerank.runs import RunReader

    reader = RunReader(io.StringIO(f"# dataset: vaswani\n# Note: made with {{my tool}} [v2\n{RUN}"), "h.run")
    assert reader.header.dataset == "vaswani" and len(list(reader)) == 1


def _vaswani_slice(data_root, folder):
    """Vaswani's first 500 documents, with all its topics and qrels: a data set of the same name, small to index."""
    import shutil

    target = folder / "vaswani"
    (target / "corpus").mkdir(parents=True)
    for name in ("qrels", "query-text.trec"):
        shutil.copy(data_root / "vaswani" / name, target / name)
    documents = (data_root / "vaswani" / "corpus" / "doc-text.trec").read_text().split("</DOC>")
    (target / "corpus" / "doc-text.trec").write_text("</DOC>".join(documents[:500]) + "</DOC>\n")
    return folder


@pytest.mark.data
def test_retrieve_builds_a_missing_index_first_unless_told_not_to(rerank, data_root, tmp_path):
    """`rerank retrieve vaswani | rerank eval` on a fresh home failed: no index. It builds it first now, saying so on
    stderr, as Pyserini fetches its prebuilt indexes; --no-build keeps the error, and a pool's index is not built."""
    home = tmp_path / "home"
    fresh = {"RERANK_HOME": str(home), "RERANK_DATA": str(_vaswani_slice(data_root, tmp_path / "data"))}
    refused = rerank("retrieve", "vaswani", "--no-build", env=fresh, check=False)
    assert refused.returncode == 1 and not refused.stdout
    assert refused.stderr == (f"rerank: error: no Lucene index 'vaswani' at {home / 'indexes' / 'vaswani' / 'lucene'};"
                              " build it with: rerank index vaswani\n")
    built = rerank("retrieve", "vaswani", env=fresh)
    assert built.stderr.startswith("rerank: note: index 'vaswani' is not built here yet; building it first from data "
                                   "set vaswani (rerank index vaswani; --no-build fails instead)\n")
    assert f"rerank: note: indexed 500 documents into {home / 'indexes' / 'vaswani' / 'lucene'}\n" in built.stderr
    assert (home / "indexes" / "vaswani" / "lucene" / "rerank-index.json").is_file()  # whole, kept for next time
    evaluated = rerank("eval", "-m", "MAP", input=built.stdout, env=fresh)
    assert evaluated.stdout.splitlines()[1].split()[0] == "bm25"
    pool = rerank("retrieve", "trec-dl-2019", env={"RERANK_HOME": str(home)}, check=False)  # a pool of candidates
    assert pool.returncode == 1 and "rerank retrieve trec-dl-2019 --candidates" in pool.stderr
    assert not (home / "indexes" / "trec-dl-2019").exists()


@pytest.mark.data
def test_score_and_index_count_up_to_their_totals_off_a_terminal(tiny_tk, data_root, tmp_path, monkeypatch, capfd):
    """Their progress off a terminal said a count a minute, without the total or the time left, and nothing at the
    start or the end: a line at each now (here from the first unit on, where it waits a few seconds), with the total
    (the queries the first stage wrote, the documents). In process: the wait is set to none."""
    import io

    from click.testing import CliRunner

    from rerank.cli import cli, commands  # noqa: F401  (registers the commands)
    from rerank.progress import Progress
    from rerank.retrieve.api import build_index, candidates
    from rerank.runs import cut_stream

    monkeypatch.setenv("RERANK_DATA", str(data_root))
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    monkeypatch.setattr(Progress, "DELAY", 0.0)
    stream = candidates("trec-dl-2019")  # as `rerank retrieve trec-dl-2019 --candidates | rerank cat --first 3`
    cut = io.StringIO()
    cut_stream(stream.header, stream.rankings, 3, None).write(cut)
    scored = CliRunner().invoke(cli, ["score", "--model", "tk", "--checkpoint", tiny_tk, "--no-cache", "-o",
                                      str(tmp_path / "s.run")], input=cut.getvalue())
    lines = scored.stderr.splitlines()
    assert scored.exit_code == 0 and lines[0].startswith("rerank: scoring with tk: 1/3 queries in "), lines
    assert ", about " in lines[0] and lines[1].startswith("rerank: scoring with tk: 3/3 queries in "), lines
    (tmp_path / "c.jsonl").write_text("".join(f'{{"id": "d{i}", "contents": "text {i}"}}\n' for i in range(3)))
    capfd.readouterr()
    build_index("counted", corpus=str(tmp_path / "c.jsonl"))
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("rerank: ")]
    assert lines[0].startswith("rerank: indexing counted: 3/3 docs in "), lines


def test_a_server_that_is_not_elasticsearch_is_said_to_be_so():
    """A web server answering 404 at the --es-url (a wrong port) was 'failed to connect to (HTTP 404)'."""
    import http.server
    import threading

    from rerank.errors import BackendError
    from rerank.retrieve.elastic import Connection

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(BackendError) as raised:
            Connection(url)
    finally:
        server.shutdown()
    assert str(raised.value) == (f"{url} does not answer as Elasticsearch (HTTP 404 to GET /); give the URL of an "
                                 "Elasticsearch server")

"""Pipelines run every stage, write runs/, reuse unchanged runs and print the leaderboard."""

import json
import re

import pytest

pytestmark = pytest.mark.data


def test_dl19_candidates_pipeline_reuses_runs(rerank, session_home, tmp_path):
    """The shipped pipeline, its re-ranking stage cut to depth 10 (MiniLM scoring 100 candidates of 43 queries took
    most of a minute; `scripts/main.sh` runs the file as shipped)."""
    from pathlib import Path

    shipped = (Path(__file__).resolve().parent.parent / "pipelines" / "trec-dl-2019-candidates.toml").read_text()
    assert shipped.count("depth = 100\n") == 2  # the MiniLM stage's, and the commented-out bert stage's
    spec = tmp_path / "trec-dl-2019-candidates.toml"
    spec.write_text(shipped.replace("depth = 100\n", "depth = 10\n", 1))
    first = rerank("run", str(spec))
    assert "bm25 (baseline)" in first.stdout and "0.5058" in first.stdout and "minilm-bi" in first.stdout
    run_file = session_home / "runs" / "trec-dl-2019-candidates" / "bm25.run"
    stamp = run_file.stat().st_mtime_ns
    second = rerank("run", str(spec))
    assert "up to date" in second.stderr and run_file.stat().st_mtime_ns == stamp
    assert second.stdout == first.stdout


def test_runs_of_an_older_rerank_without_package_versions_stay_up_to_date_and_fuse(rerank, session_home, tmp_path):
    """A score stage's entry names the torch, transformers and tokenizers it scored with; a saved run written by an
    older rerank, which named none, or under other versions, is still up to date, and a fuse stage reads it beside
    runs that name them."""
    import tokenizers
    import torch
    import transformers

    spec = tmp_path / "versions.toml"
    spec.write_text('dataset = "trecqa-dev"\nmeasures = ["MRR"]\nbaseline = "c"\n'
                    '[[stage]]\nname = "c"\nkind = "candidates"\nk = 3\n'
                    '[[stage]]\nname = "bi"\nkind = "score"\ninput = "c"\nmodel = "minilm-bi"\n'
                    '[[stage]]\nname = "both"\nkind = "fuse"\ninputs = ["c", "bi"]\n')
    first = rerank("run", str(spec))
    folder = session_home / "runs" / "versions"
    saved = (folder / "bi.run").read_text()
    entry = json.loads(next(line for line in saved.splitlines() if '"name": "bi"' in line).split(": ", 1)[1])
    assert entry["packages"] == {"torch": torch.__version__, "transformers": transformers.__version__,
                                 "tokenizers": tokenizers.__version__}
    older = {key: value for key, value in entry.items() if key != "packages"}  # as a rerank before them wrote it
    (folder / "bi.run").write_text(saved.replace(json.dumps(entry, sort_keys=True), json.dumps(older, sort_keys=True)))
    assert '"packages"' not in (folder / "bi.run").read_text()
    spec.write_text(spec.read_text().replace('inputs = ["c", "bi"]', 'inputs = ["c", "bi"]\nk = 10'))
    again = rerank("run", str(spec))
    assert "c: up to date" in again.stderr and "bi: up to date" in again.stderr and "both: running" in again.stderr
    def rows(done) -> list[str]:
        return [line for line in done.stdout.splitlines() if line.startswith(("bi ", "c "))]

    assert rows(again) == rows(first) and len(rows(first)) == 2  # read as saved
    fused = (folder / "both.run").read_text()
    assert '"packages"' not in fused and '"k": 10' in fused


def _without_pipeline(line: str) -> str:
    """A run's line, a stage entry without the pipeline file that `rerank run` names in it."""
    if not line.startswith("# stage: "):
        return line
    entry = json.loads(line.removeprefix("# stage: "))
    return "# stage: " + json.dumps({k: v for k, v in entry.items() if not k.startswith("pipeline")}, sort_keys=True)


def test_a_pipelines_runs_name_its_file_by_content_which_makes_no_run_out_of_date(rerank, session_home, tmp_path):
    """A run that `rerank run` wrote named no pipeline file: a reviewer holding it could not tell which file (nor
    which version of it) made it. Each stage entry now names the file and its content's sha256; a file that only
    gains a comment recomputes nothing, so saved runs keep naming the content that made them, and the stages run
    now name the new one (a fuse stage among them, reading runs that name it)."""
    import hashlib

    from rerank.runs import RunReader

    spec = tmp_path / "made-by.toml"
    spec.write_text('dataset = "trecqa-dev"\nmeasures = ["MRR"]\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 3\n')
    rerank("run", str(spec))
    folder = session_home / "runs" / "made-by"

    def entry(stage: str) -> dict:
        with open(folder / f"{stage}.run", encoding="utf-8") as handle:
            return RunReader(handle, stage).header.stages[-1]

    first = hashlib.sha256(spec.read_bytes()).hexdigest()[:16]  # as topics_sha256 names a file
    assert (entry("c")["pipeline"], entry("c")["pipeline_sha256"]) == (str(spec.resolve()), first)
    spec.write_text(spec.read_text() + "# more stages below\n")
    assert "c: up to date" in rerank("run", str(spec)).stderr
    spec.write_text(spec.read_text() + '[[stage]]\nname = "d"\nkind = "candidates"\nk = 2\n'
                                       '[[stage]]\nname = "both"\nkind = "fuse"\ninputs = ["c", "d"]\n')
    again = rerank("run", str(spec))
    assert "c: up to date" in again.stderr and "both: running" in again.stderr
    second = hashlib.sha256(spec.read_bytes()).hexdigest()[:16]
    assert [entry(stage)["pipeline_sha256"] for stage in ("c", "d", "both")] == [first, second, second]


def test_changed_stage_is_recomputed(rerank, session_home, tmp_path):
    spec = tmp_path / "recomputed.toml"
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 5\n')
    rerank("run", str(spec))
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 3\n')
    again = rerank("run", str(spec))
    assert "running candidates" in again.stderr
    assert again.stdout.splitlines()[1].startswith("c ")  # the stage's name labels its row, not the shipped run's


def test_a_retrieve_stage_writes_the_run_rerank_retrieve_writes(rerank, vaswani_index, session_home, tmp_path):
    """A user diffed a pipeline's run against the same stage typed as a command: the header's stage line lacked the
    search threads (2, used by both) that the command's records. Only the fingerprint and timings may differ."""
    spec = tmp_path / "typed.toml"
    spec.write_text('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 5\n')
    rerank("run", str(spec))
    typed = rerank("retrieve", "vaswani", "--k", "5", "--name", "bm25").stdout

    def kept(text: str) -> list[str]:  # and the pipeline file its stage entry names
        return [_without_pipeline(line) for line in text.splitlines()
                if not line.startswith(("# time:", "# fingerprint:"))]

    assert kept((session_home / "runs" / "typed" / "bm25.run").read_text()) == kept(typed)


def test_two_pipeline_files_of_one_name_do_not_share_a_runs_folder(rerank, vaswani_index, session_home, tmp_path):
    """A user ran a/exp.toml and b/exp.toml: both wrote runs/exp/, each re-ran the other's stage of the same name
    with nothing changed, and the stale-run note told them to delete the other experiment's run. The second file
    is refused while the first is there; a moved file (the first gone) takes its runs over."""
    first, second = tmp_path / "a" / "exp.toml", tmp_path / "b" / "exp.toml"
    for spec, k in ((first, 5), (second, 3)):
        spec.parent.mkdir()
        spec.write_text(f'dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = {k}\n')
    rerank("run", str(first))
    run_file = session_home / "runs" / "exp" / "bm25.run"
    stamp = run_file.stat().st_mtime_ns
    refused = rerank("run", str(second), check=False)
    assert refused.returncode != 0 and "running" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and str(first) in refused.stderr and "rename" in refused.stderr
    assert run_file.stat().st_mtime_ns == stamp
    first.rename(tmp_path / "a" / "gone.toml")
    second.write_text(first.parent.joinpath("gone.toml").read_text())
    assert "up to date" in rerank("run", str(second)).stderr


def test_a_run_of_a_renamed_stage_left_in_the_pipelines_folder_is_pointed_out(rerank, session_home, tmp_path):
    """A user study renamed a stage (fused -> rrf): fused.run stayed beside rrf.run, and `rerank budget
    runs/study/*.run` read both, with nothing said."""
    spec = tmp_path / "renamed.toml"
    stage = '[[stage]]\nname = "{}"\nkind = "candidates"\nk = 5\n'
    spec.write_text('dataset = "trecqa-dev"\n' + stage.format("fused"))
    assert "of no stage" not in rerank("run", str(spec)).stderr
    spec.write_text('dataset = "trecqa-dev"\n' + stage.format("rrf"))
    old = session_home / "runs" / "renamed" / "fused.run"
    assert f"rerank: note: {old}: of no stage of {spec} now (a stage renamed or removed?); delete it if so" in \
        rerank("run", str(spec)).stderr.splitlines()
    assert old.is_file()  # the user's to delete


def test_run_per_query_gives_each_querys_difference_to_the_baseline(rerank, tmp_path):
    """A pipeline's per-query view meant running eval on its runs/ folder by hand; `run -q` gives eval's table,
    queries ordered by the file's `sort`."""
    spec = tmp_path / "pq.toml"
    spec.write_text('dataset = "trecqa-dev"\nmeasures = ["MRR"]\nsort = "MRR"\nbaseline = "c5"\n'
                    '[[stage]]\nname = "c5"\nkind = "candidates"\nk = 5\n'
                    '[[stage]]\nname = "c1"\nkind = "candidates"\nk = 1\n')
    rows = json.loads(rerank("run", str(spec), "-q", "--format", "json").stdout)
    assert {row["run"] for row in rows} == {"c5", "c1"} and all(row["MRR delta"] is None for row in rows
                                                                  if row["run"] == "c5")
    compared = [row["MRR delta"] for row in rows if row["run"] == "c1" and row["qid"] != "all"]
    assert compared == sorted(compared, reverse=True) and compared[-1] < 0  # a cut to 1 loses where 2-5 found it


def test_a_topics_file_is_followed_and_scored_against_the_pipeline_data_set(rerank, session_home, tmp_path):
    """Editing a topics file the pipeline names recomputes its stage (the path alone did not change), and runs
    from it are judged by the pipeline's data set (they named none, and the leaderboard failed)."""
    import os

    topics = tmp_path / "topics.tsv"
    topics.write_text("1\tmeasurement of dielectric constant of liquids\n2\tmathematical analysis\n")
    spec = tmp_path / "mine.toml"
    spec.write_text(f'dataset = "vaswani"\n[index]\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\n'
                    f'topics = "{topics}"\n')
    first = rerank("run", str(spec))
    assert first.stdout.splitlines()[1].startswith("bm25 ")
    assert ("rerank: note: bm25: from a topics file whose queries are not all vaswani's (their ids with the same "
            "words), judged by vaswani's qrels, the pipeline's data set; set qrels = FILE if they are not its "
            "queries") in first.stderr  # eval would have asked for qrels: the pipeline says which it took
    os.utime(topics, ns=(topics.stat().st_atime_ns, topics.stat().st_mtime_ns + 10**9))  # touched, the same bytes
    assert "up to date" in rerank("run", str(spec)).stderr  # it ran the stage again
    topics.write_text("1\tmeasurement of dielectric constant of liquids\n")
    os.utime(topics, ns=(topics.stat().st_atime_ns, topics.stat().st_mtime_ns + 10**9))  # a later edit, surely
    again = rerank("run", str(spec))
    assert "running retrieve" in again.stderr
    run = (session_home / "runs" / "mine" / "bm25.run").read_text()
    assert {line.split()[0] for line in run.splitlines() if not line.startswith("#")} == {"1"}


def test_replayed_candidates_take_a_name(rerank):
    named = rerank("retrieve", "trecqa-dev", "--candidates", "--k", "2", "--name", "first").stdout
    assert '"name": "first"' in named and '"run": "candidates"' in named
    assert {line.split()[-1] for line in named.splitlines() if not line.startswith("#")} == {"first"}


def test_a_changed_data_set_or_rebuilt_index_invalidates_runs(tmp_path, monkeypatch):
    """Only parameters and files named as parameters were fingerprinted: a rebuilt index or edited topics under
    the data root kept serving the old run ('up to date')."""
    import os
    import shutil
    from pathlib import Path

    from rerank.pipeline import _fingerprint

    root = tmp_path / "data"
    shutil.copytree(Path(os.environ.get("RERANK_DATA", "../shared/data")) / "vaswani", root / "vaswani")
    monkeypatch.setenv("RERANK_DATA", str(root))
    monkeypatch.setenv("RERANK_HOME", str(tmp_path / "home"))
    manifest = tmp_path / "home" / "indexes" / "vaswani" / "lucene" / "rerank-index.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"created": "2026-11-26T10:00:00"}')
    retrieve, score = {"kind": "retrieve", "name": "bm25"}, {"kind": "score", "name": "bi", "model": "minilm-bi"}
    before = _fingerprint("vaswani", retrieve, ""), _fingerprint("vaswani", score, "u")
    assert before == (_fingerprint("vaswani", retrieve, ""), _fingerprint("vaswani", score, "u"))
    manifest.write_text('{"created": "2026-11-26T11:00:00"}')  # rebuilt
    assert _fingerprint("vaswani", retrieve, "") != before[0] and _fingerprint("vaswani", score, "u") == before[1]
    rebuilt = _fingerprint("vaswani", retrieve, "")
    os.utime(root / "vaswani" / "qrels", ns=(1, 10**18))  # judgements change no run
    assert _fingerprint("vaswani", retrieve, "") == rebuilt
    topics = root / "vaswani" / "query-text.trec"
    topics.write_text(topics.read_text().replace("MEASUREMENT", "ZEBRA", 1))
    assert _fingerprint("vaswani", retrieve, "") != rebuilt and _fingerprint("vaswani", score, "u") != before[1]


def test_an_unreadable_saved_run_is_run_again(tmp_path):
    from rerank.pipeline import _existing_fingerprint

    saved = tmp_path / "tk.run"
    saved.write_bytes(b"# rerank-run: 2\n# fingerprint: \"abc\"\n\xff\xfe not text\n")
    assert _existing_fingerprint(saved) is None
    saved.write_text('# rerank-run: 2\n# fingerprint: "abc"\n1 Q0 a 1 2.0 t\n')  # cut short before its end line
    assert _existing_fingerprint(saved) is None
    saved.write_text('# rerank-run: 2\n# fingerprint: "abc"\n1 Q0 a 1 2.0 t\n# end of run\n')
    assert _existing_fingerprint(saved) == "abc"


@pytest.mark.parametrize("top, extra, message", [
    ('sort = "FOO"\n', "", "sort 'FOO' is not one of the measures: MAP, MRR, P@1, nDCG@10, Recall@100"),
    ("", '[[stage]]\nname = "f"\nkind = "fuse"\ninputs = [{a = 1}, "bm25"]\n', "a fuse stage reads `inputs`, a list of two"),
    ("", '[[stage]]\nname = "f"\nkind = "fuse"\ninputs = ["bm25"]\n', "a fuse stage reads `inputs`, a list of two"),
    ("", '[[stage]]\nname = "b2"\nkind = "retrieve"\ninput = "bm25"\n', "a retrieve stage reads no earlier stage's run"),
    ("", '[[stage]]\nname = "s"\nkind = "score"\nmodel = "minilm-bi"\n', "a score stage needs `input`"),
    ("measures = []\n", "", r"p.toml: measures \[\]: name one or more"),  # it fell back to the data set's
    # said "unknown back end 'solr'", naming neither the file nor its table
    ('[index]\nbackend = "solr"\n', "", r"p.toml: \[index\] backend 'solr' is unknown; known: lucene, dense"),
    # a lucene [index] table's dense options: "unknown key", where they are a dense index's
    ('[index]\nindex_name = "x"\nhnsw = 8\n', "", r'p.toml: \[index\] index_name, hnsw: a dense index\'s; give backend = '
                                                 r'"dense", or leave them out'),
    # built a dense index (7 minutes on vaswani) that nothing read
    ('[index]\nbackend = "dense"\n', "", r"p.toml: \[index\] builds a dense index, which no retrieve stage searches (they "
                                         r"search lucene); leave the \[index\] table out"),
])
def test_pipeline_shape_mistakes_are_refused_when_read(tmp_path, top, extra, message):
    """A sort without measures and fuse inputs that are not names gave tracebacks (the sort one after every stage
    had run); an `input` on a first stage was ignored."""
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "p.toml"
    spec.write_text(f'dataset = "vaswani"\n{top}[[stage]]\nname = "bm25"\nkind = "retrieve"\n{extra}')
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pipeline(spec)


@pytest.mark.parametrize("stage, message", [
    ('kind = "score"\ninput = "bm25"\nmodel = "nosuch"', "stage 's': unknown model 'nosuch'; known:"),
    ('kind = "score"\ninput = "bm25"', "stage 's': a score stage needs `model`"),  # not "stage 's': score stage 's'"
    ('kind = "score"\ninput = "bm25"\nmodel = "bert"\ncheckpoint = "/nonexistent/ck"', "stage 's': .*/nonexistent/ck"),
    ('kind = "score"\ninput = "bm25"\nmodel = "minilm-bi"\ndepth = 0', "stage 's': depth must be a positive"),
    ('kind = "score"\ninput = "bm25"\nmodel = "minilm-bi"\nmax_length = 0', "stage 's': max_length must be a positive"),
    ('kind = "score"\ninput = "bm25"\nmodel = "tk"', "stage 's': model tk needs checkpoint DIR"),
    ('kind = "retrieve"\nbackend = "dense"', "stage 's': no complete dense index at .*; build it with: rerank index vaswani --backend dense"),
    ('kind = "retrieve"\nbackend = "nosuch"', "stage 's': unknown back end 'nosuch'"),
    ('kind = "retrieve"\nbackend = "dense"\nexact = true\nef_search = 64', "stage 's': ef_search tunes the HNSW"),
    ('kind = "retrieve"\nbackend = "dense"\nthreads = 5000', "stage 's': threads must be between 1 and 1024"),
    ('kind = "retrieve"\nbackend = "elasticsearch"\nthreads = 4', "stage 's': backend elasticsearch does not take "
                                                                  "threads: the server"),  # ignored, unsaid
    ('kind = "retrieve"\nk = -5', "stage 's': k must be a positive number"),
    ('kind = "retrieve"\nfb_docs = 3', "stage 's': fb_docs set RM3 feedback: add rm3 = true"),
    ('kind = "retrieve"\nes_verify_certs = false', "stage 's': backend lucene does not take es_verify_certs$"),
    ('kind = "retrieve"\ntopics = "/nonexistent/t.tsv"', "stage 's': file not found: /nonexistent/t.tsv"),
    ('kind = "retrieve"\ntopics = "/nonexistent/bm25--k/t.tsv"', "stage 's': file not found: /nonexistent/bm25--k/t"),
    ('kind = "candidates"', "stage 's': data set vaswani ships no candidate runs"),
    ('kind = "fuse"\ninputs = ["bm25", "bm25"]\nmethod = "x"', "stage 's': unknown fusion method 'x'"),
])
def test_stage_mistakes_stop_the_pipeline_before_any_stage_runs(rerank, vaswani_index, session_home, tmp_path, stage,
                                                                message):
    """Each of these used to surface only after the stages before it had run (an hour of retrieval, on a big
    collection). They name the file's keys (`add rm3 = true`), not the command-line flags the commands' own checks
    name (`add --rm3`), except in a command line they suggest (`rerank index vaswani --backend dense`)."""
    spec = tmp_path / "early.toml"
    spec.write_text(f'dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\n'
                    f'[[stage]]\nname = "s"\n{stage}\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode != 0 and re.search(message, done.stderr) and "Traceback" not in done.stderr
    assert "running" not in done.stderr and not (session_home / "runs" / "early").exists()


def test_a_score_stages_topics_or_corpus_of_another_format_stops_the_pipeline_before_any_stage_runs(
        rerank, vaswani_index, session_home, tmp_path):
    """Only their existence was checked: the retrieval before the stage ran, then the stage failed on line 1."""
    (tmp_path / "topics.tsv").write_text("a query without its id\n")
    (tmp_path / "corpus.jsonl").write_text('{"id": "1", "contents": "x"\n')
    for key, message in ("topics", r"topics.tsv:1: expected 'qid<TAB>query text'"), \
                        ("corpus", r"corpus.jsonl:1: invalid JSON"):
        spec = tmp_path / f"{key}.toml"
        spec.write_text(f'dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\n[[stage]]\n'
                        f'name = "s"\nkind = "score"\ninput = "bm25"\nmodel = "minilm-bi"\n'
                        f'{key} = "{tmp_path / (key + (".tsv" if key == "topics" else ".jsonl"))}"\n')
        done = rerank("run", str(spec), check=False)
        assert done.returncode != 0 and re.search(f"stage 's': .*{message}", done.stderr), done.stderr
        assert "running" not in done.stderr and not (session_home / "runs" / key).exists()


def test_text_an_error_quotes_from_the_users_files_is_not_put_in_the_files_words(rerank, vaswani_index, tmp_path):
    """Flags in a stage's errors become the file's keys (`--k` -> `k`), and so did a flag-like id that an error
    quoted from a topics file: '--k 1' was reported as 'k 1', an id the file does not hold."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\tfirst query\n--k 1\tsecond query\n")
    spec = tmp_path / "quoted.toml"
    spec.write_text(f'dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\ntopics = "{topics}"\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (f"rerank: error: stage 'bm25': {topics}:2: query id '--k 1' holds "
                                            "whitespace: tools that split a TREC run line's columns on whitespace "
                                            "could not read it"), done.stderr


def test_a_relative_path_beside_the_pipeline_file_but_not_in_the_working_directory_is_pointed_out(
        rerank, vaswani_index, session_home, tmp_path):
    """A user study wrote `topics = "mine.tsv"` in a pipeline beside mine.tsv and ran it from another folder: 'file
    not found: mine.tsv', with nothing to say that paths are read from the working directory, as they are given
    on the command line."""
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "mine.tsv").write_text("1\tmeasurement of dielectric constant\n")
    (folder / "mine.qrels").write_text("1 0 1239 1\n")
    spec = folder / "beside.toml"
    stage = '[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\ntopics = "mine.tsv"\n'
    spec.write_text(f'dataset = "vaswani"\n{stage}')
    done = rerank("run", "exp/beside.toml", cwd=tmp_path, check=False)
    assert done.returncode == 1 and done.stderr.splitlines()[-1] == (
        "rerank: error: stage 'bm25': file not found: mine.tsv (mine.tsv is beside the pipeline file, but its paths "
        "are read from the working directory, as the command line's are: run it from exp or give exp/mine.tsv)")
    spec.write_text(f'dataset = "vaswani"\nqrels = "mine.qrels"\n{stage.replace("mine.tsv", "exp/mine.tsv")}')
    done = rerank("run", "exp/beside.toml", cwd=tmp_path, check=False)
    assert done.returncode == 1 and done.stderr.splitlines()[-1].endswith(
        "file not found: mine.qrels (mine.qrels is beside the pipeline file, but its paths are read from the working "
        "directory, as the command line's are: run it from exp or give exp/mine.qrels)")
    spec.write_text(f'dataset = "vaswani"\nqrels = "mine.qrels"\n{stage}')
    assert rerank("run", "beside.toml", cwd=folder).stdout.startswith("run   MAP")  # from there, it runs


def test_an_error_found_only_by_running_a_stage_names_the_stage(rerank, vaswani_index, session_home, tmp_path):
    """The model's position table is known once it loads: the error said `--max-length must be ...`, naming neither
    the stage nor the file's key."""
    spec = tmp_path / "late.toml"
    spec.write_text('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nk = 10\n'
                    '[[stage]]\nname = "s"\nkind = "score"\ninput = "bm25"\nmodel = "minilm-bi"\nmax_length = 1000\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        "rerank: error: stage 's': max_length must be between 1 and 512 (the model's positions), not 1000")
    assert not (session_home / "runs" / "late" / "s.run").exists()


def test_a_switch_an_error_says_to_pass_is_named_with_its_value(rerank, tmp_path):
    """A score stage's errors at run time said "pass skip_missing to leave them unscored" and, of a damaged score
    cache, "delete it, or pass cache": the key alone, which for --no-cache says the opposite."""
    corpus = tmp_path / "small.jsonl"
    corpus.write_text('{"id": "nosuch", "contents": "hello"}\n')
    spec = tmp_path / "late.toml"
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\nk = 3\n'
                    '[[stage]]\nname = "s"\nkind = "score"\ninput = "c"\nmodel = "minilm-bi"\n'
                    f'corpus = "{corpus}"\n')
    home = {"RERANK_HOME": str(tmp_path / "home")}
    done = rerank("run", str(spec), check=False, env=home)
    assert done.returncode == 1 and "; pass skip_missing = true to leave them unscored" in done.stderr
    spec.write_text(spec.read_text().replace("corpus", "# corpus"))  # the first run made the cache: damage it
    (tmp_path / "home" / ".cache" / "scores.sqlite").write_text("not a database, not a database\n")
    done = rerank("run", str(spec), check=False, env=home)
    assert done.returncode == 1 and done.stderr.rstrip().endswith("delete it, or pass cache = false"), done.stderr


def test_flags_of_another_command_stay_flags(rerank, vaswani_index, tmp_path):
    """k1 in an Elasticsearch stage, refused when its index opens, said "pass k1/b to rerank index": the stage's
    keys, given to a command that takes flags."""
    spec = tmp_path / "es.toml"
    spec.write_text('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nbackend = "elasticsearch"\n'
                    'k1 = 1.2\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        "rerank: error: stage 'bm25': Elasticsearch fixes BM25 k1/b when the index is built (rerank index vaswani "
        "--backend elasticsearch --k1 K1 --b B), not when it is searched")


def test_an_unknown_data_set_stops_the_pipeline_before_any_stage_runs(rerank, tmp_path):
    """A misspelt `dataset` was said of the first stage ("stage 'bm25': 'vaswanni' is not a known data set"), as if
    that stage's table held the mistake: it is said of the `dataset` key, with the name it is near."""
    spec = tmp_path / "p.toml"
    from rerank.data import dataset_names

    known = "known: vaswani, cacm, trec-dl-2019"
    spec.write_text('dataset = "nosuch"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode != 0 and "running" not in done.stderr
    assert done.stderr.startswith(f"rerank: error: dataset 'nosuch' is not a known data set ({known}")
    assert done.stderr.endswith("); for an index of your own, pass topics FILE in stage 'bm25'\n")
    spec.write_text('dataset = "vaswanni"\n[[stage]]\nname = "c"\nkind = "candidates"\n')  # no own-index advice
    done = rerank("run", str(spec), check=False)
    assert done.stderr.startswith(f"rerank: error: dataset 'vaswanni' is not a known data set (did you mean "
                                  f"'vaswani'? {known}") and done.stderr.endswith(f"{dataset_names()[-1]})\n"), done.stderr
    spec.write_text('dataset = "vaswanni"\n[index]\nbackend = "lucene"\n[[stage]]\nname = "bm25"\n'
                    'kind = "retrieve"\n')
    assert rerank("run", str(spec), check=False).stderr == (
        f"rerank: error: {spec}: [index] builds a data set's index, and dataset 'vaswanni' is not one (did you mean "
        "'vaswani'?): build your own once with rerank index vaswanni --corpus FILE, and leave the [index] table out\n")


def test_a_pipeline_over_an_index_of_ones_own_without_qrels_stops_before_any_stage_runs(rerank, tmp_path):
    """A user study's pipeline over its own index (`dataset = "mine"`, topics in the stage) without `qrels` ran every
    stage, then failed at the leaderboard with "no qrels: ...; pass --qrels FILE", an option `rerank run` lacks."""
    home = {"RERANK_HOME": str(tmp_path / "home")}
    (tmp_path / "docs.jsonl").write_text('{"id": "d1", "contents": "kernel methods"}\n'
                                         '{"id": "d2", "contents": "neural ranking"}\n')
    (tmp_path / "topics.tsv").write_text("q1\tneural ranking\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d2 1\n")
    rerank("index", "mine", "--corpus", str(tmp_path / "docs.jsonl"), env=home)
    stage = f'[[stage]]\nname = "bm25"\nkind = "retrieve"\ntopics = "{tmp_path / "topics.tsv"}"\n'
    spec = tmp_path / "mine.toml"
    spec.write_text(f'dataset = "mine"\n{stage}')
    done = rerank("run", str(spec), check=False, env=home)
    assert done.returncode == 2 and "running" not in done.stderr and done.stderr.splitlines() == [
        "rerank: error: 'mine' is an index of your own, not a data set with qrels: its runs are judged by the file's "
        "qrels = FILE"]
    assert not (tmp_path / "home" / "runs" / "mine").exists()
    spec.write_text(f'dataset = "mine"\nqrels = "{tmp_path / "qrels.txt"}"\n{stage}')
    assert rerank("run", str(spec), env=home).stdout.startswith("run   MAP")


def test_an_index_table_or_its_advice_is_refused_for_an_index_of_ones_own(rerank, tmp_path):
    """The [index] table has no corpus key: for `dataset = "mine"` it said "give the documents with --corpus FILE",
    after claiming the runs folder, and a missing index of one's own was told to "give the pipeline an [index]
    table"."""
    home = {"RERANK_HOME": str(tmp_path / "home")}
    spec, topics = tmp_path / "mine.toml", tmp_path / "t.tsv"
    topics.write_text("q1\tneural ranking\n")
    stage = f'[[stage]]\nname = "bm25"\nkind = "retrieve"\ntopics = "{topics}"\n'
    spec.write_text(f'dataset = "mine"\nqrels = "{spec}"\n{stage}')
    done = rerank("run", str(spec), check=False, env=home)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"rerank: error: stage 'bm25': no complete lucene index at {tmp_path / 'home/indexes/mine/lucene'}; build it "
        "with: rerank index mine --corpus FILE"]
    spec.write_text(f'dataset = "mine"\nqrels = "{spec}"\n[index]\nbackend = "lucene"\n{stage}')
    done = rerank("run", str(spec), check=False, env=home)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"rerank: error: {spec}: [index] builds a data set's index, and dataset 'mine' is not one: build your own once "
        "with "
        "rerank index mine --corpus FILE, and leave the [index] table out"]
    assert not (tmp_path / "home" / "runs" / "mine").exists()


def test_a_missing_index_of_another_back_end_than_the_index_table_builds(tmp_path, monkeypatch):
    """With `[index] backend = "lucene"` and a dense stage, the error said to "give the pipeline an [index] table",
    which it had: one table builds one back end."""
    from rerank.errors import MissingIndexError
    from rerank.pipeline import _check_index_there

    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    with pytest.raises(MissingIndexError) as raised:
        _check_index_there({"dataset": "vaswani", "index": {"backend": "lucene"}}, "dense")
    assert str(raised.value).endswith("build it with: rerank index vaswani --backend dense (the pipeline's [index] "
                                      "table builds its lucene index: one back end per pipeline)")
    with pytest.raises(MissingIndexError, match=r"--backend dense, or give the pipeline an \[index\] table$"):
        _check_index_there({"dataset": "vaswani"}, "dense")


def test_an_unfinished_dense_index_names_the_index_tables_encoder_in_its_rebuild_command(tmp_path, monkeypatch):
    """A stage without `encoder` searches with the one its index was built with, the [index] table's; the rebuild
    command for its unfinished index left that encoder out, so it would have rebuilt with the packaged MiniLM."""
    from rerank.errors import MissingIndexError
    from rerank.pipeline import _check_index_there

    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    (tmp_path / "indexes" / "vaswani" / "dense-mine").mkdir(parents=True)  # a build's folder, no manifest
    spec = {"dataset": "vaswani", "index": {"backend": "dense", "index_name": "mine", "encoder": "/models/tasb"}}
    with pytest.raises(MissingIndexError, match="rerank index vaswani --backend dense --index-name mine --encoder "
                                                "/models/tasb"):
        _check_index_there(spec, "dense", {"index_name": "mine"})


def test_an_unfinished_index_the_index_table_would_not_build_stops_the_pipeline_before_any_stage(rerank, tmp_path):
    """`[index]` builds a missing index only: with an index folder there but no manifest (copied in, not built by
    rerank), the check passed it and the error came after "bm25: running retrieve"."""
    home = tmp_path / "home"
    (home / "indexes" / "vaswani" / "lucene").mkdir(parents=True)
    spec = tmp_path / "unfinished.toml"
    spec.write_text('dataset = "vaswani"\n[index]\nbackend = "lucene"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n')
    done = rerank("run", str(spec), check=False, env={"RERANK_HOME": str(home)})
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "running" not in done.stderr
    assert "is not a complete lucene index" in done.stderr and "rerank index vaswani" in done.stderr


def test_a_number_written_as_an_integer_is_the_same_stage(tmp_path):
    """`mu = 50` and `mu = 50.0` fingerprinted differently: the same run was computed again under another name."""
    from rerank.pipeline import load_pipeline

    stages = []
    for mu in ("50", "50.0"):
        spec = tmp_path / f"p{mu}.toml"
        spec.write_text(f'dataset = "vaswani"\n[[stage]]\nname = "qld"\nkind = "retrieve"\nqld = true\nmu = {mu}\n')
        stages.append(load_pipeline(spec)["stage"][0])
    assert stages[0] == stages[1] and isinstance(stages[0]["mu"], float)


@pytest.mark.parametrize("text, message", [
    # a pipeline key after the first [[stage]]: TOML gives it to that stage
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nmeasures = ["MAP"]\n',
     "stage 'bm25': unknown key 'measures': measures is a pipeline key, and TOML gives every key below a "
     "[[stage]] line to that stage; move it above the first [[stage]]"),
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nsort = "MAP"\n',
     "stage 'bm25': unknown key 'sort': sort is a pipeline key"),
    # a stage key at the top: it sets nothing for the stages
    ('dataset = "vaswani"\nk = 100\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n',
     "unknown key 'k': k is a stage key; set it in each [[stage]] that takes it"),
    # command-line spellings
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nrm3 = true\nfb-terms = 5\n',
     "stage 'bm25': unknown key 'fb-terms': write it fb_terms"),
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n"--rm3" = true\n',
     "stage 'bm25': unknown key '--rm3': write it rm3 = true"),
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n"--k1" = 1.2\n',
     "stage 'bm25': unknown key '--k1': write it k1"),
    # an off switch spelt as a flag, with or without its dashes (only '--no-cache' was understood)
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n[[stage]]\nname = "s"\nkind = "score"\n'
     'input = "bm25"\nmodel = "minilm-bi"\nno-cache = true\n', "stage 's': unknown key 'no-cache': write it cache = false"),
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n[[stage]]\nname = "s"\nkind = "score"\n'
     'input = "bm25"\nmodel = "minilm-bi"\n"--no-cache" = true\n', "stage 's': unknown key '--no-cache': write it cache = false"),
    # misspellings
    ('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nrm3 = true\nfb_term = 5\n',
     "stage 'bm25': unknown key 'fb_term': did you mean fb_terms?"),
    ('dataset = "vaswani"\nmesures = ["MAP"]\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n',
     "unknown key 'mesures': did you mean measures?"),
    ('dataset = "vaswani"\n[[stages]]\nname = "bm25"\nkind = "retrieve"\n',
     "unknown key 'stages': did you mean [[stage]]?"),
    ('dataset = "vaswani"\n[stage]\nname = "bm25"\nkind = "retrieve"\n',
     "stage must be a list of [[stage]] tables: write [[stage]], with two brackets, above each stage"),
])
def test_a_misplaced_or_misspelt_key_says_what_to_write(tmp_path, text, message):
    """Unknown keys were named with the whole list of known ones, nothing more: `measures` written below a
    [[stage]] (where TOML puts it in that stage), `fb-terms` or `"--rm3"` spelt as on the command line, `fb_term`
    for fb_terms, `[[stages]]` ("a pipeline needs 'dataset' and at least one [[stage]]") or `[stage]` ("stage must
    be a list, not {...}") left the newcomer to find the difference."""
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "p.toml"
    spec.write_text(text)
    with pytest.raises(DataError) as caught:
        load_pipeline(spec)
    assert message in str(caught.value), str(caught.value)


def test_a_short_unknown_key_gets_no_guess(tmp_path):
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "p.toml"
    spec.write_text('dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\nkl = 1.2\n')
    with pytest.raises(DataError) as caught:
        load_pipeline(spec)
    assert "did you mean" not in str(caught.value) and "unknown key 'kl'; known: name, kind" in str(caught.value)


def test_leaderboard_mistakes_name_the_file_and_key(tmp_path):
    """A measure that cannot be read was reported without the file or its key (`cannot read measure 'nDCG10'`,
    exit status 2, as if typed after -m), and a pipeline whose every stage has `evaluate = false` was told
    "baseline None is not an evaluated stage (none)"."""
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "p.toml"
    stage = '[[stage]]\nname = "bm25"\nkind = "retrieve"\n'
    spec.write_text(f'dataset = "vaswani"\nmeasures = ["nDCG10"]\n{stage}')
    with pytest.raises(DataError, match=rf"^{spec}: measures: cannot read measure 'nDCG10'; try"):
        load_pipeline(spec)
    spec.write_text(f'dataset = "vaswani"\n{stage}evaluate = false\n')
    with pytest.raises(DataError) as caught:
        load_pipeline(spec)
    assert str(caught.value) == (f"{spec}: every stage has evaluate = false: the leaderboard needs at least one "
                                 "evaluated stage")


def test_a_pipeline_chooses_its_significance_tests_and_correction(rerank, tmp_path):
    """`tests` and `correction` in the file, as eval's --test and --correction; a test or correction it does not
    know is refused when the file is read."""
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "sig.toml"
    stages = ('[[stage]]\nname = "c5"\nkind = "candidates"\nk = 5\n'
              '[[stage]]\nname = "c1"\nkind = "candidates"\nk = 1\n')
    spec.write_text(f'dataset = "trecqa-dev"\ntests = ["wilcoxon"]\ncorrection = "none"\n{stages}')
    board = rerank("run", str(spec)).stdout
    assert board.endswith("(Wilcoxon signed-rank test, uncorrected, p < 0.05)\n")
    for top, message in (('tests = ["sign"]', "tests ['sign']: name one or more of t, randomization, wilcoxon"),
                         ("tests = []", "tests []: name one or more of"),
                         ('correction = "fdr"', "correction 'fdr' is not one of holm, bonferroni, none")):
        spec.write_text(f'dataset = "trecqa-dev"\n{top}\n{stages}')
        with pytest.raises(DataError, match=re.escape(f"{spec}: {message}")):
            load_pipeline(spec)


_TWO_CUTS = ('[[stage]]\nname = "c5"\nkind = "candidates"\nk = 5\n'
             '[[stage]]\nname = "c1"\nkind = "candidates"\nk = 1\n')


def test_run_options_override_the_leaderboard_keys_and_reuse_every_run(rerank, session_home, tmp_path):
    """Another baseline, measure, sort, test or correction for a finished experiment meant editing its file;
    `rerank run`'s -m, --baseline, --sort, --test and --correction override the file's keys for the leaderboard
    alone: every run is reused untouched, the leaderboard is eval's with those options on the saved runs, and the
    file's keys apply again when they are left out."""
    spec = tmp_path / "again.toml"
    spec.write_text(f'dataset = "trecqa-dev"\nmeasures = ["MRR"]\nbaseline = "c5"\ntests = ["t"]\n'
                    f'correction = "bonferroni"\n{_TWO_CUTS}')
    first = rerank("run", str(spec))
    folder = session_home / "runs" / "again"
    stamps = {run: (folder / run).stat().st_mtime_ns for run in ("c5.run", "c1.run")}
    options = ("-m", "MAP", "-m", "P@1", "--sort", "P@1", "--baseline", "c1", "--test", "wilcoxon",
               "--correction", "none")
    other = rerank("run", str(spec), *options)
    assert "running" not in other.stderr and other.stderr.count("up to date") == 2
    assert {run: (folder / run).stat().st_mtime_ns for run in stamps} == stamps  # no fingerprint changed
    lines = other.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "MAP", "P@1"] and lines[2].startswith("c1 (baseline)")
    assert other.stdout.endswith("than c1 (Wilcoxon signed-rank test, uncorrected, p < 0.05)\n")
    by_eval = rerank("eval", str(folder / "c5.run"), str(folder / "c1.run"), *options)
    assert other.stdout == by_eval.stdout
    assert rerank("run", str(spec)).stdout == first.stdout  # the file's keys again: nothing was written into it
    assert first.stdout.splitlines()[1].startswith("c5 (baseline)") and "(paired t-test, Bonferroni" in first.stdout


def test_run_measure_option_with_the_files_sort_and_per_query(rerank, tmp_path):
    """-m drops a file's `sort` that is not among the measures it gives (the default order, its first measure,
    instead of an error); with -q, --sort orders each run's queries as eval -q --sort does."""
    spec = tmp_path / "resort.toml"
    spec.write_text(f'dataset = "trecqa-dev"\nmeasures = ["MRR", "P@1"]\nsort = "P@1"\n{_TWO_CUTS}')
    rows = json.loads(rerank("run", str(spec), "-m", "MAP", "--format", "json").stdout)
    assert [row["run"] for row in rows] == ["c5", "c1"] and set(rows[0]) >= {"MAP"} and "P@1" not in rows[0]
    queries = json.loads(rerank("run", str(spec), "-q", "--baseline", "c1", "--sort", "MRR", "--format",
                                "json").stdout)
    gains = [row["MRR delta"] for row in queries if row["run"] == "c5" and row["qid"] != "all"]
    assert gains == sorted(gains, reverse=True) and gains[0] > 0 and gains[-1] == 0  # c5 vs c1: gains or ties


def test_run_options_stand_in_for_the_files_keys_that_they_override(rerank, tmp_path):
    """The file's keys were checked before the options replaced them: `-m MAP --sort MAP` over a file whose sort names
    a measure it does not give, or `--baseline c1` over one whose baseline is a stage since removed, were refused."""
    spec = tmp_path / "stale.toml"
    spec.write_text(f'dataset = "trecqa-dev"\nmeasures = ["MRR"]\nsort = "P@1"\nbaseline = "c9"\n{_TWO_CUTS}')
    refused = rerank("run", str(spec), check=False)
    assert refused.returncode == 1 and "baseline 'c9' is not an evaluated stage (c5, c1)" in refused.stderr
    board = rerank("run", str(spec), "--sort", "MRR", "--baseline", "c1").stdout
    assert board.splitlines()[2].startswith("c1 (baseline)")
    assert rerank("run", str(spec), "-m", "MAP", "--baseline", "c5").stdout.splitlines()[0].split()[:2] == ["run", "MAP"]


@pytest.mark.parametrize("c1_evaluated, options, message", [
    (True, ["--baseline", "c9"], "--baseline 'c9' names none of the pipeline's stages: c5, c1"),
    (False, ["--baseline", "c1"], "--baseline 'c1' is a stage with evaluate = false, not on the leaderboard; "
                                  "evaluated stages: c5"),
    (False, ["--baseline", "c9"], "--baseline 'c9' names none of the pipeline's evaluated stages: c5"),
    (True, ["-m", "nDCG10"], "cannot read measure 'nDCG10'; try MAP, MRR@10"),
    (True, ["--sort", "MAP"], "--sort 'MAP' is not one of the measures: MRR"),
    (True, ["-m", "P@1", "--sort", "MRR"], "--sort 'MRR' is not one of the measures: P@1"),
    (True, ["--test", "sign"], "Invalid value for '--test': 'sign' is not one of 't', 'randomization', 'wilcoxon'"),
    (True, ["--correction", "fdr"], "Invalid value for '--correction': 'fdr' is not one of 'holm', 'bonferroni', "
                                    "'none'"),
])
def test_run_leaderboard_options_are_refused_before_any_stage_runs(rerank, session_home, tmp_path, c1_evaluated,
                                                                     options, message):
    """A leaderboard option eval would refuse is refused by run in eval's words, one line and exit status 2,
    before any stage runs (not after an hour of them); a --baseline that is no stage lists the stages."""
    spec = tmp_path / "refused.toml"
    spec.write_text(f'dataset = "trecqa-dev"\nmeasures = ["MRR"]\n{_TWO_CUTS}'
                    f'{"" if c1_evaluated else "evaluate = false"}\n')  # the key of the last stage, c1
    done = rerank("run", str(spec), *options, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"rerank: error: {message}") and done.stderr.count("\n") == 1
    assert not (session_home / "runs" / "refused").exists()


def test_run_help_gives_evals_leaderboard_options_with_the_files_keys_as_defaults(rerank):
    """The options are eval's own definitions (one text for both commands), their defaults the file's keys."""
    run_help = " ".join(rerank("run", "--help").stdout.split())
    eval_help = " ".join(rerank("eval", "--help").stdout.split())
    for option, default in (("--baseline TEXT", "default: the file's `baseline`, else the first evaluated stage"),
                            ("--sort TEXT", "default: the file's `sort`, else the first that is not a count"),
                            ("--test [t|randomization|wilcoxon]", "default: the file's `tests`"),
                            ("--correction [holm|bonferroni|none]", "default: the file's `correction`, else holm"),
                            ("-m, --measure TEXT", "default: the file's `measures`")):
        assert option in run_help and option in eval_help and default in run_help
    shared = "MAP, MRR[@k], P@k, HITS@k, nDCG[@k], Recall@k, an ir_measures name (Rprec, Bpref)"
    assert shared in run_help and shared in eval_help


def test_an_index_table_cannot_build_an_elasticsearch_index(tmp_path):
    """`[index] backend = "elasticsearch"` built at $RERANK_ES_URL (or 127.0.0.1:9200), not at the stages'
    es_url, and only where this machine had no indexes/<dataset>/elasticsearch folder: on a second machine the
    server's index made every run fail with "pass --overwrite", which `rerank run` has not got."""
    from rerank.errors import UsageError
    from rerank.pipeline import load_pipeline

    spec = tmp_path / "es.toml"
    spec.write_text('dataset = "cacm"\n[index]\nbackend = "elasticsearch"\n[[stage]]\nname = "es"\nkind = "retrieve"\n'
                    'backend = "elasticsearch"\nes_url = "http://127.0.0.1:9277"\n')
    with pytest.raises(UsageError) as raised:
        load_pipeline(spec)
    assert str(raised.value) == (f"{spec}: [index] builds an index under indexes/ (lucene or dense); an "
                                 "Elasticsearch index lives on its server: build it once with rerank index cacm "
                                 "--backend elasticsearch --es-url URL, and leave the [index] table out")

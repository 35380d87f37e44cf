"""Bad input gets one clear line on stderr, a non-zero exit, no traceback and nothing half-written."""

import pytest

pytestmark = pytest.mark.data


def fails(rerank, *args, input=None, env=None, cwd=None, words: str) -> str:
    done = rerank(*args, input=input, env=env, cwd=cwd, check=False)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    assert words in done.stderr, done.stderr
    return done.stderr


def test_unknown_data_set_lists_names(rerank):
    fails(rerank, "retrieve", "nosuch", words="known: vaswani, cacm")
    fails(rerank, "data", "show", "nosuch", words="unknown data set 'nosuch'")


def test_an_unknown_data_set_exits_2_wherever_it_is_named(rerank, tmp_path):
    """`data show nosuch`, `retrieve nosuch` and `index nosuch` exited 1, `--dataset nosuch` and `--train nosuch` 2,
    as click exits for a value outside an option's choices: all 2 now, with one message."""
    (tmp_path / "a.run").write_text("1 Q0 d1 1 3.5 t\n")
    for args in (("data", "show", "nosuch"), ("retrieve", "nosuch"), ("index", "nosuch"),
                 ("eval", str(tmp_path / "a.run"), "--dataset", "nosuch"),
                 ("train", "bert", "--train", "nosuch", "-o", str(tmp_path / "ck"))):
        done = rerank(*args, check=False)
        assert done.returncode == 2 and "unknown data set 'nosuch'; known: vaswani, cacm" in done.stderr, args


def test_index_that_does_not_exist_says_how_to_build(rerank, tmp_path):
    error = fails(rerank, "retrieve", "trec-dl-2020", words="build it with: rerank index trec-dl-2020")
    assert "rerank retrieve trec-dl-2020 --candidates" in error  # its published BM25, not one over the pool
    assert "replay a candidate run shipped with trec-dl-2020 (bm25, bm25-rm3)" in error
    error = fails(rerank, "retrieve", "trecqa-dev", words="rerank retrieve trecqa-dev --candidates")
    assert "(candidates)" in error and "top-100" not in error  # a QA set's candidates are all its sentences
    (tmp_path / "one.tsv").write_text("1.4\tWhat ethnic group / race are Crip members ?\n")
    fails(rerank, "retrieve", "trecqa-dev", "--topics", str(tmp_path / "one.tsv"),  # the hint was lost
          words=f"rerank retrieve trecqa-dev --candidates --topics {tmp_path / 'one.tsv'}")


def test_a_mistaken_shard_count_is_said_before_any_server_is_reached(rerank):
    """It said 'cannot reach Elasticsearch' first: a user would start a server only to learn of the typo."""
    fails(rerank, "index", "vaswani", "--backend", "elasticsearch", "--shards", "0", "--es-url", "http://127.0.0.1:1",
          words="--shards must be at least 1, not 0")


def test_missing_files(rerank, tmp_path):
    fails(rerank, "eval", str(tmp_path / "nope.run"), words="run file not found")
    fails(rerank, "retrieve", "x", "--topics", str(tmp_path / "none.tsv"), words="file not found")
    fails(rerank, "--data-root", str(tmp_path / "nodata"), "data", "list", words="is not a folder")


def test_rerank_s_own_option_after_the_command_says_where_it_goes(rerank, tmp_path):
    """`rerank eval RUN --data-root DIR`, as the README's `--data-root DIR` reads: click said "No such option
    '--data-root'. Did you mean '--dataset'?", as if rerank had no such option."""
    fails(rerank, "eval", "x.run", "--data-root", str(tmp_path), words="rerank: error: --data-root is an option of "
          "rerank itself: give it before the command (rerank --data-root ... eval ...)")
    fails(rerank, "data", "list", f"--data-root={tmp_path}", words="(rerank --data-root ... data list ...)")
    fails(rerank, "eval", "--datax", "1", words="No such option '--datax'")  # others as click says them


def test_malformed_run_names_file_and_line(rerank, tmp_path):
    bad = tmp_path / "bad.run"
    bad.write_text("# dataset: \"vaswani\"\n1 Q0 a 1 2.0 t\n1 Q0 b 2 oops t\n")
    fails(rerank, "eval", str(bad), words=f"{bad}:3: score 'oops' is not a number")
    dup = tmp_path / "dup.run"
    dup.write_text("1 Q0 a 1 2.0 t\n1 Q0 a 2 1.0 t\n")
    fails(rerank, "cat", str(dup), words="duplicate document a for query 1")


def test_cat_of_nothing_is_an_error_not_a_run_that_looks_whole(rerank, tmp_path):
    """`rerank retrieve nosuch | rerank cat -o x.run` wrote `# rerank-run: 2` and `# end of run` from the nothing a
    failed stage left: a whole-looking empty run, which the end-of-run check exists to tell from a failure. Then an
    empty file and exit 0; now an error, as eval gives, and the -o file as it was."""
    (tmp_path / "x.run").write_text("1 Q0 a 1 1.0 t\n")
    for given in ("", "\n\n"):
        done = rerank("cat", "-o", str(tmp_path / "x.run"), input=given, check=False)
        assert done.returncode == 1 and done.stderr == ("rerank: error: empty input: <stdin> holds no run (did the "
                                                        "stage before it fail?)\n")
        assert (tmp_path / "x.run").read_text() == "1 Q0 a 1 1.0 t\n"
    (tmp_path / "empty.run").write_text("")
    fails(rerank, "cat", str(tmp_path / "empty.run"), "--msmarco", words=f"empty input: {tmp_path / 'empty.run'}")
    kept = rerank("cat", input='# rerank-run: 2\n# dataset: "vaswani"\n# end of run\n')  # a stage that found nothing
    assert kept.stdout == '# rerank-run: 2\n# dataset: "vaswani"\n# end of run\n'
    assert kept.stderr == "rerank: note: <stdin> holds no queries; nothing to write: the output is its header alone\n"


def test_file_that_is_not_utf8_text_is_named(rerank, tmp_path):
    binary = tmp_path / "image.run"
    binary.write_bytes(b"\xff\xd8\xff\xe0 not a run\n")
    for command in ("eval", "cat"):  # whole-run loader and streaming reader
        fails(rerank, command, str(binary), words=f"{binary}:1: not UTF-8 text")
    fails(rerank, "run", str(binary), words="not valid TOML")


def test_empty_input_and_unrelated_qrels(rerank, data_root, tmp_path):
    fails(rerank, "eval", "--qrels", str(data_root / "vaswani/qrels"), input="", words="empty input")
    (tmp_path / "other.run").write_text("zzz Q0 a 1 1.0 t\n")
    fails(rerank, "eval", str(tmp_path / "other.run"), "--qrels", str(data_root / "vaswani/qrels"),
          words="its one query is not judged")
    fails(rerank, "eval", str(tmp_path / "other.run"), words="pass --qrels FILE")
    (tmp_path / "own-topics.run").write_text('# topics: "mine.tsv"\n# index: "vaswani"\n1 Q0 a 1 1.0 t\n')
    fails(rerank, "eval", str(tmp_path / "own-topics.run"),
          words=f"pass --qrels FILE (if its topics are vaswani's, its qrels are {data_root / 'vaswani' / 'qrels'}), "
                "or --dataset NAME (a data set's queries)")


def test_runs_of_different_data_sets_are_not_scored_against_one_qrels(rerank, tmp_path):
    """CACM's and Vaswani's query ids overlap: the second run used to score 0 against the first's qrels."""
    for name in ("vaswani", "cacm"):
        (tmp_path / f"{name}.run").write_text(f'# dataset: "{name}"\n1 Q0 a 1 1.0 bm25\n')
    runs = [str(tmp_path / "vaswani.run"), str(tmp_path / "cacm.run")]
    for command in ("eval", "budget"):
        fails(rerank, command, *runs, words="the runs are of different data sets (")


def test_a_run_given_as_qrels_is_named_a_run(rerank, tmp_path):
    """`eval RUN --qrels OTHER.RUN` said only "expected 4 columns 'qid iter docid grade', found 6"; a qrels file given
    as a run has long been named one. A run rerank wrote starts with its '# rerank-run: 2' line, which was told only
    that it had 3 columns."""
    (tmp_path / "a.run").write_text("1 Q0 d1 1 2.5 bm25\n")
    hint = "its lines are a run's, 'qid Q0 docid rank score tag': give it as a run, and the qrels with --qrels"
    fails(rerank, "eval", str(tmp_path / "a.run"), "--qrels", str(tmp_path / "a.run"),
          words=f"{tmp_path / 'a.run'}:1: expected 4 columns 'qid iter docid grade', found 6; {hint}")
    (tmp_path / "ours.run").write_text(rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout)
    fails(rerank, "eval", str(tmp_path / "ours.run"), "--qrels", str(tmp_path / "ours.run"),
          words=f"{tmp_path / 'ours.run'}:1: expected 4 columns 'qid iter docid grade', found 3; {hint}")


def test_bad_measure_and_k(rerank, data_root):
    stream = rerank("retrieve", "cacm", "--candidates", check=False)  # cacm ships no runs
    assert stream.returncode != 0 and "ships no candidate runs; search it instead" in stream.stderr
    fails(rerank, "train", "tk", "--train", "vaswani", "-o", "never-written",  # not: "build an index"
          words="training reads candidate runs, and vaswani ships none: retrieve some")
    fails(rerank, "train", "tk", "--train", "trecqa-train", "--dev-fraction", "0.999", "-o", "never-written",
          words="--dev-fraction 0.999 holds out all")  # it said: no query with both relevant and non-relevant
    fails(rerank, "eval", "--qrels", str(data_root / "vaswani/qrels"), "-m", "Bogus@3",
          input="1 Q0 a 1 1.0 t\n", words="unknown measure 'Bogus@3'")
    fails(rerank, "eval", "--qrels", str(data_root / "vaswani/qrels"), "-m", "nDCG@0",  # trec_eval would abort()
          input="1 Q0 a 1 1.0 t\n", words="cannot read measure 'nDCG@0'")
    fails(rerank, "eval", "--qrels", str(data_root / "vaswani/qrels"), "--min-rel", "0",  # was taken as 1
          input="1 Q0 a 1 1.0 t\n", words="--min-rel must be between 1 and 2147483647, not 0")
    fails(rerank, "eval", "--qrels", "vaswani", input="1 Q0 a 1 1.0 t\n",  # trec_eval habits: was 'file not found'
          words=f"--qrels takes a file, not a data set's name (vaswani's is {data_root / 'vaswani' / 'qrels'})")
    fails(rerank, "retrieve", "vaswani", "--k", "0", words="--k must be a positive")
    fails(rerank, "retrieve", "vaswani", "--k1", "-1", words="--k1 must be >= 0 and at most 3.403e+38, not -1.0")
    fails(rerank, "retrieve", "vaswani", "--k1", "1e300", words="--k1 must be >= 0 and at most 3.403e+38, not 1e+300")
    fails(rerank, "retrieve", "vaswani", "--b", "1.5", words="--b must be in [0, 1], not 1.5")
    # another back end's options would be ignored, yet recorded in the header as if they had acted
    fails(rerank, "retrieve", "vaswani", "--ef-search", "3", words="--backend lucene does not take --ef-search")
    fails(rerank, "retrieve", "vaswani", "--backend", "dense", "--k1", "1.2", words="--backend dense does not take --k1")
    fails(rerank, "index", "vaswani", "--hnsw", "16", words="--backend lucene does not take --hnsw")
    fails(rerank, "retrieve", "vaswani", "--threads", "0", words="--threads must be between 1 and 32767, not 0")
    # above Java's ForkJoinPool limit, Anserini wrote no run, and the reason went to a log kept quiet
    fails(rerank, "retrieve", "vaswani", "--threads", "32768", words="--threads must be between 1 and 32767, not 32768")
    fails(rerank, "retrieve", "trec-dl-2019", "--candidates", "bm25", "--k", "0", words="--k must be a positive")
    fails(rerank, "retrieve", "trec-dl-2019", "--candidates", "--topics", str(data_root / "vaswani/query-text.trec"),
          words=f"{data_root / 'vaswani/query-text.trec'}: query 1 is not one of trec-dl-2019's (its id with the same "
                "words); --candidates replays trec-dl-2019's run for some of its own queries")


def test_failed_output_leaves_nothing_behind(rerank, tmp_path, session_home):
    target = tmp_path / "out.run"
    fails(rerank, "cat", "-o", str(target), input="1 Q0 a 1 2.0 t\n1 Q0 a 2 1.0 t\n", words="duplicate")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    nested = tmp_path / "new" / "folder" / "out.run"  # no folder is made for an output
    fails(rerank, "cat", "-o", str(nested), input="1 Q0 a 1 2.0 t\n",
          words=f"{tmp_path / 'new' / 'folder'} does not exist")
    assert list(tmp_path.iterdir()) == []
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "title": "T", "body": "x"}\n')  # the field that holds the text named as it is
    fails(rerank, "index", "halfway", "--corpus", str(corpus),
          words="record has no 'contents' or 'text' (its other keys: 'title', 'body')")
    assert not (session_home / "indexes" / "halfway").exists()
    corpus.write_text('{"id": "a", "contents": "x"}\n{"id": "a", "contents": "y"}\n')
    fails(rerank, "index", "twice", "--corpus", str(corpus), words="document id 'a' appears twice")
    assert not (session_home / "indexes" / "twice").exists()


def test_output_that_would_replace_an_input_file(rerank, vaswani_index, tmp_path):
    """`retrieve --topics q.tsv -o q.tsv` left a run where the topics were (its header naming that file as its
    topics), and `score --topics`/`--corpus` the same: the typo lost the user's file."""
    topics, corpus = tmp_path / "q.tsv", tmp_path / "docs.jsonl"
    topics.write_text("1\tmeasurement of dielectric constant of liquids\n")
    corpus.write_text('{"id": "5502", "contents": "dielectric constant"}\n')
    run = tmp_path / "bm25.run"
    rerank("retrieve", "vaswani", "--k", "3", "--topics", str(topics), "-o", str(run))
    fails(rerank, "retrieve", "vaswani", "--topics", str(topics), "-o", str(topics),
          words=f"-o {topics} is the --topics file; the run would replace it: give it another file")
    for option, path in (("--topics", topics), ("--corpus", corpus)):
        fails(rerank, "score", str(run), "--model", "minilm-bi", option, str(path), "-o", str(tmp_path / "." / path.name),
              words=f"-o {tmp_path / '.' / path.name} is the {option} file; the run would replace it")
    assert topics.read_text() == "1\tmeasurement of dielectric constant of liquids\n"
    assert corpus.read_text() == '{"id": "5502", "contents": "dielectric constant"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25.run", "docs.jsonl", "q.tsv"]


def test_output_that_cannot_be_written(rerank, tmp_path):
    """One line, not an OSError traceback; and train says so before it trains, not after."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fails(rerank, "cat", "-o", str(blocker / "out.run"), input="1 Q0 a 1 2.0 t\n", words=f"{blocker} is not a folder")
    fails(rerank, "train", "tk", "--train", "trec-dl-2020", "--steps", "500", "-o", str(blocker / "ck"),
          words="cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_bad_pipeline(rerank, tmp_path):
    spec = tmp_path / "p.toml"
    spec.write_text('dataset = "vaswani"\n[[stage]]\nname = "a"\nkind = "teleport"\n')
    fails(rerank, "run", str(spec), words="unknown kind 'teleport'")
    spec.write_text('dataset = "vaswani"\n[[stage]\n')
    fails(rerank, "run", str(spec), words="not valid TOML")
    stage = 'dataset = "vaswani"\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n'
    for extra, words in (('kl = 1.2\n', "stage 'bm25': unknown key 'kl'; known: name, kind"),  # a typo of k1
                         ('k = "lots"\n', "stage 'bm25': k must be an integer, not 'lots'")):
        spec.write_text(stage + extra)
        fails(rerank, "run", str(spec), words=words)
    spec.write_text(stage.replace('"bm25"', '"../bm25"'))  # the name becomes a file name under runs/
    fails(rerank, "run", str(spec), words="name '../bm25' must be one word")
    for extra, words in (('measures = ["nDCG@x"]\n', "cannot read measure 'nDCG@x'"),  # before any stage runs
                         ('baseline = "bm99"\n', "baseline 'bm99' is not an evaluated stage (bm25)"),
                         ('measures = ["MAP"]\nsort = "P@5"\n', "sort 'P@5' is not one of the measures: MAP")):
        spec.write_text(extra + stage)
        assert "running" not in fails(rerank, "run", str(spec), words=words)
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\n'
                    '[[stage]]\nname = "s"\nkind = "score"\ninput = "c"\nmodel = "minilm-bi"\ncompile = true\n')
    fails(rerank, "run", str(spec), words="stage 's': compile is an option of bert only, not minilm-bi")
    spec.write_text(spec.read_text().replace("compile = true", 'device = "cuda"'))  # a pipeline's GPU score stage
    fails(rerank, "run", str(spec), words="stage 's': device is an option of bert only, not minilm-bi")


def test_java_settings_that_cannot_work(rerank, vaswani_index):
    fails(rerank, "retrieve", "vaswani", env={"RERANK_JVM_HEAP": "lots"}, words="is not a heap size like 4g")
    done = rerank("retrieve", "vaswani", env={"RERANK_JVM_HEAP": "900000g"}, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "Could not reserve enough space" in done.stderr  # the JVM's own reason, then it exits


def test_model_option_must_be_key_value(rerank, tmp_path):
    fails(rerank, "train", "tk", "--train", "trec-dl-2020", "-O", "projection", "-o", str(tmp_path / "ck"),
          words="--model-option wants KEY=VALUE, not 'projection'")
    assert not (tmp_path / "ck").exists()
    fails(rerank, "train", "tk", "--train", "trec-dl-2020", "--lr", "-0.001", "-o", str(tmp_path / "ck"),
          words="--lr must be positive and finite, not -0.001")
    assert not (tmp_path / "ck").exists()
    (tmp_path / "notes.txt").write_text("mine")  # a folder of the user's own: refused before any training
    fails(rerank, "train", "tk", "--train", "trec-dl-2020", "-o", str(tmp_path), words="refusing to replace it")
    assert (tmp_path / "notes.txt").read_text() == "mine"
    # '' was taken for the working directory: ". is a folder with other files in it"
    fails(rerank, "train", "tk", "--train", "trec-dl-2020", "-o", "", words="the output path is empty")


@pytest.mark.parametrize("args, words", [
    (["score", "--model", "minilm-bi", "-o", "{tmp}"], "Invalid value for '-o' / '--output': File '{tmp}' is a directory"),
    (["eval", "--nosuch"], "No such option '--nosuch'"),
    (["average", "a", "b", "-o", "{tmp}/f"], "Directory '{tmp}/f' is a file"),
])
def test_mistyped_options_get_one_line_too(rerank, tmp_path, args, words):
    """click printed its usage block (four lines) for these, unlike every other mistake."""
    (tmp_path / "f").write_text("")
    stderr = fails(rerank, *[a.format(tmp=tmp_path) for a in args], input="", words=words.format(tmp=tmp_path))
    assert stderr.count("\n") == 1 and stderr.startswith("rerank: error: ") and "--help" in stderr


def test_stdin_that_is_not_utf8_text_is_named(data_root, tmp_path):
    """Python reads stdin with surrogateescape, so a gzipped run piped in gave eval a UnicodeEncodeError
    traceback and cat 'expected 6 columns' on line 1, where a named file is 'not UTF-8 text'. Gzip and UTF-16
    are named as such (a named file of either is read)."""
    import gzip
    import os
    import subprocess
    import sys

    packed = tmp_path / "run.gz"
    packed.write_bytes(gzip.compress(b"1 Q0 a 1 2.5 t\n"))
    env = {**os.environ, "RERANK_HOME": str(tmp_path), "RERANK_DATA": str(data_root)}
    for command in (["eval", "--qrels", str(data_root / "vaswani/qrels")], ["cat"]):
        with open(packed, "rb") as stdin:
            done = subprocess.run([sys.executable, "-m", "rerank", *command], stdin=stdin, capture_output=True,
                                  text=True, env=env, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines() == [
            "rerank: error: <stdin>:1: not UTF-8 text (invalid start byte): it is gzip-compressed; give its file name "
            "instead of piping it, or gunzip it first"]
    with open(tmp_path / "utf16.run", "wb") as handle:
        handle.write("1 Q0 a 1 2.5 t\n".encode("utf-16"))
    with open(tmp_path / "utf16.run", "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "rerank", "cat"], stdin=stdin, capture_output=True, text=True,
                              env=env, cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "rerank: error: <stdin>:1: not UTF-8 text (invalid start byte): it is UTF-16; give its file name instead of "
        "piping it, or convert it first (iconv -f UTF-16 -t UTF-8)"], done.stderr


def test_measure_parameters_pytrec_eval_cannot_take(rerank, data_root):
    """rel=0 and cutoffs beyond a C long were tracebacks from inside pytrec_eval (TypeError, KeyError)."""
    qrels = str(data_root / "vaswani/qrels")
    for name, words in (("AP(rel=0)", "rel must be between 1 and 2147483647, not 0"),
                        ("P(rel=2147483648)@5", "rel must be between 1 and 2147483647, not 2147483648"),
                        ("P@9223372036854775808", "a cutoff must be at most 2147483647")):
        fails(rerank, "eval", "--qrels", qrels, "-m", name, input="1 Q0 a 1 1.0 t\n", words=words)


def test_min_rel_above_what_pytrec_eval_takes(rerank, data_root, tmp_path):
    """--min-rel 2147483648 was a TypeError traceback from inside pytrec_eval (a C int)."""
    fails(rerank, "eval", "--qrels", str(data_root / "vaswani/qrels"), "--min-rel", "2147483648",
          input="1 Q0 a 1 1.0 t\n", words="--min-rel must be between 1 and 2147483647, not 2147483648")
    (tmp_path / "mine.run").write_text('# dataset: "vaswani"\n1 Q0 a 1 1.0 t\n')
    fails(rerank, "train", "bert", "--candidates", str(tmp_path / "mine.run"), "--min-rel", "2147483648",
          "-o", str(tmp_path / "ck"), words="--min-rel must be between 1 and 2147483647")
    assert not (tmp_path / "ck").exists()


def test_pipeline_min_rel_is_checked_before_any_stage_runs(rerank, vaswani_index, tmp_path):
    """min_rel = 0 was refused only at the leaderboard, after every stage had run (and 2^31 was a traceback)."""
    spec = tmp_path / "p.toml"
    for value in ("0", "2147483648"):
        spec.write_text(f'dataset = "vaswani"\nmin_rel = {value}\n[[stage]]\nname = "bm25"\nkind = "retrieve"\n')
        error = fails(rerank, "run", str(spec), words=f"min_rel must be between 1 and 2147483647, not {value}")
        assert "running" not in error


def test_pipeline_score_threads_and_length_are_checked_before_any_stage_runs(rerank, tmp_path):
    """threads = 0 on a score stage was refused only when its model loaded, after every stage before it had run."""
    ck, spec = tmp_path / "ck", tmp_path / "p.toml"
    rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "-o", str(ck))
    for value in ("0", "1025"):
        spec.write_text(f'dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\n[[stage]]\nname = "s"\n'
                        f'kind = "score"\ninput = "c"\nmodel = "tk"\ncheckpoint = "{ck}"\nthreads = {value}\n')
        error = fails(rerank, "run", str(spec), words=f"threads must be between 1 and 1024, not {value}")
        assert "running" not in error
    # minilm-bi's max_length past its 512 positions was refused likewise, when the model loaded
    spec.write_text('dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\n[[stage]]\nname = "s"\n'
                    'kind = "score"\ninput = "c"\nmodel = "minilm-bi"\nmax_length = 513\n')
    error = fails(rerank, "run", str(spec), words="max_length must be between 1 and 512 (the model's positions), not 513")
    assert "running" not in error


def test_qrels_grade_beyond_a_c_int_is_refused(rerank, tmp_path):
    """pytrec_eval keeps grades in C ints: a grade of 4294967296 was judged non-relevant (0), silently."""
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 1\n1 0 b 4294967296\n")
    fails(rerank, "eval", "--qrels", str(qrels), input="1 Q0 b 1 2.0 t\n1 Q0 a 2 1.0 t\n",
          words=f"{qrels}:2: grade 4294967296 is out of range")


def test_qrels_grade_that_trec_evals_code_cannot_count_up_to_is_refused(rerank, tmp_path):
    """trec_eval's code keeps a counter for every grade up to a query's highest: a grade of 2147483647 asked
    pytrec_eval for 16 GiB, and where that could not be had, every query from there on scored 0, silently
    (trec_eval itself says "Can't calculate measure"). Grades beyond a million are refused."""
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 1\n1 0 b 1000001\n")
    fails(rerank, "eval", "--qrels", str(qrels), input="1 Q0 b 1 2.0 t\n1 Q0 a 2 1.0 t\n",
          words=f"{qrels}:2: grade 1000001 is out of range (-2147483647 to 1000000)")
    qrels.write_text("1 0 a 1\n1 0 b 1000000\n")
    assert rerank("eval", "--qrels", str(qrels), "-m", "P@2", input="1 Q0 b 1 2.0 t\n1 Q0 a 2 1.0 t\n").stdout \
        .splitlines()[1].split()[1] == "1.0000"


def test_budget_plot_that_cannot_be_written_leaves_no_report(rerank, tmp_path):
    """The report was written to -o first, then the plot failed: an error exit with the report left behind."""
    run = tmp_path / "bm25.run"
    run.write_text('# dataset: "vaswani"\n# time: 1 bm25 2.0 1\n1 Q0 8172 1 2.0 bm25\n')
    fails(rerank, "budget", str(run), "-o", str(tmp_path / "report.txt"), "--plot", str(run / "plot.png"),
          words=f"{run} is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25.run"]


def test_budget_report_and_plot_into_one_file(rerank, tmp_path):
    """-o X --plot X: the plot silently replaced the report."""
    run = tmp_path / "bm25.run"
    run.write_text('# dataset: "vaswani"\n# time: 1 bm25 2.0 1\n1 Q0 8172 1 2.0 bm25\n')
    fails(rerank, "budget", str(run), "-o", str(tmp_path / "out"), "--plot", str(tmp_path / "." / "out"),
          words="-o and --plot are both")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25.run"]


def test_budget_title_without_a_plot(rerank, tmp_path):
    """--title without --plot was ignored: the user got a report and no plot, and no word why."""
    run = tmp_path / "bm25.run"
    run.write_text('# dataset: "vaswani"\n# time: 1 bm25 2.0 1\n1 Q0 8172 1 2.0 bm25\n')
    fails(rerank, "budget", str(run), "--title", "BM25 on Vaswani", words="--title is the plot's title: give --plot")


def test_closed_standard_output(data_root, tmp_path):
    """`rerank cat RUN >&-` was an AttributeError traceback ('NoneType' object has no attribute 'write'), and
    `rerank eval RUN >&-` printed nothing and exited 0."""
    import os
    import subprocess
    import sys

    run = tmp_path / "a.run"
    run.write_text("1 Q0 8172 1 2.0 t\n")
    env = {**os.environ, "RERANK_HOME": str(tmp_path), "RERANK_DATA": str(data_root)}
    for command in (["cat", str(run)], ["eval", "--qrels", str(data_root / "vaswani/qrels"), str(run)]):
        done = subprocess.run([sys.executable, "-m", "rerank", *command], stderr=subprocess.PIPE, text=True,
                              env=env, cwd=tmp_path, preexec_fn=lambda: os.close(1))
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("rerank: error: standard output is closed")
        assert "Traceback" not in done.stderr


def test_records_after_the_end_line_are_refused(rerank, tmp_path):
    """A plain run appended to a finished one (`cat a.run b.trec`) was merged into the first run's queries:
    eval scored the mixture, silently."""
    joined = tmp_path / "joined.run"
    joined.write_text('# rerank-run: 2\n# dataset: "vaswani"\n1 Q0 8172 1 2.0 bm25\n# end of run\n'
                      "1 Q0 5502 1 9.0 other\n")
    whole = tmp_path / "whole.run"  # fuse's second run (one run given twice is refused first)
    whole.write_text('# rerank-run: 2\n# dataset: "vaswani"\n1 Q0 8172 1 2.0 bm25\n# end of run\n')
    for command in ("eval", "cat", "fuse"):
        extra = [str(whole)] if command == "fuse" else []
        fails(rerank, command, str(joined), *extra, words=f"{joined}:5: a record after the '# end of run' line")


def test_seed_beyond_torch_range(rerank, tmp_path):
    """--seed 2^64 was an overflow traceback from torch.manual_seed, after the data had been read."""
    fails(rerank, "train", "tk", "--train", "trecqa-dev", "--steps", "1", "--seed", str(2**64),
          "-o", str(tmp_path / "ck"), words="--seed must be between -2^63 and 2^64-1")
    assert not (tmp_path / "ck").exists()


def test_damaged_checkpoint_json_is_one_line(rerank, tmp_path):
    """A checkpoint.json that is not UTF-8 was a UnicodeDecodeError traceback, and one holding a JSON list an
    AttributeError, from every command that reads a checkpoint."""
    folder = tmp_path / "ck"
    folder.mkdir()
    for content, words in ((b"\x9c\xff{}", "checkpoint.json is corrupt (not JSON); retrain or copy it again"),
                           (b"[]", "checkpoint.json is corrupt (not a JSON object); retrain or copy it again")):
        (folder / "checkpoint.json").write_bytes(content)
        fails(rerank, "score", "--model", "tk", "--checkpoint", str(folder), input="", words=f"{folder}/{words}")


def test_damaged_index_and_encodings_manifests_are_one_line(rerank, tmp_path, session_home):
    """An index's rerank-index.json that was not JSON, not UTF-8 or a JSON list was a traceback from retrieve
    (JSONDecodeError, UnicodeDecodeError, TypeError); stored encodings' manifest.json, one of the latter two."""
    from rerank.encodings import read_manifest
    from rerank.errors import DataError

    corpus, topics = tmp_path / "docs.jsonl", tmp_path / "q.tsv"
    corpus.write_text('{"id": "a", "contents": "hello world"}\n')
    topics.write_text("1\thello\n")
    rerank("index", "damaged", "--corpus", str(corpus))
    manifest = session_home / "indexes" / "damaged" / "lucene" / "rerank-index.json"
    for content, what in ((b"{bad", "not JSON"), (b"\x9c\xff", "not JSON"), (b"[]", "not a JSON object")):
        manifest.write_bytes(content)
        fails(rerank, "retrieve", "damaged", "--topics", str(topics),
              words=f"{manifest} is corrupt ({what}); remove {manifest.parent} and rebuild it with: rerank index damaged")
    (tmp_path / "manifest.json").write_bytes(b"[]")
    with pytest.raises(DataError, match="manifest.json is corrupt .not a JSON object.; delete"):
        read_manifest(tmp_path)


def test_encode_name_must_be_a_plain_folder_name(rerank, tmp_path, session_home):
    """`rerank encode ../x` wrote its encodings outside indexes/ (rerank index refuses such names)."""
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "contents": "x"}\n')
    fails(rerank, "encode", "../escaped", "--model", "tk", "--checkpoint", str(tmp_path / "ck"), "--corpus", str(corpus),
          words="index name '../escaped' must be a plain folder name")
    assert not (session_home / "escaped").exists()


@pytest.mark.parametrize("ms", ["inf", "nan", "-5"])
def test_time_lines_that_no_budget_can_use(rerank, tmp_path, ms):
    """`# time: 1 bm25 inf 1` was an OverflowError traceback in budget; nan and negative times went into its
    medians silently."""
    run = tmp_path / "timed.run"
    run.write_text(f'# dataset: "vaswani"\n# time: 1 bm25 {ms} 1\n1 Q0 8172 1 2.0 bm25\n')
    for command in ("budget", "cat"):
        fails(rerank, command, str(run), words=f"{run}:2: a time must be finite and not negative")


def test_header_field_that_is_not_a_string(rerank, tmp_path):
    """`# dataset: ["vaswani"]` was a TypeError traceback (unhashable type) in eval and budget, `# qrels: 5` one
    from pathlib."""
    run = tmp_path / "edited.run"
    for line in ('# dataset: ["vaswani"]', "# qrels: 5"):
        run.write_text(f"{line}\n1 Q0 8172 1 2.0 bm25\n")
        for command in ("eval", "budget"):
            fails(rerank, command, str(run), words=f"{run}:1: '{line.split(':')[0]}:' must be a JSON string")


def test_stage_name_that_is_not_a_string(rerank, tmp_path):
    """A hand-edited `# stage: {"name": [1]}` was an 'unhashable type' traceback in budget; a fused input's
    stage named so, another one in budget's cache warning."""
    run = tmp_path / "edited.run"
    run.write_text('# dataset: "vaswani"\n# stage: {"stage": "score", "cache": true, "name": [1]}\n'
                   "1 Q0 8172 1 2.0 bm25\n")
    fails(rerank, "budget", str(run), words=f"{run}:2: a '# stage:' line's name must be a JSON string, not [1]")
    run.write_text('# dataset: "vaswani"\n# stage: {"name": "f", "inputs": [{"stages": [{"stage": "score", '
                   '"cache": true, "name": {"x": 1}}]}]}\n# time: 1 f 2.0 1\n1 Q0 8172 1 2.0 f\n')
    done = rerank("budget", str(run))
    assert "Traceback" not in done.stderr and "stage {'x': 1} ran with the score cache on" in done.stderr


def test_stdin_named_twice(rerank, data_root):
    """`rerank eval - -` read stdin twice and called the second, drained, an empty input (fuse refused it)."""
    for command in ("eval", "budget"):
        fails(rerank, command, "-", "-", input="1 Q0 a 1 1.0 t\n", words="only one of the runs can come from stdin")


def test_average_replaces_a_checkpoint_only_with_overwrite(rerank, tmp_path, tensor_checkpoints):
    """As train -o: `rerank average A B -o SOUP` silently replaced the checkpoint in SOUP, which runs name by hash."""
    tensor_checkpoints(a=1.0, b=3.0)
    a, b, soup = (str(tmp_path / name) for name in ("a", "b", "soup"))
    rerank("average", a, b, "-o", soup)
    before = (tmp_path / "soup" / "checkpoint.json").read_text()
    fails(rerank, "average", a, b, "-o", soup, words="holds a checkpoint already; pass --overwrite")
    assert (tmp_path / "soup" / "checkpoint.json").read_text() == before
    rerank("average", a, b, "-o", soup, "--overwrite")


def test_average_of_a_checkpoint_with_itself_is_refused(rerank, tmp_path, tensor_checkpoints):
    """`rerank average CK CK` wrote CK's weights again as a soup: averaging a checkpoint with itself changes
    nothing. Refused as eval refuses a run given twice, under another spelling of its folder or as a copy too."""
    import shutil

    tensor_checkpoints(a=1.0, b=3.0)
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    once = "give each checkpoint once (averaging one with itself changes nothing)"
    for twice, words in ((("a", "a"), "checkpoint a is given twice"),
                         (("a", "b", "./a"), "checkpoint ./a is given twice"),
                         (("a", "copy"), "checkpoints a and copy are one checkpoint (the same files, hash ")):
        said = fails(rerank, "average", *twice, "-o", "soup", words=f"rerank: error: {words}", cwd=tmp_path)
        assert said.endswith(f"; {once}\n") and len(said.splitlines()) == 1
    assert not (tmp_path / "soup").exists()


def test_average_into_a_folder_inside_a_checkpoint_is_refused(rerank, tmp_path, tensor_checkpoints):
    """`rerank average A B -o A/soup` wrote the soup's files into A, whose content hash covers every file under it:
    A was refused from then on as changed since written."""
    tensor_checkpoints(a=1.0, b=3.0, c=5.0)
    # c is no ingredient: a soup written into it spoiled it all the same
    for inside in ("a", "c"):
        before = (tmp_path / inside / "checkpoint.json").read_text()
        fails(rerank, "average", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / inside / "soup"),
              words=f"{tmp_path / inside / 'soup'} is inside the checkpoint {tmp_path / inside}")
        assert sorted(p.name for p in (tmp_path / inside).iterdir()) == ["checkpoint.json", "weights.pt"]
        assert (tmp_path / inside / "checkpoint.json").read_text() == before


def test_ctrl_c_while_the_commands_load_is_one_line(tmp_path):
    """Ctrl-C in a command's first second (a busy machine's imports of ir_measures, pyarrow, ...) was a
    KeyboardInterrupt traceback through the imports, not 'rerank: interrupted' and exit 130. The SIGINT here is
    real, sent to the process as the commands' module starts to load."""
    import subprocess
    import sys

    interrupted_while_loading = """
import os, signal, sys

class SigintOnLoad:
    def find_spec(self, name, path=None, target=None):
        if name == "rerank.cli.commands":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, SigintOnLoad())
sys.argv = ["rerank", "cat", "-"]
from rerank.cli import main
main()
"""
    done = subprocess.run([sys.executable, "-c", interrupted_while_loading], capture_output=True, text=True,
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (130, "rerank: interrupted\n")


def test_ctrl_c_in_a_command_is_one_line_in_a_log_and_ends_the_terminal_s_line(tmp_path, data_root):
    """Ctrl-C while `rerank cat -` waits for its input: click wrote an empty line before 'rerank: interrupted',
    which closes a terminal's ^C echo but stood as a blank line in a log. On a terminal the line is still ended."""
    import os
    import pty
    import subprocess
    import sys
    from pathlib import Path

    from signals import signal_when_ready

    def interrupted(stderr) -> str:
        process = subprocess.Popen([sys.executable, "-m", "rerank", "cat", "-"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=stderr, text=True, cwd=tmp_path,
                                   env={**os.environ, "RERANK_DATA": str(data_root)})
        wchan = Path(f"/proc/{process.pid}/wchan")  # the kernel's word for where it waits: reading its stdin
        said = signal_when_ready(process, lambda: "pipe_read" in wchan.read_text(), "SIGINT", "rerank cat -")
        assert process.returncode == 130
        return said

    assert interrupted(subprocess.PIPE) == "rerank: interrupted\n"
    terminal, its_stderr = pty.openpty()
    interrupted(its_stderr)
    os.close(its_stderr)
    assert os.read(terminal, 1000) == b"\r\nrerank: interrupted\r\n"  # the pty's line ends
    os.close(terminal)


def test_topics_or_corpus_from_a_pipe_are_named_as_a_pipe(rerank, tmp_path):
    """`--topics <(...)` said 'data set custom is not present: missing /dev/fd/63', a file that was there; such
    files are read twice (their format is told from their start), so a pipe is refused, saying why."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: anything that opened it would hang
    for args in (["retrieve", "vaswani", "--topics", str(fifo)], ["index", "mine", "--corpus", str(fifo)]):
        stderr = fails(rerank, *args, words=f"{fifo} is not a regular file")
        assert len(stderr.strip().splitlines()) == 1, stderr
    # score --corpus <(...) said 'corpus file not found: /dev/fd/63'
    (tmp_path / "topics.tsv").write_text("1\tneural ranking\n")
    fails(rerank, "score", "--model", "minilm-bi", "--topics", str(tmp_path / "topics.tsv"), "--corpus", str(fifo),
          input="1 Q0 d1 1 1.0 t\n", words=f"{fifo} is not a regular file")
    # training records a run file's sha256 and reads it again: each of its run options said "not found"
    for option in ("--candidates", "--teacher", "--dev"):
        fails(rerank, "train", "tk", "--train", "trecqa-dev", option, str(fifo), "-o", str(tmp_path / "ck"),
              words=f"{option} {fifo} is not a regular file (a pipe?)")
    assert not (tmp_path / "ck").exists()


@pytest.mark.data
def test_an_empty_stage_name_is_refused_as_fuse_refuses_it(rerank):
    """`retrieve --name ''` and `score --name ''` took the empty name for none and wrote the default tag; `fuse
    --name ''` was refused. All three refuse it."""
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    for args, given in ((("retrieve", "trecqa-dev", "--candidates", "--name", ""), None),
                        (("score", "--model", "minilm-bi", "--no-cache", "--name", ""), candidates)):
        refused = rerank(*args, input=given, check=False)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert refused.stderr.splitlines()[-1] == "rerank: error: stage name '' must be one word (it becomes the run " \
                                                  "tag and timing label)", refused.stderr


@pytest.mark.data
def test_significance_options_without_a_comparison_are_refused(rerank, data_root):
    """`eval RUN --test t` (one run) and `eval A B -q --correction none` ignored the option without a word: a table
    without marks then read as 'no significant difference'."""
    run = str(data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt")
    qrels = str(data_root / "trec-dl" / "qrels" / "qrels.dl19-passage.txt")
    one = rerank("eval", run, "--qrels", qrels, "--test", "t", check=False)
    assert one.returncode == 2 and one.stdout == "" and one.stderr == (
        "rerank: error: --test marks differences between several runs on a leaderboard; one run has no baseline to "
        "test against\n")
    per_query = rerank("eval", f"A={run}", f"B={run}", "--qrels", qrels, "-q", "--correction", "none", check=False)
    assert per_query.returncode == 2 and "--per-query shows differences without tests" in per_query.stderr
    assert rerank("eval", f"A={run}", f"B={run}", "--qrels", qrels, "--test", "t", "-m", "MAP").returncode == 0
    twice = rerank("eval", run, run, "--qrels", qrels, check=False)  # said: two runs are named 'P:P' (P, P)
    assert twice.returncode == 2 and twice.stderr == f"rerank: error: run {run} is given twice; give it once, or " \
                                                     f"label the copies (A={run})\n"


def test_a_reader_that_stops_early_ends_every_command_quietly_and_alike(rerank, data_root, session_home, tmp_path):
    """A closed pipe (`rerank cat X | head -1`) ended cat, fuse and retrieve with exit 1 (click's rule, met before
    rerank's own), eval and budget with 0 where their one write was cut short, 1 where it was refused whole: every
    command now stops quietly with 0. The pipe's reading end is closed here before the command writes at all."""
    import os
    import subprocess
    import sys

    replayed = [rerank("retrieve", "trec-dl-2019", "--candidates", run, "-o", str(tmp_path / f"{run}.run")).returncode
                for run in ("bm25", "bm25-rm3")]
    assert replayed == [0, 0]
    bm25, rm3 = str(tmp_path / "bm25.run"), str(tmp_path / "bm25-rm3.run")
    env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    for args in (("cat", bm25), ("fuse", bm25, rm3), ("retrieve", "trec-dl-2019", "--candidates"), ("eval", bm25, "-q"),
                 ("budget", bm25, "--zero-untimed"), ("eval", "--help")):
        process = subprocess.Popen([sys.executable, "-m", "rerank", *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        process.stdout.close()  # the reader gone, as `head` is once it has its lines
        stderr = process.stderr.read()
        assert (process.wait(), stderr) == (0, ""), args


def test_numbers_in_other_scripts_digits_are_refused_as_trec_eval_cannot_read_them(rerank, tmp_path):
    """Python's int() and float() read Arabic-Indic '٣' and fullwidth '３' as 3, where trec_eval's atoi and atof
    read no digits: a grade, score or rank so written was taken at its face value here and as 0 by trec_eval."""
    run, qrels = tmp_path / "a.run", tmp_path / "qrels.txt"
    run.write_text("1 Q0 d1 1 3.5 t\n1 Q0 d2 2 1.0 t\n")
    qrels.write_text("1 0 d1 ٣\n")
    hint = "(its digits must be ASCII 0-9: trec_eval reads others as no digits)"
    fails(rerank, "eval", str(run), "--qrels", str(qrels), words=f"{qrels}:1: grade '٣' is not an integer {hint}")
    qrels.write_text("1 0 d1 3\n")
    for line, said in (("1 Q0 d2 2 １.0 t", "score '１.0' is not a number"), ("1 Q0 d2 ٢ 1.0 t", "rank '٢' is not an integer")):
        run.write_text(f"1 Q0 d1 1 3.5 t\n{line}\n")
        for command in (("eval", "--qrels", str(qrels)), ("cat",)):  # whole-run loader and streaming reader
            fails(rerank, command[0], str(run), *command[1:], words=f"{run}:2: {said} {hint}")
    (tmp_path / "m.run").write_text("1 d1 ٢\n")
    fails(rerank, "cat", "--msmarco", str(tmp_path / "m.run"), words=f"rank '٢' is not a whole number from 0 up {hint}")


def test_a_file_given_in_another_s_place_is_named_for_what_it_is(rerank, data_root, tmp_path):
    """A qrels file given as --topics was told only that its line was no 'qid<TAB>query text' (with tabs, to cut its
    columns); a run file given for a data set, only that no data set is named so; TREC DL's candidates JSON given as
    a run, only that its line had 1 column. Each error now says what the file looks like."""
    qrels, run = data_root / "vaswani" / "qrels", tmp_path / "a.run"
    run.write_text("1 Q0 d1 1 3.5 t\n")
    (tmp_path / "tabs.txt").write_text("1\t0\td1\t3\n")
    judgements = "its lines are judgements (qrels), 'qid iter docid grade', not topics"
    fails(rerank, "retrieve", "vaswani", "--topics", str(qrels), words=f"{qrels}:1: expected 'qid<TAB>query text'; "
                                                                       f"{judgements}")
    tabs = fails(rerank, "retrieve", "vaswani", "--topics", str(tmp_path / "tabs.txt"), words=f"4 columns; {judgements}")
    assert "cut -f1,2" not in tabs
    fails(rerank, "retrieve", "vaswani", "--topics", str(run), words="its lines are a run's, 'qid Q0 docid rank score "
                                                                      "tag', not topics")
    for args in (("retrieve", str(run)), ("eval", str(run), "--dataset", str(run))):
        fails(rerank, *args, words=f"unknown data set {str(run)!r} (it is a run file, not a data set); known: vaswani")
    fails(rerank, "index", str(qrels), words=f"unknown data set {str(qrels)!r} (it is a qrels file, not a data set)")
    candidates = data_root / "trec-dl" / "bm25" / "retrieve_results_dl19.json"
    fails(rerank, "eval", str(candidates), words="found 1 (a JSON list, as TREC DL's candidates with their texts are, "
                                                 "[{query, hits}]? rerank retrieve NAME --candidates replays a data set's)")


def test_an_output_inside_a_checkpoint_that_lists_no_files_is_refused(rerank, tmp_path, tensor_checkpoints):
    """A checkpoint written before checkpoints listed their files is hashed over every file in its folder: a run or
    report written there (`score -o CK/scored.run`) had it refused as changed from then on. Such an output is refused
    now, and the checkpoint still reads; one that lists its files takes the output and still reads too."""
    import json

    from rerank.checkpoint import CHECKPOINT_FILE, read_checkpoint

    tensor_checkpoints(listed=1.0, unlisted=2.0)
    manifest = json.loads((tmp_path / "unlisted" / CHECKPOINT_FILE).read_text())
    del manifest["files"]  # as one written before the list
    (tmp_path / "unlisted" / CHECKPOINT_FILE).write_text(json.dumps(manifest))
    read_checkpoint(str(tmp_path / "unlisted"), None)
    run = tmp_path / "a.run"
    run.write_text("q1 Q0 d1 1 2.0 tag\n")
    for command in (["cat", str(run)], ["budget", str(run)]):
        output = tmp_path / "unlisted" / "x.txt"
        done = rerank(*command, "-o", str(output), check=False)
        assert done.returncode == 2 and done.stderr == (
            f"rerank: error: {output} is inside the checkpoint {tmp_path / 'unlisted'}, whose content hash covers "
            "every file in its folder (it was written before checkpoints listed their files): a file written there "
            "would make it refused as changed; write it outside\n"), done.stderr
        assert not output.exists()
    read_checkpoint(str(tmp_path / "unlisted"), None)
    rerank("cat", str(run), "-o", str(tmp_path / "listed" / "x.run"))
    assert (tmp_path / "listed" / "x.run").is_file()
    read_checkpoint(str(tmp_path / "listed"), None)

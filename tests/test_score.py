"""The score stage: depth cut, the rest kept below in order, timings, provenance, cache; CLI error paths."""

from __future__ import annotations

import json

import pytest

from rerank.errors import DataError, UsageError
from rerank.models.base import Reranker
from rerank.runs import QueryRanking, RunHeader, Stream, Timing
from rerank.score import ScoreCache, ScoreStats, cache_namespace, score_stream


class OverlapReranker(Reranker):
    """A real (if simple) scorer: query words found in the text; counts the pairs it scored."""

    name = "overlap"
    checkpoint_hash = "overlap-v1"
    scores_version = 1  # not a registered model, so no spec says its version

    def __init__(self):
        self.scored = 0

    def score(self, query, docids, texts):
        self.scored += len(texts)
        words = set(query.split())
        return [float(len(words & set(t.split()))) + 0.001 * len(t) for t in texts]


QUERIES = {"q1": "neural ranking models", "q2": "kernel pooling"}
TEXTS = {f"d{i}": text for i, text in enumerate([
    "neural ranking models with transformers", "a cooking recipe", "ranking models", "neural nets",
    "kernel pooling for ranking", "nothing relevant here at all", "pooling layers", "kernel methods",
])}


class DictStore:
    source = "toy store"

    def __init__(self, texts):
        self.table = texts

    def texts(self, docids):
        return {d: self.table[d] for d in docids if d in self.table}


def _stream(depth_docs=8):
    header = RunHeader({"dataset": "toy"}).with_stage({"name": "bm25", "stage": "retrieve"})
    docids = [f"d{i}" for i in range(depth_docs)]
    rankings = [QueryRanking.from_scores(q, docids, [10.0 - i for i in range(depth_docs)], tag="bm25",
                                         timings=[Timing("bm25", 1.5, depth_docs)]) for q in QUERIES]
    return Stream(header, rankings)


def _score(model, depth, cache=False, **kw):
    stats = ScoreStats()
    out = score_stream(_stream(), model, depth, cache=cache, store=DictStore(kw.pop("texts", TEXTS)),
                       queries=QUERIES, stats=stats, **kw)
    return out, list(out.rankings), stats


def test_head_rescored_and_rest_kept_in_order_below():
    model = OverlapReranker()
    out, rankings, stats = _score(model, depth=4)
    q1 = rankings[0]
    assert set(q1.docids[:4]) == {"d0", "d1", "d2", "d3"}
    assert q1.docids[0] == "d0" and q1.docids[1] == "d2"  # 3 and 2 overlapping words
    assert q1.docids[4:] == ["d4", "d5", "d6", "d7"]  # original order kept
    assert max(q1.scores[4:]) < min(q1.scores[:4])
    assert q1.scores == sorted(q1.scores, reverse=True)  # survives any evaluator's re-sort
    assert model.scored == 8 and stats.pairs == 8 and stats.queries == 2


@pytest.mark.parametrize("head", [
    {"d5": 2.0, "d1": 2.0, "d7": 0.5, "d3": 2.0},  # ties in the head: by docid descending
    {"d2": -1.0, "d6": 4.0},
    {"d0": 1e17, "d4": 1e17 + 64},  # past 2**53: the rest's scores tie, and are sorted with the head's
    {},
])
def test_head_over_tail_gives_trec_eval_order_of_all_its_pairs(head):
    """The head is sorted alone and the rest kept below it unsorted; the ranking is still the one a whole sort of
    its pairs gives (trec_eval's order, whatever its input's). (Passes before and after that change.)"""
    from rerank.score import head_over_tail

    ranking = QueryRanking("q1", ["d3", "d9", "d1", "d0", "d8", "d2", "d4", "d6", "d5", "d7"], [0.0] * 10)
    result = head_over_tail(ranking, head, tag="m")
    assert sorted(result.docids) == sorted(ranking.docids)
    assert list(zip(result.scores, result.docids)) == sorted(zip(result.scores, result.docids), reverse=True)
    if head and max(head.values()) < 2**53:
        assert result.docids[len(head):] == [d for d in ranking.docids if d not in head]


def test_timings_appended_and_provenance_recorded():
    out, rankings, _ = _score(OverlapReranker(), depth=3)
    assert [t.stage for t in rankings[0].timings] == ["bm25", "overlap"]
    assert rankings[0].timings[-1].depth == 3 and rankings[0].timings[-1].ms >= 0
    stage = out.header.stages[-1]
    assert stage["stage"] == "score" and stage["depth"] == 3 and stage["cache"] is False
    assert stage["model"] == "overlap" and stage["checkpoint_hash"] == "overlap-v1"
    assert [s["name"] for s in out.header.stages] == ["bm25", "overlap"]


def test_cache_hit_scores_nothing_twice(home):
    first = OverlapReranker()
    _, before, stats1 = _score(first, depth=5, cache=True)
    second = OverlapReranker()
    _, after, stats2 = _score(second, depth=5, cache=True)
    assert first.scored == 10 and second.scored == 0
    assert stats2.cached == 10 and stats1.cached == 0
    assert [r.scores for r in before] == [r.scores for r in after]
    assert (home / ".cache" / "scores.sqlite").is_file()
    third = OverlapReranker()
    _score(third, depth=5, cache=False)
    assert third.scored == 10  # --no-cache scores again


def test_a_stage_records_its_rerank_and_files_by_content_but_its_cache_is_keyed_as_before(home, tmp_path):
    """The rerank that ran a score stage, and the topics and corpus files given to it by content, go into its header
    entry for a reviewer; none of them changes a model's scores, so the cache stays keyed on what the model
    computes (a new rerank or a copied file would otherwise score every pair again)."""
    import hashlib

    from rerank import code_version

    (tmp_path / "t.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in QUERIES.items()))
    (tmp_path / "c.tsv").write_text("".join(f"{docid}\t{text}\n" for docid, text in TEXTS.items()))
    out, _, _ = _score(OverlapReranker(), depth=5, cache=True, topics=str(tmp_path / "t.tsv"),
                       corpus=str(tmp_path / "c.tsv"))
    assert out.header.stages[-1]["rerank_version"] == code_version()
    for key in ("topics", "corpus"):
        digest = hashlib.sha256((tmp_path / f"{key[0]}.tsv").read_bytes()).hexdigest()[:16]
        assert (out.header.get(key), out.header.get(f"{key}_sha256")) == (str(tmp_path / f"{key[0]}.tsv"), digest)
    assert cache_namespace(OverlapReranker()) == (
        '{"checkpoint_hash": "overlap-v1", "model": "overlap", "scores_version": 1}')  # the key of caches made so far


class NumpyOverlapReranker(OverlapReranker):
    """OverlapReranker's scores, summed by numpy: a model that computes with a package."""

    packages = ("numpy",)

    def score(self, query, docids, texts):
        import numpy

        self.scored += len(texts)
        words = set(query.split())
        return [float(numpy.add(len(words & set(t.split())), 0.001 * len(t))) for t in texts]


def test_a_stage_records_the_packages_it_scored_with_which_key_no_cache(home):
    """A reviewer holding two runs whose scores differed in the 5th decimal could not tell that another torch had
    computed them: a score stage now names the versions of the packages its model computes with, beside (not in)
    the provenance that keys the cache, so scores cached under other versions, or by a rerank that recorded none,
    are still found."""
    import numpy

    plain = _score(OverlapReranker(), depth=5, cache=True)[0]
    assert "packages" not in plain.header.stages[-1]  # a model that computes with no package names none
    out = _score(NumpyOverlapReranker(), depth=5)[0]
    assert out.header.stages[-1]["packages"] == {"numpy": numpy.__version__}
    assert cache_namespace(NumpyOverlapReranker()) == cache_namespace(OverlapReranker())
    again = NumpyOverlapReranker()
    _, _, stats = _score(again, depth=5, cache=True)
    assert again.scored == 0 and stats.cached == 10  # what the model without packages cached


def test_a_topics_file_edited_since_the_stream_read_it_is_said(home, tmp_path, capsys):
    """A score stage reads the header's topics file again: edited since retrieval read it, its new texts were scored
    without a word, though the header's topics_sha256 said what retrieval read."""
    from rerank.docstore import queries_for
    from rerank.runs import file_fields

    topics = tmp_path / "t.tsv"
    topics.write_text("1\tneural ranking\n")
    header = RunHeader(file_fields(topics=str(topics)))
    assert queries_for(header) == {"1": "neural ranking"} and capsys.readouterr().err == ""
    topics.write_text("1\tkernel pooling\n")
    assert queries_for(header) == {"1": "kernel pooling"}
    said = capsys.readouterr().err
    assert said.startswith(f"rerank: warning: {topics} has changed since the stream's stages read it") and \
        "--topics" in said


def test_cache_is_keyed_on_document_text(home):
    _score(OverlapReranker(), depth=2, cache=True)
    changed = {**TEXTS, "d0": "a different text now"}
    model = OverlapReranker()
    _, _, stats = _score(model, depth=2, cache=True, texts=changed)
    assert model.scored == 2 and stats.cached == 2  # d0 for both queries re-scored, d1 cached


def test_missing_documents_fail_or_are_skipped():
    texts = {k: v for k, v in TEXTS.items() if k != "d1"}
    with pytest.raises(DataError, match="d1 is not in the document store"):
        _score(OverlapReranker(), depth=4, texts=texts)
    _, rankings, stats = _score(OverlapReranker(), depth=4, texts=texts, skip_missing=True)
    assert stats.missing == 2 and rankings[0].docids[3:] == ["d1", "d4", "d5", "d6", "d7"]


def test_skipping_every_candidate_is_an_error_after_the_last_query():
    """--skip-missing with a store that has none of the texts gave the first stage's order under the model's name,
    as if re-scored. The error comes after the last query, before the end line (readers refuse the stream);
    candidates below the depth are not looked up, and queries without candidates do not count."""
    model = OverlapReranker()
    with pytest.raises(DataError, match=r"^no candidate's text was found in toy store \(all 8 candidates skipped"):
        _score(model, depth=4, texts={"d7": TEXTS["d7"]}, skip_missing=True)
    assert model.scored == 0
    _, rankings, stats = _score(OverlapReranker(), depth=4, texts={"d3": TEXTS["d3"]}, skip_missing=True)
    assert stats.pairs == 2 and stats.missing == 6 and len(rankings) == 2  # one text found: not an error
    empty = Stream(RunHeader({"dataset": "toy"}), [QueryRanking.from_scores("q1", [], [])])
    assert [r.docids for r in score_stream(empty, model, 4, cache=False, skip_missing=True, store=DictStore({}),
                                           queries=QUERIES).rankings] == [[]]


class BrokenReranker(OverlapReranker):
    """Weights gone NaN: one document gets a non-finite score."""

    checkpoint_hash = "broken-v1"

    def score(self, query, docids, texts):
        return [float("nan") if d == "d1" else s for d, s in zip(docids, super().score(query, docids, texts))]


@pytest.mark.parametrize("cache", [False, True])
def test_non_finite_model_scores_are_an_error_naming_the_query(home, cache):
    """They came out as 'nan' run lines, or with the cache on as sqlite's NOT NULL IntegrityError."""
    model = BrokenReranker()
    with pytest.raises(DataError, match="query q1: overlap scored document d1 nan .*did its training diverge"):
        _score(model, 4, cache=cache)
    cache_file = ScoreCache(cache_namespace(model))
    assert not cache_file.get([cache_file.key(QUERIES["q1"], TEXTS[f"d{i}"]) for i in range(4)])  # none cached
    cache_file.close()


def test_training_dev_figure_is_the_figure_of_score_then_eval():
    """The dev evaluation dropped the candidates below --dev-depth; `score --depth` keeps them below the head,
    so a relevant document found there counted for eval but not for early stopping."""
    torch = pytest.importorskip("torch")
    from rerank.evaluate.measures import evaluate, parse_measure
    from rerank.runs import Run
    from rerank.train import DevSet, JudgedQuery

    class OverlapModule(torch.nn.Module):  # OverlapReranker as a trainable model
        def score_batch(self, queries, docs):
            return torch.tensor([OverlapReranker().score(q, [], row) for q, row in zip(queries, docs)])

    qrels = {"q1": {"d0": 1, "d6": 1}, "q2": {"d4": 1, "d7": 2}}  # d6 and d7 lie below the re-scored head
    queries = [JudgedQuery(r.qid, QUERIES[r.qid], r, [], []) for r in _stream().rankings]
    measure = parse_measure("MAP")
    dev = DevSet(queries, TEXTS, qrels, measure, "toy")
    _, scored, _ = _score(OverlapReranker(), 3)
    expected = evaluate(Run(RunHeader(), {r.qid: r for r in scored}, "score"), qrels, [measure]).overall("MAP")
    assert dev.evaluate(OverlapModule(), 3) == pytest.approx(expected)


def test_bad_depth_and_unknown_query():
    with pytest.raises(UsageError, match="--depth"):
        score_stream(_stream(), OverlapReranker(), 0, store=DictStore(TEXTS), queries=QUERIES)
    out = score_stream(_stream(), OverlapReranker(), 3, cache=False, store=DictStore(TEXTS), queries={"q1": "x"})
    with pytest.raises(DataError, match="q2 has no text"):
        list(out.rankings)


# ------------------------------------------------------------------------------------------ CLI errors

RUN_NO_HEADER = "1 Q0 d1 1 2.0 x\n1 Q0 d2 2 1.0 x\n"


def test_cli_unknown_model_lists_names(rerank):
    done = rerank("score", "--model", "nope", input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and "unknown model 'nope'" in done.stderr and "minilm-bi" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_cli_header_naming_nothing(rerank):
    done = rerank("score", "--model", "minilm-bi", input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and "names no data set" in done.stderr and "--topics/--corpus" in done.stderr
    assert done.stderr.count("\n") == 1


def test_cli_depth_and_batch_size_must_be_positive(rerank):
    done = rerank("score", "--model", "minilm-bi", "--depth", "0", input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and "--depth must be a positive" in done.stderr
    done = rerank("score", "--model", "minilm-bi", "--batch-size", "-1", input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and "--batch-size must be a positive number of pairs, not -1" in done.stderr


def test_cli_help_says_which_models_take_max_length(rerank):
    """tk and tkl refuse --max-length; the help said nothing of it ("Truncate pairs to this many tokens")."""
    text = " ".join(rerank("score", "--help").stdout.split())
    assert "Tokens per text (default: the checkpoint's, else 256). (bert and minilm-bi only)" in text


@pytest.mark.parametrize("option", [["--precision", "bf16"], ["--compile"]])
def test_cli_bert_only_options(rerank, option):
    done = rerank("score", "--model", "minilm-bi", *option, input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and f"{option[0]} is an option of bert only, not minilm-bi" in done.stderr
    assert done.stderr.count("\n") == 1


def test_files_given_for_texts_go_into_the_header(tmp_path):
    """A run scored with --topics/--corpus could not be scored again, nor evaluated with the qrels its header
    could have named: the files were not recorded."""
    (tmp_path / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()))
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in TEXTS.items()))
    plain = Stream(RunHeader(), _stream().rankings)
    first = score_stream(plain, OverlapReranker(), 3, cache=False, topics=str(tmp_path / "topics.tsv"),
                         corpus=str(tmp_path / "corpus.jsonl"))
    assert first.header.get("topics") == str(tmp_path / "topics.tsv") and first.header.get("corpus")
    again = score_stream(Stream(first.header, list(first.rankings)), OverlapReranker(), 3, cache=False)
    assert len(list(again.rankings)) == 2


def test_a_damaged_score_cache_is_named(tmp_path):
    from rerank.score import ScoreCache

    (tmp_path / "scores.sqlite").write_text("garbage, not a database\n" * 100)
    with pytest.raises(DataError, match="scores.sqlite cannot be used .*delete it, or pass --no-cache"):
        ScoreCache("overlap-v1", tmp_path / "scores.sqlite")


def test_a_score_cache_that_cannot_be_opened_is_named(tmp_path):
    """sqlite could not open it (a folder of its name here; a read-only .cache folder without it does the same):
    an OperationalError traceback from the score command."""
    from rerank.score import ScoreCache

    (tmp_path / "scores.sqlite").mkdir()
    with pytest.raises(DataError, match="scores.sqlite cannot be opened .*a file in a folder you can write; or pass "
                                        "--no-cache"):
        ScoreCache("overlap-v1", tmp_path / "scores.sqlite")


def test_a_score_cache_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    """It opened (a read-only file reads), then the first scores written came out as sqlite's traceback."""
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    model = OverlapReranker()
    ScoreCache(cache_namespace(model)).close()
    path = tmp_path / ".cache" / "scores.sqlite"
    header = bytearray(path.read_bytes())
    header[18] = 3  # a file-format write version this sqlite does not know: it opens the file read-only
    path.write_bytes(bytes(header))
    with pytest.raises(DataError, match="scores.sqlite cannot be written .*make it writable, or pass --no-cache"):
        _score(model, depth=2, cache=True)


def test_cli_empty_stream_is_empty_output(rerank, tiny_tk, tmp_path):
    model = ("--model", "tk", "--checkpoint", tiny_tk)
    done = rerank("score", *model, input="", check=False)
    assert done.returncode == 0 and done.stdout == ""
    # -o replaces an earlier run (a make rule would take the old one as up to date); the header goes on
    (tmp_path / "old.run").write_text(RUN_DL19)
    rerank("score", *model, "-o", str(tmp_path / "old.run"), input='# dataset: "trec-dl-2019"\n')
    assert (tmp_path / "old.run").read_text() == '# rerank-run: 2\n# dataset: "trec-dl-2019"\n# end of run\n'
    unchecked = rerank("score", "--model", "bert", input="", check=False)  # the model is checked all the same
    assert unchecked.returncode == 2 and "needs --checkpoint" in unchecked.stderr


RUN_DL19 = '# rerank-run: 1\n# dataset: "trec-dl-2019"\n19335 Q0 1017759 1 3.0 x\n'


def test_cli_checkpoint_errors(rerank, tmp_path):
    done = rerank("score", "--model", "bert", input=RUN_DL19, check=False)
    assert done.returncode != 0 and "needs --checkpoint" in done.stderr
    done = rerank("score", "--model", "bert", "--checkpoint", str(tmp_path / "absent"), input=RUN_DL19,
                  check=False)
    assert done.returncode == 2 and done.stderr == (f"rerank: error: checkpoint {tmp_path / 'absent'} does not exist; "
                                                    f"train one with: rerank train bert ... -o {tmp_path / 'absent'}\n")
    # a file (a run given for the checkpoint) was "not a folder; train one with: ... -o FILE", onto the file
    (tmp_path / "some.run").write_text(RUN_DL19)
    done = rerank("score", "--model", "bert", "--checkpoint", str(tmp_path / "some.run"), input=RUN_DL19,
                  check=False)
    assert done.returncode == 2 and done.stderr == (f"rerank: error: checkpoint {tmp_path / 'some.run'} is a file, not "
                                                    "a checkpoint folder; give the folder that rerank train bert -o "
                                                    "wrote\n")
    (tmp_path / "some.run").unlink()
    done = rerank("score", "--model", "bert", "--checkpoint", str(tmp_path), input=RUN_DL19, check=False)
    assert done.returncode != 0 and "is not a checkpoint" in done.stderr
    (tmp_path / "checkpoint.json").write_text(json.dumps({"model": "tk", "hash": "x"}))
    done = rerank("score", "--model", "bert", "--checkpoint", str(tmp_path), input=RUN_DL19, check=False)
    assert done.returncode != 0 and "trained for model 'tk', not 'bert'" in done.stderr


def test_cli_missing_docids(rerank, tiny_tk, tmp_path):
    run = '# rerank-run: 1\n# dataset: "trec-dl-2019"\n19335 Q0 no-such-passage 1 3.0 x\n'
    out = tmp_path / "out.run"
    model = ("--model", "tk", "--checkpoint", tiny_tk)
    done = rerank("score", *model, "--no-cache", "-o", str(out), input=run, check=False)
    assert done.returncode != 0 and "no-such-passage is not in the document store" in done.stderr
    assert not out.exists()  # nothing half-written
    run += "264014 Q0 5611210 1 3.0 x\n"  # a query whose candidate has a text
    done = rerank("score", *model, "--no-cache", "--skip-missing", input=run)
    assert "scored 1 pair over 2 queries (0 from the cache); skipped 1 candidate with" in done.stderr
    assert "19335 Q0 no-such-passage 1" in done.stdout and done.stdout.endswith("# end of run\n")


def test_cli_skip_missing_with_no_text_for_any_candidate_is_an_error(rerank, tiny_tk, tmp_path):
    """Needs ../shared/data (TREC DL 2019). A run scored against the wrong texts came out in its first-stage order
    under the model's name, exit 0. Now an error: no -o file; on stdout the stream stops before its end line, so
    the next stage refuses it (as any stage failing mid-stream)."""
    corpus = tmp_path / "other.jsonl"
    corpus.write_text('{"id": "elsewhere", "contents": "a document of some other collection"}\n')
    run = ('# rerank-run: 2\n# dataset: "trec-dl-2019"\n19335 Q0 1017759 1 3.0 x\n19335 Q0 1082489 2 2.0 x\n'
           '264014 Q0 5611210 1 3.0 x\n# end of run\n')
    out = tmp_path / "out.run"
    args = ("score", "--model", "tk", "--checkpoint", tiny_tk, "--no-cache", "--skip-missing", "--corpus", str(corpus))
    done = rerank(*args, "-o", str(out), input=run, check=False)
    assert done.returncode == 1 and not out.exists() and list(tmp_path.iterdir()) == [corpus]
    assert done.stderr == (f"rerank: error: no candidate's text was found in {corpus} (all 3 candidates "
                           "skipped, none re-scored); is it the run's document store? Pass the right --corpus, or a "
                           "run whose header names its index or data set\n")
    piped = rerank(*args, input=run, check=False)
    assert piped.returncode == 1 and "# end of run" not in piped.stdout
    assert rerank("eval", input=piped.stdout, check=False).returncode != 0
    empty = rerank(*args, "-o", str(out), input='# rerank-run: 2\n# dataset: "trec-dl-2019"\n# end of run\n')
    assert "holds no queries" in empty.stderr and out.read_text().endswith("# end of run\n")  # still fine


def test_cli_a_run_without_a_header_is_scored_as_the_data_set_dataset_names(rerank, data_root):
    """Needs ../shared/data (TREC DL 2019). A Pyserini run of DL 2019 (or the shipped trec_results_dl19.txt) could
    be evaluated but not re-scored: its passages' texts are only in the data set's candidate files, which --corpus
    does not read, and nothing named the data set."""
    lines = (data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt").read_text().splitlines()
    plain = "".join(line + "\n" for line in lines if line.split()[0] in ("264014", "19335"))
    args = ("score", "--model", "minilm-bi", "--no-cache", "--depth", "3")
    refused = rerank(*args, input=plain, check=False)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "names no data set, index or corpus; pass --dataset NAME (a run of a data set's queries), or --topics/--corpus")
    scored = rerank(*args, "--dataset", "trec-dl-2019", input=plain).stdout
    assert scored.splitlines()[1] == '# dataset: "trec-dl-2019"' and scored.endswith("# end of run\n")
    assert rerank("eval", "-m", "nDCG@10", input=scored).stdout.startswith("run")  # the data set's qrels: no --qrels
    for other, said in (("vaswani", "header names the data set trec-dl-2019"), ("nosuch", "unknown data set 'nosuch'")):
        done = rerank(*args, "--dataset", other, input=scored, check=False)
        assert done.returncode == 2 and said in done.stderr


def test_cli_a_stage_that_fails_mid_pipe_does_not_get_its_partial_output_scored(rerank):
    """Needs ../shared/data (TREC DL 2019). `score | eval` without pipefail used to print figures for the
    queries the failed stage got through, as if they were the whole run."""
    run = '# rerank-run: 1\n# dataset: "trec-dl-2019"\n264014 Q0 5611210 1 3.0 x\n1037798 Q0 no-such-passage 1 3.0 x\n'
    failed = rerank("score", "--model", "minilm-bi", "--no-cache", input=run, check=False)
    assert failed.returncode != 0 and ("no-such-passage is not in the document store (1 of the 1 to score is "
                                       "missing)") in failed.stderr  # not 'of its top 100': the query has one
    assert "264014 Q0 5611210 1" in failed.stdout  # the first query went out before the failure
    evaluated = rerank("eval", input=failed.stdout, check=False)
    assert evaluated.returncode != 0 and evaluated.stdout == ""
    assert evaluated.stderr.strip().endswith("<stdin>: the run stops before its '# end of run' line: the stage that "
                                             "wrote it failed (see its error) or the file was cut short; rerun that "
                                             "stage (to cut a run on purpose, keep it whole: rerank cat --first N or "
                                             "--depth K)")


# ------------------------------------------------------------------------------------------ integration

def _first_queries(stream_text: str, count: int) -> str:
    """Header lines plus the records (and timings) of the first `count` queries of a run stream."""
    kept, qids = [], []
    for line in stream_text.splitlines(keepends=True):
        if line.startswith("# time:"):
            qid = line.split()[2]
        elif line.startswith("#"):
            kept.append(line)
            continue
        else:
            qid = line.split()[0]
        if qid not in qids:
            qids.append(qid)
        if len(qids) <= count:
            kept.append(line)
    return "".join(kept)


@pytest.mark.data
def test_cli_chain_retrieve_score_eval_on_dl19(rerank, tmp_path):
    """retrieve | score --model minilm-bi | eval on three TREC DL 2019 queries, then the cache answers."""
    bm25 = _first_queries(rerank("retrieve", "trec-dl-2019", "--candidates", "bm25").stdout, 3)
    own_cache = {"RERANK_HOME": str(tmp_path)}  # other tests (the DL 2019 pipeline) warm the shared cache
    scored = rerank("score", "--model", "minilm-bi", "--depth", "10", input=bm25, env=own_cache)
    lines = scored.stdout.splitlines()
    stage = json.loads(next(line for line in lines if line.startswith("# stage:") and '"score"' in line)[9:])
    assert stage["model"] == "minilm-bi" and stage["depth"] == 10 and stage["checkpoint_hash"]
    timings = [line.split() for line in lines if line.startswith("# time:") and "minilm-bi" in line]
    assert len(timings) == 3 and all(t[5] == "10" for t in timings)
    records = [line.split() for line in lines if not line.startswith("#")]
    first = [r for r in records if r[0] == records[0][0]]
    assert len(first) == 100 and all(float(r[4]) <= 1.0 for r in first[:10]) and float(first[10][4]) < float(first[9][4])
    assert scored.stderr.endswith("scored 30 pairs over 3 queries (0 from the cache); 3 queries had candidates below "
                                  "the top 10, left unscored in their order (--depth to score more)\n")
    (tmp_path / "bm25.run").write_text(bm25)
    (tmp_path / "bi.run").write_text(scored.stdout)
    table = rerank("eval", str(tmp_path / "bm25.run"), str(tmp_path / "bi.run"), "-m", "nDCG@10", "--per-query",
                   "--format", "json")
    qids = {t[2] for t in timings}
    rows = {(row["run"], row["qid"]): float(row["nDCG@10"]) for row in json.loads(table.stdout) if row["qid"] in qids}
    assert len(rows) == 6 and all(0 <= v <= 1 for v in rows.values())
    assert any(rows[("minilm-bi", q)] != rows[("bm25", q)] for q in qids)  # re-ranking changed the top 10
    again = rerank("score", "--model", "minilm-bi", "--depth", "10", input=bm25, env=own_cache)
    assert "(30 from the cache)" in again.stderr
    assert [r for r in again.stdout.splitlines() if not r.startswith("#")] == [r for r in lines if not r.startswith("#")]


def test_stage_name_must_be_one_word():
    with pytest.raises(UsageError, match="one word"):
        score_stream(_stream(), OverlapReranker(), 3, stage="my model", store=DictStore(TEXTS), queries=QUERIES)


def test_interpolation_with_the_first_stage():
    _, model_only, _ = _score(OverlapReranker(), depth=4)
    out, halves, _ = _score(OverlapReranker(), depth=4, interpolate=0.5)
    _, first_only, _ = _score(OverlapReranker(), depth=4, interpolate=1.0)
    _, alpha0, _ = _score(OverlapReranker(), depth=4, interpolate=0.0)
    assert out.header.stages[-1]["interpolate"] == 0.5
    assert first_only[0].docids == ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"]  # the first stage's order
    assert alpha0[0].docids == model_only[0].docids
    # q1 head: model 3.039, 0.016, 2.014, 1.011 and first stage 10, 9, 8, 7, each z-scored, then averaged
    model = [3.039, 0.016, 2.014, 1.011]
    mean, spread = sum(model) / 4, (sum((m - sum(model) / 4) ** 2 for m in model) / 4) ** 0.5
    first = [1.5 / 1.25 ** 0.5, 0.5 / 1.25 ** 0.5, -0.5 / 1.25 ** 0.5, -1.5 / 1.25 ** 0.5]
    expected = {f"d{i}": 0.5 * (model[i] - mean) / spread + 0.5 * first[i] for i in range(4)}
    got = dict(zip(halves[0].docids[:4], halves[0].scores[:4]))
    assert got == pytest.approx(expected, abs=1e-3)
    with pytest.raises(UsageError, match="between 0 and 1"):
        _score(OverlapReranker(), depth=4, interpolate=1.5)


def test_cli_interpolate_out_of_range(rerank):
    done = rerank("score", "--model", "minilm-bi", "--interpolate", "-0.1", input=RUN_NO_HEADER, check=False)
    assert done.returncode != 0 and "between 0 and 1" in done.stderr and done.stderr.count("\n") == 1


def test_a_corpus_file_with_a_repeated_id_is_refused(tmp_path):
    """`rerank index` refuses such a corpus; the score stage's --corpus took the later text for both documents."""
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in
                                                   [*TEXTS.items(), ("d1", "another text under d1")]))
    out = score_stream(Stream(RunHeader(), _stream().rankings), OverlapReranker(), 3, cache=False, queries=QUERIES,
                       corpus=str(tmp_path / "corpus.jsonl"))
    with pytest.raises(DataError, match="corpus.jsonl: document id 'd1' appears twice"):
        list(out.rankings)


def test_progress_without_a_terminal_says_a_line_at_the_start_now_and_then_and_at_the_end(capsys, monkeypatch):
    """tqdm's bar is silent where stderr is not a terminal: a log of a long score or encode run said nothing for
    an hour. There a line comes instead: once it has run a few seconds, at most one per `every` seconds, and at the
    end, each with the total and the time left where the total is known. A quick run, or an error in its first
    seconds, says nothing more than its own lines."""
    from rerank import progress as module
    from rerank.progress import Progress

    times = iter([100.0, 110.0, 120.0, 160.0, 170.0, 175.0, 0.0, 50.0, 70.0, 0.0, 1.0, 2.0, 0.0, 9.0, 0.0, 9.0])
    monkeypatch.setattr(module.time, "monotonic", lambda: next(times))
    progress = Progress("scoring with bert", "query", total=4, every=15.0, units="queries")
    for _ in range(4):
        progress.update()
    progress.close()
    progress.close()  # once
    quiet = Progress("indexing x", "doc", every=3600.0)  # no total: no time left
    quiet.update(5)
    quiet.close()
    quick = Progress("quick", "doc", total=3)
    quick.update(3)
    quick.close()
    with pytest.raises(ValueError), Progress("failing", "doc", every=3600.0):  # the error is the one line
        raise ValueError
    one_long_unit = Progress("one", "doc")
    one_long_unit.close()
    assert capsys.readouterr().err.splitlines() == [
        "rerank: scoring with bert: 1/4 queries in 10 s, about 30 s left",
        "rerank: scoring with bert: 3/4 queries in 60 s, about 20 s left",
        "rerank: scoring with bert: 4/4 queries in 75 s",
        "rerank: indexing x: 5 docs in 50 s",
        "rerank: one: 0 docs in 9 s"]


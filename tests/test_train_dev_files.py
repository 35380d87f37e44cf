"""`rerank train` on run files whose dev split has files of its own (BEIR's qrels/train.tsv and qrels/dev.tsv over one
queries.jsonl; MS MARCO's queries.train.tsv and queries.dev.tsv): --dev-qrels and --dev-topics, through the real CLI
with GloVe TK on TrecQA dev written out as a BEIR data set. What training and scoring say of the queries a teacher run
or a checkpoint holds is tested by training and scoring in this process (`in_process`), seconds less each."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import pytest

from in_process import in_process_home, score, train_tk  # noqa: F401  (fixture)
from rerank.runs import RunHeader, RunWriter, load_run
from retrieval_fixtures import rerank_module  # noqa: F401  (fixture)

pytestmark = [pytest.mark.data, pytest.mark.usefixtures("in_process_home")]

TRAINING = {"steps": 2, "eval_every": 1, "dev_depth": 5, "negatives": 2, "batch_groups": 2, "threads": 1}
STEPS = tuple(word for key, value in TRAINING.items() for word in (f"--{key.replace('_', '-')}", str(value)))


@pytest.fixture
def beir(tmp_path, data_root, monkeypatch):
    """TrecQA dev as a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev}.tsv: its judged questions split
    2 to 1), a headerless run of every question (all.run, as a user's first stage over it writes) and that run
    split by the same questions, each with its own topics file (train.run + train.tsv, dev.run + dev.tsv)."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    qrels, topics = dataset.qrels(), dataset.topics()
    judged = sorted(qrels)
    split = {"train": judged[: 2 * len(judged) // 3], "dev": judged[2 * len(judged) // 3 :]}
    (tmp_path / "qrels").mkdir()
    for name, qids in split.items():
        (tmp_path / "qrels" / f"{name}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{g}\n" for q in qids for d, g in qrels[q].items()))
        (tmp_path / f"{name}.tsv").write_text("".join(f"{q}\t{topics[q]}\n" for q in qids))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in topics.items()))
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                                                   for d, t in dataset.doc_texts().items()))
    rankings = dataset.candidates()
    for name, qids in (("all", set(topics)), *split.items()):
        with open(tmp_path / f"{name}.run", "w") as handle, RunWriter(handle, RunHeader()) as out:
            for ranking in rankings:
                if ranking.qid in qids:
                    out.write(ranking)
        lines = (tmp_path / f"{name}.run").read_text().splitlines(keepends=True)  # headerless, as Pyserini's
        (tmp_path / f"{name}.run").write_text("".join(line for line in lines if not line.startswith("#")))
    monkeypatch.chdir(tmp_path)
    return tmp_path, split


def training_record(folder: Path) -> dict:
    return json.loads((folder / "checkpoint.json").read_text())["training"]


def test_one_run_of_every_query_trains_and_stops_by_the_dev_split_s_own_judgements(beir, rerank):
    """One --qrels served the candidates and the dev run: a BEIR user with qrels/train.tsv and qrels/dev.tsv had to
    concatenate them by hand, and passing one run of every query as both was refused as 'the training set'.
    --dev-qrels judges the dev run alone; each split's unjudged queries are left out, with a note; the checkpoint
    records the dev files, by content too, and the dev queries' ids, and still tells the queries it trained on."""
    folder, split = beir
    done = rerank("train", "tk", "--candidates", "all.run", "--qrels", "qrels/train.tsv", "--topics", "queries.jsonl",
                  "--corpus", "corpus.jsonl", "--dev", "all.run", "--dev-qrels", "qrels/dev.tsv", *STEPS, "-o", "ck",
                  cwd=folder)
    unjudged = 81 - len(split["train"]), 81 - len(split["dev"])
    assert f"rerank: note: {unjudged[0]} queries of all.run are not judged in qrels/train.tsv and left out (" in done.stderr
    assert f"rerank: note: {unjudged[1]} queries of all.run are not judged in qrels/dev.tsv and left out (" in done.stderr
    assert "step 2: dev MAP = " in done.stderr and "warning" not in done.stderr
    record = training_record(folder / "ck")
    assert record["train_queries"] == len(split["train"]) and sorted(record["query_space"]["dev"]["text_sha256"]) == sorted(split["dev"])
    assert (record["qrels"], record["dev_qrels"]) == (str(folder / "qrels/train.tsv"), str(folder / "qrels/dev.tsv"))
    assert record["file_sha256"]["dev_qrels"] == hashlib.sha256((folder / "qrels/dev.tsv").read_bytes()).hexdigest()
    from rerank.checkpoint import trained_qids

    assert trained_qids(record) == set(split["train"])  # judged as training judged them: by --qrels alone


def test_split_runs_with_their_own_topics_files(beir, rerank):
    """Each split's run with its own topics file (--dev-topics), as MS MARCO ships its queries per split: the same
    training as one topics file of every query gives, recorded with the dev topics file."""
    folder, split = beir
    common = ("--corpus", "corpus.jsonl", "--dev", "dev.run", "--dev-qrels", "qrels/dev.tsv", *STEPS)
    rerank("train", "tk", "--candidates", "train.run", "--qrels", "qrels/train.tsv", "--topics", "train.tsv",
           "--dev-topics", "dev.tsv", *common, "-o", "apart", cwd=folder)
    rerank("train", "tk", "--candidates", "train.run", "--qrels", "qrels/train.tsv", "--topics", "queries.jsonl",
           *common, "-o", "shared", cwd=folder)
    apart, shared = training_record(folder / "apart"), training_record(folder / "shared")
    assert apart["history"][-1]["MAP"] == shared["history"][-1]["MAP"]
    assert apart["dev_topics"] == str(folder / "dev.tsv") and shared["dev_topics"] is None
    assert set(apart["file_sha256"]) == {"candidates", "qrels", "topics", "corpus", "dev", "dev_qrels", "dev_topics"}


@pytest.mark.parametrize("options, words", [
    # the training split's qrels judge none of the dev run: say which option gives the dev run's
    (("--candidates", "train.run", "--qrels", "qrels/train.tsv", "--dev", "dev.run"),
     "no query of dev.run is judged in qrels/train.tsv (the training queries' judgements? give the dev run's with "
     "--dev-qrels FILE)"),
    (("--candidates", "all.run", "--qrels", "qrels/train.tsv", "--dev", "all.run"),
     "--dev all.run is the training set; hold queries out with --dev-fraction or --dev-fold (or judge its dev "
     "queries apart: --dev-qrels FILE)"),
    # a data set judges its queries once: --dev-qrels, which a data set refuses, was suggested for it too
    (("--train", "trecqa-train", "--dev", "trecqa-train"),
     "--dev trecqa-train is the training set; hold queries out with --dev-fraction or --dev-fold\n"),
    (("--candidates", "all.run", "--qrels", "qrels/train.tsv", "--dev", "all.run", "--dev-qrels", "qrels/train.tsv"),
     "(is --dev-qrels qrels/train.tsv the dev split's?); hold queries out with --dev-fraction or --dev-fold"),
    # options that would be ignored
    (("--candidates", "train.run", "--qrels", "qrels/train.tsv", "--dev-qrels", "qrels/dev.tsv"),
     "--dev-qrels: for a dev run file (--dev FILE); give the dev run with --dev FILE"),
    (("--candidates", "train.run", "--qrels", "qrels/train.tsv", "--dev-fraction", "0.2", "--dev-topics", "dev.tsv"),
     "--dev-topics: for a dev run file (--dev FILE); give the dev run with --dev FILE"),
    (("--train", "trecqa-train", "--dev", "trecqa-dev", "--dev-qrels", "qrels/dev.tsv"),
     "--dev-qrels: for a dev run file (--dev FILE); --dev trecqa-dev is a data set, which brings its own"),
    (("--train", "trecqa-train", "--dev", "dev.run", "--qrels", "qrels/train.tsv", "--dev-qrels", "qrels/dev.tsv"),
     "--qrels: for candidate run files (--candidates FILE, --dev FILE); the data set trecqa-train brings its own, "
     "and the dev run has --dev-qrels"),
    # errors about the dev run's files name the dev options
    (("--candidates", "train.run", "--qrels", "qrels/train.tsv", "--dev", "dev.run", "--dev-qrels", "trecqa-dev"),
     "dev.run: --dev-qrels takes a file, not a data set's name"),
    (("--candidates", "train.run", "--qrels", "qrels/train.tsv", "--dev", "dev.run", "--dev-qrels", "qrels/dev.tsv",
      "--dev-topics", "train.tsv"),
     "no judged query of dev.run has a text in train.tsv (--dev-topics); are they the run's queries?"),
])
def test_dev_files_refused_in_one_line(beir, rerank, options, words):
    folder, _ = beir
    texts = () if "--train" in options else ("--topics", "queries.jsonl", "--corpus", "corpus.jsonl")
    done = rerank("train", "tk", *texts, *options, "--steps", "1", "-o", "ck", check=False, cwd=folder)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    assert not (folder / "ck").exists()


def test_score_tells_the_dev_run_s_queries_from_a_test_split(tmp_path, rerank, data_root, monkeypatch):
    """A checkpoint whose --dev was a run file of some of a data set's queries: `score` on the whole data set noted
    that every query it did not train on had chosen its step ('dev figures, not test figures'), those held out for
    testing too. The checkpoint records the dev queries' ids, and only those are noted."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    judged = sorted(dataset.qrels())
    parts = {"train": judged[:40], "dev": judged[40:55]}  # and 10 judged questions left for testing
    for name, qids in parts.items():
        with open(tmp_path / f"{name}.run", "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-dev"})) as out:
            for ranking in dataset.candidates():
                if ranking.qid in qids:
                    out.write(ranking)
    ck = tmp_path / "ck"
    rerank("train", "tk", "--candidates", "train.run", "--dev", "dev.run", *STEPS, "-o", str(ck), cwd=tmp_path)
    scored = rerank("score", "--model", "tk", "--checkpoint", str(ck),
                    input=rerank("retrieve", "trecqa-dev", "--candidates").stdout).stderr
    assert f"its checkpoint {ck} was trained on 40 of the 81 queries re-scored here" in scored
    assert f"its checkpoint {ck} chose its best training step by 15 of the 81 queries re-scored here" in scored


@pytest.fixture(scope="module")
def own_collection(rerank_module, data_root, tmp_path_factory):
    """CACM as a collection of one's own, a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv
    splitting its judged queries 30/10/12) indexed with Lucene as cacm-own, a run of every query from it (all.run),
    and GloVe TK trained on that run as README's BEIR walkthrough trains, the run's path typed relative."""
    from rerank.data import get_dataset

    cacm = get_dataset("cacm", data_root)
    folder = tmp_path_factory.mktemp("own-collection")
    qrels, topics = cacm.qrels(), cacm.topics()
    judged = sorted(qrels, key=int)
    split = {"train": judged[:30], "dev": judged[30:40], "test": judged[40:]}
    (folder / "qrels").mkdir()
    for name, qids in split.items():
        (folder / "qrels" / f"{name}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{g}\n" for q in qids for d, g in qrels[q].items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in topics.items()))
    (folder / "test.jsonl").write_text("".join(json.dumps({"_id": q, "text": topics[q]}) + "\n" for q in split["test"]))
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d.docid, "title": "", "text": d.contents}) + "\n"
                                                 for d in cacm.documents()))
    rerank_module("index", "cacm-own", "--corpus", str(folder / "corpus.jsonl"), "--threads", "1")
    (folder / "all.run").write_text(rerank_module("retrieve", "cacm-own", "--topics", "queries.jsonl", "--k", "10",
                                                  "--threads", "1", cwd=folder).stdout)
    rerank_module("train", "tk", "--candidates", "all.run", "--qrels", "qrels/train.tsv", "--dev", "all.run",
                  "--dev-qrels", "qrels/dev.tsv", *STEPS, "-o", "ck", cwd=folder)
    return folder, split


@pytest.fixture(scope="module")
def cacm_over_vaswani(own_collection, rerank_module, vaswani_index) -> str:
    """vaswani.run beside the own collection: CACM's queries searched in Vaswani's documents, whose queries are
    numbered from 1 too: the ids and words of the checkpoint's queries, ranked over other documents."""
    folder, _ = own_collection
    (folder / "vaswani.run").write_text(rerank_module("retrieve", vaswani_index, "--topics", "queries.jsonl", "--k",
                                                      "10", "--threads", "1", cwd=folder).stdout)
    return "vaswani.run"


def test_score_tells_the_queries_of_one_s_own_collection_that_its_checkpoint_saw(own_collection, rerank_module,
                                                                                 cacm_over_vaswani, data_root,
                                                                                 monkeypatch):
    """`score` said which queries a checkpoint trained on, or chose its step by, only for a named data set's runs: on
    one's own collection (runs naming an index and a topics file) a test split sharing queries with the training
    split was scored in silence. The checkpoint records the queries' words and the documents they were ranked over;
    queries with the same ids but other words, or the same queries over other documents, are not counted."""
    from rerank.data import get_dataset

    folder, split = own_collection
    monkeypatch.chdir(folder)
    ck = folder / "ck"
    record = training_record(ck)
    assert record["train_source"] == record["dev_source"] == str(folder / "all.run")  # typed relative

    def said(run: str, **files: str) -> str:
        return score(run, ck, depth=5, **files)[1]

    def retrieved(index: str, topics: str) -> str:
        return rerank_module("retrieve", index, "--topics", topics, "--k", "5", "--threads", "1", cwd=folder).stdout

    trained = (f"its checkpoint {ck} was trained on 30 of the 64 queries re-scored here (cacm-own's): figures on them "
               "are not held out")
    chosen = (f"its checkpoint {ck} chose its best training step by 10 of the 64 queries re-scored here (cacm-own's): "
              "figures on them are dev figures, not test figures")
    every = said((folder / "all.run").read_text())
    assert f"rerank: warning: tk: {trained}" in every and f"rerank: note: tk: {chosen}" in every
    assert "its checkpoint" not in said(retrieved("cacm-own", "test.jsonl"))  # the test split alone
    # the same documents read from the corpus file, for a run without a header
    plain = rerank_module("cat", "--trec", "all.run", cwd=folder).stdout
    from_files = said(plain, topics="queries.jsonl", corpus="corpus.jsonl")
    assert f"was trained on 30 of the 64 queries re-scored here ({folder / 'corpus.jsonl'}'s)" in from_files
    # other queries numbered as the training ones (Vaswani's words under CACM's ids), over the same index
    vaswani = get_dataset("vaswani", data_root).topics()
    (folder / "other.jsonl").write_text("".join(json.dumps({"_id": q, "text": vaswani[q]}) + "\n"
                                                for q in split["train"]))
    assert "its checkpoint" not in said(retrieved("cacm-own", "other.jsonl"))
    # CACM's queries over other documents, Vaswani's, whose queries are numbered from 1 too
    assert "its checkpoint" not in said((folder / cacm_over_vaswani).read_text())


def test_continuing_training_tells_dev_queries_of_one_s_own_collection_its_start_trained_on(own_collection,
                                                                                           rerank_module):
    """--init from a checkpoint with a --dev run of one's own collection: the note that the dev figures are not held
    out for the starting weights came only where the dev run's path, as typed, was the path the start was trained on
    as typed then; another run of the same queries (or the same file from another folder) was not told."""
    folder, _ = own_collection
    (folder / "again.run").write_text((folder / "all.run").read_text())  # a second retrieval of every query
    done = rerank_module("train", "tk", "--init", "ck", "--candidates", "all.run", "--qrels", "qrels/test.tsv",
                         "--dev", "again.run", "--dev-qrels", "qrels/train.tsv", *STEPS, "-o", "continued", cwd=folder)
    assert (f"note: the dev figures are not held out for the starting weights: those of --init {folder / 'ck'} were "
            "trained on 30 of the 30 dev queries") in done.stderr


def test_score_tells_the_queries_a_checkpoint_distilled_on(own_collection, rerank_module, monkeypatch):
    """A teacher run's queries that training does not judge are trained on by the teacher's scores (train says so of
    another data set's): the checkpoint recorded the judged queries alone, so its test split, distilled on, was then
    scored in silence as if held out."""
    folder, split = own_collection
    monkeypatch.chdir(folder)
    train_tk("distilled", candidates="all.run", qrels="qrels/train.tsv", teacher="all.run", steps=2, negatives=2,
             batch_groups=2, threads=1)
    test_run = rerank_module("retrieve", "cacm-own", "--topics", "test.jsonl", "--k", "5", "--threads", "1",
                             cwd=folder).stdout
    said = score(test_run, "distilled", depth=5)[1]
    assert (f"its checkpoint {folder / 'distilled'} was trained on {len(split['test'])} of the "
            f"{len(split['test'])} queries re-scored here (cacm-own's)") in said


def test_score_tells_a_data_set_s_queries_trained_on_with_their_texts_from_a_corpus_file(tmp_path, rerank, data_root,
                                                                                        monkeypatch):
    """A run of a data set's queries trained on with its texts from --corpus FILE: the checkpoint recorded the queries
    as that file's, so `score` on the data set's own run said nothing of them (before checkpoints recorded the
    documents, it told them by the data set the run names, as it tells such a run scored with --corpus)."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    train = set(sorted(dataset.qrels())[:40])
    with open(tmp_path / "train.run", "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-dev"})) as out:
        for ranking in dataset.candidates():
            if ranking.qid in train:
                out.write(ranking)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": t}) + "\n"
                                                   for d, t in dataset.doc_texts().items()))
    ck = tmp_path / "ck"
    rerank("train", "tk", "--candidates", "train.run", "--corpus", "corpus.jsonl", "--dev-fraction", "0.25", *STEPS,
           "-o", str(ck), cwd=tmp_path)
    scored = rerank("score", "--model", "tk", "--checkpoint", str(ck),
                    input=rerank("retrieve", "trecqa-dev", "--candidates").stdout).stderr
    assert f"its checkpoint {ck} was trained on 30 of the 81 queries re-scored here" in scored
    assert f"its checkpoint {ck} chose its best training step by 10 of the 81 queries re-scored here" in scored


def test_a_teacher_run_of_every_query_distils_on_none_of_the_dev_queries(own_collection, rerank_module,
                                                                         cacm_over_vaswani, monkeypatch):
    """README's own-collection training with a teacher run of every query (--teacher all.run beside --dev all.run
    --dev-qrels): the dev queries, unjudged by --qrels, were distilled on in silence, so early stopping and the dev
    figures were no longer held out. They are left out of distillation with a note, and the checkpoint does not record
    them as distilled on; the same ids with other words, or the same queries over other documents, are other queries
    and are distilled on."""
    folder, split = own_collection
    monkeypatch.chdir(folder)
    dev = set(split["dev"])

    def distil(teacher: str, output: str) -> tuple[str, set[str]]:
        said = train_tk(output, candidates="all.run", qrels="qrels/train.tsv", dev="all.run",
                        dev_qrels="qrels/dev.tsv", teacher=teacher, **TRAINING)
        return said, set(training_record(folder / output)["query_space"]["distilled"]["text_sha256"])

    said, distilled = distil("all.run", "taught")
    assert "rerank: note: 10 queries of the teacher run all.run are dev queries (--dev all.run) (" in said
    assert "), left out of distillation so that early stopping and the dev figures stay held out" in said
    assert "distilling also on 24 unjudged queries of the teacher run" in said  # CACM's 12 unjudged, the 12 test ones
    assert not distilled & dev and set(split["test"]) <= distilled
    with open(folder / "all.run") as handle:  # a teacher of the dev queries alone teaches nothing: refused, saying why
        every = load_run(handle, "all.run")
    with open(folder / "dev-only.run", "w") as handle, RunWriter(handle, every.header) as out:
        for qid in sorted(dev):
            out.write(every.queries[qid])
    refused = rerank_module("train", "tk", "--candidates", "all.run", "--qrels", "qrels/train.tsv", "--dev", "all.run",
                            "--dev-qrels", "qrels/dev.tsv", "--teacher", "dev-only.run", *STEPS, "-o", "dev-only",
                            check=False, cwd=folder)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr and not (folder / "dev-only").exists()
    assert refused.stderr.splitlines()[-1] == (
        "rerank: error: teacher run dev-only.run scores none of the training candidates of all.run and has no other "
        "query with 3 candidates (--negatives + 1) to distil on (it holds 10 dev queries of --dev all.run, left out)")

    from rerank.data import get_dataset

    vaswani = get_dataset("vaswani").topics()  # Vaswani's words under the dev queries' ids, over CACM's documents
    (folder / "other-dev.jsonl").write_text("".join(json.dumps({"_id": q, "text": vaswani[q]}) + "\n" for q in dev))
    (folder / "other-words.run").write_text(rerank_module("retrieve", "cacm-own", "--topics", "other-dev.jsonl", "--k",
                                                          "10", "--threads", "1", cwd=folder).stdout)
    for run, output in (("other-words.run", "other-words"),
                        (cacm_over_vaswani, "other-documents")):  # CACM's queries over Vaswani's
        said, distilled = distil(run, output)
        assert "left out of distillation" not in said and dev <= distilled


@pytest.mark.parametrize("held_out", [("--dev-fraction", "0.25"), ("--dev-fold", "2/3")])
def test_training_queries_held_out_for_dev_are_not_distilled_on(own_collection, rerank_module, held_out):
    """The training queries held out for dev (--dev-fraction, --dev-fold) are judged in --qrels: a teacher run of
    every query, which holds them, does not make them distillation queries, and says so."""
    folder, split = own_collection
    output = f"held-out-{held_out[0].removeprefix('--dev-')}"
    said = rerank_module("train", "tk", "--candidates", "all.run", "--qrels", "qrels/train.tsv", *held_out,
                         "--teacher", "all.run", *STEPS, "-o", output, cwd=folder).stderr
    record = training_record(folder / output)
    held = set(record["held_out_qids"])
    distilled = set(record["query_space"]["distilled"]["text_sha256"])
    assert held and held <= set(split["train"]) and not held & distilled
    assert (f"rerank: note: 30 queries of the teacher run all.run are training queries of all.run (1, 2, 3, 4, 5, 6, "
            f"7, 8, 9, 10 ...), left out of distillation: their judgements train them ({len(held)} held out for dev)"
            ) in said
    assert set(split["dev"]) <= distilled  # what it does distil on: qrels/train.tsv judges the dev split's none


def test_a_teacher_run_over_the_dev_data_set_s_documents_that_names_no_data_set(tmp_path, rerank, session_home,
                                                                              vaswani_index, data_root, monkeypatch):
    """--dev trecqa-dev, with a teacher run searched in an index of its sentences for a topics file of one's own, its
    questions and unlabelled ones (here TrecQA train's, renumbered): the header names the index and the file, no data
    set, and only a teacher naming the dev set was refused, so its dev questions were distilled on. They are left out;
    the same questions searched in Vaswani's documents are not; a teacher run naming the dev set is refused as before."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    monkeypatch.chdir(tmp_path)
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    questions = {**dataset.topics(), **{f"u{q}": t for q, t in get_dataset("trecqa-train").topics().items()}}
    (tmp_path / "questions.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in questions.items()))
    if not (session_home / "indexes" / "trecqa-dev" / "lucene").is_dir():
        rerank("index", "trecqa-dev", "--threads", "1")
    dev_questions = {r.qid for r in dataset.candidates() if dataset.qrels().get(r.qid)}

    def distil(index: str) -> tuple[str, set[str], set[str]]:
        """What training said, the queries it distilled on, and those of the teacher run with a group's candidates."""
        run = rerank("retrieve", index, "--topics", "questions.tsv", "--k", "10", "--threads", "1", cwd=tmp_path).stdout
        (tmp_path / f"{index}.run").write_text(run)
        said = train_tk(tmp_path / index, train="trecqa-train", dev="trecqa-dev", teacher=f"{index}.run", **TRAINING)
        grouped = {qid for qid, r in load_run(io.StringIO(run), index).queries.items() if len(r.docids) >= 3}
        return said, set(training_record(tmp_path / index)["query_space"]["distilled"]["text_sha256"]), grouped

    said, distilled, grouped = distil("trecqa-dev")
    assert (f"rerank: note: {len(dev_questions & grouped)} queries of the teacher run trecqa-dev.run are dev "
            "queries (--dev trecqa-dev) (") in said
    assert len(dev_questions & grouped) > 50 and distilled == grouped - dev_questions
    said, distilled, grouped = distil(vaswani_index)
    assert "left out of distillation" not in said and len(dev_questions & grouped) > 50 and distilled == grouped
    named = tmp_path / "named.run"
    named.write_text(rerank("retrieve", "trecqa-dev", "--candidates", cwd=tmp_path).stdout)
    refused = rerank("train", "tk", "--train", "trecqa-train", "--dev", "trecqa-dev", "--teacher", str(named), *STEPS,
                     "-o", "named", check=False, cwd=tmp_path)
    assert refused.returncode != 0 and refused.stderr == (f"rerank: error: teacher run {named} is a run of the dev set "
                                                          "trecqa-dev: training on its queries would leak into early "
                                                          "stopping\n")


def test_a_teacher_s_queries_under_training_ids_are_told_by_their_words_and_documents(own_collection, rerank_module,
                                                                                    cacm_over_vaswani, data_root,
                                                                                    monkeypatch):
    """A teacher run's queries were told from the training queries by id alone: those numbered as judged training
    queries were left out of distillation in silence, and their scores were taken as the training groups' targets,
    though they were other queries (here Vaswani's words under CACM's training ids, scoring the training candidates;
    or CACM's queries over Vaswani's documents). Only the same id and words over the same documents are the training
    query: other queries are distilled on and teach no training group, with a note naming them."""
    from rerank.data import get_dataset

    folder, split = own_collection
    monkeypatch.chdir(folder)
    trained = set(split["train"])

    def distil(teacher: str, output: str) -> tuple[str, set[str]]:
        said = train_tk(output, candidates="all.run", qrels="qrels/train.tsv", teacher=teacher, steps=2, negatives=2,
                        batch_groups=2, threads=1)
        return said, set((training_record(folder / output)["query_space"]["distilled"] or {}).get(
            "text_sha256", ()))

    vaswani = get_dataset("vaswani", data_root).topics()
    cacm = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    (folder / "other-train.jsonl").write_text("".join(
        json.dumps({"_id": q["_id"], "text": vaswani[q["_id"]] if q["_id"] in trained else q["text"]}) + "\n"
        for q in cacm))
    # the training candidates scored for other words under the training queries' ids
    (folder / "other-train.run").write_text(score((folder / "all.run").read_text(), "ck", depth=10,
                                                  topics="other-train.jsonl")[0])
    said, distilled = distil("other-train.run", "ids-other-words")
    assert ("rerank: note: 30 queries of the teacher run other-train.run have the ids of training queries of all.run "
            "but are other queries (other words, or ranked over other documents) (") in said
    assert "teacher run other-train.run scores every candidate of 0 of the " in said  # not the training queries' scores
    assert "distilling also on 64 unjudged queries of the teacher run" in said and trained <= distilled
    assert "left out of distillation" not in said
    # CACM's queries over Vaswani's documents, numbered as CACM's: other queries too
    said, distilled = distil(cacm_over_vaswani, "ids-other-documents")
    assert "30 queries of the teacher run vaswani.run have the ids of training queries of all.run" in said
    assert trained <= distilled
    # the training queries themselves: left out of distillation, said, and their scores teach their groups
    said, distilled = distil("all.run", "ids-same")
    assert ("rerank: note: 30 queries of the teacher run all.run are training queries of all.run (1, 2, 3, 4, 5, 6, 7, "
            "8, 9, 10 ...), left out of distillation: their judgements train them") in said
    assert "have the ids of training queries" not in said and not trained & distilled
    assert re.search(r"teacher run all.run scores every candidate of (\d+) of the \1 training groups", said)
    # a run without a header (as another tool writes a teacher's scores of the training candidates): its ids alone
    with open(folder / "all.run") as handle:
        every = load_run(handle, "all.run")
    with open(folder / "plain.run", "w") as handle, RunWriter(handle, RunHeader()) as out:
        for qid in split["train"]:
            out.write(every.queries[qid])
    (folder / "plain.run").write_text("".join(line for line in (folder / "plain.run").read_text().splitlines(True)
                                              if not line.startswith("#")))
    said, distilled = distil("plain.run", "ids-alone")
    assert "30 queries of the teacher run plain.run are training queries of all.run (" in said and not distilled
    assert re.search(r"teacher run plain.run scores every candidate of (\d+) of the \1 training groups", said)
    # other words under the training ids, too few candidates each to distil on: refused, saying what it holds
    (folder / "other-train-only.jsonl").write_text("".join(json.dumps({"_id": q, "text": vaswani[q]}) + "\n"
                                                           for q in split["train"]))
    (folder / "too-few.run").write_text(rerank_module("retrieve", "cacm-own", "--topics", "other-train-only.jsonl",
                                                      "--k", "2", "--threads", "1", cwd=folder).stdout)
    refused = rerank_module("train", "tk", "--candidates", "all.run", "--qrels", "qrels/train.tsv", "--teacher",
                            "too-few.run", "--steps", "2", "--negatives", "2", "-o", "too-few", check=False, cwd=folder)
    assert refused.returncode != 0 and not (folder / "too-few").exists()
    assert refused.stderr.splitlines()[-1] == (
        "rerank: error: teacher run too-few.run scores none of the training candidates of all.run and has no other "
        "query with 3 candidates (--negatives + 1) to distil on (it holds 30 other queries under training queries' "
        "ids)")


def test_a_teacher_scored_to_a_depth_teaches_by_the_candidates_it_scored(own_collection, rerank_module, monkeypatch):
    """A teacher made by `score --depth 2` over a 10-deep run holds 8 candidates per query below its head with filler
    scores (their first stage's order, one unit apart): they were distillation targets, so the training groups of
    candidates mostly below the head took them as the teacher's, and the unjudged queries were sampled from them. Only
    the scored head teaches, said in a note: the same training as that run cut to its top 2 gives, to the weight."""
    folder, _ = own_collection
    monkeypatch.chdir(folder)
    (folder / "top2.run").write_text(score((folder / "all.run").read_text(), "ck", depth=2)[0])
    (folder / "head2.run").write_text(rerank_module("cat", "--depth", "2", "top2.run", cwd=folder).stdout)
    with open(folder / "all.run") as handle:
        below = sum(len(ranking) - 2 for ranking in load_run(handle, "all.run").queries.values())
    assert below > 0

    def distil(teacher: str, output: str) -> tuple[str, str]:
        said = train_tk(output, candidates="all.run", qrels="qrels/train.tsv", teacher=teacher, distill="kl", steps=2,
                        negatives=1, batch_groups=2, threads=1)
        return said, json.loads((folder / output / "checkpoint.json").read_text())["hash"]

    said, scored = distil("top2.run", "taught-top2")
    assert (f"rerank: note: teacher run top2.run: its score stage tk re-scored the top 2 of each query; the {below} "
            "candidates below, kept in their order with filler scores, are not used as targets") in said
    # every training query has more than 2 candidates: no group is scored whole by the head alone
    assert "teacher run top2.run scores every candidate of 0 of the " in said
    assert "distilling also on 34 unjudged queries of the teacher run" in said  # each with its 2 scored candidates
    said, cut = distil("head2.run", "taught-head2")
    assert "filler" not in said and scored == cut
    # fused, the filler of a score stage that left some (tk, not tk10, which scored all 10) is used: said, not mended
    (folder / "top10.run").write_text(score((folder / "all.run").read_text(), "ck", depth=10, stage="tk10")[0])
    rerank_module("fuse", "--method", "combsum", "--norm", "zscore", "-o", "fused.run", "top2.run", "top10.run",
                  cwd=folder)
    said, _ = distil("fused.run", "taught-fused")
    assert ("rerank: note: teacher run fused.run: it fuses the score stage tk, which left candidates below the head it "
            "re-scored with filler scores (their first stage's order): the fused scores drawing on them are used as "
            "targets as they are") in said
    assert "scores every candidate of 0 of the " not in said

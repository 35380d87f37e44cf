"""Movie Dialog: the knowledge base as documents, the task data sets, the answer stage (frequency, mdqa) and
`rerank train mdqa`, on a small slice of the real knowledge base and task files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_server import es_server  # noqa: F401  (fixture)
from rerank.answer import Fact, FrequencyReader, Question, ranked
from rerank.data.movie_dialog import FIELD, entities_in, kb_documents, read_kb, read_task, split_answers, split_ids
from rerank.errors import FormatError

QUESTIONS = 240  # of task 1's dev file; the slice of the knowledge base holds the facts of their answers
NOTHING = "1 zqxjv wpqkz?\tHeat\n"  # a question no fact matches: retrieval finds nothing for it


@pytest.fixture(scope="module")
def movie_root(data_root, tmp_path_factory) -> Path:
    """A data root whose movie-dialog/ holds the first task lines and the facts about their answers."""
    source = data_root / "movie-dialog"
    root = tmp_path_factory.mktemp("movie-data")
    folder = root / "movie-dialog"
    folder.mkdir()
    qa = source.joinpath("task1_qa_dev.txt").read_text().splitlines(keepends=True)[:QUESTIONS]
    folder.joinpath("task1_qa_dev.txt").write_text("".join(qa) + NOTHING)
    recs = source.joinpath("task2_recs_dev.txt").read_text().splitlines(keepends=True)[:60]
    folder.joinpath("task2_recs_dev.txt").write_text("".join(recs))
    folder.joinpath("entities.txt").symlink_to(source / "entities.txt")
    answers = {a.strip().lower() for line in qa + recs for a in line.rstrip("\n").split("\t")[1].split(", ")}
    lines = source.joinpath("kb_facts.tsv").read_text().splitlines(keepends=True)
    kept = [line for line in lines[1:] if {line.split("\t")[0], line.split("\t")[2].strip()} & answers]
    folder.joinpath("kb_facts.tsv").write_text(lines[0] + "".join(kept))
    return root


@pytest.fixture(scope="module")
def movie(movie_root, tmp_path_factory):
    """`rerank` on the slice, with a home of its own; returns a runner like the `rerank` fixture's."""
    import os
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("movie-home")

    def run(*args: str, check: bool = True, env: dict | None = None, input: str | None = None):
        done = subprocess.run([sys.executable, "-m", "rerank", *args], capture_output=True, text=True, cwd=home,
                              input=input,
                              env={**os.environ, "RERANK_HOME": str(home), "RERANK_DATA": str(movie_root),
                                   "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})})
        if check and done.returncode != 0:
            raise AssertionError(f"rerank {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    run.home = home
    return run


# ------------------------------------------------------------------------------------------------ data

def test_answers_split_on_commas_but_not_inside_names():
    entities = {"Girl, Interrupted", "Heat", "Drive, He Said"}
    assert split_answers("Girl, Interrupted, Heat, Drive, He Said", entities) == ["Girl, Interrupted", "Heat",
                                                                                   "Drive, He Said"]
    assert split_answers("Heat, Nowhere Film", entities) == ["Heat", "Nowhere Film"]


def test_a_task_file_read_counts_unlisted_answers_and_names_a_bad_line(tmp_path):
    path = tmp_path / "task.txt"
    path.write_text("1 who directed Heat?\tMichael Mann\n1 what films did X star in?\tHeat, Nowhere Film\n")
    task = read_task(path, {"Heat", "Michael Mann"}, "qa-dev")
    assert task.topics == {"qa-dev-1": "who directed Heat?", "qa-dev-2": "what films did X star in?"}
    assert task.answers["qa-dev-2"] == ["Heat", "Nowhere Film"] and task.unlisted == 1
    path.write_text("1 who directed Heat?\tMichael Mann\nwho wrote it? Michael Mann\n")
    with pytest.raises(FormatError, match=f"{path}:2: a task line is"):
        read_task(path, set(), "qa-dev")


def test_the_train_and_validation_parts_are_fixed_and_disjoint():
    qids = [f"qa-dev-{i}" for i in range(1, 1001)]
    train, valid = split_ids(qids, "train"), split_ids(qids, "valid")
    assert len(valid) == 100 and not set(train) & set(valid) and set(train) | set(valid) == set(qids)
    assert split_ids(qids, "valid") == valid


def test_a_fact_is_a_subject_a_relation_and_all_its_objects(tmp_path):
    path = tmp_path / "kb.tsv"
    path.write_text("subject\trelation\tobject\nheat\tstarred_actors\tal pacino\nheat\tstarred_actors\trobert de niro\n"
                    "heat\tdirected_by\tmichael mann\n")
    facts = list(kb_documents(path))
    assert [d.text for d in facts] == ["heat | starred actors | al pacino | robert de niro",
                                       "heat | directed by | michael mann"]
    assert entities_in(facts[0].text) == [(0, 1, "heat"), (5, 7, "al_pacino"), (8, 11, "robert_de_niro")]
    assert len(list(kb_documents(path, "triple"))) == 3 and len(list(kb_documents(path, "entity"))) == 1
    path.write_text("subject\trelation\tobject\nheat\tstarred_actors\n")
    with pytest.raises(FormatError, match=f"{path}:2: a fact is"):
        read_kb(path)


# ------------------------------------------------------------------------------------------------ readers

def _question(text: str, *facts: str) -> Question:
    return Question.of("q1", text, [Fact(f"kb{i}", t, i) for i, t in enumerate(facts, 1)])


def test_the_frequency_reader_ranks_what_retrieval_found_less_what_the_question_names():
    question = _question("what movies did Al Pacino act in?", f"al pacino{FIELD}!starred actors{FIELD}heat{FIELD}"
                         "scarface", f"heat{FIELD}starred actors{FIELD}al pacino{FIELD}robert de niro")
    assert question.named == {"al_pacino"}
    scores = FrequencyReader().answer([question], 10)[0]
    assert scores["heat"] == 1.5 and scores["scarface"] == 1.0 and scores["robert_de_niro"] == 0.5
    ranking = ranked("q1", scores, question.named, 10, "frequency", 1.0, 2)
    assert ranking.docids == ["heat", "scarface", "robert_de_niro"]
    empty = _question("zqxjv?")
    assert ranked("q2", FrequencyReader().answer([empty], 10)[0], empty.named, 10, "frequency", 1.0, 0).docids == []


def test_mdqa_reads_a_batch_and_saves_what_it_loads(tmp_path):
    import torch

    from rerank.models.mdqa import load_mdqa, new_mdqa
    from rerank.train import write_checkpoint

    questions = [_question("who directed Heat?", f"heat{FIELD}directed by{FIELD}michael mann"),
                 _question("zqxjv?")]  # no facts: answered with nothing to read, not a crash
    torch.manual_seed(0)
    reader = new_mdqa(["heat", "michael_mann", "al_pacino"], steps=2, hidden=4, ffn=4, max_fact=8)
    logits = reader.net(reader.net.batch(questions, reader.words))
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    write_checkpoint(tmp_path, "mdqa", reader.net.save(tmp_path), {})
    again = load_mdqa(str(tmp_path))
    assert again.answer(questions, 2) == reader.answer(questions, 2)


# ------------------------------------------------------------------------------------------------ the CLI chain

@pytest.fixture(scope="module")
def retrieved(movie):
    movie("index", "movie-kb", "--threads", "1")
    runs = {}
    for part in ("train", "valid"):
        runs[part] = str(movie.home / f"qa-{part}.run")
        movie("retrieve", f"movie-dialog-qa-{part}", "--k", "20", "--threads", "1", "-o", runs[part])
    return runs


@pytest.mark.data
@pytest.mark.java
def test_index_retrieve_answer_and_evaluate_the_slice(movie, retrieved):
    header = [line for line in Path(retrieved["valid"]).read_text().splitlines() if line.startswith("# index")]
    assert header == ['# index: "movie-kb"']
    refused = movie("index", "movie-dialog-qa-train", check=False)
    assert refused.returncode != 0 and "searches the index movie-kb" in refused.stderr
    done = movie("answer", retrieved["train"], "--model", "frequency", "-o", "freq.run")
    assert "1 question with no retrieved fact got no answer" in done.stderr  # the question nothing matches
    assert "no entity of their retrieved facts (answered from them all the same)" in done.stderr  # counted
    table = json.loads(movie("eval", "freq.run", "-m", "HITS@1", "-m", "HITS@10", "--format", "json").stdout)[0]
    assert 0.2 < table["HITS@10"] <= 1 and table["HITS@1"] <= table["HITS@10"]


@pytest.mark.data
@pytest.mark.java
def test_train_mdqa_then_answer_with_it(movie, retrieved, tiny_tk):
    done = movie("train", "mdqa", "--candidates", retrieved["train"], "--dev", retrieved["valid"], "--steps", "4",
                 "--batch-groups", "8", "--eval-every", "2", "-O", "hidden=8", "-O", "ffn=8", "-O", "steps=1",
                 "-O", "max_fact=16", "--threads", "1", "-o", "ck")
    assert "best dev value" in done.stderr
    manifest = json.loads((movie.home / "ck" / "checkpoint.json").read_text())
    assert manifest["model"] == "mdqa" and manifest["training"]["ended"] == "steps"
    assert [h["step"] for h in manifest["training"]["history"]] == [2, 4]
    movie("answer", retrieved["valid"], "--model", "mdqa", "--checkpoint", "ck", "-o", "mdqa.run")
    assert json.loads(movie("eval", "mdqa.run", "-m", "MRR", "--format", "json").stdout)[0]["MRR"] >= 0
    for args, said in [(("--checkpoint", tiny_tk), "was trained for model 'tk', not 'mdqa'"),
                       ((), "--model mdqa needs --checkpoint DIR"),
                       (("--checkpoint", "ck", "-O", "steps=2"), "-O: mdqa's architecture is its checkpoint's")]:
        refused = movie("answer", retrieved["valid"], "--model", "mdqa", *args, check=False)
        assert refused.returncode != 0 and said in refused.stderr and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    refused = movie("train", "mdqa", "--candidates", retrieved["train"], "-o", "ck2", check=False)
    assert refused.returncode != 0 and "needs --candidates RUN" in refused.stderr


@pytest.mark.data
def test_score_sends_a_reader_to_the_answer_stage(movie):
    for model in ("frequency", "mdqa"):  # declared readers: one without weights, one that needs a checkpoint
        refused = movie("score", "--model", model, check=False, input="qa-dev-1 Q0 kb1 1 2.5 bm25\n")
        assert refused.returncode != 0 and refused.stdout == "" and "Traceback" not in refused.stderr
        assert refused.stderr.startswith(f"rerank: error: --model {model} is a reader: readers answer questions "
                                         "through rerank answer (readers: ")
        assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.data
def test_answer_refuses_a_run_of_no_knowledge_base_questions(movie):
    other = '# rerank-run: 2\n# dataset: "vaswani"\n1 Q0 kb1 1 2.5 bm25\n# end of run\n'
    for run, named in (("qa-dev-1 Q0 kb1 1 2.5 bm25\n", "no data set"), (other, "data set vaswani")):
        refused = movie("answer", "--model", "frequency", check=False, input=run)
        assert refused.returncode != 0 and refused.stdout == "" and "Traceback" not in refused.stderr
        assert refused.stderr.strip() == (f"rerank: error: the run holds no knowledge-base questions (its header names "
                                          f"{named}): readers read the facts retrieved for them, e.g. by rerank "
                                          "retrieve movie-dialog-qa-valid -o FILE")


@pytest.mark.data
def test_a_task_file_notes_an_unlisted_answer_and_names_a_malformed_line(movie, movie_root, tmp_path):
    import shutil

    broken = tmp_path / "root"
    shutil.copytree(movie_root, broken, symlinks=True)
    path = broken / "movie-dialog" / "task1_qa_dev.txt"
    path.write_text(path.read_text() + "1 what did Zqxjv Wpqkz direct?\tNowhere Film\n")  # qa-dev-242: train part
    shown = movie("data", "show", "movie-dialog-qa-train", env={"RERANK_DATA": str(broken)})
    assert "rerank: note: movie-dialog-qa-train: 1 answer of its 218 questions is not in entities.txt" in shown.stderr
    path.write_text(path.read_text() + "no tab here\n")
    done = movie("data", "show", "movie-dialog-qa-valid", check=False, env={"RERANK_DATA": str(broken)})
    assert done.returncode != 0 and f"{path}:{QUESTIONS + 3}: a task line is" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.data
@pytest.mark.elasticsearch
def test_the_knowledge_base_on_elasticsearch(movie, es_server):  # noqa: F811
    movie("index", "movie-kb", "--backend", "elasticsearch", "--es-url", es_server)
    lucene = movie("retrieve", "movie-dialog-qa-valid", "--k", "5", "--threads", "1").stdout
    elastic = movie("retrieve", "movie-dialog-qa-valid", "--backend", "elasticsearch", "--es-url", es_server,
                    "--k", "5").stdout
    def tops(run: str) -> dict[str, str]:
        rows = [line.split() for line in run.splitlines() if line and not line.startswith("#")]
        return {row[0]: row[2] for row in reversed(rows)}  # each question's rank 1

    lucene_top, elastic_top = tops(lucene), tops(elastic)
    assert '"backend": "elasticsearch"' in elastic and all(d.startswith("kb") for d in elastic_top.values())
    agree = sum(elastic_top.get(q) == d for q, d in lucene_top.items())
    assert agree >= 0.5 * len(lucene_top)  # BM25 both; the analysers differ (Anserini's Porter stemmer)
    answered = movie("answer", "--model", "frequency", input=elastic)
    assert answered.stdout.count("# stage:") == 2

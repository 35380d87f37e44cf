"""CTRN, QRNN and word overlap: tiny configurations in this process (the cell, the crossing's aligned steps, padding,
bad text, options, checkpoints, the pointwise loss), and the real CLI on a slice of TrecQA (train a few steps,
score, eval; the errors a user meets)."""

from __future__ import annotations

import json

import pytest
import torch

from in_process import in_process_home  # noqa: F401  (fixture)
from rerank.errors import UsageError
from rerank.models.base import load_model
from rerank.models.ctrn import aligned_steps, fo_pool, new_ctrn, new_qrnn, overlap_features
from rerank.train import group_loss, write_checkpoint

TINY = {"projection": 8, "filters": 8, "hidden": 8, "dropout": 0.0}
QUESTION = "who wrote the hobbit ?"
ANSWERS = ["The Hobbit was written by J. R. R. Tolkien in 1937 .", "Bread needs flour , water and yeast .", "",
           "zzqxv qqxzv vvqzx"]


def tiny(variant: str = "ctrn", seed: int = 0, **extra):
    torch.manual_seed(seed)
    return (new_ctrn if variant == "ctrn" else new_qrnn)(**TINY, **extra).eval()


def test_fo_pooling_is_the_papers_recurrence():
    torch.manual_seed(0)
    z, f = torch.randn(2, 5, 3).tanh(), torch.rand(2, 5, 3)
    c, expected = torch.zeros(2, 3), []
    for t in range(5):
        c = f[:, t] * c + (1 - f[:, t]) * z[:, t]
        expected.append(c)
    assert torch.allclose(fo_pool(z, f), torch.stack(expected, 1))


def test_aligned_steps_follow_the_ratio_of_lengths():
    # the shorter text (3) reads every ceil(7/3) = 3rd gate of the longer (7); the longer reads t // 3
    assert aligned_steps(torch.tensor([3]), torch.tensor([7]), 3).tolist() == [[0, 3, 6]]
    assert aligned_steps(torch.tensor([7]), torch.tensor([3]), 7).tolist() == [[0, 0, 0, 1, 1, 1, 2]]
    assert aligned_steps(torch.tensor([4]), torch.tensor([4]), 4).tolist() == [[0, 1, 2, 3]]
    assert aligned_steps(torch.tensor([2]), torch.tensor([3]), 2).tolist() == [[0, 2]]  # within the partner


@pytest.mark.parametrize("variant", ["ctrn", "qrnn"])
def test_scores_do_not_depend_on_the_batch(variant):
    module = tiny(variant)
    with torch.no_grad():
        together = module.score_batch([QUESTION], [ANSWERS])[0]
        alone = torch.stack([module.score_batch([QUESTION], [[a]])[0, 0] for a in ANSWERS])
    assert torch.allclose(together, alone, atol=1e-6)


def test_all_unknown_words_and_empty_answers_score_finitely():
    module = tiny()
    with torch.no_grad():
        scores = module.score_batch(["qqzxv vvzqx", ""], [["zzqxv qqxzv", ""], ["", "..."]])
    assert torch.isfinite(scores).all()


def test_crossing_changes_the_scores_and_adds_no_parameters():
    ctrn, qrnn = tiny("ctrn"), tiny("qrnn")
    assert {k: v.shape for k, v in ctrn.state_dict().items()} == {k: v.shape for k, v in qrnn.state_dict().items()}
    qrnn.load_state_dict(ctrn.state_dict())
    with torch.no_grad():
        assert not torch.allclose(ctrn.score_batch([QUESTION], [ANSWERS]), qrnn.score_batch([QUESTION], [ANSWERS]))


def test_overlap_features():
    # distinct question words: who, wrote, the, hobbit (the last three outside the stop list are who, wrote, hobbit)
    count_all, count_content, idf_all, idf_content = overlap_features("Who wrote the Hobbit?", "the hobbit, by Tolkien")
    assert (count_all, count_content) == (0.5, pytest.approx(1 / 3))
    assert 0 < idf_content < 1 and 0 < idf_all < 1
    assert overlap_features("", "anything") == [0.0] * 4
    # GloVe's most frequent word weighs nothing; a question of stop words alone has no content words to overlap
    assert overlap_features("the of", "the") == [0.5, 0.0, 0.0, 0.0]


def test_options_are_checked_against_the_spec():
    with pytest.raises(UsageError, match=r"unknown ctrn option\(s\) filterz; known: dropout, embeddings, filter_width"):
        new_ctrn(filterz=3)
    with pytest.raises(UsageError, match="overlap must be true or false"):
        new_ctrn(overlap="False")
    with pytest.raises(UsageError, match="embeddings must be one of glove, minilm-context"):
        new_ctrn(embeddings="word2vec")
    with pytest.raises(UsageError, match="filters must be at least 1"):
        new_ctrn(filters=0)
    with pytest.raises(UsageError, match="dropout must be below 1"):
        new_ctrn(dropout=1.0)
    assert tiny(overlap=False).classes.in_features == 8 and tiny().mlp[1].in_features == 2 * 8 + 4


def test_checkpoint_round_trip_and_another_models_checkpoint(tmp_path):
    module = tiny("qrnn", overlap=False)
    write_checkpoint(tmp_path, "qrnn", module.save(tmp_path), {"note": "test"})
    config = json.loads((tmp_path / "checkpoint.json").read_text())["config"]
    assert config["filters"] == 8 and config["overlap"] is False and config["vocabulary"] == "glove-6b-50d"
    loaded = load_model("qrnn", str(tmp_path), threads=1)
    with torch.no_grad():
        expected = module.score_batch([QUESTION], [ANSWERS])[0].tolist()
    assert loaded.score(QUESTION, ["a", "b", "c", "d"], ANSWERS) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(UsageError, match="was trained for model 'qrnn', not 'ctrn'"):
        load_model("ctrn", str(tmp_path))
    with pytest.raises(UsageError, match="needs --checkpoint"):
        load_model("ctrn")


def test_overlap_model_ranks_by_idf_weighted_overlap():
    model = load_model("overlap")
    scores = model.score(QUESTION, ["a", "b", "c", "d"], ANSWERS)
    assert scores[0] > scores[1] == scores[2] == scores[3] == 0.0
    with pytest.raises(UsageError, match="nothing trained"):
        load_model("overlap", "some-folder")


def test_pointwise_loss_is_two_class_cross_entropy():
    scores = torch.tensor([[2.0, -1.0, 0.5]])
    # the score is logit(right) - logit(wrong), so a 2-class softmax over (0, score) gives the same loss
    pairs = torch.stack([torch.zeros(3), scores[0]], 1)
    expected = torch.nn.functional.cross_entropy(pairs, torch.tensor([1, 0, 0]))
    assert group_loss(scores, "pointwise").item() == pytest.approx(expected.item())


@pytest.mark.data
def test_training_counts_the_questions_it_skips(in_process_home, tmp_path):
    from rerank.train import TrainArgs, train

    said: list[str] = []
    args = TrainArgs(train="wikiqa-train", output=str(tmp_path / "ck"), steps=1, batch_groups=1, negatives=1,
                     loss="pointwise", model_options=dict(TINY))
    train("qrnn", args, log=said.append)
    # WikiQA's judged questions have a right answer; 16 of them have no wrong one
    assert "note: 16 of the 873 training queries have no relevant or no non-relevant candidate; skipped" in said
    assert json.loads((tmp_path / "ck" / "checkpoint.json").read_text())["model"] == "qrnn"


# ------------------------------------------------------------------------------------------- the real CLI

TINY_OPTIONS = [f"-O{key}={value}" for key, value in {**TINY, "max_answer": 30}.items()]


@pytest.mark.data
def test_train_score_and_eval_through_the_cli(rerank, tmp_path):
    dev = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    dev_file = tmp_path / "dev.run"
    dev_file.write_text(dev)
    ck = tmp_path / "ck"
    done = rerank("train", "ctrn", "--train", "trecqa-train", "--dev", str(dev_file), "--steps", "4", "--eval-every",
                  "2", "--batch-groups", "2", "--negatives", "2", "--dev-depth", "5", "--threads", "1", "--seed", "7",
                  *TINY_OPTIONS, "-o", str(ck))
    assert "step 4: dev MAP" in done.stderr
    manifest = json.loads((ck / "checkpoint.json").read_text())
    assert manifest["model"] == "ctrn" and manifest["training"]["loss"] == "pointwise"
    assert manifest["config"]["filters"] == 8 and manifest["config"]["overlap"] is True
    scored = rerank("score", "--model", "ctrn", "--checkpoint", str(ck), "--depth", "5", input=dev).stdout
    figures = rerank("eval", "-m", "MAP", "-m", "P@1", input=scored).stdout.split("\n")[1].split()
    assert figures[0] == "ctrn" and all(0 <= float(x) <= 1 for x in figures[1:])
    wrong = rerank("score", "--model", "qrnn", "--checkpoint", str(ck), input=dev, check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1] == (
        f"rerank: error: checkpoint {ck} was trained for model 'ctrn', not 'qrnn'")


@pytest.mark.data
def test_cli_refuses_unknown_options_and_training_without_right_answers(rerank, tmp_path):
    done = rerank("train", "qrnn", "--train", "trecqa-train", "-O", "layers=2", "-o", str(tmp_path / "a"), check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("rerank: error: unknown qrnn option(s) layers; known: dropout, ")
    run = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    (tmp_path / "c.run").write_text(run)
    wrong = {line.split()[0] + " 0 " + line.split()[2] + " 0" for line in run.splitlines() if not line.startswith("#")}
    (tmp_path / "none.qrels").write_text("\n".join(sorted(wrong)) + "\n")
    done = rerank("train", "ctrn", "--candidates", str(tmp_path / "c.run"), "--qrels", str(tmp_path / "none.qrels"),
                  *TINY_OPTIONS, "-o", str(tmp_path / "b"), check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("rerank: error: no training query of trecqa-dev has a relevant "
                                                    "candidate (grade >= 1)")
    assert not (tmp_path / "b").exists()

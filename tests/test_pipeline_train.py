"""A pipeline's train stage: it trains a model into runs/<pipeline>/<stage>/, a later score stage names that
checkpoint, and a second run reuses both until a training key changes. Tiny QRNNs, a few steps, trecqa."""

import json

import pytest

pytestmark = pytest.mark.data

TINY = """dataset = "trecqa-dev"
measures = ["MAP"]
baseline = "qrnn"

[[stage]]
name = "candidates"
kind = "candidates"
run = "candidates"
k = 5
evaluate = false

[[stage]]
name = "qrnn-train"
kind = "train"
model = "qrnn"
steps = 4
train = "trecqa-train"
dev_fraction = 0.2
batch_groups = 2
negatives = 2
eval_every = 2
dev_depth = 5
threads = 1
options = { projection = 8, filters = 8, hidden = 8, max_answer = 20 }

[[stage]]
name = "qrnn"
kind = "score"
input = "candidates"
model = "qrnn"
checkpoint = "qrnn-train"
depth = 1000
threads = 1
"""


def test_train_stage_trains_once_and_a_second_run_reuses_its_checkpoint(rerank, session_home, tmp_path):
    spec = tmp_path / "tiny-train.toml"
    spec.write_text(TINY)
    first = rerank("run", str(spec))
    folder = session_home / "runs" / "tiny-train"
    manifest = json.loads((folder / "qrnn-train" / "checkpoint.json").read_text())
    assert manifest["model"] == "qrnn" and manifest["config"]["projection"] == 8
    assert manifest["training"]["steps"] == 4 and manifest["training"]["train"] == "trecqa-train"
    assert "qrnn-train: running train" in first.stderr and "qrnn-train: trained qrnn: 4 steps" in first.stderr
    scored = (folder / "qrnn.run").read_text()
    assert str(folder / "qrnn-train") in scored and manifest["hash"] in scored  # scored with that checkpoint
    assert first.stdout.splitlines()[1].startswith("qrnn ")  # the leaderboard: the train stage is no run on it

    stamp = (folder / "qrnn-train" / "checkpoint.json").stat().st_mtime_ns
    second = rerank("run", str(spec))
    assert "qrnn-train: up to date" in second.stderr and "qrnn: up to date" in second.stderr
    assert "running" not in second.stderr and second.stdout == first.stdout
    assert (folder / "qrnn-train" / "checkpoint.json").stat().st_mtime_ns == stamp

    spec.write_text(TINY.replace('"qrnn-train"', '"renamed"'))  # the stage renamed: trained again, the old folder noted
    renamed = rerank("run", str(spec))
    assert "renamed: running train" in renamed.stderr and f"{folder / 'qrnn-train'}: of no stage" in renamed.stderr



def test_a_changed_training_key_trains_again_and_rescores(tmp_path):
    """The reuse rule itself, without training: a train stage's fingerprint moves with any of its keys, a record of
    another fingerprint or of another checkpoint's hash is no reuse, and a checkpoint's hash is what its score
    stages' fingerprints read of it."""
    from rerank.pipeline import FINGERPRINT_FILE, _checkpoint_reused, _fingerprint

    stage = {"name": "qrnn-train", "kind": "train", "model": "qrnn", "train": "trecqa-train", "steps": 4}
    fingerprint = _fingerprint("trecqa-dev", stage, "")
    assert _fingerprint("trecqa-dev", {**stage, "seed": 7}, "") != fingerprint
    assert _fingerprint("trecqa-dev", {**stage, "train": "wikiqa-train"}, "") != fingerprint
    folder = tmp_path / "qrnn-train"
    folder.mkdir()
    (folder / "checkpoint.json").write_text(json.dumps({"hash": "abc"}))
    (folder / FINGERPRINT_FILE).write_text(json.dumps({"fingerprint": fingerprint, "hash": "abc"}))
    assert _checkpoint_reused(folder, fingerprint) and not _checkpoint_reused(folder, "other")
    (folder / "checkpoint.json").write_text(json.dumps({"hash": "retrained"}))
    assert not _checkpoint_reused(folder, fingerprint)
    score = {"name": "qrnn", "kind": "score", "model": "qrnn", "checkpoint": "qrnn-train"}
    assert _fingerprint("trecqa-dev", score, "c+abc") != _fingerprint("trecqa-dev", score, "c+retrained")


@pytest.mark.parametrize("edit, message", [
    (("steps = 4", "stepz = 4"), "stage 'qrnn-train': unknown key 'stepz': did you mean steps?"),
    (("dev_fraction = 0.2", "dev_fraction = 2"), "stage 'qrnn-train': dev_fraction must be in [0, 1), not 2.0"),
    (("hidden = 8", "hiden = 8"), "stage 'qrnn-train': unknown qrnn option(s) hiden; known: dropout"),
    (('model = "qrnn"', 'model = "overlap"'), "stage 'qrnn-train': cannot train model 'overlap'"),
    (('model = "qrnn"\nsteps', 'model = "ctrn"\nsteps'), "stage 'qrnn': checkpoint 'qrnn-train' trains model 'ctrn', "
                                                         "not 'qrnn'"),
    (("threads = 1\noptions", "evaluate = true\noptions"), "a train stage writes a checkpoint, not a run to evaluate"),
    (("dev_fraction = 0.2\n", ""), "stage 'qrnn-train': eval_every, dev_depth: options of the dev evaluation, which "
                                  "needs a dev set (dev, dev_fraction or dev_fold)"),
])
def test_bad_train_stage_keys_get_one_line_before_any_stage_runs(rerank, session_home, tmp_path, edit, message):
    spec = tmp_path / "bad-train.toml"
    assert edit[0] in TINY
    spec.write_text(TINY.replace(*edit))
    done = rerank("run", str(spec), check=False)
    assert done.returncode != 0 and message in done.stderr and done.stderr.count("\n") == 1
    assert not (session_home / "runs" / "bad-train" / "qrnn-train").exists()

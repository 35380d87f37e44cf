"""MTN, the flat Transformer and the GRU seq2seq: tiny configurations, trained in-process on a made-up log."""

from __future__ import annotations

import json

import pytest
import torch

from rerank.errors import DataError, UsageError
from rerank.models.base import model_spec
from rerank.models.generators import MTN, beam_search, new_generator
from rerank.train_generator import GeneratorArgs, train_generator

TINY = {"d_model": 16, "heads": 2, "ff": 32, "dropout": 0.0, "max_query_tokens": 4, "max_queries": 4}
SESSIONS = [["cheap flights", "cheap flights paris", "paris hotels"], ["weather rome", "rome hotels"],
            ["cheap hotels", "paris hotels"], ["flights rome", "cheap flights rome"]] * 3


def log_file(tmp_path, sessions=SESSIONS):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"session": f"s{i}", "user": f"u{i}", "queries": s}) + "\n"
                            for i, s in enumerate(sessions)))
    return path


@pytest.mark.parametrize("family", ["mtn", "transformer", "seq2seq", "hred"])
def test_likelihoods_are_the_teacher_forced_loss(family):
    torch.manual_seed(0)
    model = new_generator(family, [q for s in SESSIONS for q in s], **TINY).eval()
    session, target = ["cheap flights", "cheap flights paris"], "paris hotels"
    from rerank.models.generators import TrainedSuggester

    suggester = TrainedSuggester(model, family, "h", beam=3)
    (log_likelihood,) = suggester.likelihoods(session, [target])
    assert log_likelihood == pytest.approx(-model.loss([session], [target]).item() * 3, rel=1e-4)  # 2 words + </s>
    found = beam_search(model, session, beam=3, k=3)
    assert 1 <= len(found) <= 3 and len({t for t, _ in found}) == len(found) and all(t for t, _ in found)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


@pytest.mark.parametrize("family", ["mtn", "transformer", "seq2seq", "hred"])
def test_last_position_logits_are_the_full_logits_last_row(family):
    torch.manual_seed(0)
    model = new_generator(family, [q for s in SESSIONS for q in s], **TINY).eval()
    memory = model.encode([SESSIONS[0], SESSIONS[1]])
    prefix = model.target_ids(["cheap flights paris", "rome"])[:, :-1]  # the second row ends in padding
    with torch.no_grad():
        last, full = model.logits(memory, prefix, last=True), model.logits(memory, prefix)
    assert last.shape == (2, 1, full.shape[-1])
    assert torch.allclose(last[:, 0], full[:, -1], atol=1e-6)


def test_mtn_session_encoder_is_masked():
    """A query's session vector reads the queries before it, never after: the first query's tokens do not change
    when a later query does."""
    torch.manual_seed(0)
    model = new_generator("mtn", ["a b c d e f"], **TINY).eval()
    assert isinstance(model, MTN)
    first, _ = model.encode([["a b", "c d"]])
    other, _ = model.encode([["a b", "e f"]])
    width = TINY["max_query_tokens"]
    assert torch.allclose(first[0, :width], other[0, :width], atol=1e-6)
    assert not torch.allclose(first[0, width:], other[0, width:])


def test_an_over_long_query_is_cut_and_counted():
    model = new_generator("mtn", ["a b c d e f"], **TINY)
    model.encode([["a b c d e f", "a"]])
    model.encode([["a b c d e f"]])
    assert model.vocab.cut == {"a b c d e f"}


@pytest.mark.parametrize("family", ["mtn", "transformer"])
def test_training_keeps_the_best_dev_checkpoint_and_suggests_from_it(tmp_path, family):
    args = GeneratorArgs(train=str(log_file(tmp_path)), output=str(tmp_path / "ck"), steps=30, batch=4, lr=3e-3,
                         eval_every=10, patience=5, model_options=TINY)
    result = train_generator(family, args, log=lambda _m: None)
    manifest = json.loads((tmp_path / "ck" / "checkpoint.json").read_text())
    assert manifest["model"] == family and manifest["training"]["ended"] == "steps"
    assert result.best == pytest.approx(max(h["-cross-entropy"] for h in result.history), abs=1e-4)
    assert manifest["training"]["dev_value"] == result.best
    suggester = model_spec(family).load(str(tmp_path / "ck"), beam=2)
    assert suggester.suggest(["cheap flights"], 2)
    # the same seed trains the same weights
    again = GeneratorArgs(**{**args.__dict__, "output": str(tmp_path / "ck2")})
    train_generator(family, again, log=lambda _m: None)
    assert json.loads((tmp_path / "ck2" / "checkpoint.json").read_text())["hash"] == manifest["hash"]


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    args = GeneratorArgs(train=str(log_file(tmp_path)), output=str(tmp_path / "ck"), steps=2, batch=4,
                         eval_every=2, model_options=TINY)
    train_generator("transformer", args, log=lambda _m: None)
    with pytest.raises(UsageError, match="trained for model 'transformer', not 'mtn'"):
        model_spec("mtn").load(str(tmp_path / "ck"))


def test_a_split_without_training_pairs_is_refused(tmp_path):
    path = log_file(tmp_path, [["only one"], ["again", "again"]] * 4)
    with pytest.raises(DataError, match="leave no .prefix, next query. pair"):
        train_generator("mtn", GeneratorArgs(train=str(path), output=str(tmp_path / "ck"), model_options=TINY),
                        log=lambda _m: None)


def test_an_unknown_architecture_option_is_refused(tmp_path):
    with pytest.raises(UsageError, match="unknown mtn option.s. layers; known: d_model"):
        train_generator("mtn", GeneratorArgs(train=str(log_file(tmp_path)), output=str(tmp_path / "ck"),
                                             model_options={"layers": 2}), log=lambda _m: None)


"""The MiniLM cross-encoder and bi-encoder, the training loop and checkpoints, on a tiny random BERT."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import math
import re
import shutil
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rerank.data import get_dataset  # noqa: E402
from rerank.errors import DataError, UsageError  # noqa: E402
from rerank.models.base import BF16_EMULATED, bf16_is_emulated, load_model  # noqa: E402
from rerank.models.bert import CrossEncoderReranker, cls_logits, minilm_path, new_trainable, supports_cls_logits  # noqa: E402
from rerank.runs import QueryRanking, RunHeader, RunWriter  # noqa: E402
from rerank.checkpoint import content_hash, read_checkpoint  # noqa: E402
from rerank.train import TrainArgs, train  # noqa: E402


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A random 2-layer, 32-dim BERT with the MiniLM tokenizer: a base that trains in seconds."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=512)
    transformers.BertModel(config).save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_bert, tmp_path_factory, data_root):
    """A checkpoint trained for a few steps on TrecQA dev with held-out queries for early stopping."""
    import os

    os.environ.setdefault("RERANK_DATA", str(data_root))
    out = tmp_path_factory.mktemp("ck") / "bert"
    args = TrainArgs(train="trecqa-dev", output=str(out), dev_fraction=0.25, steps=4, eval_every=2, dev_depth=10,
                     batch_groups=2, negatives=3, model_options={"base": str(tiny_bert), "max_length": 64})
    result = train("bert", args)
    return out, result


def test_score_batch_shape_and_gradients(tiny_bert):
    """Training scores through cls_logits: without dropout, its gradients are the full forward's."""
    model = new_trainable(base=str(tiny_bert), max_length=32)
    queries, docs = ["a query", "another"], [["doc one", "doc two is longer", "doc three"], ["x", "y", "z"]]
    scores = model.score_batch(queries, docs)
    assert scores.shape == (2, 3)
    scores.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.eval()  # dropout off: the same function, so the same gradients
    gradients = []
    for logits in (lambda: model.score_batch(queries, docs),
                   lambda: model.encoder(**model.tokenizer([q for q in queries for _ in range(3)],
                                                           [d for row in docs for d in row], padding=True,
                                                           return_tensors="pt")).logits):
        model.zero_grad()
        logits().sum().backward()
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert gradients[0].shape == gradients[1].shape and torch.allclose(*gradients, atol=1e-5)


def test_weights_saved_in_float16_train_and_embed_in_float32(tmp_path):
    """transformers 5 loads a float16 save as float16: a checkpoint or encoder carried that way trained in float16
    and embedded queries in it on the CPU."""
    from rerank.models.bert import BiEncoderReranker

    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64)
    transformers.BertModel(config).half().save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(tmp_path)
    assert {p.dtype for p in new_trainable(base=str(tmp_path), max_length=32).parameters()} == {torch.float32}
    assert {p.dtype for p in BiEncoderReranker(path=tmp_path).model.parameters()} == {torch.float32}


def test_training_needs_a_bert_base(tmp_path):
    """cls_logits is BERT's attention: another architecture as `-O base=DIR` is a clear error, not a wrong model."""
    config = transformers.RobertaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=64)
    transformers.RobertaModel(config).save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(tmp_path)
    with pytest.raises(UsageError, match="not a BERT encoder.*roberta"):
        new_trainable(base=str(tmp_path))


def test_length_sorted_inference_equals_plain_forward(tiny_checkpoint):
    folder, _ = tiny_checkpoint
    model = load_model("bert", str(folder), batch_size=3)
    texts = ["short", "a somewhat longer passage about ranking " * 3, "mid length text here", "x " * 40, "tiny"]
    fast = model.score("what is ranking", ["a", "b", "c", "d", "e"], texts)
    plain = model.model(**model.tokenizer(["what is ranking"] * 5, texts, padding=True, truncation=True,
                                          max_length=model.max_length, return_tensors="pt")).logits[:, 0]
    assert max(abs(a - b) for a, b in zip(fast, plain.tolist())) < 1e-5
    assert model.use_cls_logits  # the default path is cls_logits, so this compares it with Hugging Face's


def test_cls_logits_equal_the_full_forward(tiny_checkpoint):
    """Packed real tokens and a [CLS]-only last layer give Hugging Face's logits: padded, unpadded, one row,
    without segment ids; int8 runs through it too. Other attention variants keep the Hugging Face forward."""
    folder, _ = tiny_checkpoint
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    texts = ["short", "a somewhat longer passage about ranking " * 3, "mid length text here", "x " * 40, "tiny"]
    with torch.inference_mode():
        for batch in (texts, texts[:1], ["same length", "same length"]):
            inputs = tokenizer(["what is ranking"] * len(batch), batch, padding=True, return_tensors="pt")
            assert torch.allclose(cls_logits(model, **inputs), model(**inputs).logits, atol=1e-5)
        del inputs["token_type_ids"]
        assert torch.allclose(cls_logits(model, **inputs), model(**inputs).logits, atol=1e-5)
    int8 = load_model("bert", str(folder), quantize=True)
    fp32 = load_model("bert", str(folder)).score("what is ranking", list("abcde"), texts)
    assert int8.use_cls_logits and 0 < max(abs(a - b) for a, b in
                                           zip(int8.score("what is ranking", list("abcde"), texts), fp32)) < 0.05
    assert supports_cls_logits(model)
    model.config.position_embedding_type = "relative_key"
    assert not supports_cls_logits(model)


def test_bf16_scores_close_to_fp32_and_cached_apart(tiny_checkpoint):
    folder, _ = tiny_checkpoint
    texts = ["short", "a somewhat longer passage about ranking " * 3, "mid length text here", "x " * 40, "tiny"]
    fp32, bf16 = load_model("bert", str(folder)), load_model("bert", str(folder), precision="bf16")
    a, b = fp32.score("what is ranking", list("abcde"), texts), bf16.score("what is ranking", list("abcde"), texts)
    assert max(abs(x - y) for x, y in zip(a, b)) < 0.05 and a != b
    assert bf16.provenance()["precision"] == "bf16"  # the score cache keys on provenance: no mixing
    with pytest.raises(UsageError, match="--precision"):
        load_model("bert", str(folder), precision="fp8")


def test_scoring_device(tiny_checkpoint):
    """--device cpu is the default and leaves the provenance (and so the score cache) as before; a GPU torch cannot
    see, or another device, is refused at load; other models take no --device."""
    folder, _ = tiny_checkpoint
    default, cpu = load_model("bert", str(folder)), load_model("bert", str(folder), device="cpu")
    assert default.provenance() == cpu.provenance() and "device" not in cpu.provenance()
    assert cpu.score("what is ranking", ["a"], ["a passage"]) == default.score("what is ranking", ["a"], ["a passage"])
    with pytest.raises(UsageError, match="--device must be cpu or cuda"):
        load_model("bert", str(folder), device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA GPU here"):
            load_model("bert", str(folder), device="cuda", quantize=True)
    with pytest.raises(UsageError, match="--device is an option of bert only, not minilm-bi"):
        load_model("minilm-bi", device="cuda")


def test_length_and_threads_out_of_range_are_refused_before_scoring(tiny_checkpoint):
    """A length past the position table would only fail on the first long text, mid-run; 0 used to mean 'default'."""
    folder, _ = tiny_checkpoint
    with pytest.raises(UsageError, match="--max-length must be a positive number of tokens, not 0"):  # before loading
        load_model("bert", str(folder), max_length=0)
    with pytest.raises(UsageError, match="--max-length must be between 1 and 512 .*, not 513"):
        load_model("bert", str(folder), max_length=513)
    with pytest.raises(UsageError, match="--max-length must be between 1 and 512"):
        load_model("minilm-bi", max_length=1000)
    for threads in (0, -2, 1025):  # 20,000 ended the process in libgomp, 100,000 in a segmentation fault
        with pytest.raises(UsageError, match=f"--threads must be between 1 and 1024, not {threads}"):
            load_model("bert", str(folder), threads=threads)


def test_pipeline_bert_options_are_checked_before_any_stage_runs(tiny_checkpoint, rerank, tmp_path):
    """A pipeline's bert stage with options loading refuses (precision = "fp64", quantize with compile, max_length
    past the positions) failed only when its model loaded, after the stages before it had run."""
    folder, _ = tiny_checkpoint
    spec = tmp_path / "p.toml"
    for extra, words in (('precision = "fp64"', "precision must be one of fp32, bf16, not 'fp64'"),
                         ("quantize = true\ncompile = true", "compile does not take int8 (quantize) models; use one of them"),
                         ("max_length = 513", "max_length must be between 1 and 512 (the model's positions), not 513")):
        spec.write_text(f'dataset = "trecqa-dev"\n[[stage]]\nname = "c"\nkind = "candidates"\n[[stage]]\nname = "s"\n'
                        f'kind = "score"\ninput = "c"\nmodel = "bert"\ncheckpoint = "{folder}"\n{extra}\n')
        done = rerank("run", str(spec), check=False)
        assert done.returncode == 2 and done.stderr == f"rerank: error: stage 's': {words}\n", done.stderr


def test_cli_warns_where_bf16_is_emulated(tiny_checkpoint, rerank):
    """Without AVX512/AMX, bf16 runs several times slower than fp32: the score stage says so, fp32 never does."""
    folder, _ = tiny_checkpoint
    candidates = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    for precision in ("fp32", "bf16"):
        done = rerank("score", "--model", "bert", "--checkpoint", str(folder), "--depth", "2", "--no-cache",
                      "--precision", precision, input=candidates)
        warned = f"rerank: warning: {BF16_EMULATED}" in done.stderr
        assert warned == (precision == "bf16" and bf16_is_emulated()) and done.stdout.count("\n") > 100


def test_compiled_scores_equal_eager_and_share_the_cache(tiny_checkpoint):
    """--compile (torch.compile, frozen weights; needs the machine's C++ compiler) changes speed, not scores."""
    from rerank.score import cache_namespace

    folder, _ = tiny_checkpoint
    texts = ["short", "a somewhat longer passage about ranking " * 3, "mid length text here", "x " * 40, "tiny"]
    eager, compiled = load_model("bert", str(folder), batch_size=2), load_model("bert", str(folder), batch_size=2,
                                                                               compile=True)
    for depth in (5, 1):  # the last batch of 5 holds one pair; so does depth 1
        a = eager.score("what is ranking", list("abcde")[:depth], texts[:depth])
        b = compiled.score("what is ranking", list("abcde")[:depth], texts[:depth])
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    assert compiled.provenance()["compile"] is True and cache_namespace(compiled) == cache_namespace(eager)
    with pytest.raises(UsageError, match="--compile"):
        load_model("bert", str(folder), compile=True, quantize=True)


def test_training_writes_a_loadable_checkpoint(tiny_checkpoint):
    folder, result = tiny_checkpoint
    manifest = json.loads((folder / "checkpoint.json").read_text())
    assert manifest["model"] == "bert" and manifest["hash"] == content_hash(folder)
    # its own files, which alone it is made of from now on (what a user adds later is not; test_tk.py scores one)
    assert manifest["files"] == sorted(p.name for p in folder.iterdir() if p.name != "checkpoint.json")
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["files"])
    assert manifest["training"]["train"] == "trecqa-dev" and manifest["training"]["dev_measure"] == "MAP"
    assert manifest["config"]["max_length"] == 64 and (folder / "tokenizer.json").is_file()
    assert result.steps == 4 and len(result.history) == 2 and result.best is not None
    assert manifest["training"]["step"] == result.best_step
    # how it ended, and every dev evaluation (the checkpoint said neither: one stopped by Ctrl-C looked finished)
    assert manifest["training"]["ended"] == result.stopped == "steps" and manifest["training"]["last_step"] == 4
    assert [h["step"] for h in manifest["training"]["history"]] == [2, 4]
    versions = manifest["training"]["versions"]
    assert versions["torch"] == torch.__version__
    assert versions["transformers"] == transformers.__version__ and versions["python"].startswith("3.")
    pairs = get_dataset("trecqa-dev").files["pairs"]  # the named data set's files by content
    digest = hashlib.sha256(pairs.read_bytes()).hexdigest()
    assert manifest["training"]["dataset_sha256"] == {"trecqa-dev": {"pairs": digest}}
    held_out = manifest["training"]["held_out_qids"]  # the queries early stopping chose by, not trained on
    assert len(held_out) == int(re.search(r"held-out (\d+) queries", manifest["training"]["dev_source"]).group(1))
    assert set(held_out) < set(get_dataset("trecqa-dev").qrels())
    model = load_model("bert", str(folder))
    assert isinstance(model, CrossEncoderReranker) and model.checkpoint_hash == manifest["hash"]
    assert model.provenance()["checkpoint_hash"] == manifest["hash"]


def test_training_is_seeded(tiny_bert, tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "again"), dev_fraction=0.25, steps=4, eval_every=2,
                     dev_depth=10, batch_groups=2, negatives=3, model_options={"base": str(tiny_bert), "max_length": 64})
    train("bert", args)
    assert content_hash(tmp_path / "again") == content_hash(folder)


def test_bf16_autocast_training(tiny_bert, tiny_checkpoint, tmp_path):
    """--precision bf16 trains under autocast (other weights than the same seeded fp32 run), saves fp32 weights."""
    folder, _ = tiny_checkpoint
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "bf16"), dev_fraction=0.25, steps=4, eval_every=2,
                     dev_depth=10, batch_groups=2, negatives=3, precision="bf16",
                     model_options={"base": str(tiny_bert), "max_length": 64})
    messages = []
    train("bert", args, log=messages.append)
    assert (f"warning: {BF16_EMULATED}" in messages) == bf16_is_emulated()  # slow here, and said so
    assert read_checkpoint(tmp_path / "bf16", "bert")["training"]["precision"] == "bf16"
    assert content_hash(tmp_path / "bf16") != content_hash(folder)
    scores = load_model("bert", str(tmp_path / "bf16")).score("what is ranking", ["a", "b"], ["one passage", "two"])
    assert all(abs(s) < 1e3 for s in scores) and scores[0] != scores[1]


def dev_teacher(path):
    """A teacher run of trecqa-dev's candidates, scored by docid length (a stand-in for a teacher's scores)."""
    from rerank.data import get_dataset

    with open(path, "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-dev"})) as writer:
        for ranking in get_dataset("trecqa-dev").candidates():
            writer.write(QueryRanking.from_scores(ranking.qid, ranking.docids,
                                                 [len(d) * 0.1 for d in ranking.docids]))
    return path


def test_pairwise_loss_with_distillation(tiny_bert, tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    teacher = dev_teacher(tmp_path / "teacher.run")
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "ck"), steps=3, batch_groups=2, negatives=2,
                     loss="pairwise", teacher=str(teacher), distill="kl",
                     model_options={"base": str(tiny_bert), "max_length": 48})
    messages: list[str] = []
    result = train("bert", args, log=messages.append)
    assert re.fullmatch(r"teacher run .* scores every candidate of (\d+) of the \1 training groups", messages[0])
    assert result.best is None and result.steps == 3  # no dev set: the last state is saved
    training = read_checkpoint(tmp_path / "ck", "bert")["training"]
    assert training["teacher"] == str(teacher)
    assert training["file_sha256"] == {"teacher": hashlib.sha256(teacher.read_bytes()).hexdigest()}


def test_a_diverged_model_is_never_saved(tiny_bert, tmp_path, data_root, monkeypatch):
    """A loss gone NaN (here: teacher scores scaled past float32) stops training before the step reaches the
    weights; the dev evaluation used to save the NaN model as the best checkpoint, and the error blamed --lr."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "ck"), dev_fraction=0.25, steps=3, eval_every=1,
                     dev_depth=5, batch_groups=2, negatives=2, teacher=str(dev_teacher(tmp_path / "teacher.run")),
                     teacher_scale=1e300, model_options={"base": str(tiny_bert), "max_length": 48})
    with pytest.raises(DataError, match="diverged at step 1 .*lower --lr, --teacher-scale or --distill-weight; "
                                        "no checkpoint was written"):
        train("bert", args)
    assert not (tmp_path / "ck").exists()


def test_a_teacher_run_that_teaches_nothing_is_refused(tmp_path, data_root, monkeypatch):
    """An empty teacher run, or one scoring none of the training candidates, trained as if there were no teacher.
    An empty one (no run lines: an empty file, or a header alone) is said to be empty, not to "score none of the
    training candidates", as if it held some."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    (tmp_path / "empty.run").write_text("")
    (tmp_path / "header.run").write_text('# rerank-run: 2\n# dataset: "trecqa-dev"\n# end of run\n')
    (tmp_path / "other.run").write_text('# dataset: "trecqa-dev"\n1.4 Q0 nosuch 1 1.0 t\n1.4 Q0 none 2 0.5 t\n')
    for teacher, said in (("empty.run", "empty input: teacher run {} holds no run records"),
                          ("header.run", "empty input: teacher run {} holds no run records"),
                          ("other.run", "teacher run {} scores none of the training candidates of trecqa-dev and has "
                                        "no other query with 8 candidates")):
        args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "ck"), steps=1, teacher=str(tmp_path / teacher))
        with pytest.raises(DataError, match=re.escape(said.format(tmp_path / teacher))):
            train("bert", args)
    assert not (tmp_path / "ck").exists()


def test_distillation_on_the_unjudged_queries_of_a_teacher_run(tiny_bert, tmp_path, data_root, monkeypatch):
    """Queries the training set does not judge (here TrecQA train's, for training on dev) are distilled on,
    their text found through the teacher run's header; --teacher-min-score skips the weakly matched."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    teacher = tmp_path / "teacher.run"
    dev = get_dataset("trecqa-dev")
    judged = set(dev.qrels()) | {r.qid for r in dev.candidates()}
    rankings = [r for r in get_dataset("trecqa-train").candidates() if len(r.docids) >= 3 and r.qid not in judged]
    with open(teacher, "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-train"})) as writer:
        for i, ranking in enumerate(rankings):
            writer.write(QueryRanking.from_scores(ranking.qid, ranking.docids,
                                                 [float(i % 2)] + [0.0] * (len(ranking.docids) - 1)))
    messages: list[str] = []
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "ck"), steps=2, batch_groups=2, negatives=2, overwrite=True,
                     teacher=str(teacher), distill="kl", model_options={"base": str(tiny_bert), "max_length": 48})
    assert train("bert", args, log=messages.append).steps == 2
    assert f"distilling also on {len(rankings)} unjudged queries of the teacher run" in messages
    assert any("is a run of trecqa-train, not of trecqa-dev: its unjudged queries are trained on" in m
               for m in messages)  # fine for unlabelled queries, a leak if they were a test set's
    with pytest.raises(UsageError, match="is a run of the dev set trecqa-train: training on its queries would leak"):
        train("bert", replace(args, dev="trecqa-train"))
    # A dev run file of some of its questions: the teacher, a run of all of them, was refused as that run; its dev
    # questions are left out of distillation, the others distilled on
    dev_run = tmp_path / "dev.run"
    questions = get_dataset("trecqa-train")
    with open(dev_run, "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-train"})) as writer:
        for ranking in questions.candidates()[:5]:
            writer.write(ranking)
    dev_questions = {r.qid for r in questions.candidates()[:5] if questions.qrels().get(r.qid)}
    left_out = [r.qid for r in rankings if r.qid in dev_questions]
    messages.clear()
    train("bert", replace(args, dev=str(dev_run), dev_depth=5), log=messages.append)
    assert left_out and (f"note: {len(left_out)} queries of the teacher run {teacher} are dev queries (--dev {dev_run}) "
                         f"({', '.join(left_out)}), left out of distillation so that early stopping and the dev "
                         "figures stay held out") in messages
    assert f"distilling also on {len(rankings) - len(left_out)} unjudged queries of the teacher run" in messages
    messages.clear()
    args.teacher_min_score = 0.5
    train("bert", args, log=messages.append)
    assert f"distilling also on {len(rankings) // 2} unjudged queries of the teacher run" in messages
    packed = tmp_path / "teacher.run.gz"  # read gunzipped, as every other run file is
    packed.write_bytes(gzip.compress(teacher.read_bytes()))
    messages.clear()
    train("bert", replace(args, teacher=str(packed)), log=messages.append)
    assert f"distilling also on {len(rankings) // 2} unjudged queries of the teacher run" in messages
    plain = tmp_path / "plain.run"  # as `rerank cat --trec` writes it: no header to find the texts through
    plain.write_text("".join(line for line in teacher.read_text().splitlines(keepends=True) if not line.startswith("#")))
    with pytest.raises(UsageError, match="names no data set, index or corpus; the teacher run .*plain.run needs a "
                                         "'# ' header naming a data set known here, or its topics and corpus files") as refused:
        train("bert", replace(args, teacher=str(plain)))
    assert "--topics" not in str(refused.value)  # train has no such option


def test_average_of_checkpoints_is_their_mean_and_scores(tiny_bert, tiny_checkpoint, tmp_path, rerank):
    """`rerank average` (a model soup): the weights are the children's mean, the folder scores like any
    checkpoint and records its ingredients; one checkpoint, or two of different models, are errors."""
    from safetensors.torch import load_file

    folder, _ = tiny_checkpoint
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "seed7"), dev_fraction=0.25, steps=4, eval_every=2,
                     dev_depth=10, batch_groups=2, negatives=3, seed=7,
                     model_options={"base": str(tiny_bert), "max_length": 64})
    train("bert", args)
    rerank("average", str(folder), str(tmp_path / "seed7"), "-o", str(tmp_path / "soup"))
    a, b = (load_file(f / "model.safetensors") for f in (folder, tmp_path / "seed7"))
    soup = load_file(tmp_path / "soup" / "model.safetensors")
    name = "classifier.weight"
    assert not torch.equal(a[name], b[name]) and torch.allclose(soup[name], (a[name] + b[name]) / 2)
    manifest = read_checkpoint(tmp_path / "soup", "bert")
    assert [i["hash"] for i in manifest["training"]["soup"]] == [content_hash(folder), content_hash(tmp_path / "seed7")]
    assert manifest["training"]["train"] == "trecqa-dev"
    assert manifest["config"]["max_length"] == 64 and (tmp_path / "soup" / "tokenizer.json").is_file()
    assert len(load_model("bert", str(tmp_path / "soup")).score("what is ranking", ["a", "b"], ["one", "two"])) == 2
    lonely = rerank("average", str(folder), "-o", str(tmp_path / "lonely"), check=False)
    assert lonely.returncode != 0 and "at least two checkpoints" in lonely.stderr
    (tmp_path / "tk").mkdir()
    (tmp_path / "tk" / "checkpoint.json").write_text(json.dumps({"model": "tk", "config": {},
                                                               "hash": content_hash(tmp_path / "tk")}))
    mixed = rerank("average", str(folder), str(tmp_path / "tk"), "-o", str(tmp_path / "mixed"), check=False)
    assert mixed.returncode != 0 and "Traceback" not in mixed.stderr
    # said in a few words: it listed every config key of one model against the other's, the model names among them
    assert f"checkpoint {tmp_path / 'tk'} is a tk checkpoint, {folder} a bert one" in mixed.stderr
    assert " vs " not in mixed.stderr
    # the difference is named: checkpoints a --max-length apart were "not the same model and architecture" alone
    shutil.copytree(tmp_path / "seed7", tmp_path / "short")
    record = json.loads((tmp_path / "short" / "checkpoint.json").read_text())
    record["config"]["max_length"] = 32
    (tmp_path / "short" / "checkpoint.json").write_text(json.dumps(record))
    apart = rerank("average", str(folder), str(tmp_path / "short"), "-o", str(tmp_path / "apart"), check=False)
    assert apart.returncode != 0 and apart.stderr.strip().endswith("(max_length 32 vs 64)"), apart.stderr
    assert not (tmp_path / "lonely").exists() and not (tmp_path / "mixed").exists()
    before = (tmp_path / "seed7" / "checkpoint.json").read_text()
    onto = rerank("average", str(tmp_path / "seed7"), str(folder), "-o", str(tmp_path / "seed7"), check=False)
    assert onto.returncode != 0 and "is one of the checkpoints to average" in onto.stderr
    assert (tmp_path / "seed7" / "checkpoint.json").read_text() == before  # its training record is kept


def test_a_checkpoint_whose_files_changed_is_refused(tiny_checkpoint, tmp_path):
    """Edited weights kept the recorded hash, so the score cache served the old weights' scores; weights cut short
    gave a safetensors traceback."""
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(tiny_checkpoint[0], folder)
    load_model("bert", str(folder))  # a copy is the same checkpoint
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-8] + bytes(8))
    with pytest.raises(DataError, match="its files are not those checkpoint.json describes"):
        load_model("bert", str(folder))
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="changed or cut short"):
        load_model("bert", str(folder))


def test_training_on_a_run_file_trains_as_on_the_data_set(tiny_bert, tiny_checkpoint, tmp_path, rerank):
    """A user's candidate run file trains exactly as the data set's shipped run: here the same candidates,
    once with a header that names the data set (texts and qrels found through it), once headerless
    (`rerank cat --trec`) with the data set's parts written out as the files a user would pass."""
    from rerank.data import get_dataset

    folder, _ = tiny_checkpoint
    dataset = get_dataset("trecqa-dev")
    with_header = tmp_path / "candidates.run"
    with_header.write_text(rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout)
    plain = tmp_path / "plain.run"
    plain.write_text(rerank("cat", "--trec", str(with_header)).stdout)
    topics, corpus, qrels = tmp_path / "topics.tsv", tmp_path / "corpus.jsonl", tmp_path / "qrels.txt"
    topics.write_text("".join(f"{qid}\t{text}\n" for qid, text in dataset.topics().items()))
    corpus.write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in dataset.doc_texts().items()))
    qrels.write_text("".join(f"{qid} 0 {d} {g}\n" for qid, grades in dataset.qrels().items() for d, g in grades.items()))
    common = dict(dev_fraction=0.25, steps=4, eval_every=2, dev_depth=10, batch_groups=2, negatives=3,
                  model_options={"base": str(tiny_bert), "max_length": 64})
    for name, files in (("header", dict(candidates=str(with_header))),
                        ("plain", dict(candidates=str(plain), qrels=str(qrels), topics=str(topics), corpus=str(corpus),
                                       min_rel=dataset.min_rel))):
        out = tmp_path / name
        result = train("bert", TrainArgs(train=None, output=str(out), **files, **common))
        assert content_hash(out) == content_hash(folder), name
        manifest = read_checkpoint(out, "bert")["training"]
        assert manifest["train_source"] == ("trecqa-dev" if name == "header" else str(plain))
        assert [h["MAP"] for h in result.history] == [h["MAP"] for h in read_checkpoint(folder, "bert")["training"]["history"]]
    # --train names the data set for a headerless run's texts and qrels
    train("bert", TrainArgs(train="trecqa-dev", candidates=str(plain), output=str(tmp_path / "named"), **common))
    assert content_hash(tmp_path / "named") == content_hash(folder)
    # candidates the corpus lacks are left out, and said so; the dev evaluation ranks them below, as score
    # --skip-missing does
    lines = corpus.read_text().splitlines(keepends=True)
    corpus.write_text("".join(lines[::2]))
    messages: list[str] = []
    result = train("bert", TrainArgs(train="trecqa-dev", candidates=str(plain), corpus=str(corpus),
                                     output=str(tmp_path / "some"), **common), log=messages.append)
    assert any(re.fullmatch(r"warning: \d+ of the \d+ candidates of .*plain.run's judged queries have no text in "
                            r".*corpus.jsonl; they are left out", m) for m in messages), messages
    assert len(result.history) == 2
    # one --qrels judges every run file, a dev run of another data set too: said when it overrides a data set's
    from rerank.train import judged_run_file

    messages.clear()
    judged_run_file(str(with_header), TrainArgs(train=None, output="unused", qrels=str(qrels)), messages.append)
    assert messages == [f"warning: {with_header} is a run of trecqa-dev; --qrels {qrels} judges it, not "
                        "trecqa-dev's qrels"]


def test_a_checkpoint_records_where_its_run_files_are(tiny_bert, tmp_path, rerank, monkeypatch):
    """Run files and the files that serve them are recorded resolved, as --init's base and score's topics and
    corpus are: a checkpoint.json naming 'plain.run' says nothing once read from another folder."""
    from rerank.data import get_dataset

    runs = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    (tmp_path / "train.run").write_text(rerank("cat", "--trec", "-", input=runs).stdout)
    (tmp_path / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in get_dataset("trecqa-dev").topics().items()))
    with open(tmp_path / "dev.run", "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-train"})) as out:
        for ranking in get_dataset("trecqa-train").candidates()[:5]:
            out.write(ranking)
    monkeypatch.chdir(tmp_path)
    args = TrainArgs(train="trecqa-dev", candidates="train.run", topics="topics.tsv", dev_fraction=0.25, output="ck",
                     steps=1, batch_groups=2, negatives=2, dev_depth=5, overwrite=True,
                     model_options={"base": str(tiny_bert), "max_length": 32})
    train("bert", args)
    manifest = read_checkpoint(tmp_path / "ck", "bert")["training"]
    assert "overwrite" not in manifest
    # a second run into it replaces it only when asked: runs name the first by its hash
    with pytest.raises(UsageError, match="^ck holds a checkpoint already; pass --overwrite to replace it"):
        replace(args, overwrite=False).check()
    assert (manifest["candidates"], manifest["topics"]) == (str(tmp_path / "train.run"), str(tmp_path / "topics.tsv"))
    assert manifest["train"] == "trecqa-dev" and manifest["train_source"] == "trecqa-dev"
    # and by content: a run file regenerated under the same name is told from the one it learnt from
    digest = {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in ("train.run", "topics.tsv")}
    assert manifest["file_sha256"] == {"candidates": digest["train.run"], "topics": digest["topics.tsv"]}
    train("bert", replace(args, topics=None, dev_fraction=0.0, dev="dev.run"))  # (--topics would serve it too)
    manifest = read_checkpoint(tmp_path / "ck", "bert")["training"]
    assert manifest["dev"] == str(tmp_path / "dev.run")
    assert set(manifest["file_sha256"]) == {"candidates", "dev"}
    train("bert", replace(args, candidates="candidates", topics=None, output="ck2"))  # a run it ships: as named
    assert read_checkpoint(tmp_path / "ck2", "bert")["training"]["candidates"] == "candidates"
    assert read_checkpoint(tmp_path / "ck2", "bert")["training"]["file_sha256"] == {}


def test_a_continued_checkpoint_records_the_hash_of_the_one_it_started_from(tiny_checkpoint, tiny_bert, tmp_path):
    """--init's base was recorded by path alone: once that folder was retrained (train -o replaces it without a
    word), nothing told which weights the continuation had started from. Its content hash is recorded too."""
    parent, _ = tiny_checkpoint
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "child"), steps=1, batch_groups=2, negatives=2,
                     model_options={"base": str(parent), "max_length": 32})
    train("bert", args)
    training = read_checkpoint(tmp_path / "child", "bert")["training"]
    assert training["init_hash"] == read_checkpoint(parent, "bert")["hash"]
    train("bert", replace(args, output=str(tmp_path / "fresh"), model_options={"base": str(tiny_bert), "max_length": 32}))
    assert read_checkpoint(tmp_path / "fresh", "bert")["training"]["init_hash"] is None  # a model folder, not a checkpoint


def test_eval_on_start_lets_the_starting_weights_stay_the_best(tiny_checkpoint, tmp_path):
    """A continuation (--init) whose steps never improve on the dev set kept its first evaluated step, worse than
    the weights it started from; --eval-on-start evaluates those first, and keeps them if nothing beats them."""
    parent, parent_result = tiny_checkpoint
    args = TrainArgs(train="trecqa-dev", output=str(tmp_path / "child"), dev_fraction=0.25, steps=2, eval_every=1,
                     dev_depth=10, batch_groups=2, negatives=3, lr=1e-12, eval_on_start=True,
                     model_options={"base": str(parent), "max_length": 64})
    result = train("bert", args)
    assert [point["step"] for point in result.history] == [0, 1, 2] and result.history[0]["loss"] is None
    assert result.history[0]["MAP"] == round(parent_result.best, 4)  # the same weights on the same dev queries
    assert result.best_step == 0  # steps of a learning rate of 1e-12 change no ranking: none is better
    child = read_checkpoint(tmp_path / "child", "bert")
    assert child["training"]["step"] == 0 and child["training"]["history"][0]["step"] == 0
    from safetensors.torch import load_file

    kept, started = (load_file(folder / "model.safetensors") for folder in (tmp_path / "child", parent))
    assert kept.keys() == started.keys() and all(torch.equal(kept[name], started[name]) for name in kept)


def test_a_continuation_keeps_the_pair_length_of_its_init(tiny_checkpoint, tmp_path):
    """`train bert --init CK` without --max-length trained at the default 256 tokens, though CK learnt (and
    `rerank score` scores it) at CK's own length; --max-length still sets another."""
    parent, _ = tiny_checkpoint
    assert read_checkpoint(parent, "bert")["config"]["max_length"] == 64
    for given, kept in ({}, 64), ({"max_length": 48}, 48):
        out = tmp_path / f"child-{kept}"
        train("bert", TrainArgs(train="trecqa-dev", output=str(out), steps=1, batch_groups=1, negatives=1,
                                model_options={"base": str(parent), **given}))
        assert read_checkpoint(out, "bert")["config"]["max_length"] == kept


def test_more_negatives_than_any_query_has_are_refused_and_an_epoch_smaller_than_a_batch_is_said(tiny_bert, tmp_path):
    """--negatives 100000000 filled memory sampling repeats (or hung) before training began; --batch-groups above an
    epoch's group count made every step a whole epoch without a word."""
    common = dict(train="trecqa-dev", steps=1, model_options={"base": str(tiny_bert), "max_length": 32})
    with pytest.raises(UsageError, match=r"--negatives 100000000: no training query of trecqa-dev has more than "
                                         r"\d+ non-relevant candidates; give at most \d+"):
        train("bert", TrainArgs(output=str(tmp_path / "a"), negatives=100_000_000, **common))
    assert not (tmp_path / "a").exists()
    messages: list[str] = []
    train("bert", TrainArgs(output=str(tmp_path / "b"), batch_groups=100_000, negatives=1, **common),
          log=messages.append)
    assert any(re.fullmatch(r"note: an epoch has \d+ groups, fewer than --batch-groups 100000: each step trains on "
                            r"a whole epoch", m) for m in messages), messages


def test_an_interrupt_while_the_replaced_checkpoint_is_deleted_says_what_it_kept(tiny_checkpoint, tmp_path,
                                                                                   monkeypatch):
    """A dev evaluation's checkpoint takes -o's place, then the one it replaced (an older run's, with --overwrite;
    or this run's earlier best) is deleted: Ctrl-C there came after -o held the new checkpoint, yet training said
    "no checkpoint of this run was written" (or named the earlier best step) and recorded no ending in it."""
    import os
    import shutil

    import rerank.atomic

    parent, _ = tiny_checkpoint
    out = tmp_path / "ck"
    shutil.copytree(parent, out)  # an older checkpoint, replaced with --overwrite
    deleting = shutil.rmtree

    def interrupted(path, *args, **kwargs):  # while the replaced checkpoint, moved aside, is deleted
        moved_aside = os.path.basename(path) == ".ck.old" and os.path.exists(path)
        deleting(path, *args, **kwargs)
        if moved_aside:
            raise KeyboardInterrupt

    monkeypatch.setattr(rerank.atomic.shutil, "rmtree", interrupted)
    messages: list[str] = []
    args = TrainArgs(train="trecqa-dev", output=str(out), overwrite=True, dev_fraction=0.25, steps=2, eval_every=1,
                     dev_depth=10, batch_groups=2, negatives=3, eval_on_start=True,
                     model_options={"base": str(parent), "max_length": 64})
    with pytest.raises(KeyboardInterrupt):
        train("bert", args, log=messages.append)
    training = read_checkpoint(out, "bert")["training"]
    assert training["step"] == 0 and training["eval_on_start"]  # this run's first checkpoint is in place
    assert training["ended"] == "interrupted at step 0"
    assert re.fullmatch(rf"training interrupted at step 0; {re.escape(str(out))} keeps the best checkpoint so far "
                        r"\(step 0, dev MAP [0-9.]+\)", messages[-1]), messages
    # Without a dev set the one checkpoint is saved at the end: interrupted there, it said only "interrupted"
    messages.clear()
    with pytest.raises(KeyboardInterrupt):
        train("bert", replace(args, dev_fraction=0.0, eval_on_start=False, steps=1), log=messages.append)
    training = read_checkpoint(out, "bert")["training"]
    assert training["step"] == 1 and training["ended"] == "interrupted at step 1"
    assert messages[-1] == f"training interrupted at step 1; {out} holds its checkpoint of step 1"


@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_training_says_what_it_kept(tiny_checkpoint, tmp_path, data_root, signal_name, code):
    """Ctrl-C (or a scheduler's SIGTERM) said only 'interrupted', and the checkpoint recorded no ending: whether -o
    held this run's best weights, and from which step, was left to guess. The signal's own line comes last."""
    import os
    import subprocess
    import sys

    from signals import signal_when_ready

    parent, _ = tiny_checkpoint
    out = tmp_path / "ck"
    env = {**os.environ, "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "rerank", "train", "bert", "--train", "trecqa-dev", "--dev-fraction", "0.25",
         "--steps", "100000", "--eval-every", "1", "--patience", "100000", "--dev-depth", "10", "--batch-groups", "2",
         "--negatives", "3", "--init", str(parent), "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    err = signal_when_ready(process, (out / "checkpoint.json").is_file, signal_name, "rerank train")  # its first kept
    assert process.returncode == code, err
    said = re.search(r"rerank: training interrupted at step (\d+); (\S+) keeps the best checkpoint so far "
                     r"\(step (\d+), dev MAP [0-9.]+\)", err)
    assert said and said.group(2) == str(out), err
    # the signal is named last, after what unwinding said (SIGTERM's came before the step line)
    assert err.splitlines()[-1] == ("rerank: interrupted" if signal_name == "SIGINT" else "rerank: terminated"), err
    training = read_checkpoint(out, "bert")["training"]
    assert training["ended"] == f"interrupted at step {said.group(1)}" and training["step"] == int(said.group(3))


def test_an_interrupted_overwrite_says_the_old_checkpoint_is_still_there(tiny_checkpoint, tmp_path, data_root):
    """`train -o CK --overwrite` interrupted before its first checkpoint said "no checkpoint of this run was written
    to CK", leaving the user to wonder whether CK had lost the checkpoint it held."""
    import os
    import subprocess
    import sys

    from signals import signal_when_ready

    parent, _ = tiny_checkpoint
    out, log = tmp_path / "ck", tmp_path / "stderr.txt"
    shutil.copytree(parent, out)
    before = (out / "checkpoint.json").read_text()
    env = {**os.environ, "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as stderr:  # no dev set: the checkpoint is written when its 100000 steps end
        process = subprocess.Popen(
            [sys.executable, "-m", "rerank", "train", "bert", "--train", "trecqa-dev", "--steps", "100000",
             "--batch-groups", "2", "--negatives", "3", "--init", str(parent), "-o", str(out), "--overwrite"],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=env, cwd=tmp_path)
        signal_when_ready(process, lambda: "step 10/100000" in log.read_text(), "SIGINT", "rerank train")
    assert process.returncode == 130
    assert re.search(rf"rerank: training interrupted at step \d+; no checkpoint of this run was written: "
                     rf"{re.escape(str(out))} still holds the checkpoint it held before\nrerank: interrupted\n$",
                     log.read_text()), log.read_text()
    assert (out / "checkpoint.json").read_text() == before


def test_qrels_read_from_a_pipe_train_and_have_no_digest(tiny_bert, tmp_path, data_root, monkeypatch):
    """--qrels <(zcat qrels.gz) was read, then opened again to hash it: /dev/fd/N resolved to a path that is not
    there (a traceback after the model had loaded), and a named FIFO waited for a writer for ever."""
    import os

    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    run = tmp_path / "train.run"
    with open(run, "w") as handle, RunWriter(handle, RunHeader({"dataset": "trecqa-dev"})) as writer:
        for ranking in dataset.candidates():
            writer.write(ranking)
    read_end, write_end = os.pipe()  # what the shell's <(...) hands over; the qrels fit in its buffer
    os.write(write_end, "".join(f"{q} 0 {d} {g}\n" for q, grades in dataset.qrels().items()
                                for d, g in grades.items()).encode())
    os.close(write_end)
    try:
        train("bert", TrainArgs(train=None, candidates=str(run), qrels=f"/dev/fd/{read_end}",
                                output=str(tmp_path / "ck"), steps=1, batch_groups=2, negatives=2,
                                model_options={"base": str(tiny_bert), "max_length": 32}))
    finally:
        os.close(read_end)
    digests = read_checkpoint(tmp_path / "ck", "bert")["training"]["file_sha256"]
    assert digests == {"candidates": hashlib.sha256(run.read_bytes()).hexdigest()}


def test_a_teacher_of_a_training_run_file_that_names_no_data_set(tiny_bert, tmp_path, data_root, monkeypatch):
    """A headerless training run (its files passed) has no data set to hold a teacher run's against: no warning
    that the teacher is 'a run of trecqa-dev, not of plain.run' when nothing says the two differ. Its queries are
    the training queries (the same words over documents of the same texts, though named otherwise): their scores
    teach every training group, and they are not distilled on as queries of their own."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.data import get_dataset

    dataset = get_dataset("trecqa-dev")
    plain, teacher = tmp_path / "plain.run", tmp_path / "teacher.run"
    for path, header in ((plain, RunHeader()), (teacher, RunHeader({"dataset": "trecqa-dev"}))):
        with open(path, "w") as handle, RunWriter(handle, header) as writer:
            for ranking in dataset.candidates():
                writer.write(ranking)
    plain.write_text("".join(line for line in plain.read_text().splitlines(keepends=True) if line[0] != "#"))
    topics, corpus, qrels = tmp_path / "topics.tsv", tmp_path / "corpus.jsonl", tmp_path / "qrels.txt"
    topics.write_text("".join(f"{qid}\t{text}\n" for qid, text in dataset.topics().items()))
    corpus.write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in dataset.doc_texts().items()))
    qrels.write_text("".join(f"{qid} 0 {d} {g}\n" for qid, grades in dataset.qrels().items() for d, g in grades.items()))
    messages: list[str] = []
    train("bert", TrainArgs(train=None, candidates=str(plain), qrels=str(qrels), topics=str(topics),
                            corpus=str(corpus), teacher=str(teacher), output=str(tmp_path / "ck"), steps=1,
                            batch_groups=2, negatives=2, model_options={"base": str(tiny_bert), "max_length": 32}),
          log=messages.append)
    assert not [m for m in messages if "is a run of" in m], messages
    covered = [m for m in messages if m.startswith(f"teacher run {teacher} scores every candidate of")]
    assert len(covered) == 1 and re.fullmatch(r".* of (\d+) of the \1 training groups", covered[0]), messages
    assert not [m for m in messages if "ids of training queries" in m], messages
    assert [m for m in messages if re.search(r"are training queries of .*, left out of distillation", m)], messages


def test_bad_training_data(tmp_path, rerank):
    """What `rerank train` refuses about its training data, before a model loads."""
    runs = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    (tmp_path / "dev.run").write_text(runs)
    (tmp_path / "plain.run").write_text(rerank("cat", "--trec", "-", input=runs).stdout)
    (tmp_path / "qrels.txt").write_text("1 0 d 1\n")
    (tmp_path / "topics.tsv").write_text("1\tnot one of trecqa-dev's questions\n")
    (tmp_path / "empty.run").write_text("")
    (tmp_path / "nothing-relevant.qrels").write_text("".join(  # every dev candidate judged, none relevant
        f"{line.split()[0]} 0 {line.split()[2]} 0\n" for line in runs.splitlines() if not line.startswith("#")))
    for args, words in (
            (("--train", "trecqa-train", "--dev", "dev.run", "--qrels", "nothing-relevant.qrels", "--steps", "1",
              "--dev-depth", "1", "--max-length", "32"),  # (were it not refused: train briefly, fail here)
             "--dev dev.run: no query of trecqa-dev has a relevant candidate (grade >= 1)"),
            (("--candidates", "empty.run"), "empty input: empty.run holds no run records"),
            (("--train", "trecqa-dev", "--candidates", "empty.run"), "empty input: empty.run holds no run records"),
            (("--candidates", "dev.run", "--dev", "empty.run"), "empty input: empty.run holds no run records"),
            ((), "give the training data: --train DATASET, or --candidates RUN_FILE"),
            (("--train", "trec-dl-2020", "--candidates", "bm2"), "--candidates bm2 is neither a run of trec-dl-2020 "
                                                                 "(bm25, bm25-rm3) nor a run file"),
            # a data set that ships no run: "candidate run file not found: bm25" said nothing of that
            (("--train", "vaswani", "--candidates", "bm25"), "--candidates bm25 is no run file, and vaswani ships no "
                                                             "candidate run to name: retrieve some (rerank retrieve "
                                                             "vaswani > FILE) and pass --candidates FILE"),
            (("--candidates", "nothing.run"), "candidate run file not found: nothing.run"),
            (("--candidates", "bm25"), "candidate run file not found: bm25 (a run trec-dl-2019, trec-dl-2020, "
                                       "trec-dl-2021 ships? give --train DATASET too)"),
            (("--candidates", "dev.run", "--min-rel", "5", "--dev-fraction", "0.2"),
             "no training query of trecqa-dev has a relevant candidate (grade >= 5, --min-rel)"),
            (("--candidates", "dev.run", "--train", "wikiqa-dev"), "dev.run is a run of trecqa-dev, not of --train "
                                                                   "wikiqa-dev"),
            (("--candidates", "dev.run", "--dev", "dev.run"), "--dev dev.run is the training set"),
            (("--candidates", "dev.run", "--dev", "nothing"), "--dev 'nothing' is neither a data set nor a run file"),
            (("--candidates", "dev.run", "--dev", "vaswani"), "--dev vaswani ships no candidate run to evaluate on: "
                                                              "retrieve some (rerank retrieve vaswani > FILE) and "
                                                              "pass --dev FILE"),
            (("--train", "trecqa-dev", "--qrels", "qrels.txt"), "--qrels: for candidate run files"),
            (("--train", "trecqa-dev", "--min-rel", "2"), "--min-rel: for candidate run files"),
            (("--candidates", "dev.run", "--min-rel", "0"), "--min-rel must be between 1 and 2147483647, not 0"),
            (("--candidates", "plain.run"), "no qrels: the run's header names no known data set; pass --qrels FILE"),
            (("--candidates", "plain.run", "--qrels", "qrels.txt"), "plain.run needs a '# ' header naming a data set "
                                                                    "known here, or its topics and corpus"),
            (("--candidates", "dev.run", "--qrels", "qrels.txt"), "no query of dev.run is judged in qrels.txt"),
            # a file given is named, not asked for: "(pass --topics)" told the user to do what they had done
            (("--candidates", "dev.run", "--topics", "topics.tsv"), "no judged query of dev.run has a text in "
                                                                    "topics.tsv (--topics); are they the run's queries?"),
            (("--candidates", "dev.run", "--corpus", "topics.tsv"), "none of the candidates of dev.run is in "
                                                                    "topics.tsv; is --corpus the run's corpus?")):
        done = rerank("train", "bert", "-o", str(tmp_path / "ck"), *args, check=False, cwd=tmp_path)
        errors = [line for line in done.stderr.splitlines() if not line.startswith("rerank: warning: ")]
        assert done.returncode != 0 and len(errors) == 1 and words in errors[0], (args, done.stderr)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("call, refusal", [
    ("train('bert', TrainArgs(train=None, candidates='empty.run', output='ck'))",
     "empty input: empty.run holds no run records"),
    ("average_checkpoints(['ck'], 'soup')", "give at least two checkpoints to average")])
def test_training_data_and_a_soup_are_refused_before_torch_loads(tmp_path, call, refusal):
    """Torch was imported before the training data was read, and before `average` looked at what it was given, so
    each refusal of them (a run file that is empty, or judged nowhere; checkpoints of two models) came after the
    seconds that import takes; they are checked first now."""
    import subprocess
    import sys

    (tmp_path / "empty.run").write_text("")
    code = ("import sys; from rerank.errors import RerankError\n"
            "from rerank.checkpoint import average_checkpoints\nfrom rerank.train import TrainArgs, train\n"
            f"try: {call}\n"
            "except RerankError as error: print(error, 'torch' in sys.modules, sep='|')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.split("|") == [refusal, "False\n"], done.stderr


def test_a_dev_set_of_the_training_queries_is_refused(tmp_path, rerank):
    """--dev that holds training queries under another name or path (the data set of a run file, another run
    of the same queries, the run gzipped) would pick the checkpoint by them: refused as --dev TRAIN is."""
    runs = rerank("retrieve", "trecqa-dev", "--candidates", "candidates").stdout
    (tmp_path / "dev.run").write_text(runs)
    (tmp_path / "dev.run.gz").write_bytes(gzip.compress(runs.encode()))
    (tmp_path / "top.run").write_text("".join(line for line in runs.splitlines(keepends=True)  # its top 5
                                              if line.startswith("#") or int(line.split()[3]) <= 5))
    for args in (("--candidates", "dev.run", "--dev", "trecqa-dev"), ("--train", "trecqa-dev", "--dev", "dev.run"),
                 ("--candidates", "dev.run", "--dev", "dev.run.gz"), ("--candidates", "dev.run", "--dev", "top.run")):
        done = rerank("train", "bert", "-o", str(tmp_path / "ck"), "--steps", "1", "--max-length", "32", *args,
                      check=False, cwd=tmp_path)  # (were it not refused: train briefly, fail below)
        assert done.returncode != 0 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert f"--dev {args[-1]} shares " in done.stderr and "queries with the training set" in done.stderr, \
            (args, done.stderr)
    assert not (tmp_path / "ck").exists()


def test_bad_training_arguments(tmp_path):
    with pytest.raises(UsageError, match="only one of"):
        train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), dev="trecqa-dev", dev_fraction=0.2))
    with pytest.raises(UsageError, match="only one of"):
        train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), dev_fraction=0.2, dev_fold="1/5"))
    for fold in ("2", "a/5", "0/5", "6/5", "1/1"):
        with pytest.raises(UsageError, match="--dev-fold"):
            train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), dev_fold=fold))
    with pytest.raises(UsageError, match="cannot train model"):
        train("nope", TrainArgs(train="trecqa-dev", output=str(tmp_path)))
    with pytest.raises(UsageError, match="unknown data set"):
        train("bert", TrainArgs(train="nope", output=str(tmp_path)))
    with pytest.raises(UsageError, match="--precision"):
        train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), precision="fp16"))
    # tk said "--device foo: only bert trains on a GPU here", and `cpu:x` (taken for the CPU) was torch's traceback
    for model, device in itertools.product(("bert", "tk"), ("tpu", "gpu", "cuda:x", "foo", "cpu:x")):
        with pytest.raises(UsageError, match=f"--device must be cpu or cuda \\(cuda:N\\), not '{device}'"):
            train(model, TrainArgs(train="trecqa-dev", output=str(tmp_path), device=device))
    with pytest.raises(UsageError, match="only bert trains on a GPU here; train tk on --device cpu"):
        train("tk", TrainArgs(train="trecqa-dev", output=str(tmp_path), device="cuda"))
    if not torch.cuda.is_available():  # CI's machines and this project's have none
        with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA GPU here"):
            train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), device="cuda"))
    for wrong, words in (({"patience": 0}, "--patience must be positive"),
                         ({"max_minutes": 0.0}, "--max-minutes must be positive"),
                         ({"teacher": "t.run", "distill_weight": -1.0}, "--distill-weight must be >= 0"),
                         ({"metric": "MAP"}, "--metric is the dev measure: give a dev set too"),
                         ({"metric": "nDCG@0", "dev_fraction": 0.2}, "cannot read measure 'nDCG@0'"),
                         ({"dev": "trecqa-dev"}, "is the training set"),
                         ({"eval_on_start": True}, "--eval-on-start evaluates on a dev set")):  # it stopped early on training queries
        with pytest.raises(UsageError, match=words):  # refused before any model loads or step runs
            train("bert", TrainArgs(train="trecqa-dev", output=str(tmp_path), **wrong))


def test_the_thread_count_that_trained_is_recorded(tmp_path, rerank):
    """The same seed trains other weights under another torch thread count (2 threads and 1 gave BERT checkpoints
    of other hashes), and without --threads it is one per core: checkpoint.json did not say how many ran, so its
    recorded command rerun on another machine made another checkpoint with no clue why."""
    import subprocess
    import sys

    cores = int(subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                               capture_output=True, text=True, check=True).stdout)
    for typed, threads in (((), cores), (("--threads", "1"), 1)):
        rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", *typed, "-o", str(tmp_path / f"ck{threads}"))
        assert read_checkpoint(tmp_path / f"ck{threads}", "tk")["training"]["torch_threads"] == threads


def test_dev_evaluation_options_need_a_dev_set(tmp_path, rerank):
    """--patience, --eval-every and --dev-depth without a dev set were ignored: training ran to --steps and kept
    the last step, with no word that early stopping never ran."""
    for typed in (("--patience", "5"), ("--eval-every", "10", "--dev-depth", "20")):
        done = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "-o", str(tmp_path / "ck"), *typed,
                      check=False)
        assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
        assert f"{', '.join(typed[::2])}: options of the dev evaluation, which needs a dev set" in done.stderr
    assert not (tmp_path / "ck").exists()
    rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "--dev-fraction", "0.2", "--patience", "5",
           "--dev-depth", "5", "-o", str(tmp_path / "ck"))


@pytest.mark.parametrize("wrong, words", [
    ({"teacher_scale": math.inf}, "--teacher-scale must be positive and finite, not inf"),
    ({"teacher_min_score": math.nan}, "--teacher-min-score must be a finite number, not nan"),  # it dropped every query
    ({"teacher": None, "distill": "kl"}, "--distill: distillation options, which need a teacher run"),  # ignored
    ({"teacher": None, "distill_weight": 2.0, "teacher_min_score": 0.5},
     "--distill-weight, --teacher-min-score: distillation options, which need a teacher run")])
def test_distillation_options_need_a_teacher_and_finite_values(wrong, words, tiny_bert, tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    teacher = dev_teacher(tmp_path / "teacher.run")
    with pytest.raises(UsageError, match=words):
        train("bert", TrainArgs(**{"train": "trecqa-dev", "output": str(tmp_path / "ck"), "steps": 1, "batch_groups": 1,
                                   "teacher": str(teacher), "model_options": {"base": str(tiny_bert)}, **wrong}))
    assert not (tmp_path / "ck").exists()


def test_bi_encoder_matches_sentence_transformers():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = load_model("minilm-bi")
    texts = ["The kernel pooling layer counts soft matches.", "Bananas are yellow.", "Ranking with BERT " * 30]
    ours = model.score("how does kernel pooling work", ["a", "b", "c"], texts)
    reference = sentence_transformers.SentenceTransformer(str(minilm_path()), device="cpu")
    reference.max_seq_length = model.max_length
    vectors = reference.encode(["how does kernel pooling work", *texts], convert_to_tensor=True,
                               normalize_embeddings=True)
    expected = (vectors[1:] @ vectors[0]).tolist()
    assert max(abs(a - b) for a, b in zip(ours, expected)) < 1e-4
    with pytest.raises(UsageError, match="takes no --checkpoint"):
        load_model("minilm-bi", "somewhere")


def test_held_out_dev_set_is_disjoint_and_judged_alone(data_root, monkeypatch):
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.train import build_dev, judged_queries

    args = TrainArgs(train="trecqa-dev", output="unused", dev_fraction=0.25)
    judged = judged_queries("trecqa-dev", None)
    train_part, dev = build_dev(args, judged)
    dev_ids = {q.qid for q in dev.queries}
    assert dev_ids and not dev_ids & {q.qid for q in train_part}
    assert set(dev.qrels) == dev_ids  # the dev mean runs over the held-out queries only
    assert len(train_part) + len(dev_ids) == len(judged.queries)


def test_dev_folds_partition_the_judged_queries(data_root, monkeypatch):
    """k-fold cross-validation: each usable query is held out by exactly one of the n folds."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    from rerank.train import build_dev, judged_queries

    judged = judged_queries("trecqa-dev", None)
    queries = judged.queries
    held_out = []
    for k in range(1, 4):
        args = TrainArgs(train="trecqa-dev", output="unused", dev_fold=f"{k}/3")
        train_part, dev = build_dev(args, judged)
        dev_ids = {q.qid for q in dev.queries}
        assert not dev_ids & {q.qid for q in train_part} and len(train_part) + len(dev_ids) == len(queries)
        assert f"fold {k}/3" in dev.source
        held_out += dev_ids
    assert sorted(held_out) == sorted(q.qid for q in queries if q.positives)
    with pytest.raises(UsageError, match="only 1 training queries"):
        one_query = replace(judged, queries=[q for q in queries if q.positives][:1])
        build_dev(TrainArgs(train="trecqa-dev", output="unused", dev_fold="1/2"), one_query)

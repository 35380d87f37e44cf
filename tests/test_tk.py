"""TK/TKL with tiny configs: shapes, padding invariance, regions, checkpoints, stored encodings; and through
the real CLI on TrecQA dev: score on the fly, encode, score from the store, explain, budget, errors. Where a test is
about what training or scoring does and says rather than about the command, it trains and scores in this process
(`in_process`), seconds less each."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from in_process import in_process_home, score, train_tk  # noqa: F401  (fixture)
from rerank.encodings import VECTORS, encode_collection, open_store, store_folder
from rerank.errors import DataError, UsageError
from rerank.models.base import load_model
from rerank.models.tk import TKConfig, TKModule, load_tk, load_tkl, pad_ids
from rerank.runs import load_run
from rerank.checkpoint import average_checkpoints, content_hash, write_checkpoint
from retrieval_fixtures import cacm_slice  # noqa: F401  (fixture)

TINY = {"layers": 1, "heads": 2, "feedforward": 16, "dropout": 0.0, "max_doc": 60, "window": 8, "stride": 2,
        "chunk": 10, "overlap": 2, "regions": 2}
DOCS = {
    "d1": "the transformer kernel model ranks passages by soft term matches",
    "d2": "kernel pooling counts cosine similarities between query and document terms",
    "d3": "a recipe for bread with flour water salt and yeast " * 3,
    "d4": "",
    "d5": "ranking ranking ranking kernel",
}
QUERY = "how does kernel ranking work"


def tiny(variant: str = "tk", seed: int = 0, **extra) -> TKModule:
    torch.manual_seed(seed)
    module = TKModule(TKConfig.from_dict({**TINY, **extra, "variant": variant}))
    return module.eval()


def checkpoint(tmp_path, variant: str = "tk", name: str = "ck", **extra):
    folder = tmp_path / name
    folder.mkdir()
    module = tiny(variant, **extra)
    write_checkpoint(folder, variant, module.save(folder), {"note": "test"})
    return folder


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_scores_do_not_depend_on_batch_padding(variant):
    module = tiny(variant)
    texts = list(DOCS.values())
    with torch.no_grad():
        together = module.score_batch([QUERY], [texts])[0]
        alone = torch.stack([module.score_batch([QUERY], [[t]])[0, 0] for t in texts])
    assert together.shape == (len(texts),)
    assert torch.allclose(together, alone, atol=1e-5)
    assert torch.isfinite(together).all()


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_training_gradients_reach_every_trained_part(variant):
    module = tiny(variant).train()
    module.score_batch([QUERY, "bread"], [[DOCS["d1"], DOCS["d3"]], [DOCS["d3"], DOCS["d2"]]]).sum().backward()
    trained = dict(module.named_parameters())
    for name in ("mix", "encoder.layers.0.linear1.weight",
                 "region_kernels.weight" if variant == "tkl" else "log_weights.weight"):
        assert trained[name].grad is not None and trained[name].grad.abs().sum() > 0, name
    assert "table" not in module.state_dict()  # the frozen GloVe table is not saved with the weights


def test_tkl_chunks_match_whole_passage_when_one_chunk_holds_it():
    """With a chunk wider than the passage, chunked contextualisation is contextualising the one window
    (the passage after `overlap` positions of left context)."""
    wide = tiny("tkl", chunk=60, overlap=2)
    ids, mask = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4)
    window = torch.tensor([[0, 0, 5, 6, 7, 8] + [0] * 58])
    expected = wide.contextualise(window, (window != 0).float())[:, 2:6]
    assert torch.allclose(wide.encode_docs(ids, mask), expected, atol=1e-6)
    long_ids = torch.arange(2, 2 + 45)[None]  # three chunks, the last one part padding
    assert wide.encode_docs(long_ids, torch.ones(1, 45)).shape == (1, 45, 50)


def test_tkl_regions_do_not_overlap_and_lie_in_the_document(tmp_path):
    reranker = load_tkl(str(checkpoint(tmp_path, "tkl")))
    text = " ".join(["kernel ranking"] * 5 + ["bread flour"] * 10 + ["ranking kernel"] * 5)
    regions = reranker.explain(QUERY, "x", text)["regions"]
    assert 1 <= len(regions) <= 2
    for a in regions:
        assert text[a["chars"][0]:a["chars"][1]] == a["text"] and 0 <= a["tokens"][0] < a["tokens"][1] <= 40
    if len(regions) == 2:
        first, second = sorted(r["tokens"][0] for r in regions)
        assert second - first >= 8
    short = reranker.explain(QUERY, "y", "kernel ranking")["regions"]
    assert len(short) == 1 and short[0]["chars"] == [0, 14]


def test_tkl_windows_reach_every_documents_last_token():
    """Windows started every `stride` tokens and had to fit in the document: where its length less the window was
    odd, none reached its last token, and a document ending in the query's word scored as if the word were absent."""
    module = tiny("tkl", regions=1)
    with torch.no_grad():
        module.region_kernels.weight.fill_(1.0)  # a window scores higher the more it matches
    for length in (11, 12, 5, 20):
        kernels = torch.zeros(2, 1, 20, module.region_kernels.in_features)
        kernels[:, 0, length - 1] = 1.0  # the last token alone matches
        doc_mask = torch.zeros(2, 20)
        doc_mask[:, :length] = 1
        _, starts, _ = module.region_scores(kernels[:, :, :length] if length < 20 else kernels, torch.ones(2, 1),
                                            doc_mask[:, :length])
        alone = starts[0, 0].item()
        _, padded, _ = module.region_scores(kernels, torch.ones(2, 1), doc_mask)  # beside a longer document
        assert alone <= length - 1 < alone + TINY["window"] and padded[0, 0].item() == alone, (length, alone)


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_explain_parts_add_up_to_the_score(tmp_path, variant):
    """TKL's explain listed its regions' scores, which did not add up to its score (the learned region weights
    were not shown), and gave no query term a share. Now each region shows its weight and share, and the shares,
    like the query terms' (TK's and TKL's), add up to the score."""
    from rerank.models.tk_explain import render_text

    reranker = (load_tk if variant == "tk" else load_tkl)(str(checkpoint(tmp_path, variant)))
    if variant == "tkl":
        with torch.no_grad():
            reranker.module.region_weights.copy_(torch.tensor([0.7, -0.4]))
    text = " ".join(["kernel ranking"] * 5 + ["bread flour"] * 10 + ["ranking kernel"] * 5)
    for document in (text, "", "kernel"):
        shown = reranker.explain(QUERY, "x", document)
        score = reranker.score(QUERY, ["x"], [document])[0]
        assert shown["score"] == pytest.approx(score, abs=1e-5)
        assert len(shown["term_contributions"]) == len(shown["query_terms"])
        assert sum(shown["term_contributions"]) == pytest.approx(score, abs=1e-4)
        if variant == "tkl":
            assert shown["regions"] and sum(r["share"] for r in shown["regions"]) == pytest.approx(score, abs=1e-5)
    if variant == "tkl":
        first, second = reranker.explain(QUERY, "x", text)["regions"]
        assert first["share"] == pytest.approx(0.7 * first["score"]) and second["weight"] == pytest.approx(-0.4)
        assert f"{second['score']:.4f} x -0.4000 = {second['share']:+.4f}" in render_text(reranker.explain(QUERY, "x", text))


def test_explain_says_what_it_ignored_of_a_long_text_and_when_a_text_has_no_token(tmp_path):
    """A document past max_doc was shown by its first tokens alone, without a word that the rest is not read: its
    query terms at the end matched nothing and nothing said why. An empty one was shown as a document term
    "[unk]". explain now says how many tokens the model reads and where the ignored tail starts."""
    from rerank.models.tk_explain import render_text

    reranker = load_tk(str(checkpoint(tmp_path)))  # max_doc 60, max_query 30
    text = "bread flour " * 35 + "kernel ranking"
    shown = reranker.explain(QUERY, "x", text)
    assert shown["doc_read"] == {"tokens": 72, "read": 60, "limit": "max_doc=60", "ignored_from": 360,
                                 "ignored_text": "bread flour " * 5}  # its first 60 characters
    assert shown["query_read"]["ignored_from"] is None and len(shown["doc_terms"]) == 60
    assert ("the document has 72 tokens; the model reads the first 60 (max_doc=60) and ignores the rest, from "
            "character 360: 'bread flour bread") in render_text(shown)
    long_query = " ".join(["kernel"] * 31 + ["ranking"])
    assert "the query has 32 tokens; the model reads the first 30 (max_query=30) and ignores the rest, from " \
           "character 210: 'kernel ranking'" in render_text(reranker.explain(long_query, "x", text))
    empty = render_text(reranker.explain(QUERY, "x", " ?! "))
    assert "the document has no token the tokenizer reads: it is scored as one unknown token [unk]" in empty
    assert "ignores" not in render_text(reranker.explain(QUERY, "x", "kernel ranking"))


def test_explain_names_the_words_glove_lacks_and_the_plurals_it_folded(tmp_path):
    """Words GloVe lacks all read as one shared vector, so explain showed a query's "theradermq" matching a document's
    "zzqxv" as closely as itself, with no word why; a plural folded to its singular (fold_plurals) showed as
    itself. explain now names both."""
    from rerank.models.tk_explain import render_text

    shared = load_tk(str(checkpoint(tmp_path, fold_plurals=True)))
    shown = shared.explain("theradermq kernels", "x", "zzqxv kernel theradermq costs")
    assert shown["query_words"] == {"unknown": ["theradermq"], "folded": {"kernels": "kernel"}}
    assert shown["doc_words"] == {"unknown": ["zzqxv", "theradermq"], "folded": {"costs": "cost"}}
    text = render_text(shown)
    assert "document words GloVe lacks, read as one shared vector (they match each other): zzqxv, theradermq" in text
    assert "query plurals read as their singular (fold_plurals): kernels->kernel" in text
    hashed = load_tk(str(checkpoint(tmp_path, name="hashed", oov_buckets=1000)))  # each its own vector: no note
    assert hashed.explain("theradermq kernels", "x", "zzqxv")["doc_words"] == {"unknown": [], "folded": {}}


def test_glove_spans_are_offsets_in_the_text_even_where_lower_casing_lengthens_it(tmp_path):
    """GloVe's tokens were found in `text.lower()` and their offsets applied to the text, but lower-casing makes
    "İ" two characters: after one, explain showed the terms "s", "n", "ul flea", "cycl", and a query's stopwords
    were looked up at shifted offsets, so query_stopwords=false kept "is" and "the" after an "İ"."""
    reranker = load_tk(str(checkpoint(tmp_path, query_stopwords=False)))
    shown = reranker.explain("İzmir is the kernel", "x", "İİ İstanbul kernel ranking")
    assert shown["doc_terms"] == ["İ", "İ", "İ", "stanbul", "kernel", "ranking"]  # "i", then a combining dot
    assert shown["query_terms"] == ["İ", "zmir", "kernel"]
    assert shown["query_stopwords_removed"] == ["is", "the"]  # explain named neither: they were simply not there
    from rerank.models.tk_explain import render_text

    assert "query stopwords left out (query_stopwords=false): is, the" in render_text(shown)
    kept = load_tk(str(checkpoint(tmp_path, name="kept"))).explain("İzmir is the kernel", "x", "kernel")
    assert kept["query_stopwords_removed"] == [] and "stopwords left out" not in render_text(kept)


def test_explain_shows_wordpiece_pieces_as_the_tokenizer_writes_them(tmp_path):
    """With WordPiece embeddings, "theradermq" was shown as the query terms the, rade, rm, q: a stopword and three
    words, not the tokenizer's the, ##rade, ##rm, ##q."""
    reranker = load_tk(str(checkpoint(tmp_path, embeddings="minilm")))
    shown = reranker.explain("Fleas theradermq", "x", "Theradermq for fleas")
    tokenizer = reranker.module.vocabulary.tokenizer
    assert [t.lower() for t in shown["query_terms"]] == tokenizer.tokenize("Fleas theradermq")
    assert [t.lower() for t in shown["doc_terms"]] == tokenizer.tokenize("Theradermq for fleas")
    assert shown["doc_terms"][:2] == ["The", "##rade"]  # as the text spells it


def test_a_tk_stage_names_the_packages_its_vocabulary_computes_with(tmp_path):
    """A TK score stage's entry names torch's version, and that of the packages its vocabulary tokenizes and embeds
    with: numpy for GloVe's table and unknown words, transformers' tokenizer for MiniLM's WordPiece."""
    import tokenizers
    import transformers

    from rerank.runs import QueryRanking, RunHeader, Stream
    from rerank.score import score_stream

    texts = {docid: text for docid, text in DOCS.items() if text}
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in texts.items()))
    (tmp_path / "topics.tsv").write_text(f"q\t{QUERY}\n")
    expected = {"glove": {"torch": torch.__version__, "numpy": np.__version__},
                "minilm": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__}}
    for embeddings, packages in expected.items():
        reranker = load_tk(str(checkpoint(tmp_path, name=embeddings, embeddings=embeddings)), on_the_fly=True)
        stream = Stream(RunHeader().with_stage({"name": "bm25"}), [QueryRanking.from_scores("q", texts, range(4))])
        scored = score_stream(stream, reranker, 4, cache=False, topics=str(tmp_path / "topics.tsv"),
                              corpus=str(tmp_path / "corpus.jsonl"))
        assert scored.header.stages[-1]["packages"] == packages
        assert len(next(iter(scored.rankings))) == len(texts)


def test_checkpoint_round_trip_and_wrong_model(tmp_path):
    folder = checkpoint(tmp_path)
    module = tiny()
    reranker = load_tk(str(folder))
    with torch.no_grad():
        expected = module.score_batch([QUERY], [list(DOCS.values())])[0].tolist()
    assert np.allclose(reranker.score(QUERY, list(DOCS), list(DOCS.values())), expected, rtol=2e-3)  # docs rounded to float16
    with pytest.raises(UsageError, match="trained for model 'tk', not 'tkl'"):
        load_tkl(str(folder))
    for option, words in (({"batch_size": 0}, "--batch-size must be a positive number of pairs, not 0"),
                          ({"precision": "bf16"}, "--precision is an option of bert only, not tk"),
                          ({"threads": -1}, "--threads must be between 1 and 1024, not -1"),
                          ({"max_length": 64}, "--max-length is an option of bert and minilm-bi only, not tk"),
                          ({"max_length": 0}, "--max-length is an option of bert and minilm-bi only, not tk")):
        with pytest.raises(UsageError, match=words):
            load_model("tk", str(folder), **option)


def interrupted_encoding(reranker, items: list) -> Path:
    """Encode `items` in chunks of two until Ctrl-C at the fourth: a partial store of two documents."""

    def interrupted():
        for position, item in enumerate(items):
            if position == 3:
                raise KeyboardInterrupt
            yield item

    with pytest.raises(KeyboardInterrupt):
        encode_collection("toy", interrupted, len(items), reranker, chunk=2, progress=False)
    return store_folder("toy", "tk", reranker.checkpoint_hash)


def test_stored_encodings_give_the_same_scores_and_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = load_tk(str(checkpoint(tmp_path)))
    items = list(DOCS.items())
    folder = interrupted_encoding(reranker, items)
    partial = json.loads((folder / "manifest.json").read_text())
    assert partial["documents"] == 2 and not partial["complete"]
    with pytest.raises(DataError, match="incomplete .2 of 5 documents.; resume with: rerank encode"):
        open_store(folder, reranker.checkpoint_hash, "tk")
    messages: list[str] = []
    manifest = encode_collection("toy", lambda: iter(items), len(items), reranker, chunk=2, progress=False,
                                 log=messages.append)
    assert manifest["complete"] and manifest["documents"] == 5
    assert messages == [f"resuming {folder}: 2 of 5 documents are encoded already"]  # the manifest counts all 5
    store = open_store(folder, reranker.checkpoint_hash, "tk")
    fresh_folder = tmp_path / "fresh"
    encode_collection("toy", lambda: iter(items), len(items), reranker, fresh_folder, progress=False)
    assert (folder / VECTORS).read_bytes() == (fresh_folder / VECTORS).read_bytes()  # resumed == uninterrupted
    on_the_fly = reranker.score(QUERY, list(DOCS), list(DOCS.values()))
    reranker.use_store(store)
    stored = reranker.score(QUERY, list(DOCS), ["(ignored: stored)"] * len(DOCS))
    assert np.allclose(stored, on_the_fly, atol=1e-4)
    assert reranker.provenance()["encodings"].startswith("stored (")


def test_resuming_refuses_a_partial_store_shorter_than_its_recorded_progress(tmp_path, monkeypatch):
    """Resuming used to zero-pad a cut vectors file back to the recorded size (truncate lengthens) and
    checksum the zeros into a 'complete' store."""
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = load_tk(str(checkpoint(tmp_path)))
    items = list(DOCS.items())
    folder = interrupted_encoding(reranker, items)
    cut = (folder / VECTORS).read_bytes()[:-100]
    (folder / VECTORS).write_bytes(cut)
    with pytest.raises(DataError, match="truncated or corrupt: vectors.f16 is .* bytes, the manifest promises "
                                        ".*rerank encode .* --overwrite"):
        encode_collection("toy", lambda: iter(items), len(items), reranker, chunk=2, progress=False)
    assert (folder / VECTORS).read_bytes() == cut and not json.loads((folder / "manifest.json").read_text())["complete"]
    assert encode_collection("toy", lambda: iter(items), len(items), reranker, overwrite=True, progress=False)["complete"]


def test_store_refuses_other_checkpoints_and_detects_damage(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    first = load_tk(str(checkpoint(tmp_path, name="a")))
    other = load_tk(str(checkpoint(tmp_path, name="b", layers=2)))
    folder = tmp_path / "store"
    encode_collection("toy", lambda: iter(DOCS.items()), len(DOCS), first, folder, progress=False)
    with pytest.raises(UsageError, match="refusing to mix"):
        encode_collection("toy", lambda: iter(DOCS.items()), len(DOCS), other, folder, progress=False)
    with pytest.raises(UsageError, match=f"built by tk checkpoint .*{first.checkpoint_hash}"):
        open_store(folder, other.checkpoint_hash, "tk")
    data = bytearray((folder / VECTORS).read_bytes())
    data[10] ^= 0xFF
    (folder / VECTORS).write_bytes(bytes(data))
    with pytest.raises(DataError, match="does not match its checksum; rebuild it with: rerank encode"):
        open_store(folder, first.checkpoint_hash, "tk")
    (folder / VECTORS).write_bytes(bytes(data[:-6]))
    with pytest.raises(DataError, match="truncated or corrupt: vectors.f16 is .* bytes"):
        open_store(folder, first.checkpoint_hash, "tk")


def test_a_second_encode_of_a_store_being_written_is_refused(tmp_path, monkeypatch):
    """Two `rerank encode` of one store at once both appended to its files and both said they had encoded it: the
    store then held its documents twice (or interleaved) under one checksum. The one that comes second is refused
    in one line; the first finishes a store equal to one written alone."""
    from rerank.errors import BusyError

    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = load_tk(str(checkpoint(tmp_path)))
    items = list(DOCS.items())
    second: list = []

    def documents():  # the first encode, which lets a second one start once it has stored its first chunk
        for position, item in enumerate(items):
            if position == 3:
                try:
                    second.append(encode_collection("toy", lambda: iter(items), len(items), reranker, chunk=2,
                                                    progress=False))
                except BusyError as error:
                    second.append(error)
            yield item

    manifest = encode_collection("toy", documents, len(items), reranker, chunk=2, progress=False)
    assert isinstance(second[0], BusyError), f"the second encode ran alongside the first: {second[0]}"
    assert "being written by another process" in str(second[0])
    folder = store_folder("toy", "tk", reranker.checkpoint_hash)
    assert manifest["complete"] and manifest["documents"] == len(items)
    open_store(folder, reranker.checkpoint_hash, "tk")
    alone = tmp_path / "alone"
    encode_collection("toy", lambda: iter(items), len(items), reranker, alone, progress=False)
    assert (folder / VECTORS).read_bytes() == (alone / VECTORS).read_bytes()
    assert not list(folder.parent.glob(".*.lock"))  # the lock goes with its holder


# ----------------------------------------------------------------------------- the CLI on real data


def _scores(text: str) -> dict[tuple[str, str], float]:
    import io

    run = load_run(io.StringIO(text), "run")
    return {(q, d): s for q, r in run.queries.items() for d, s in zip(r.docids, r.scores)}


def _stage(text: str) -> dict:
    return [json.loads(line.split(":", 1)[1]) for line in text.splitlines() if line.startswith("# stage:")][-1]


@pytest.mark.data
def test_encode_score_explain_budget(tmp_path, rerank, in_process_home):
    ck = str(checkpoint(tmp_path))
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    fly = score(candidates, ck, cache=False)[0]
    assert _stage(fly)["encodings"].startswith("on the fly")
    encoded = rerank("encode", "trecqa-dev", "--model", "tk", "--checkpoint", ck)
    assert "1148 documents, " in encoded.stderr and "100 bytes per token" in encoded.stderr
    assert "nothing to encode" not in encoded.stderr
    # a complete store is kept, and said so: "encoded 1148 documents" claimed work this run had not done
    again = rerank("encode", "trecqa-dev", "--model", "tk", "--checkpoint", ck).stderr
    assert "nothing to encode: " in again and "holds every document's encodings already" in again, again
    stored = rerank("score", "--model", "tk", "--checkpoint", ck, "--no-cache", input=candidates).stdout
    assert _stage(stored)["encodings"].startswith("stored (")
    a, b = _scores(fly), _scores(stored)
    assert a.keys() == b.keys() and max(abs(a[k] - b[k]) for k in a) < 1e-4
    # on the fly where a store would serve, to measure what the store saves: a store had to be moved aside for that
    asked = rerank("score", "--model", "tk", "--checkpoint", ck, "--no-cache", "--on-the-fly", input=candidates).stdout
    assert _stage(asked)["encodings"] == "on the fly (asked for)" and _scores(asked) == a
    refused = rerank("score", "--model", "bert", "--checkpoint", ck, "--on-the-fly", input=candidates, check=False)
    assert refused.returncode == 2 and refused.stderr.strip() == ("rerank: error: --on-the-fly is an option of "
                                                                  "minilm-bi and tk and tkl only, not bert")

    plot = tmp_path / "explain.png"
    qid, docid = next(iter(a))
    shown = rerank("explain", "--model", "tk", "--checkpoint", ck, "--dataset", "trecqa-dev", "--qid", qid,
                   "--docid", docid, "--plot", str(plot))
    assert f"score {a[qid, docid]:.4f}" in shown.stdout and "best-matching document terms" in shown.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"
    from rerank.models.tk_explain import plot as plot_explanation

    explanation = load_model("tk", ck).explain(QUERY, "d1", DOCS["d1"])
    plot_explanation(explanation, str(tmp_path / "explain.pdf"), "tk")
    assert (tmp_path / "explain.pdf").read_bytes()[:4] == b"%PDF"  # it was PNG bytes under a .pdf name

    # run files beside --model's curve (it was one or the other): the on-the-fly run above as curve 'fly'
    (tmp_path / "fly.run").write_text(asked)
    both = rerank("budget", f"fly={tmp_path / 'fly.run'}", "--model", "tk", "--checkpoint", ck, "--depths", "2,5",
                  "--format", "json", input=candidates).stdout
    points = json.loads(both)["points"]
    assert [p["depth"] for p in points if p["model"] == "tk"] == [2, 5] and all(p["median_ms"] > 0 for p in points)
    assert [p["model"] for p in points if p["model"] != "tk"] == ["fly"]
    mixed = rerank("budget", "--model", "tk", "--checkpoint", ck, "--depths", "5", "--interpolate", "0.5",
                   "--format", "json", input=candidates).stdout
    assert {p["model"] for p in json.loads(mixed)["points"]} == {"tk+candidates"}
    stdin_twice = rerank("budget", "-", "--model", "tk", "--checkpoint", ck, "--depths", "2", input=candidates,
                         check=False)
    assert stdin_twice.returncode == 2 and "with --model, stdin is the candidate stream" in stdin_twice.stderr


@pytest.mark.data
def test_files_added_to_a_checkpoint_later_are_no_part_of_it(tmp_path, rerank):
    """A checkpoint's content hash covered every file under its folder, so a run scored into it (`score --checkpoint
    CK -o CK/scored.run`), a notes.txt or macOS's .DS_Store refused it from then on as "changed or cut short". It
    lists its own files now, hashed as hashing them all did, so its hash, and the score cache keyed on it, stand."""
    import shutil

    ck = checkpoint(tmp_path)
    manifest = json.loads((ck / "checkpoint.json").read_text())
    assert manifest["files"] == ["weights.pt"] and manifest["hash"] == content_hash(ck)
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    rerank("score", "--model", "tk", "--checkpoint", str(ck), "-o", str(ck / "scored.run"), input=candidates)
    (ck / "notes.txt").write_text("lr 1e-4 did better\n")
    (ck / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    again = rerank("score", "--model", "tk", "--checkpoint", str(ck), input=candidates)
    assert _stage(again.stdout)["checkpoint_hash"] == manifest["hash"]
    assert _scores(again.stdout) == _scores((ck / "scored.run").read_text())
    # the same scores from the cache, and not a word about the extra files
    said = [line for line in again.stderr.splitlines() if not line.startswith("rerank: scoring with tk: ")]  # progress
    assert said == ["rerank: tk: scored 1148 pairs over 81 queries (1148 from the cache)"]
    # a soup is made of its first ingredient's own files (the extras were copied into it)
    average_checkpoints([str(ck), str(checkpoint(tmp_path, name="ck2", seed=1))], str(tmp_path / "soup"))
    assert sorted(p.name for p in (tmp_path / "soup").iterdir()) == ["checkpoint.json", "weights.pt"]
    assert json.loads((tmp_path / "soup" / "checkpoint.json").read_text())["files"] == ["weights.pt"]
    # a file it lists is still its own: gone, it is refused, by name
    shutil.copytree(ck, tmp_path / "gone")
    (tmp_path / "gone" / "weights.pt").unlink()
    gone = rerank("score", "--model", "tk", "--checkpoint", str(tmp_path / "gone"), input=candidates, check=False)
    assert gone.returncode == 1 and gone.stderr.strip() == (
        f"rerank: error: checkpoint {tmp_path / 'gone'}: weights.pt that checkpoint.json lists is missing: changed or "
        "cut short since written; retrain or copy it again")
    # An older rerank's checkpoint.json was this one's without its list (the manifest is outside the hash, so it is
    # what that rerank wrote for these weights): every file under it is its own, as then, so extras refuse it ...
    del manifest["files"]
    (ck / "checkpoint.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    with pytest.raises(DataError, match="changed or cut short since written"):  # exit 1, as 'gone' above
        load_model("tk", str(ck))
    # ... and without them it scores as it did, under the same hash, from the same cache entries
    for extra in ("scored.run", "notes.txt", ".DS_Store"):
        (ck / extra).unlink()
    old = rerank("score", "--model", "tk", "--checkpoint", str(ck), input=candidates)
    assert _stage(old.stdout)["checkpoint_hash"] == manifest["hash"] and "(1148 from the cache)" in old.stderr


@pytest.mark.data
def test_bad_encodings_and_inputs(tmp_path, rerank, session_home):
    ck = str(checkpoint(tmp_path, name="ck-bad", layers=2))
    rerank("encode", "trecqa-dev", "--model", "tk", "--checkpoint", ck)
    checkpoint_hash = json.loads((Path(ck) / "checkpoint.json").read_text())["hash"]
    folder = session_home / "indexes" / "trecqa-dev" / f"tk-{checkpoint_hash[:12]}"
    vectors = folder / "vectors.f16"
    vectors.write_bytes(vectors.read_bytes()[:-100])
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    broken = rerank("score", "--model", "tk", "--checkpoint", ck, "--no-cache", input=candidates, check=False)
    assert broken.returncode == 1 and "truncated or corrupt" in broken.stderr and "rerank encode" in broken.stderr
    assert "Traceback" not in broken.stderr

    wrong = rerank("encode", "trecqa-dev", "--model", "bert", "--checkpoint", ck, check=False)
    assert wrong.returncode == 2 and "no query-independent document encodings" in wrong.stderr
    zero = rerank("encode", "trecqa-dev", "--model", "tk", "--checkpoint", ck, "--batch-size", "0", check=False)
    assert zero.returncode == 2 and zero.stderr == "rerank: error: --batch-size must be a positive number of " \
                                                   "documents, not 0\n"  # not "of pairs": encode counts documents
    missing = rerank("explain", "--model", "tk", "--checkpoint", ck, "--dataset", "trecqa-dev", "--qid", "1.4",
                     "--docid", "nope", check=False)
    assert missing.returncode == 1 and "document nope is not in" in missing.stderr
    for wrong, words in ((["--query", " "], "--query is empty"), (["--qid", "1.4", "--plot", "m.gif"], "cannot write .gif")):
        refused = rerank("explain", "--model", "tk", "--checkpoint", ck, "--dataset", "trecqa-dev", *wrong,
                         "--docid", "x", check=False)
        assert refused.returncode == 2 and words in refused.stderr, wrong


def test_encode_refuses_a_corpus_with_a_repeated_id(tmp_path, rerank, session_home):
    """`rerank index` refuses such a corpus; encode stored both, and the later one's vectors stood for both texts."""
    ck = str(checkpoint(tmp_path, name="ck-repeat"))
    corpus = tmp_path / "corpus.jsonl"
    records = [*DOCS.items(), ("d2", "another text")]
    corpus.write_text("".join(json.dumps({"id": d, "contents": t or "x"}) + "\n" for d, t in records))
    done = rerank("encode", "repeated", "--model", "tk", "--checkpoint", ck, "--corpus", str(corpus), check=False)
    assert done.returncode == 1 and "document id 'd2' appears twice" in done.stderr
    assert not (session_home / "indexes" / "repeated").exists()


def test_stored_encodings_are_used_only_for_the_documents_they_were_made_from(tmp_path, rerank, in_process_home):
    """Encodings were found by the stream's index or data set name whatever they had been encoded from: encoding
    `mine --corpus A`, then scoring texts of B (or of A since edited) under the same docids took A's vectors, and a
    second `encode mine --corpus B` resumed or kept A's store. Now each store records its documents."""
    ck = str(checkpoint(tmp_path, name="ck-origin"))
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps({"id": d, "contents": t or "x"}) + "\n" for d, t in DOCS.items()))
    second.write_text("".join(json.dumps({"id": d, "contents": "bread and yeast"}) + "\n" for d in DOCS))
    rerank("encode", "mine", "--model", "tk", "--checkpoint", ck, "--corpus", str(first))
    run = '# index: "mine"\n' + "".join(f"q1 Q0 {d} {i + 1} {-i} bm25\n" for i, d in enumerate(DOCS))
    topics = tmp_path / "topics.tsv"
    topics.write_text(f"q1\t{QUERY}\n")

    def encodings(corpus: Path) -> str:
        return _stage(score(run, ck, cache=False, topics=str(topics), corpus=str(corpus))[0])["encodings"]

    assert encodings(first).startswith("stored (")
    other = encodings(second)
    assert other.startswith("on the fly (stored encodings in ") and f"they are of {first.resolve()}, not of " \
        f"{second.resolve()}; to store them: rerank encode --model tk --checkpoint {ck} mine --corpus " \
        f"{second.resolve()} --overwrite)" in other
    refused = rerank("encode", "mine", "--model", "tk", "--checkpoint", ck, "--corpus", str(second), check=False)
    assert refused.returncode == 2 and "holds encodings of other documents: they are of" in refused.stderr
    assert "pass --overwrite to replace them" in refused.stderr
    first.write_text(first.read_text().replace("bread", "cake"))  # edited since it was encoded
    assert "they were encoded from another version of" in encodings(first)
    rerank("encode", "mine", "--model", "tk", "--checkpoint", ck, "--corpus", str(second), "--overwrite")
    assert encodings(second).startswith("stored (")


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_explain_json_holds_every_part_of_the_score(tmp_path, rerank, variant):
    """explain had only its text, which left out the query terms' learned weights (term_weights=idf), TK's kernel
    sums and weights and TKL's region weights: the score could not be recomputed from what it showed. `--format
    json` gives them, as one object, and the score they make is `rerank score`'s for the same pair."""
    ck = str(checkpoint(tmp_path, variant, term_weights="idf"))
    corpus, topics = tmp_path / "c.jsonl", tmp_path / "t.tsv"
    corpus.write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in DOCS.items()))
    topics.write_text(f"q1\t{QUERY}\n")
    files = ("--topics", str(topics), "--corpus", str(corpus))
    scored = _scores(rerank("score", "--model", variant, "--checkpoint", ck, "--no-cache", *files,
                            input="".join(f"q1 Q0 {d} {i + 1} {-i} bm25\n" for i, d in enumerate(DOCS))).stdout)
    shown = json.loads(rerank("explain", "--model", variant, "--checkpoint", ck, *files, "--qid", "q1", "--docid", "d1",
                              "--format", "json").stdout)
    assert (shown["qid"], shown["docid"], shown["query"]) == ("q1", "d1", QUERY)
    weights = np.array(shown["term_weights"])
    assert len(weights) == len(shown["query_terms"]) == 5 and len(set(weights.round(6))) > 1
    if variant == "tk":
        sums = np.array(shown["kernel_sums"])
        cosine, mus, sigmas = (np.array(shown[k]) for k in ("cosine", "kernel_mus", "kernel_sigmas"))
        assert np.allclose(np.exp(-0.5 * ((cosine[..., None] - mus) / sigmas) ** 2).sum(1), sums, atol=1e-4)
        remade = (weights[:, None] * (np.array(shown["log_weights"]) * np.log(np.maximum(sums, 1e-10))
                                      + np.array(shown["length_weights"])
                                      * np.log(np.maximum(sums / shown["doc_length"], 1e-10)))).sum()
    else:
        saturate = np.log1p if shown["saturation"] == "log1p" else (lambda x: np.log(np.maximum(x, 1e-10)))
        for region in shown["regions"]:
            terms = weights * (saturate(np.array(region["kernel_sums"])) @ np.array(shown["region_kernel_weights"]))
            assert np.allclose(terms, region["term_scores"], atol=1e-5) and terms.sum() == pytest.approx(region["score"], abs=1e-5)
        remade = sum(r["weight"] * r["score"] for r in shown["regions"])
    assert remade == pytest.approx(shown["score"], abs=1e-4) and shown["score"] == pytest.approx(scored["q1", "d1"], abs=1e-5)
    text = rerank("explain", "--model", variant, "--checkpoint", ck, *files, "--qid", "q1", "--docid", "d1").stdout
    assert "  weight  contribution" in text and f"{weights[0]:8.4f}" in text


def test_explain_of_another_model_is_refused_before_anything_is_read(tmp_path, rerank):
    """`explain --model bert` said bert "has no query-independent document encodings", which is encode's reason, not
    explain's, and only after reading the query and document: explain takes apart TK and TKL alone."""
    done = rerank("explain", "--model", "bert", "--checkpoint", str(tmp_path), "--corpus", str(tmp_path / "absent"),
                  "--query", "x", "--docid", "d", check=False)
    assert done.returncode == 2 and "Invalid value for '--model': 'bert' is not one of 'tk', 'tkl'" in done.stderr


def _own_index(rerank, cacm_slice, tmp_path, name: str, documents: int = 60) -> Path:  # noqa: F811
    """A Lucene index NAME of one's own, built from the first real CACM documents written to a file."""
    corpus = tmp_path / f"{name}.jsonl"
    lines = (cacm_slice / "corpus.jsonl").read_text().splitlines()[:documents]
    corpus.write_text("".join(line + "\n" for line in lines))
    rerank("index", name, "--corpus", str(corpus))
    return corpus


def _encodings_scored(ck: str, run: str) -> tuple[str, dict]:
    """The score stage's `encodings` note and its scores."""
    done = score(run, ck, cache=False)[0]
    return _stage(done)["encodings"], _scores(done)


@pytest.mark.data
def test_encode_of_an_index_of_ones_own_is_what_score_uses(tmp_path, rerank, cacm_slice, in_process_home):  # noqa: F811
    """`rerank encode own` said "'own' is not a known data set ... give --corpus" although the index own records
    the corpus file it was built from. It now encodes that file, recorded as the score stage matches it."""
    ck = str(checkpoint(tmp_path, name="ck-own"))
    _own_index(rerank, cacm_slice, tmp_path, "own")
    run = rerank("retrieve", "own", "--topics", str(cacm_slice / "topics.tsv"), "--k", "5").stdout
    encodings, fly = _encodings_scored(ck, run)
    assert encodings == "on the fly (no stored encodings for own)"
    assert "60 documents, " in rerank("encode", "own", "--model", "tk", "--checkpoint", ck).stderr
    encodings, stored = _encodings_scored(ck, run)
    assert encodings.startswith("stored (") and max(abs(fly[k] - stored[k]) for k in fly) < 1e-4


@pytest.mark.data
def test_explain_an_index_of_ones_own(tmp_path, rerank, cacm_slice, in_process_home):  # noqa: F811
    """`rerank explain --dataset own` said "unknown data set 'own'" of an index of one's own, which retrieve and
    score read. `--index own` reads its stored texts (and --topics its queries), and finds its stored encodings
    as score does."""
    ck = str(checkpoint(tmp_path, name="ck-explain"))
    topics = cacm_slice / "topics.tsv"
    corpus = _own_index(rerank, cacm_slice, tmp_path, "own-explained")
    run = rerank("retrieve", "own-explained", "--topics", str(topics), "--k", "5").stdout
    _, scores = _encodings_scored(ck, run)
    qid, docid = next(iter(scores))

    def explained(*how: str) -> str:
        return rerank("explain", "--model", "tk", "--checkpoint", ck, *how, "--docid", docid).stdout

    shown = explained("--index", "own-explained", "--topics", str(topics), "--qid", qid)
    assert f"score {scores[qid, docid]:.4f}" in shown and "document encodings: on the fly" in shown
    assert f"score {scores[qid, docid]:.4f}" in explained("--corpus", str(corpus), "--topics", str(topics),
                                                          "--qid", qid)
    rerank("encode", "own-explained", "--model", "tk", "--checkpoint", ck, "--corpus", str(corpus))
    assert "document encodings: stored (" in explained("--index", "own-explained", "--query", "computer programming")


@pytest.mark.data
def test_explain_and_encode_refuse_what_they_cannot_read_in_one_line(tmp_path, rerank, cacm_slice):  # noqa: F811
    ck = str(checkpoint(tmp_path, name="ck-refuse"))
    corpus = _own_index(rerank, cacm_slice, tmp_path, "moved", documents=5)
    corpus.unlink()
    explain = ("explain", "--model", "tk", "--checkpoint", ck, "--docid", "CACM-0001")
    for args, code, words in (
            ((*explain, "--query", "x", "--dataset", "cacm", "--index", "moved"), 2, "give --dataset or --index, not both"),
            ((*explain, "--query", "x", "--index", "absent"), 1,
             "no index 'absent' is built here; build it with: rerank index absent --corpus FILE"),
            ((*explain, "--query", "x"), 2, "--dataset NAME, --index NAME or --corpus FILE"),
            ((*explain, "--query", "x", "--dataset", "moved"), 2, "; for an index of your own, give --index NAME"),
            ((*explain, "--qid", "1", "--index", "moved"), 2, "--qid needs the query texts: give --topics FILE"),
            ((*explain, "--query", "x", "--dataset", "cacm", "--topics", "/nonexistent.tsv"), 2,
             "--topics gives the texts of --qid; with --query, leave it out"),
            (("encode", "absent", "--model", "tk", "--checkpoint", ck), 1,
             "'absent' is neither a known data set (vaswani, "),
            (("encode", "moved", "--model", "tk", "--checkpoint", ck), 1,
             f"{corpus.resolve()}, which index moved was built from, is gone; rebuild the index from where it is "
             "now (rerank index moved --corpus FILE --overwrite); then encode it")):
        done = rerank(*args, check=False)
        assert done.returncode == code and done.stderr.count("\n") == 1 and words in done.stderr, (args, done.stderr)


@pytest.mark.data
def test_encodings_of_a_corpus_edited_after_its_lucene_index_are_not_used_for_its_texts(tmp_path, rerank,
                                                                                         in_process_home):
    """A Lucene index stores its texts as they were read; vectors encoded from the corpus file edited since were
    compared with the file as it is now, so they were used for the index's older texts under the same docids."""
    ck = str(checkpoint(tmp_path, name="ck-snapshot"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d, "contents": t or "x"}) + "\n" for d, t in DOCS.items()))
    rerank("index", "snapshot", "--corpus", str(corpus))
    corpus.write_text(corpus.read_text().replace("kernel", "bread"))
    rebuild = f"{corpus} has changed since index snapshot was built; rebuild it (rerank index snapshot --corpus {corpus} " \
              "--overwrite)"
    refused = rerank("encode", "snapshot", "--model", "tk", "--checkpoint", ck, check=False)  # the index's documents
    assert refused.returncode == 1 and f"{rebuild}; then encode it" in refused.stderr
    rerank("encode", "snapshot", "--model", "tk", "--checkpoint", ck, "--corpus", str(corpus))  # the file as it is now
    (tmp_path / "t.tsv").write_text(f"q1\t{QUERY}\n")
    run = rerank("retrieve", "snapshot", "--topics", str(tmp_path / "t.tsv"), "--k", "5").stdout

    def encodings() -> str:
        return _encodings_scored(ck, run)[0]

    assert f"they were encoded from another version of {corpus} than the texts scored; {rebuild}, then encode " \
           "it)" in encodings()  # not the encode of the file as it is, which the note had suggested, in a loop
    rerank("index", "snapshot", "--corpus", str(corpus), "--overwrite")  # the index now stores the edited texts
    assert encodings().startswith("stored (")
    # rebuilt from another file, the index would give the run's docids that file's texts
    other = tmp_path / "other.jsonl"
    other.write_text(corpus.read_text())
    rerank("index", "snapshot", "--corpus", str(other), "--overwrite")
    done = rerank("score", "--model", "tk", "--checkpoint", ck, "--no-cache", input=run, check=False)
    assert done.returncode == 1 and done.stdout == "" and (
        f"index snapshot is built from {other}, but the run's header says its documents are {corpus} (rebuilt since "
        "the run was made?); pass --corpus FILE with the run's documents, or retrieve again") in done.stderr


def test_query_stopwords_can_be_dropped():
    module = tiny(query_stopwords=False)
    kept = module.query_ids(["what is the daily life of thai people", "the of"])
    query = "what is the daily life of thai people"
    assert [query[a:b] for a, b in kept[0].spans] == ["what", "daily", "life", "thai", "people"]
    assert len(kept[1].ids) == 2  # a query of stopwords only keeps them


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_idf_term_weights_favour_rare_words_and_are_trained(variant, tmp_path):
    module = tiny(variant, term_weights="idf").train()
    ids, mask = pad_ids([module.query_ids(["the kernel"])[0].ids, module.query_ids(["ranking"])[0].ids])
    weights = module.term_weights(ids, mask)
    assert weights[0, 0] < 0.1 < weights[0, 1]  # "the" (GloVe's most frequent word) counts far less
    assert weights[1, 1] == 0  # padding weighs nothing
    module.score_batch([QUERY], [[DOCS["d1"], DOCS["d3"]]]).sum().backward()
    assert module.rank_gate.grad.abs().sum() > 0 and module.embedding_gate.weight.grad.abs().sum() > 0
    folder = checkpoint(tmp_path, variant, term_weights="idf")  # stored and on-the-fly scoring use the weights
    reranker = (load_tk if variant == "tk" else load_tkl)(str(folder))
    expected = tiny(variant, term_weights="idf").score_batch([QUERY], [list(DOCS.values())])[0].tolist()
    assert np.allclose(reranker.score(QUERY, list(DOCS), list(DOCS.values())), expected, rtol=2e-3, atol=1e-4)
    with pytest.raises(UsageError, match="needs embeddings=glove"):
        TKConfig.from_dict({"term_weights": "idf", "embeddings": "minilm"})


def test_init_continues_from_a_checkpoint_and_options_are_checked(tmp_path):
    from rerank.models.bert import new_trainable as new_bert
    from rerank.models.tk import new_tk

    folder = checkpoint(tmp_path, "tk", term_weights="idf")
    continued = new_tk(base=str(folder))
    assert continued.config.term_weights == "idf" and continued.config.layers == TINY["layers"]
    saved = tiny("tk", term_weights="idf").state_dict()
    assert all(torch.equal(saved[k], v) for k, v in continued.state_dict().items())
    with pytest.raises(UsageError, match="unknown tk option.*bogus.*known:.*term_weights"):
        new_tk(bogus=1)
    with pytest.raises(UsageError, match="come from that checkpoint"):
        new_tk(base=str(folder), layers=3)
    with pytest.raises(UsageError, match="bert takes no model option"):
        new_bert(layers=3)


def test_lexical_options_fold_plurals_hash_unknown_words_and_sharpen_exact_matches():
    module = tiny(fold_plurals=True, oov_buckets=1000)
    rows = {w: module.tokenize(w, 5).ids[0] for w in ("costs", "cost", "this", "theraderm", "sigmet")}
    assert rows["costs"] == rows["cost"] and rows["this"] == module.vocabulary.index["this"]
    glove_rows = len(module.vocabulary.table)
    assert rows["theraderm"] != rows["sigmet"] and min(rows["theraderm"], rows["sigmet"]) >= glove_rows
    assert module.tokenize("theraderm", 5).ids == [rows["theraderm"]]  # hashing is stable (crc32, not hash())
    with torch.no_grad():
        vectors = module.embed(torch.tensor([[rows["theraderm"], rows["sigmet"]]]))[0]
    assert abs(float(F.cosine_similarity(vectors[0], vectors[1], dim=0))) < 0.6  # unknown words no longer all alike

    def exact_kernel(sigma):
        near = F.normalize(torch.tensor([[[1.0, 0.0]]]), dim=-1), F.normalize(torch.tensor([[[1.0, 0.33]]]), dim=-1)
        return float(tiny(exact_sigma=sigma).kernel_activations(*near, torch.ones(1, 1))[0, 0, 0, 0])
    assert exact_kernel(0.1) > 0.7 and exact_kernel(0.01) < 1e-3  # cosine 0.95: a near match, not an exact one


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_query_log_idf_is_learned_from_the_log_and_stored_with_the_weights(variant, tmp_path):
    log = tmp_path / "queries.tsv"
    log.write_text("".join(f"{i}\twhat is the {w} of kernels\n" for i, w in enumerate(["cost", "ranking", "use"] * 5)))
    extra = {"term_weights": "query-idf", "query_log": str(log), "oov_buckets": 100, "saturation": "log"}
    module = tiny(variant, **extra)
    ids, mask = pad_ids([module.query_ids(["the kernels bread"])[0].ids])
    the, kernels, bread = module.rarity[ids[0]].tolist()
    assert the == kernels < 0.1 < bread == 1.0  # in every logged query / in none
    folder = checkpoint(tmp_path, variant, **extra)
    log.unlink()  # scoring needs only the checkpoint
    reranker = (load_tk if variant == "tk" else load_tkl)(str(folder))
    with torch.no_grad():
        expected = module.score_batch([QUERY], [list(DOCS.values())])[0].tolist()
    assert np.isfinite(expected).all()
    assert np.allclose(reranker.score(QUERY, list(DOCS), list(DOCS.values())), expected, rtol=2e-3, atol=1e-4)
    with pytest.raises(UsageError, match="query_log .*no query file"):
        tiny(variant, **extra)


def test_lexical_options_are_checked():
    for bad, message in [({"fold_plurals": True, "embeddings": "minilm"}, "need embeddings=glove"),
                         ({"saturation": "sqrt"}, "saturation must be"), ({"exact_sigma": 0}, "exact_sigma in"),
                         ({"oov_buckets": "many"}, "oov_buckets must be int, not .many."),
                         ({"term_weights": "query-idf", "embeddings": "minilm"}, "needs embeddings=glove")]:
        with pytest.raises(UsageError, match=message):
            TKConfig.from_dict(bad)


@pytest.mark.parametrize("bad, message", [
    ({"heads": 0}, "heads must be an integer of at least 1, not 0"),  # was ZeroDivisionError
    ({"layers": 0}, "layers must be an integer of at least 1, not 0"),  # IndexError from torch
    ({"dropout": 2}, r"dropout must be in \[0, 1\), not 2.0"),  # ValueError from torch
    ({"projection": -5}, "projection must be an integer of at least 0, not -5"),  # was 'not divisible by 2 heads'
    ({"max_doc": 0}, "max_doc must be an integer of at least 1, not 0"),  # these three trained, silently
    ({"max_query": 0}, "max_query must be an integer of at least 1, not 0"),
    ({"feedforward": 0}, "feedforward must be an integer of at least 1, not 0"),
    ({"variant": "tkl", "stride": 0}, "stride must be an integer of at least 1, not 0"),
])
def test_sizes_out_of_range_are_refused(bad, message):
    with pytest.raises(UsageError, match=message):
        TKConfig.from_dict(bad)


def test_minilm_context_sequences_longer_than_minilm_reads_are_refused():
    """`rerank train tk -O embeddings=minilm-context -O max_doc=600` trained (on short passages), and scoring or
    explaining a document of more than 510 tokens with it was a RuntimeError traceback from MiniLM (512 positions)."""
    for bad, message in [({"max_doc": 600}, "so max_doc must be at most 510, not 600"),
                         ({"max_query": 511}, "so max_query must be at most 510, not 511"),
                         ({"variant": "tkl", "chunk": 500, "overlap": 6}, "so chunk . 2 x overlap must be at most 510, not 512")]:
        with pytest.raises(UsageError, match="embeddings=minilm-context: MiniLM's encoder reads at most 510 tokens "
                                             "a sequence, " + message):
            TKConfig.from_dict({"embeddings": "minilm-context", **bad})
    TKConfig.from_dict({"embeddings": "minilm-context", "variant": "tkl", "max_doc": 1000})  # read in chunks of 50
    TKConfig.from_dict({"embeddings": "minilm", "max_doc": 1000})  # no MiniLM encoder


def test_a_size_out_of_range_is_one_line_from_the_cli(rerank, tmp_path):
    """`rerank train tk -O heads=0` was a ZeroDivisionError traceback."""
    done = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "-O", "heads=0", "-o", str(tmp_path / "ck"),
                  check=False)
    assert (done.returncode, done.stderr) == (2, "rerank: error: heads must be an integer of at least 1, not 0\n")
    assert not (tmp_path / "ck").exists()


def test_tkl_options_are_refused_for_tk_instead_of_recorded_unused():
    """`-O saturation=log` (README: "for TKL") and TKL's chunk/region sizes change nothing in TK, whose config
    would record them all the same; `rerank train tk` refuses them, and tkl takes them."""
    from rerank.models.tk import new_trainable

    for option in ({"saturation": "log"}, {"regions": 2}, {"window": 8, "stride": 2}, {"chunk": 10, "overlap": 2}):
        with pytest.raises(UsageError, match="TKL's option.*tk does not use"):
            new_trainable("tk", **option)
    with pytest.raises(UsageError, match="unknown tk option.*foo") as refused:
        new_trainable("tk", foo=1)
    assert "saturation" not in str(refused.value)  # not offered to tk as a known option
    module = new_trainable("tkl", **{**TINY, "saturation": "log"})
    assert module.config.variant == "tkl" and module.config.saturation == "log"


@pytest.mark.data
def test_train_and_score_with_lexical_options_through_the_cli(tmp_path, rerank, session_home):
    log = tmp_path / "log.tsv"
    log.write_text("1\twho is the author\n2\twhen was the war\n")
    ck = tmp_path / "ck"
    options = ["-O", "term_weights=query-idf", "-O", f"query_log={log}", "-O", "oov_buckets=1000",
               "-O", "exact_sigma=0.01", "-O", "layers=1", "-O", "fold_plurals=true"]
    rerank("train", "tk", "--train", "trecqa-dev", "--steps", "2", "--eval-every", "2", "--dev-fraction", "0.25",
           *options, "-o", str(ck))
    manifest = json.loads((ck / "checkpoint.json").read_text())
    config = manifest["config"]
    assert config["term_weights"] == "query-idf" and config["oov_buckets"] == 1000 and config["fold_plurals"]
    # the command as typed, a shell line that reruns it from its folder (the parsed arguments lose relative paths)
    folder, typed = manifest["training"]["command"].split(" && ")
    assert shlex.split(folder) == ["cd", str(session_home)] and shlex.split(typed) == [
        "rerank", "train", "tk", "--train", "trecqa-dev", "--steps", "2", "--eval-every", "2", "--dev-fraction", "0.25",
        *options, "-o", str(ck)]
    log.unlink()
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    scored = rerank("score", "--model", "tk", "--checkpoint", str(ck), "--no-cache", input=candidates).stdout
    assert len(_scores(scored)) == 1148
    bad = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "2", *options, "-o", str(tmp_path / "ck2"),
                 check=False)
    assert bad.returncode == 2 and "no query file" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "ck2").exists()


@pytest.mark.data
def test_dev_lines_get_a_line_of_their_own_above_the_progress_bar(tmp_path, data_root, session_home):
    """On a terminal each dev evaluation's line was written onto the end of the bar's
    ("| 10/30 [...loss=1.1986]rerank: step 10: dev MAP = 0.6411"): the bar is now cleared first and redrawn."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # a width to draw the bar in
    env = {**os.environ, "RERANK_HOME": str(session_home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "rerank", "train", "tk", "--train", "trecqa-dev", "--dev-fraction", "0.25",
                    "--steps", "2", "--eval-every", "1", "--dev-depth", "5", "-o", str(tmp_path / "ck")],
                   stdout=subprocess.DEVNULL, stderr=follower, env=env, check=True)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the terminal's other end is closed and everything was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    text = shown.decode("utf-8", "replace")
    assert "training tk:" in text and "rerank: step 2: dev MAP" in text, text  # the bar was drawn
    assert "]rerank: step" not in text, text


@pytest.mark.data
def test_a_head_learning_rate_for_a_model_without_a_new_head_is_refused(tmp_path, rerank):
    """TK has no freshly initialised head: --head-lr-scale 20 scaled nothing, yet checkpoint.json recorded it as
    the run's setting."""
    done = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "--head-lr-scale", "20",
                  "-o", str(tmp_path / "ck"), check=False)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "--head-lr-scale: tk has no freshly initialised head" in done.stderr
    assert not (tmp_path / "ck").exists()


@pytest.mark.data
def test_dev_queries_the_init_weights_were_trained_on_get_a_note(tmp_path, rerank, in_process_home):
    """`--init CK --dev-fraction F` reported "held-out" dev figures on queries CK (or a checkpoint it continued) had
    trained on, without a word: a note now, not an error (continuing training is legitimate). A base that held the
    same queries out gets none; the log counts its queries with agreeing nouns ("held-out 1 queries")."""
    def train(name, **options):
        return train_tk(tmp_path / name, train="trecqa-dev", steps=1, **options)

    def note(base, seen, of):
        return (f"rerank: note: the dev figures are not held out for the starting weights: those of --init "
                f"{tmp_path / base} were trained on {seen} of the {of} dev queries (")

    train("all")  # every query
    assert note("all", 16, 16) in train("cont", init=tmp_path / "all", dev_fraction=0.25)
    # "cont" held the 16 out, but the weights it continued from were trained on them
    assert note("cont", 16, 16) in train("cont2", init=tmp_path / "cont", dev_fraction=0.25)
    log = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "--dev-fraction", "0.01",
                 "-o", str(tmp_path / "one")).stderr  # the command's own count of steps too
    assert "(held-out 1 query)" in log and "trained tk for 1 step in" in log
    log = train("one2", init=tmp_path / "one", dev_fraction=0.01)
    assert "note:" not in log and "(held-out 1 query)" in log  # the same query held out: its figures stay held out
    log = train("fold", init=tmp_path / "one", dev_fold="1/5")

    def held_out(name):
        return set(json.loads((tmp_path / name / "checkpoint.json").read_text())["training"]["held_out_qids"])

    fold, one = held_out("fold"), held_out("one")
    assert len(fold) == 13 and "(fold 1/5, 13 queries)" in log
    assert note("one", len(fold - one), 13) in log  # all but the one query "one" held out, if the fold has it


@pytest.mark.data
def test_scoring_the_queries_a_checkpoint_trained_on_is_warned_of(tmp_path, rerank, in_process_home):
    """`train tk --train trecqa-dev`, then `score` and `eval` on trecqa-dev: figures on the training queries, and
    nothing said (train itself says so of dev queries). The queries it held out, or a --dev set, chose its best
    step: dev figures, which a note says."""
    from rerank.data import get_dataset

    ck = tmp_path / "ck"
    train_tk(ck, train="trecqa-dev", steps=1, dev_fraction=0.25)
    held = json.loads((ck / "checkpoint.json").read_text())["training"]["held_out_qids"]
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    done = rerank("score", "--model", "tk", "--checkpoint", str(ck), input=candidates)
    trained = len(get_dataset("trecqa-dev").qrels()) - len(held)
    assert (f"rerank: warning: tk: its checkpoint {ck} was trained on {trained} of the 81 queries re-scored here "
            "(trecqa-dev's): figures on them are not held out") in done.stderr
    at_depths = rerank("budget", "--model", "tk", "--checkpoint", str(ck), "--depths", "2,5", input=candidates)
    assert at_depths.stderr.count("was trained on") == 1  # once, not once per depth
    # the data set's queries with their texts from a corpus file: still the queries it trained on
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n"
                                                   for d in get_dataset("trecqa-dev").documents()))
    from_file = score(candidates, ck, corpus=str(tmp_path / "corpus.jsonl"))[1]
    assert f"was trained on {trained} of the 81 queries re-scored here (trecqa-dev's)" in from_file
    topics = get_dataset("trecqa-dev").topics()
    (tmp_path / "held.tsv").write_text("".join(f"{qid}\t{topics[qid]}\n" for qid in held))
    held_out = rerank("retrieve", "trecqa-dev", "--candidates", "--topics", str(tmp_path / "held.tsv")).stdout
    scored = score(held_out, ck)[1]
    assert "warning" not in scored and (f"rerank: note: tk: its checkpoint {ck} chose its best training step by "
                                        f"{len(held)} of the {len(held)} queries re-scored here (trecqa-dev's): figures "
                                        "on them are dev figures, not test figures") in scored
    # a --dev data set chose the step too (a QA user trained on trecqa-train and scored trecqa-dev, its --dev)
    train_tk(tmp_path / "d", train="trecqa-train", steps=1, dev="trecqa-dev")
    on_dev = score(candidates, tmp_path / "d")[1]
    assert "warning" not in on_dev and "chose its best training step by 65 of the 81 queries" in on_dev


@pytest.mark.data
def test_a_soup_tells_the_queries_its_ingredients_trained_on_after_they_are_deleted(tmp_path, rerank, in_process_home):
    """`rerank average` recorded none of its ingredients' queries: scoring a soup on the queries they trained on said
    nothing, nor did `--init SOUP --dev-fraction` of dev queries they trained on. The soup's checkpoint.json carries
    them now, once for ingredients that share them, so it still tells them once their folders are gone: a query one
    trained on is trained on, whoever held it out; one each held out chose the step. A continuation also tells the
    queries of the weights the ingredients continued, while their folder holds them, as of any --init."""
    import shutil

    from rerank.data import get_dataset

    def train(name, **options):
        train_tk(tmp_path / name, train="trecqa-dev", steps=1, **options)
        return json.loads((tmp_path / name / "checkpoint.json").read_text())["training"]

    train("all")  # every query
    fraction, fold = (set(train(name, **options)["held_out_qids"]) for name, options in
                      (("a", {"init": tmp_path / "all", "dev_fraction": 0.25}),
                       ("b", {"dev_fold": "1/5", "seed": 2})))
    train("a2", init=tmp_path / "all", dev_fraction=0.25, seed=3)  # a's queries, another seed
    for name in ("a", "b"):  # as checkpoints from before query_space: a named data set's queries by their ids
        shutil.copytree(tmp_path / name, tmp_path / f"{name}-old")
        manifest = json.loads((tmp_path / f"{name}-old" / "checkpoint.json").read_text())
        del manifest["training"]["query_space"]
        (tmp_path / f"{name}-old" / "checkpoint.json").write_text(json.dumps(manifest))
    average_checkpoints([str(tmp_path / name) for name in ("a", "a2", "b")], str(tmp_path / "soup"))
    average_checkpoints([str(tmp_path / "a-old"), str(tmp_path / "b-old")], str(tmp_path / "old-ingredients"))
    soup = json.loads((tmp_path / "soup" / "checkpoint.json").read_text())["training"]
    assert [record["held_out_qids"] for record in soup["ingredient_queries"]] == [sorted(fraction), sorted(fold)]
    for name in ("a", "a2", "b", "a-old", "b-old"):
        shutil.rmtree(tmp_path / name)

    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    both = fraction & fold
    assert both and fraction - fold  # some held out by both, some by one alone
    trained = len(get_dataset("trecqa-dev").qrels()) - len(both)
    for name in ("soup", "old-ingredients"):
        ck = tmp_path / name
        scored = score(candidates, ck)[1]
        assert (f"rerank: warning: tk: its checkpoint {ck} was trained on {trained} of the 81 queries re-scored here "
                "(trecqa-dev's): figures on them are not held out") in scored
        assert (f"rerank: note: tk: its checkpoint {ck} chose its best training step by {len(both)} of the 81 queries "
                "re-scored here (trecqa-dev's): figures on them are dev figures, not test figures") in scored

    def continued() -> str:
        return train_tk(tmp_path / "cont", train="trecqa-dev", steps=1, init=tmp_path / "soup", dev_fraction=0.25,
                        overwrite=True)

    def note(seen: int) -> str:
        return (f"rerank: note: the dev figures are not held out for the starting weights: those of --init "
                f"{tmp_path / 'soup'} were trained on {seen} of the {len(fraction)} dev queries (")

    assert note(len(fraction)) in continued()  # "all", which a continued, trained on every one
    shutil.rmtree(tmp_path / "all")
    assert note(len(fraction - fold)) in continued()  # those b trained on
    # a soup made before they were recorded tells none, as before
    manifest = json.loads((tmp_path / "soup" / "checkpoint.json").read_text())
    del manifest["training"]["ingredient_queries"]
    (tmp_path / "soup" / "checkpoint.json").write_text(json.dumps(manifest))
    scored = score(candidates, tmp_path / "soup")[1]
    assert "warning" not in scored and "note" not in scored


def test_the_queries_a_checkpoint_trained_on_are_the_judged_ones_of_its_candidate_run(tmp_path):
    """`train tk --candidates cacm.run --dev-fraction 0.2` trained on 42 queries (CACM judges 52 of the run's 64,
    10 held out), yet `score` warned that it "was trained on 54 of the 64 queries": the 12 unjudged ones, which
    made no training group, were counted as trained on."""
    from rerank.paths import file_sha256
    from rerank.checkpoint import trained_qids

    run, qrels = tmp_path / "candidates.run", tmp_path / "qrels.txt"
    run.write_text("".join(f"{q} Q0 d{i} {i} {10 - i} bm25\n" for q in ("q1", "q2", "q3", "q4") for i in (1, 2)))
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 1\nq3 0 d1 1\n")  # q4 is not judged
    training = {"candidates": str(run), "qrels": str(qrels), "min_rel": None, "held_out_qids": ["q3"],
                "file_sha256": {"candidates": file_sha256(run), "qrels": file_sha256(qrels)}}
    assert trained_qids(training) == {"q1", "q2"}
    qrels.write_text("q4 0 d1 1\n")  # judged otherwise since: which queries it trained on can no longer be told
    assert trained_qids(training) is None


def test_training_into_a_folder_another_training_writes_is_refused(tmp_path, rerank):
    """Two `rerank train -o CK` at once replaced each other's checkpoint at their dev evaluations and each wrote how
    its training ended into whichever checkpoint CK held, both reporting success. While one trains into CK (it holds
    CK's lock, as here), another is refused in one line before it trains."""
    from rerank.locks import exclusive

    ck = tmp_path / "ck"
    with exclusive(ck, "another training"):
        refused = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "2", "-o", str(ck), check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"rerank: error: {ck} is being written by another process (rerank train with the same -o); wait for it to "
        "finish, or choose another folder")
    assert not ck.exists() and list(tmp_path.iterdir()) == []
    rerank("train", "tk", "--train", "trecqa-dev", "--steps", "2", "-o", str(ck))  # once it has finished
    assert (ck / "checkpoint.json").is_file() and list(tmp_path.iterdir()) == [ck]


def test_a_bad_dev_fold_is_a_one_line_error(tmp_path, rerank):
    bad = rerank("train", "tk", "--train", "trecqa-dev", "--dev-fold", "6/5", "-o", str(tmp_path / "ck"), check=False)
    assert bad.returncode == 2 and "--dev-fold K/N needs" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("wrong, words", [
    (["--distill", "margin-mse"], "--distill: distillation options, which need a teacher run"),  # click's default, given
    (["--init", "{ck}"], "{ck} is the checkpoint training starts from (--init); write the result to a new folder"),
    (["--init", "{ck}", "-o", "{ck}/longer"], "{ck}/longer is inside the checkpoint {ck}, which would delete it "
                                             "when replaced"),
    # any checkpoint's folder, not only --init's: training wrote a checkpoint into CK, which was refused from then on
    # as changed (an older rerank's still is), and replacing CK deletes it
    (["-o", "{ck}/sub"], "{ck}/sub is inside the checkpoint {ck}, which would delete it when replaced"),
    (["--max-length", "5"], "--max-length is an option of bert and minilm-bi only, not tk"),  # it was ignored
    (["-o", "{ck}/weights.pt"], "{ck}/weights.pt is a file, not a folder"),  # these two were click's 4-line usage
    (["--teacher", "{ck}"], "--teacher {ck} is a folder; give a run file"),
    ([], "{ck} holds a checkpoint already; pass --overwrite to replace it"),  # it was replaced without a word
    (["--overwrite", "--candidates", "-"], "--candidates takes a run file, not stdin ('-')"),  # "candidate run file not found: -"
])
def test_train_cli_refuses_in_one_line_before_training(wrong, words, tmp_path, rerank):
    ck = checkpoint(tmp_path)  # an output that exists: refusals leave it as it was
    before = (ck / "checkpoint.json").read_text()
    wrong, words = [w.format(ck=ck) for w in wrong], words.format(ck=ck)
    bad = rerank("train", "tk", "--train", "trecqa-dev", "--steps", "1", "-o", str(ck), *wrong, check=False)
    assert bad.returncode == 2 and f"rerank: error: {words}" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and (ck / "checkpoint.json").read_text() == before


def test_checkpoints_from_before_the_lexical_options_load_as_they_were(tmp_path):
    folder = checkpoint(tmp_path, "tkl")
    manifest = json.loads((folder / "checkpoint.json").read_text())
    for key in ("saturation", "fold_plurals", "oov_buckets", "exact_sigma", "query_log"):
        del manifest["config"][key]  # what a checkpoint of an earlier version records
    (folder / "checkpoint.json").write_text(json.dumps(manifest))
    with torch.no_grad():
        earlier = tiny("tkl", saturation="log1p", fold_plurals=False, oov_buckets=0, exact_sigma=0.1)
        expected = earlier.score_batch([QUERY], [list(DOCS.values())])[0].tolist()
    assert np.allclose(load_tkl(str(folder)).score(QUERY, list(DOCS), list(DOCS.values())), expected, rtol=2e-3,
                       atol=1e-4)


@pytest.mark.parametrize("variant", ["tk", "tkl"])
def test_minilm_context_vectors_are_frozen_cached_and_padding_free(variant):
    """MiniLM's encoder embeds each sequence alone (padding anywhere in a row changes nothing), the
    encoder is neither trained nor saved, and TK's own parts above it are."""
    module = tiny(variant, embeddings="minilm-context")
    texts = list(DOCS.values())
    with torch.no_grad():
        together = module.score_batch([QUERY], [texts])[0]
        alone = torch.stack([module.score_batch([QUERY], [[t]])[0, 0] for t in texts])
    assert torch.allclose(together, alone, atol=1e-5) and torch.isfinite(together).all()
    ids = torch.tensor(module.doc_ids([DOCS["d1"]])[0].ids)
    padded = torch.stack([F.pad(ids, (2, 3)), F.pad(ids, (0, 5))])  # TKL's first chunk pads on the left
    vectors = module.vocabulary.vectors(padded)
    assert torch.allclose(vectors[0, 2:-3], vectors[1, :-5]) and not vectors[0, :2].any()
    assert tuple(ids.tolist()) in module.vocabulary.cache
    module.train().score_batch([QUERY], [texts[:2]]).sum().backward()
    assert module.mix.grad is not None and module.encoder.layers[0].linear1.weight.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in module.vocabulary.encoder.parameters())
    assert not any(key.startswith("vocabulary") or key == "table" for key in module.state_dict())


def test_minilm_context_checkpoint_scores_alike_from_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = load_tkl(str(checkpoint(tmp_path, "tkl", embeddings="minilm-context")))
    items = list(DOCS.items())
    manifest = encode_collection("toy", lambda: iter(items), len(items), reranker, progress=False)
    assert manifest["complete"]
    on_the_fly = reranker.score(QUERY, list(DOCS), list(DOCS.values()))
    reranker.use_store(open_store(store_folder("toy", "tkl", reranker.checkpoint_hash), reranker.checkpoint_hash,
                                  "tkl"))
    assert np.allclose(reranker.score(QUERY, list(DOCS), ["(stored)"] * len(DOCS)), on_the_fly, atol=1e-4)
    with pytest.raises(UsageError, match="embeddings must be one of glove, minilm, minilm-context"):
        TKConfig.from_dict({"embeddings": "bert"})


@pytest.mark.data
def test_a_config_edited_after_training_is_keyed_apart(tmp_path, rerank, in_process_home):
    """TK builds its model from checkpoint.json's config, which the content hash leaves out: after a hand edit of
    `max_doc`, the score cache (and stored encodings) still answered with the trained config's scores. An edited
    config now gets a hash of its own and a note; one that no longer fits the weights is a clear error."""
    ck = checkpoint(tmp_path, max_doc=200)
    candidates = rerank("retrieve", "trecqa-dev", "--candidates").stdout
    trained, _ = score(candidates, ck)
    manifest_path = ck / "checkpoint.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["config"]["max_doc"] = 3
    manifest_path.write_text(json.dumps(manifest))
    edited = rerank("score", "--model", "tk", "--checkpoint", str(ck), input=candidates)  # said by the command
    uncached, _ = score(candidates, ck, cache=False)
    assert _scores(edited.stdout) == _scores(uncached) != _scores(trained)
    assert _stage(edited.stdout)["checkpoint_hash"] != _stage(trained)["checkpoint_hash"] == manifest["hash"]
    assert edited.stderr.count("was edited since training") == 1, edited.stderr

    manifest["config"]["max_doc"] = 200
    manifest_path.write_text(json.dumps(manifest))  # put back: the trained model and its cached scores again
    again, said = score(candidates, ck)
    assert _scores(again) == _scores(trained) and "edited" not in said

    manifest["config"]["layers"] = 3
    manifest_path.write_text(json.dumps(manifest))
    misfit = rerank("score", "--model", "tk", "--checkpoint", str(ck), input=candidates, check=False)
    assert misfit.returncode == 1 and "Traceback" not in misfit.stderr, misfit.stderr
    assert misfit.stderr.splitlines()[-1].startswith("rerank: error: ") and "config" in misfit.stderr


def test_encode_of_the_bi_encoder_names_where_its_vectors_are_stored(rerank):
    """`rerank encode --model minilm-bi` (Pyserini's `encode` for a dense index) said the bi-encoder had no
    query-independent document encodings: its passage vectors are exactly that, stored by a dense index."""
    done = rerank("encode", "cacm", "--model", "minilm-bi", "--checkpoint", "unused", check=False)
    assert done.returncode == 2 and done.stderr == (
        "rerank: error: --model minilm-bi's passage vectors are stored by a dense index: rerank index cacm --backend "
        "dense (score --model minilm-bi and retrieve --backend dense use them); encode stores those of tk, tkl\n")


def test_stored_encodings_record_the_packages_that_encoded_them_which_key_no_cache(tmp_path, monkeypatch):
    """A TK stage scoring from stored encodings named the torch it scored with, not the one that encoded the
    documents (`rerank encode`, maybe months before, on another machine). The store records them (`encoded_with`,
    the model's `packages`) and the stage names them beside its own; like those, they key no cache, and a store
    encoded before they were recorded is used as before, naming none."""
    from rerank import installed_versions
    from rerank.encodings import MANIFEST
    from rerank.runs import QueryRanking, RunHeader, Stream
    from rerank.score import ScoreStats, score_stream

    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    texts = {docid: text for docid, text in DOCS.items() if text}
    corpus = (tmp_path / "corpus.jsonl").resolve()
    corpus.write_text("".join(json.dumps({"id": d, "contents": t}) + "\n" for d, t in texts.items()))
    folder = checkpoint(tmp_path)
    manifest = encode_collection("toy", lambda: iter(texts.items()), len(texts), load_tk(str(folder)),
                                 progress=False, source={"corpus": str(corpus)})
    versions = installed_versions("torch", "numpy")
    assert manifest["encoded_with"] == versions and all(versions.values())

    def scored() -> tuple[dict, ScoreStats]:
        stats = ScoreStats()
        header = RunHeader({"index": "toy", "corpus": str(corpus)}).with_stage({"name": "bm25"})
        stream = score_stream(Stream(header, [QueryRanking.from_scores("q", texts, range(len(texts)))]),
                              load_tk(str(folder)), 4, queries={"q": QUERY}, stats=stats)
        assert len(list(stream.rankings)) == 1
        return stream.header.stages[-1], stats

    entry, stats = scored()
    assert entry["encodings"].startswith("stored (") and entry["encoded_with"] == versions == entry["packages"]
    assert stats.cached == 0
    path = store_folder("toy", "tk", manifest["checkpoint_hash"]) / MANIFEST
    (path).write_text(json.dumps({**manifest, "encoded_with": {**versions, "torch": "1.13.0"}}))
    entry, stats = scored()
    assert entry["encoded_with"]["torch"] == "1.13.0" and stats.cached == 4  # the scores cached above
    path.write_text(json.dumps({key: value for key, value in manifest.items() if key != "encoded_with"}))
    entry, stats = scored()
    assert entry["encodings"].startswith("stored (") and "encoded_with" not in entry and stats.cached == 4


def test_encodings_begun_under_other_package_versions_are_not_resumed(tmp_path, monkeypatch):
    """Resumed after torch was upgraded, a store would hold two torches' vectors under one record of what encoded
    them: refused, as other checkpoints' are. One begun by a rerank that kept no record resumes, and records none."""
    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = load_tk(str(checkpoint(tmp_path)))
    items = list(DOCS.items())
    folder = interrupted_encoding(reranker, items)
    partial = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**partial, "encoded_with": {**partial["encoded_with"],
                                                                                   "torch": "1.13.0"}}))
    numpy = f"numpy {np.__version__}"
    with pytest.raises(UsageError, match=re.escape(f"encodings begun under other package versions ({numpy}, torch "
                                                   f"1.13.0; now {numpy}, torch {torch.__version__}); pass --overwrite "
                                                   "to encode them all again")):
        encode_collection("toy", lambda: iter(items), len(items), reranker, chunk=2, progress=False)
    del partial["encoded_with"]
    (folder / "manifest.json").write_text(json.dumps(partial))
    manifest = encode_collection("toy", lambda: iter(items), len(items), reranker, chunk=2, progress=False)
    assert manifest["complete"] and "encoded_with" not in manifest
    fresh = encode_collection("toy", lambda: iter(items), len(items), reranker, overwrite=True, progress=False)
    assert fresh["encoded_with"]["torch"] == torch.__version__

"""The dense back end: MiniLM vectors that match sentence-transformers, resumable builds, encoder checks."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spinning threads starve a busy CPU

import numpy as np
import pytest

from retrieval_fixtures import cacm_slice, rerank_module  # noqa: F401  (fixtures)
from rerank.errors import UsageError
from rerank.runs import load_run


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """A randomly initialised one-layer BERT with MiniLM's tokenizer: a real, different, fast encoder."""
    import torch
    from transformers import BertConfig, BertModel

    from rerank.retrieve.dense import default_encoder_path

    folder = tmp_path_factory.mktemp("tiny-encoder")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(f"{default_encoder_path()}/{name}", folder / name)
    return str(folder)


def test_an_encoder_with_another_recipe_is_refused(tiny_encoder, tmp_path):
    """A CLS-pooled or dot-product encoder used to be mean-pooled and ranked by cosine without a word, and so was
    a cross-encoder's body."""
    from rerank.retrieve.dense import encoder_identity

    folder = tmp_path / "cls-encoder"
    shutil.copytree(tiny_encoder, folder)
    (folder / "1_Pooling").mkdir()
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type":
                                                      "sentence_transformers.models.Transformer"},
                                                     {"idx": 1, "name": "1", "path": "1_Pooling", "type":
                                                      "sentence_transformers.models.Pooling"}]))
    pooling = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert encoder_identity(str(folder))["pooling"] == "mean"
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode_cls_token": True,
                                                                  "pooling_mode_mean_tokens": False}))
    with pytest.raises(UsageError, match="its pooling is cls_token"):
        encoder_identity(str(folder))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "dot"}))
    with pytest.raises(UsageError, match="trained for dot similarity"):
        encoder_identity(str(folder))
    cross = tmp_path / "cross-encoder"  # e.g. rerank train bert -o CK: a BERT body with a 1-logit head
    shutil.copytree(tiny_encoder, cross)
    config = json.loads((cross / "config.json").read_text())
    (cross / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    with pytest.raises(UsageError, match="it is a cross-encoder \\(BertForSequenceClassification\\)"):
        encoder_identity(str(cross))


def _documents(slice_folder, limit=None):
    from rerank.data.formats import read_jsonl_docs

    docs = list(read_jsonl_docs(slice_folder / "corpus.jsonl"))
    return docs[:limit] if limit else docs


@pytest.mark.data
def test_minilm_bi_looks_up_the_passages_a_dense_index_stores(rerank, home, cacm_slice, tmp_path):  # noqa: F811
    """`score --model minilm-bi` embedded every passage again, though a dense index of the stream's collection held
    their vectors from the same encoder: a re-scored BM25 stream (or its time in a budget report) paid for the
    passages twice. It now looks them up, with the same scores, and embeds only what the index lacks. (The index,
    its search and all but the first scoring run in-process: each `rerank` start loads torch and MiniLM.)"""
    from rerank.docstore import doc_store_for
    from rerank.models.bert import BiEncoderReranker
    from rerank.retrieve import api
    from rerank.runs import Run, RunHeader, RunReader, Stream
    from rerank.score import score_stream

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in (cacm_slice / "corpus.jsonl").read_text().splitlines()[:40]))
    api.build_index("storedslice", "dense", corpus=str(corpus), overwrite=True)
    out = io.StringIO()
    api.retrieve("storedslice", "dense", k=20, topics=str(cacm_slice / "topics.tsv")).write(out)
    dense = out.getvalue()

    def scored_in_process(**options) -> Run:
        """What `rerank score --model minilm-bi --no-cache` writes for the dense run, OPTIONS being score_stream's
        `corpus` and the model's `on_the_fly`."""
        reader = RunReader(io.StringIO(dense), "dense")
        rankings = list(reader)
        model = BiEncoderReranker(on_the_fly=options.pop("on_the_fly", False))
        written = io.StringIO()
        score_stream(Stream(reader.header, rankings), model, cache=False, **options).write(written)
        return load_run(io.StringIO(written.getvalue()), "bi")

    scored = load_run(io.StringIO(rerank("score", "--model", "minilm-bi", "--no-cache", input=dense).stdout), "bi")
    assert scored.header.stages[-1]["passages"] == f"stored ({home / 'indexes' / 'storedslice' / 'dense'})"
    asked = scored_in_process(on_the_fly=True)  # every passage embedded, as if none were stored
    assert asked.header.stages[-1]["passages"] == "on the fly (asked for)"
    assert [s for r in asked.queries.values() for s in r.scores] == pytest.approx(
        [s for r in scored.queries.values() for s in r.scores], abs=1e-5)
    retrieved = load_run(io.StringIO(dense), "dense")
    for qid, ranking in scored.queries.items():
        by_doc = dict(zip(retrieved.queries[qid].docids, retrieved.queries[qid].scores))
        assert ranking.scores == pytest.approx([by_doc[d] for d in ranking.docids], abs=1e-5)
    # texts from a file of one's own (--corpus) are what is scored, not the index's vectors of the same docids
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"id": d.docid, "contents": "an unrelated text"}) + "\n"
                             for d in _documents(cacm_slice, 40)))
    own = scored_in_process(corpus=str(other))
    assert "passages" not in own.header.stages[-1] and len(set(own.queries[qid].scores)) == 1
    # ... while the very file the index was built from, given with --corpus, is what its vectors were made from
    same = scored_in_process(corpus=str(corpus))
    assert same.header.stages[-1]["passages"] == scored.header.stages[-1]["passages"]
    # what the index lacks is embedded from its text; what it holds is not embedded at all
    docs = _documents(cacm_slice, 41)
    model, fresh = BiEncoderReranker(), BiEncoderReranker()
    header = RunHeader({"index": "storedslice", "corpus": str(corpus.resolve())})
    model.attach(header, doc_store_for(header))
    embedded = []
    embed = model.embed
    model.embed = lambda texts: embedded.append(list(texts)) or embed(texts)
    docids, texts = [docs[3].docid, docs[40].docid], [docs[3].contents, docs[40].contents]  # docs[40]: not indexed
    assert model.score("a query", docids, texts) == pytest.approx(fresh.score("a query", docids, texts), abs=1e-5)
    assert embedded == [[docs[40].contents], ["a query"]]
    # the corpus edited since the index was built: its texts are no longer what the vectors were made from
    corpus.write_text(corpus.read_text().replace(docs[3].contents[:20], "edited " + docs[3].contents[:20], 1))
    assert "passages" not in scored_in_process().header.stages[-1]


@pytest.mark.data
def test_vectors_match_sentence_transformers(cacm_slice):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    from rerank.retrieve.dense import default_encoder_path, load_encoder

    texts = [d.contents for d in _documents(cacm_slice, 6)]
    ours = load_encoder(default_encoder_path(), threads=2).embed(texts).numpy()
    reference = SentenceTransformer(default_encoder_path(), device="cpu").encode(texts, convert_to_numpy=True)
    assert ours.shape == (6, 384)
    assert np.allclose(ours, reference, atol=1e-4)


@pytest.mark.data
def test_minilm_retrieval_through_the_cli(rerank, home, cacm_slice, tmp_path):  # noqa: F811
    """A document's own text finds it first with cosine ~1; real topics get k ranked documents. (The index is built
    in-process: a `rerank index` start loads torch and MiniLM as the search's does.)"""
    from rerank.retrieve import api

    docs = _documents(cacm_slice, 60)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in (cacm_slice / "corpus.jsonl").read_text().splitlines()[:60]))
    chosen = [docs[5], docs[30], docs[59]]
    real = (cacm_slice / "topics.tsv").read_text()
    topics = tmp_path / "topics.tsv"
    topics.write_text(real + "".join(f"self-{d.docid}\t{' '.join(d.contents.split())}\n" for d in chosen))
    api.build_index("minislice", "dense", corpus=str(corpus), overwrite=True)
    run = load_run(io.StringIO(rerank("retrieve", "minislice", "--backend", "dense", "--topics", str(topics),
                                      "--k", "10").stdout), "dense")
    assert len(run.queries) == 8 + 3
    for doc in chosen:
        ranking = run.queries[f"self-{doc.docid}"]
        assert ranking.docids[0] == doc.docid and ranking.scores[0] == pytest.approx(1.0, abs=1e-4)
    for ranking in run.queries.values():
        assert len(ranking) == 10 and max(ranking.scores) <= 1 + 1e-5
        assert [t.stage for t in ranking.timings] == ["dense"]
    stage = run.header.stages[-1]
    assert stage["backend"] == "dense" and stage["faiss"] == "FlatIP" and len(stage["encoder"]) == 16


def test_interrupted_build_resumes_from_saved_shards(home, cacm_slice, tiny_encoder, monkeypatch):  # noqa: F811
    from rerank.retrieve import dense

    monkeypatch.setattr(dense, "SHARD", 20)
    docs = _documents(cacm_slice, 70)

    def interrupted():
        for i, doc in enumerate(docs):
            if i == 45:
                raise KeyboardInterrupt
            yield doc

    with pytest.raises(KeyboardInterrupt):
        dense.build("resumed", interrupted(), {"corpus": "slice"}, encoder=tiny_encoder)
    assert not (home / "indexes" / "resumed" / "dense").exists()
    info = dense.build("resumed", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder)
    assert info.documents == 70 and info.source["resumed_documents"] == 40  # two whole shards of 20
    fresh = dense.build("fresh", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder)
    assert fresh.source["resumed_documents"] == 0
    resumed_vectors = np.load(home / "indexes" / "resumed" / "dense" / dense.VECTORS)
    assert np.allclose(resumed_vectors, np.load(home / "indexes" / "fresh" / "dense" / dense.VECTORS), atol=1e-6)
    assert not list((home / "indexes" / "resumed").glob(".dense.partial"))


def test_a_build_resumed_after_its_corpus_changed_encodes_it_again(home, cacm_slice, tiny_encoder, monkeypatch,
                                                                    tmp_path):  # noqa: F811
    """The shards were matched by docids alone: a corpus whose texts were corrected after an interruption got the
    old texts' vectors back."""
    import json
    import os

    from rerank.retrieve import dense

    monkeypatch.setattr(dense, "SHARD", 20)
    docs = _documents(cacm_slice, 30)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))

    def interrupted():
        yield from docs[:25]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dense.build("edited", interrupted(), {"corpus": str(corpus)}, encoder=tiny_encoder)
    corpus.write_text(corpus.read_text().upper())
    os.utime(corpus, ns=(corpus.stat().st_atime_ns, corpus.stat().st_mtime_ns + 10**9))
    info = dense.build("edited", iter(docs), {"corpus": str(corpus)}, encoder=tiny_encoder)
    assert info.source["resumed_documents"] == 0


def test_an_overwrite_that_changes_only_the_faiss_index_encodes_nothing(home, cacm_slice, tiny_encoder, monkeypatch,
                                                                        tmp_path):  # noqa: F811
    """Exact to HNSW re-encoded the whole corpus: on a large one, hours for a graph built in seconds. The stored
    vectors are taken when the documents' files and the encoder are the ones they came from, and only then."""
    import json
    import os

    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 30)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))
    source = {"corpus": str(corpus)}
    dense.build("switch", iter(docs), source, encoder=tiny_encoder)
    before = np.load(home / "indexes" / "switch" / "dense" / dense.VECTORS)
    real_encoder, loads = dense.load_encoder, []
    monkeypatch.setattr(dense, "load_encoder", lambda *args: loads.append(args) or real_encoder(*args))
    info = dense.build("switch", iter(docs), source, encoder=tiny_encoder, hnsw=16, overwrite=True)
    assert loads == [] and info.source["faiss"] == "HNSW16,IP" and info.source[dense.REUSED]
    assert (np.load(home / "indexes" / "switch" / "dense" / dense.VECTORS) == before).all()
    topics = {d.docid: d.contents for d in docs[:3]}
    assert [r.docids[0] for r in dense.open_index("switch", encoder=tiny_encoder).search(topics, k=5)] == list(topics)
    loads.clear()  # (the search's query encoder)
    # touched (copied, downloaded again) with the same bytes: the same file, which a state of size and time took for
    # an edit, encoding the whole corpus again
    os.utime(corpus, ns=(corpus.stat().st_atime_ns, corpus.stat().st_mtime_ns + 10**9))
    info = dense.build("switch", iter(docs), source, encoder=tiny_encoder, overwrite=True)
    assert loads == [] and info.source[dense.REUSED]
    corpus.write_text(corpus.read_text() + "\n")  # edited: the corpus may have changed
    info = dense.build("switch", iter(docs), source, encoder=tiny_encoder, overwrite=True)
    assert len(loads) == 1 and not info.source[dense.REUSED]
    info = dense.build("switch", iter(docs), {"corpus": str(tmp_path / "other.jsonl")}, encoder=tiny_encoder,
                       overwrite=True)  # other documents (here a name with no file: no file state to tell them apart)
    assert len(loads) == 2 and info.source["resumed_documents"] == 0


def test_an_overwrite_of_a_damaged_index_encodes_again(home, cacm_slice, tiny_encoder, tmp_path):  # noqa: F811
    """--overwrite is how a damaged index is repaired: taking its stored vectors copied a cut docids.txt into the
    new index (300 vectors, 100 docids: a search that fails or names the wrong documents), and a cut or removed
    vectors.npy stopped the build with a traceback or an error."""
    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 30)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))
    source, folder = {"corpus": str(corpus)}, home / "indexes" / "damaged" / "dense"
    dense.build("damaged", iter(docs), source, encoder=tiny_encoder)
    good = np.load(folder / dense.VECTORS)
    for damage in (lambda: (folder / dense.DOCIDS).write_text("\n".join(d.docid for d in docs[:10]) + "\n"),
                   lambda: (folder / dense.VECTORS).write_bytes((folder / dense.VECTORS).read_bytes()[:1000]),
                   lambda: (folder / dense.VECTORS).unlink(),
                   lambda: (folder / "rerank-index.json").write_text("{not json"),
                   lambda: (folder / "rerank-index.json").write_text('{"name": "damaged", "unknown": 1}')):
        damage()
        info = dense.build("damaged", iter(docs), source, encoder=tiny_encoder, overwrite=True)
        assert not info.source[dense.REUSED] and info.documents == 30
        assert (folder / dense.DOCIDS).read_text().split() == [d.docid for d in docs]
        assert np.allclose(np.load(folder / dense.VECTORS), good, atol=1e-6)


def test_a_repeated_docid_stops_the_build_where_it_appears(home, cacm_slice, tiny_encoder, monkeypatch,
                                                           tmp_path):  # noqa: F811
    """The shared id check (formats.distinct_ids) stops a dense build at the repeat, before the rest is encoded;
    an empty corpus leaves no partial build behind."""
    import json

    import torch

    from rerank.errors import BackendError, DataError
    from rerank.retrieve import api, dense

    monkeypatch.setattr(dense, "SHARD", 20)
    docs = _documents(cacm_slice, 30)
    encoded: list[int] = []

    class CountingEncoder:
        def embed(self, texts):
            encoded.append(len(texts))
            return torch.zeros(len(texts), 4)

    monkeypatch.setattr(dense, "load_encoder", lambda path, threads: CountingEncoder())
    corpus = tmp_path / "twice.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in [*docs, docs[3]]))
    with pytest.raises(DataError, match=f"document id '{docs[3].docid}' appears twice"):
        api.build_index("twice", "dense", corpus=str(corpus), encoder=tiny_encoder)
    assert encoded == []  # the pass that counts the documents finds the repeat before any shard is encoded
    assert not (home / "indexes" / "twice" / ".dense.partial").exists()  # the corrected corpus starts afresh
    with pytest.raises(BackendError, match="no documents"):
        dense.build("nothing", iter([]), {}, encoder=tiny_encoder)
    assert not (home / "indexes" / "nothing").exists() or not any((home / "indexes" / "nothing").iterdir())


def test_hnsw_finds_what_exact_search_finds(home, cacm_slice, tiny_encoder, monkeypatch):  # noqa: F811
    import faiss

    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 100)
    topics = {d.docid: d.contents for d in docs[:5]}
    dense.build("exact", iter(docs), {}, encoder=tiny_encoder)
    dense.build("graph", iter(docs), {}, encoder=tiny_encoder, hnsw=16)
    exact = list(dense.open_index("exact", encoder=tiny_encoder).search(topics, k=10))
    graph = list(dense.open_index("graph", encoder=tiny_encoder).search(topics, k=10, ef_search=64))
    for a, b in zip(exact, graph):
        assert a.docids[:5] == b.docids[:5]
        assert a.docids[0] == a.qid  # each document finds itself first
    # With efSearch left at 16, faiss returned ~80 of 100 documents for k=100 (~500 of 3,000 for k=1000)
    deep = list(dense.open_index("graph", encoder=tiny_encoder).search(topics, k=100))
    assert [len(r) for r in deep] == [100] * 5
    assert dense.open_index("graph", encoder=tiny_encoder, k=50, ef_search=20).provenance["ef_search"] == 50
    with pytest.raises(UsageError, match="--ef-search tunes an HNSW index; exact's is exact"):
        dense.open_index("exact", encoder=tiny_encoder, ef_search=64)  # it would be ignored, yet recorded
    # one build serves both: the graph's stored vectors, searched exactly, give the exact index's run; the graph
    # is not read for it (with the vectors it holds, a third copy of them in memory)
    with monkeypatch.context() as patched:
        patched.setattr(faiss, "read_index", None)
        reference = dense.open_index("graph", encoder=tiny_encoder, exact=True)
    assert reference.provenance["faiss"] == "FlatIP" and reference.ef_search(10, None) is None
    for a, b in zip(exact, reference.search(topics, k=10)):
        assert (a.docids, a.scores) == (b.docids, b.scores)
    with pytest.raises(UsageError, match="--ef-search tunes the HNSW graph's search; --exact compares every vector"):
        dense.open_index("graph", encoder=tiny_encoder, exact=True, ef_search=64)


@pytest.mark.data
def test_a_search_without_encoder_embeds_with_the_encoder_the_index_was_built_with(rerank, home, cacm_slice,  # noqa: F811
                                                                                   tiny_encoder, tmp_path,
                                                                                   monkeypatch):
    """`retrieve --backend dense` without --encoder embedded its queries with the packaged MiniLM, whatever encoder
    the index was built with, and so refused every index built with `--encoder DIR` unless DIR was given again. An
    index knows its encoder, as Pyserini's and PyTerrier's do: a search without --encoder uses the folder its manifest
    records (recorded whole, so a relative --encoder works from elsewhere) while it holds the same content. Another
    --encoder is refused as before; a recorded folder gone or changed is named in the refusal."""
    from rerank.errors import RerankError
    from rerank.retrieve import api, dense

    encoder = tmp_path / "own-encoder"
    shutil.copytree(tiny_encoder, encoder)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in (cacm_slice / "corpus.jsonl").read_text().splitlines()[:30]))
    with monkeypatch.context() as inside:  # `rerank index ... --encoder own-encoder` run in tmp_path
        inside.chdir(tmp_path)
        api.build_index("ownencoder", "dense", corpus=str(corpus), encoder="own-encoder", overwrite=True)
    topics = str(cacm_slice / "topics.tsv")
    search = ("retrieve", "ownencoder", "--backend", "dense", "--topics", topics, "--k", "5")
    run = load_run(io.StringIO(rerank(*search).stdout), "recorded")
    out = io.StringIO()
    api.retrieve("ownencoder", "dense", k=5, topics=topics, encoder=str(encoder)).write(out)  # --encoder ENCODER
    given = load_run(io.StringIO(out.getvalue()), "given")
    stage = run.header.stages[-1]
    assert stage["encoder"] == dense.encoder_identity(str(encoder))["hash"]
    assert stage["encoder_path"] == given.header.stages[-1]["encoder_path"] == str(encoder.resolve())
    assert {qid: (r.docids, r.scores) for qid, r in run.queries.items()} == {
        qid: (r.docids, r.scores) for qid, r in given.queries.items()} and len(run.queries) == 8
    for problem, why in (("another encoder given", "not " + dense.default_encoder_path()),
                         ("folder changed", "which has changed since"), ("folder gone", "which is gone")):
        if problem == "folder changed":
            (encoder / "notes.txt").write_text("an edit")
        elif problem == "folder gone":
            shutil.rmtree(encoder)
        extra = ("--encoder", dense.default_encoder_path()) if problem == "another encoder given" else ()
        if extra:  # through the CLI: one line, exit 1, no run
            done = rerank(*search, *extra, check=False)
            status, stderr = done.returncode, done.stderr
            assert done.stdout == "", problem
        else:  # in-process, as rerank's main says what the search raised
            with pytest.raises(RerankError) as refused:
                api.retrieve("ownencoder", "dense", k=5, topics=topics)
            status, stderr = refused.value.exit_code, f"rerank: error: {refused.value}\n"
        assert status == 1 and len(stderr.strip().splitlines()) == 1, problem
        assert f"was built with encoder {encoder.resolve()} (hash {stage['encoder']})" in stderr, problem
        assert why in stderr and "not comparable" in stderr, problem
        # a rebuild keeps the index's encoder while its folder is there (it rebuilt with the packaged MiniLM)
        kept = f" --encoder {encoder.resolve()}" if problem == "folder changed" else "".join(f" {a}" for a in extra)
        assert stderr.endswith(f"rebuild with rerank index ownencoder --corpus FILE --backend dense{kept} "
                               "--overwrite\n"), problem


@pytest.mark.data
def test_missing_dense_index_says_how_to_build_it(rerank):
    done = rerank("retrieve", "cacm", "--backend", "dense", "--name", "x", check=False,
                  env={"RERANK_HOME": "/nonexistent-rerank-home"})
    assert done.returncode != 0 and "build it with: rerank index cacm --backend dense" in done.stderr


def _midway(monkeypatch, action, position: int = 25):
    """Index builds' documents, with `action` run once when the first build is midway (it has saved a shard), not in
    the pass that counts and checks them before a build begins; returns the builds' own wrapper, to put back."""
    from rerank.progress import Counted
    from rerank.retrieve import api

    done = []

    def documents(docs, total):
        def midway():
            for number, doc in enumerate(docs):
                if number == position and not done:
                    done.append(True)
                    action()
                yield doc
        return Counted(midway(), total)

    monkeypatch.setattr(api, "Counted", documents)
    return Counted


def test_a_second_build_of_an_index_being_built_is_refused(home, cacm_slice, tiny_encoder, monkeypatch):  # noqa: F811
    """Two builds of one dense index at once (two shells, parallel jobs) shared indexes/NAME/.dense.partial: the
    second took over the first's shards and moved the folder into place under it, and the first then failed with
    'No such file or directory: .../.dense.partial/...'. The second is refused in one line; the first finishes."""
    from rerank.errors import BusyError
    from rerank.retrieve import api, dense

    monkeypatch.setattr(dense, "SHARD", 20)
    corpus = str(cacm_slice / "corpus.jsonl")
    second: list = []

    def start_second():
        try:
            second.append(api.build_index("contended", "dense", corpus=corpus, encoder=tiny_encoder, overwrite=True))
        except BusyError as error:
            second.append(error)

    checked = _midway(monkeypatch, start_second)
    info = api.build_index("contended", "dense", corpus=corpus, encoder=tiny_encoder)
    assert isinstance(second[0], BusyError), f"the second build ran alongside the first: {second[0]}"
    assert str(second[0]) == "index 'contended' (dense) is being built by another process; wait for it to finish"
    monkeypatch.setattr(api, "Counted", checked)
    alone = api.build_index("alone", "dense", corpus=corpus, encoder=tiny_encoder)
    assert info.documents == alone.documents == len(_documents(cacm_slice))
    assert np.allclose(np.load(home / "indexes" / "contended" / "dense" / dense.VECTORS),
                       np.load(home / "indexes" / "alone" / "dense" / dense.VECTORS), atol=1e-6)
    assert sorted(p.name for p in (home / "indexes" / "contended").iterdir()) == ["dense"]  # no lock left behind


def test_a_rebuild_never_deletes_the_live_index_in_place(home, cacm_slice, tiny_encoder, monkeypatch):  # noqa: F811
    """`--overwrite`: the old index moves aside before the new one moves in. Deleted where it stood, a search
    opening it meanwhile found a manifest with half its files (or a faiss error)."""
    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 30)
    dense.build("live", iter(docs), {}, encoder=tiny_encoder)
    live = home / "indexes" / "live" / "dense"
    deleting = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        assert os.path.realpath(path) != os.path.realpath(live), "the live index was deleted where searches open it"
        return deleting(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    info = dense.build("live", iter(docs[:20]), {}, encoder=tiny_encoder, overwrite=True)
    assert info.documents == 20 and dense.open_index("live", encoder=tiny_encoder).info.documents == 20
    assert sorted(p.name for p in live.parent.iterdir()) == ["dense"]  # nothing aside is left


def _fake_dense_index(home, name: str, docids: list[str], dim: int = 4, source: dict | None = None,
                      index_name: str | None = None, encoder_hash: str = "h"):
    """A dense index's files as a build leaves them, without encoding anything (its source's files recorded as a
    build records them)."""
    from rerank.retrieve.dense import DOCIDS, VECTORS
    from rerank.retrieve.store import IndexInfo, source_state

    folder = home / "indexes" / name / ("dense" if index_name is None else f"dense-{index_name}")
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / VECTORS, np.eye(len(docids), dim, dtype=np.float32))
    (folder / DOCIDS).write_text("\n".join(docids) + "\n")
    source = source or {"corpus": "/c.jsonl"}
    IndexInfo(name, "dense", len(docids), {**source, "dim": dim, "encoder": {"hash": encoder_hash, "max_length": 256},
                                           "files": source_state(source, skip=("qrels", "topics"))}).write(folder)
    return folder


@pytest.mark.parametrize("damage", ["docids a line short", "docids a line long", "vectors truncated",
                                    "vectors not an array", "manifest not JSON"])
def test_stored_passages_of_a_damaged_dense_index_are_refused(home, damage):
    """score --model minilm-bi looked passages up by docid in a dense index's docids.txt and vectors.npy as they
    were: a docids.txt a line short gave each later document its neighbour's vector (scores silently wrong), and a
    truncated vectors.npy or a damaged manifest ended in a traceback. A damaged index is named, with its rebuild."""
    from rerank.errors import DataError
    from rerank.retrieve.dense import DOCIDS, VECTORS, stored_passages
    from rerank.retrieve.store import MANIFEST
    from rerank.runs import RunHeader

    folder = _fake_dense_index(home, "damagedpassages", ["d1", "d2", "d3"])
    header = RunHeader({"index": "damagedpassages", "corpus": "/c.jsonl"})
    assert stored_passages(header, {"corpus": "/c.jsonl"}, "h", 256).rows == {"d1": 0, "d2": 1, "d3": 2}
    if damage == "docids a line short":
        (folder / DOCIDS).write_text("d1\nd3\n")
    elif damage == "docids a line long":
        (folder / DOCIDS).write_text("d1\nd2\nd3\nd4\n")
    elif damage == "vectors truncated":
        os.truncate(folder / VECTORS, (folder / VECTORS).stat().st_size - 8)
    elif damage == "vectors not an array":
        (folder / VECTORS).write_text("hello\n")
    else:
        (folder / MANIFEST).write_text("{")
    with pytest.raises(DataError, match="dense index .*damagedpassages.* is damaged.*rerank index damagedpassages "
                                        "--corpus FILE --backend dense --overwrite"):
        stored_passages(header, {"corpus": "/c.jsonl"}, "h", 256)


def test_stored_passages_are_of_the_collection_the_texts_come_from(home):
    """Stored vectors are found by docid, and were taken from the dense index named after the stream's index or data
    set whatever it had been built from: a dense `cacm` built from a corpus file of one's own (or a `mini` rebuilt
    from another file) gave a BM25 stream over CACM's texts the vectors of other texts under the same docids. So did
    a header naming data set X and a Lucene index Y: texts came from Y, vectors from X's dense index."""
    from rerank.docstore import doc_store_for
    from rerank.errors import DataError
    from rerank.retrieve.dense import stored_passages
    from rerank.retrieve.store import IndexInfo
    from rerank.runs import RunHeader

    _fake_dense_index(home, "ownpassages", ["d1", "d2"])  # built from /c.jsonl
    own = RunHeader({"index": "ownpassages"})
    assert stored_passages(own, {"corpus": "/c.jsonl"}, "h", 256) is not None
    assert stored_passages(own, {"corpus": "/other.jsonl"}, "h", 256) is None
    assert stored_passages(own, {"dataset": "ownpassages"}, "h", 256) is None
    assert stored_passages(own, {}, "h", 256) is None  # texts of unknown origin
    _fake_dense_index(home, "setpassages", ["d1", "d2"], source={"dataset": "setpassages"})
    assert stored_passages(RunHeader({"dataset": "setpassages"}), {"dataset": "setpassages"}, "h", 256) is not None
    # texts from Lucene index `elsewhere` (built from another file), vectors offered by setpassages' dense index
    lucene = home / "indexes" / "elsewhere" / "lucene"
    lucene.mkdir(parents=True)
    IndexInfo("elsewhere", "lucene", 2, {"corpus": "/e.jsonl"}).write(lucene)
    mixed = RunHeader({"dataset": "setpassages", "index": "elsewhere"})
    with pytest.raises(DataError, match="index elsewhere is built from /e.jsonl, but the run's header says its "
                                        "documents are data set setpassages"):
        doc_store_for(mixed)  # nor does it take that index's texts for the data set's documents
    store = doc_store_for(RunHeader({"index": "elsewhere"}))
    assert store.source == "index elsewhere" and store.origin == {"corpus": "/e.jsonl"}
    assert stored_passages(mixed, store.origin, "h", 256) is None
    IndexInfo("elsewhere", "lucene", 2, {"dataset": "setpassages"}).write(lucene)
    assert stored_passages(mixed, doc_store_for(mixed).origin, "h", 256) is not None  # built from the same set


def test_an_hnsw_m_faiss_cannot_take_is_refused_before_encoding(home, tiny_encoder):
    """`--hnsw 100000000000` encoded the whole corpus, then faiss's constructor gave a TypeError traceback."""
    from rerank.retrieve import dense

    def documents():
        raise AssertionError("nothing is encoded")
        yield

    for m in (1, 2 ** 30, 10 ** 11):
        with pytest.raises(UsageError, match=f"links per node \\(e.g. 32\\), not {m}"):
            dense.build("huge-m", documents(), {}, encoder=tiny_encoder, hnsw=m)


def test_an_encoder_folder_that_is_not_a_usable_model_is_one_line(tiny_encoder, tmp_path):
    """A damaged config.json or modules.json was a JSONDecodeError or AttributeError traceback, and a folder
    transformers cannot load (no tokenizer, no weights) was its ValueError's."""
    from rerank.retrieve.dense import encoder_identity, load_encoder

    folder = tmp_path / "damaged"
    shutil.copytree(tiny_encoder, folder)
    config = (folder / "config.json").read_text()
    for name, text, words in (("config.json", "{oops", "its config.json is not a JSON object"),
                              ("config.json", "[1]", "its config.json is not a JSON object"),
                              ("modules.json", "{", "its modules.json is not a JSON list"),
                              ("modules.json", "[3]", "its modules.json lists 3, not a module")):
        (folder / name).write_text(text)
        with pytest.raises(UsageError, match=words):
            encoder_identity(str(folder))
        (folder / "config.json").write_text(config)
        (folder / "modules.json").unlink(missing_ok=True)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(config)
    assert encoder_identity(str(bare))["pooling"] == "mean"
    with pytest.raises(UsageError, match="transformers cannot load a model from it"):
        load_encoder(str(bare), threads=1)


def test_documents_without_text_are_skipped_as_lucene_skips_them(home, tiny_encoder, tmp_path):
    """A dense index held the documents without text that Lucene and Elasticsearch leave out: an empty document came
    first for a query of punctuation or stopwords, and `rerank score` of such a run over the Lucene index's texts
    stopped at it ('not in the document store'). They are skipped and counted, also when the vectors are reused."""
    from rerank.data import Document
    from rerank.retrieve import dense
    from rerank.retrieve.store import EMPTY_SKIPPED

    texts = {"a": "alpha beta", "b": "", "c": " \t\n", "d": "\u00a0"}  # a no-break space is text to Anserini
    docs = [Document(docid, text) for docid, text in texts.items()]
    corpus = tmp_path / "blank.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.text}) + "\n" for d in docs))
    folder = home / "indexes" / "blankdense" / "dense"
    for overwrite, hnsw in ((False, None), (True, 8)):
        info = dense.build("blankdense", iter(docs), {"corpus": str(corpus)}, encoder=tiny_encoder,
                           overwrite=overwrite, hnsw=hnsw)
        assert info.source[dense.REUSED] == overwrite  # the second build took the first's vectors
        assert info.documents == 2 and info.source[EMPTY_SKIPPED] == 2
        assert (folder / dense.DOCIDS).read_text().split() == ["a", "d"]
    manifest = json.loads((folder / "rerank-index.json").read_text())
    del manifest["source"][EMPTY_SKIPPED]  # as built before documents without text were skipped: it may hold them
    (folder / "rerank-index.json").write_text(json.dumps(manifest))
    info = dense.build("blankdense", iter(docs), {"corpus": str(corpus)}, encoder=tiny_encoder, overwrite=True)
    assert not info.source[dense.REUSED] and info.documents == 2


@pytest.mark.parametrize("damage", ["docids a line short", "faiss index removed", "vectors removed"])
def test_a_search_of_a_damaged_dense_index_is_refused(home, cacm_slice, tiny_encoder, damage):  # noqa: F811
    """Searching a dense index whose docids.txt had lost a line ended in an IndexError traceback (or, for a hit
    above the cut, named the neighbour of the document found); a removed faiss.index in faiss's RuntimeError, and
    an --exact search of an HNSW build whose vectors.npy was removed in numpy's. Each is named, with its rebuild."""
    from rerank.errors import DataError
    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 30)
    dense.build("damagedsearch", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder, hnsw=8, overwrite=True)
    folder = home / "indexes" / "damagedsearch" / "dense"
    if damage == "docids a line short":
        (folder / dense.DOCIDS).write_text("\n".join(d.docid for d in docs[1:]) + "\n")
    else:
        (folder / (dense.FAISS_INDEX if damage == "faiss index removed" else dense.VECTORS)).unlink()
    with pytest.raises(DataError, match="dense index .*damagedsearch.* is damaged.*rerank index damagedsearch "
                                        "--corpus FILE --backend dense --overwrite"):
        index = dense.open_index("damagedsearch", encoder=tiny_encoder, k=30, exact=damage == "vectors removed")
        list(index.search({"q": docs[-1].contents}, k=30))


def test_a_run_of_another_encoder_names_its_folder(home, cacm_slice, tiny_encoder):  # noqa: F811
    """`retrieve --backend dense --encoder DIR` recorded the encoder's hash in place of DIR (the back end's provenance
    overwrote the option of the same name): the run named no folder to retrieve with again, and the index refuses
    a search without it."""
    from rerank.retrieve import api, dense

    dense.build("tinynamed", iter(_documents(cacm_slice, 20)), {}, encoder=tiny_encoder, overwrite=True)
    stream = api.retrieve("tinynamed", "dense", k=3, topics=str(cacm_slice / "topics.tsv"), encoder=tiny_encoder)
    stage = stream.header.stages[-1]
    assert stage["encoder_path"] == tiny_encoder and stage["encoder"] == dense.encoder_identity(tiny_encoder)["hash"]


def test_a_dense_run_names_the_faiss_and_torch_it_searched_with(home, cacm_slice, tiny_encoder):  # noqa: F811
    """A dense stage's entry named the index build and encoder, not the faiss that searched nor the torch and
    transformers that embedded the queries, by which two machines' runs may differ in the 5th decimal."""
    import faiss
    import tokenizers
    import torch
    import transformers

    from rerank.retrieve import api, dense

    dense.build("withpackages", iter(_documents(cacm_slice, 20)), {}, encoder=tiny_encoder, overwrite=True)
    stream = api.retrieve("withpackages", "dense", k=3, topics=str(cacm_slice / "topics.tsv"), encoder=tiny_encoder)
    assert stream.header.stages[-1]["packages"] == {"faiss": faiss.__version__, "torch": torch.__version__,
                                                    "transformers": transformers.__version__,
                                                    "tokenizers": tokenizers.__version__}


def test_documents_tied_at_the_cut_are_kept_in_the_runs_own_order(home, cacm_slice, tiny_encoder):  # noqa: F811
    """Of documents tied at the k-th score (the same text under several ids), faiss kept the first rows, which
    the run then ranked below the others: `--k 1` kept the first copy, `--k 3` ranked the last one first, so a
    shallower run was not the head of a deeper one. The cut now keeps the run's own order (ties by docid
    descending, as trec_eval orders them), exact and HNSW alike."""
    from rerank.data import Document
    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 12)
    copies = [Document(f"zz-copy-{i}", docs[0].contents) for i in range(3)]
    for hnsw in (None, 8):
        dense.build("tiedcut", iter(docs + copies), {}, encoder=tiny_encoder, overwrite=True, hnsw=hnsw)
        index = dense.open_index("tiedcut", encoder=tiny_encoder)
        deep = next(index.search({"q": docs[0].contents}, k=15))
        assert deep.docids[:4] == ["zz-copy-2", "zz-copy-1", "zz-copy-0", docs[0].docid]
        for k in (1, 2, 3, 4, 5):
            assert next(index.search({"q": docs[0].contents}, k=k)).docids == deep.docids[:k]


def test_an_exact_index_stores_its_vectors_once(home, cacm_slice, tiny_encoder):  # noqa: F811
    """An exact build wrote vectors.npy and a faiss.index of the same vectors (17.6 MB each for vaswani): the
    flat index is now made from vectors.npy when opened, and searches the same."""
    from rerank.retrieve import dense

    docs = _documents(cacm_slice, 30)
    dense.build("once", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder, overwrite=True)
    folder = home / "indexes" / "once" / "dense"
    assert (folder / dense.VECTORS).is_file() and not (folder / dense.FAISS_INDEX).exists()
    exact = list(dense.open_index("once", encoder=tiny_encoder, k=5).search({"q": docs[3].contents}, k=5))[0]
    assert exact.docids[0] == docs[3].docid and len(exact.docids) == 5
    dense.build("graph", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder, hnsw=8, overwrite=True)
    graph = list(dense.open_index("graph", encoder=tiny_encoder, k=5, exact=True).search({"q": docs[3].contents}, k=5))
    assert graph[0].docids == exact.docids and graph[0].scores == exact.scores


def test_vectors_embedded_by_another_version_of_the_code_are_neither_searched_nor_reused(home, cacm_slice,  # noqa: F811
                                                                                         tiny_encoder, monkeypatch,
                                                                                         tmp_path):
    """A dense index records its encoder's weights; vectors embedded by code that embedded otherwise (minilm-bi's
    scores version bumped since) were searched with today's query vectors, looked up by score --model minilm-bi, and
    taken over by an --overwrite, as if comparable."""
    from rerank.models.base import model_spec
    from rerank.retrieve import dense
    from rerank.runs import RunHeader

    docs = _documents(cacm_slice, 20)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))
    source = {"corpus": str(corpus)}
    info = dense.build("versioned", iter(docs), source, encoder=tiny_encoder)
    encoder_hash = info.source["encoder"]["hash"]
    assert dense.stored_passages(RunHeader({"index": "versioned"}), source, encoder_hash, dense.MAX_LENGTH) is not None
    monkeypatch.setattr(model_spec("minilm-bi"), "scores_version", model_spec("minilm-bi").scores_version + 1)
    with pytest.raises(dense.BackendError, match="embedded by a rerank whose embedding is version 1, and this one "
                                                 "embeds as version 2: its vectors are not comparable; rebuild"):
        dense.open_index("versioned", encoder=tiny_encoder)
    # without --encoder it searches with the folder it was built with, and a rebuild keeps that folder (it was left
    # out of the command, which then rebuilt with the packaged MiniLM)
    with pytest.raises(dense.BackendError, match=re.escape(f"rebuild with rerank index versioned --corpus FILE --backend "
                                                           f"dense --encoder {Path(tiny_encoder).resolve()} --overwrite")):
        dense.open_index("versioned")
    assert dense.stored_passages(RunHeader({"index": "versioned"}), source, encoder_hash, dense.MAX_LENGTH) is None
    info = dense.build("versioned", iter(docs), source, encoder=tiny_encoder, overwrite=True)
    assert not info.source[dense.REUSED] and info.source["encoder"]["scores_version"] == 2
    assert len(list(dense.open_index("versioned", encoder=tiny_encoder).search({"q": "time sharing"}, k=3))[0]) == 3


@pytest.mark.data
def test_dense_indexes_of_one_data_set_side_by_side_under_index_names(rerank, home, tiny_encoder, tmp_path):
    """Comparing two encoders (or HNSW settings) on cacm took two index NAMEs (`rerank index cacm-tasb --corpus ...`),
    whose runs named no data set: eval wanted --qrels, score --topics. `--index-name` keeps several dense indexes
    of cacm side by side (indexes/cacm/dense-INDEX_NAME), and their runs name cacm, the index name and the build."""
    from rerank.retrieve import api
    from rerank.retrieve.store import MANIFEST

    folders = home / "indexes" / "cacm"
    for index_name, hnsw in (("tiny-exact", None), ("tiny-hnsw", 8)):
        info = api.build_index("cacm", "dense", encoder=tiny_encoder, index_name=index_name, hnsw=hnsw, overwrite=True)
        assert info.source["index_name"] == index_name and info.source["dataset"] == "cacm"
    assert {"dense-tiny-exact", "dense-tiny-hnsw"} <= {path.name for path in folders.iterdir()}
    assert not [path for path in folders.iterdir() if path.name.startswith(".")]  # no partial build, no lock
    exact = api.retrieve("cacm", "dense", k=20, index_name="tiny-exact", encoder=tiny_encoder, stage_name="exact")
    with open(tmp_path / "exact.run", "w") as out:
        exact.write(out)
    rerank("retrieve", "cacm", "--backend", "dense", "--index-name", "tiny-hnsw", "--encoder", tiny_encoder,
           "--k", "20", "--name", "hnsw", "-o", str(tmp_path / "hnsw.run"))
    for index_name, run in (("tiny-exact", "exact"), ("tiny-hnsw", "hnsw")):
        header = load_run(io.StringIO((tmp_path / f"{run}.run").read_text()), run).header
        manifest = json.loads((folders / f"dense-{index_name}" / MANIFEST).read_text())
        stage = header.stages[-1]
        assert header.dataset == "cacm" and header.get("index") == "cacm" and stage["index_name"] == index_name
        assert stage["index_build"] == manifest["source"]["index_build"]
        assert stage["faiss"] == ("FlatIP" if run == "exact" else "HNSW8,IP")
    table = rerank("eval", str(tmp_path / "exact.run"), str(tmp_path / "hnsw.run"), "-m", "MAP").stdout  # no --qrels
    assert [line.split()[0] for line in table.splitlines()[1:3]] == ["exact", "hnsw"]
    bad = rerank("retrieve", "cacm", "--backend", "dense", "--index-name", "../tiny-exact", check=False)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == (
        "rerank: error: --index-name '../tiny-exact': a dense index name is one word of at most 100 letters, digits "
        "and _ . + - (not starting with . + or -)\n")
    with pytest.raises(UsageError, match="^--backend lucene does not take --index-name$"):
        api.retrieve("cacm", "lucene", index_name="tiny-exact")


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "a b", "-x", "x" * 101])
def test_a_dense_index_name_that_is_not_one_plain_word_is_refused(home, bad):
    """An index name becomes part of a folder's name under indexes/NAME/ and a word in commands that messages
    suggest: a path, a build's dot-folder or a name with spaces is refused before anything is read or written."""
    from rerank.retrieve import api

    for call in (lambda: api.retrieve("cacm", "dense", index_name=bad),
                 lambda: api.build_index("cacm", "dense", index_name=bad)):
        with pytest.raises(UsageError, match=r"a dense index name is one word of at most 100 letters"):
            call()


def test_builds_of_two_dense_index_names_go_side_by_side(home, cacm_slice, tiny_encoder, monkeypatch):  # noqa: F811
    """Each index name has its own partial build (.dense-INDEX_NAME.partial) and its own lock: a second build of
    the same name is refused, one of another name goes ahead, and a rebuild of the unnamed index, which replaces
    indexes/NAME/dense whole, leaves the named ones alone."""
    from rerank.errors import BusyError
    from rerank.retrieve import api, dense

    monkeypatch.setattr(dense, "SHARD", 20)
    corpus = str(cacm_slice / "corpus.jsonl")
    during: list = []

    def start_others():
        during.append(sorted(path.name for path in (home / "indexes" / "twonames").iterdir()))
        try:
            api.build_index("twonames", "dense", corpus=corpus, encoder=tiny_encoder, index_name="a", overwrite=True)
        except BusyError as error:
            during.append(str(error))
        during.append(api.build_index("twonames", "dense", corpus=corpus, encoder=tiny_encoder, index_name="b"))

    checked = _midway(monkeypatch, start_others)
    first = api.build_index("twonames", "dense", corpus=corpus, encoder=tiny_encoder, index_name="a")
    assert during[:2] == [[".dense-a.lock", ".dense-a.partial"], "index 'twonames' (dense index name 'a') is being "
                                                                 "built by another process; wait for it to finish"]
    assert first.documents == during[2].documents == len(_documents(cacm_slice))
    folder = home / "indexes" / "twonames"
    assert np.allclose(np.load(folder / "dense-a" / dense.VECTORS), np.load(folder / "dense-b" / dense.VECTORS))
    monkeypatch.setattr(api, "Counted", checked)
    api.build_index("twonames", "dense", corpus=corpus, encoder=tiny_encoder, overwrite=True)
    api.build_index("twonames", "dense", corpus=corpus, encoder=tiny_encoder, overwrite=True)  # replaces dense/
    assert sorted(path.name for path in folder.iterdir()) == ["dense", "dense-a", "dense-b"]
    assert dense.open_index("twonames", encoder=tiny_encoder, index_name="b").info.documents == first.documents


def test_stored_passages_are_found_in_the_dense_index_the_stream_searched(home):
    """score --model minilm-bi looked for stored vectors in indexes/NAME/dense alone: a stream from a named dense
    index (or a BM25 stream) embedded every passage again though a named index held their vectors; and an index
    of the collection built by another encoder ended the look-up, where another index held this encoder's."""
    from rerank.errors import DataError
    from rerank.retrieve.dense import stored_passages
    from rerank.runs import RunHeader

    unnamed = _fake_dense_index(home, "namedpassages", ["d1", "d2"])
    named = _fake_dense_index(home, "namedpassages", ["d2", "d1"], index_name="other", encoder_hash="h2")
    searched = RunHeader({"index": "namedpassages"}, [{"name": "dense", "stage": "retrieve", "backend": "dense",
                                                       "index_name": "other"}])
    documents = {"corpus": "/c.jsonl"}
    found = stored_passages(searched, documents, "h2", 256)
    assert found is not None and found.folder == named and found.rows == {"d2": 0, "d1": 1}
    assert stored_passages(searched, documents, "h", 256).folder == unnamed  # past the other encoder's index
    _fake_dense_index(home, "namedpassages", ["d1", "d2"], index_name="another", encoder_hash="h2")
    assert stored_passages(searched, documents, "h2", 256).folder == named  # the index searched first
    bm25 = RunHeader({"index": "namedpassages"}, [{"name": "bm25", "stage": "retrieve", "backend": "lucene"}])
    assert stored_passages(bm25, documents, "h2", 256).folder == named.with_name("dense-another")  # by name
    assert stored_passages(bm25, documents, "h3", 256) is None
    (named.with_name("dense-another") / "rerank-index.json").write_text("{")  # damaged, and no stage searched it
    assert stored_passages(bm25, documents, "h2", 256).folder == named
    (named / "rerank-index.json").write_text("{")  # damaged, and the stream's own
    with pytest.raises(DataError, match="rebuild it with: rerank index namedpassages --corpus FILE --backend dense "
                                        "--index-name other --overwrite"):
        stored_passages(searched, documents, "h2", 256)


@pytest.mark.data
def test_a_pipeline_builds_and_searches_a_named_dense_index(rerank, home, tiny_encoder, tmp_path):
    """A retrieve stage's `index_name` searches that dense index, its run's fingerprint reads that index's manifest
    (a rebuild runs the stage again, also one with another encoder, which a stage without `encoder` then searches
    with), the check before any stage looks for that folder, and [index] builds it with its `encoder`, which a stage
    without one uses (it used the packaged MiniLM, and the stage failed after the build)."""
    from rerank.errors import MissingIndexError
    from rerank.pipeline import _check_index_there
    from rerank.retrieve import api

    with pytest.raises(MissingIndexError, match=r"no complete dense index 'nosuch' at .*/cacm/dense-nosuch; build it "
                                                r"with: rerank index cacm --backend dense --index-name nosuch, or give"):
        _check_index_there({"dataset": "cacm"}, "dense", {"index_name": "nosuch"})
    spec = tmp_path / "named.toml"
    spec.write_text(f'dataset = "cacm"\nmeasures = ["MAP"]\n[index]\nbackend = "dense"\nindex_name = "piped"\n'
                    f'encoder = "{tiny_encoder}"\n[[stage]]\nname = "tiny"\nkind = "retrieve"\nbackend = "dense"\n'
                    f'index_name = "piped"\nk = 20\n')
    first = rerank("run", str(spec))
    assert first.stdout.splitlines()[1].startswith("tiny ")
    assert (home / "indexes" / "cacm" / "dense-piped" / "rerank-index.json").is_file()
    assert "tiny: up to date" in rerank("run", str(spec)).stderr
    other = tmp_path / "other-encoder"  # the same weights in another folder with other content: another encoder
    shutil.copytree(tiny_encoder, other)
    (other / "notes.txt").write_text("another encoder")
    api.build_index("cacm", "dense", encoder=str(other), index_name="piped", overwrite=True)
    assert "tiny: running retrieve" in rerank("run", str(spec)).stderr
    header = load_run(io.StringIO((home / "runs" / "named" / "tiny.run").read_text()), "tiny").header
    assert header.stages[-1]["encoder_path"] == str(other.resolve())


@pytest.mark.data
def test_a_dense_stage_with_another_encoder_than_the_index_table_builds_with_is_refused_when_read(rerank, home,
                                                                                                  tiny_encoder,
                                                                                                  tmp_path):
    """A pipeline whose [index] builds a dense index with one encoder, and whose stage searches it with another, was
    refused only when that stage ran: after the build and every stage before it. It is refused when the file is
    read; the same encoder (another spelling of its folder, or a copy of it) or none is not."""
    from rerank.errors import DataError
    from rerank.pipeline import load_pipeline
    from rerank.retrieve.dense import default_encoder_path

    copy = tmp_path / "copy"
    shutil.copytree(tiny_encoder, copy)
    spec = tmp_path / "clash.toml"

    def written(table: str, stage: str, index_name: str = "clash") -> None:
        spec.write_text(f'dataset = "cacm"\nmeasures = ["MAP"]\n[index]\nbackend = "dense"\nindex_name = "clash"\n'
                        f'{table}[[stage]]\nname = "dense"\nkind = "retrieve"\nbackend = "dense"\n'
                        f'index_name = "{index_name}"\n{stage}[[stage]]\nname = "other"\nkind = "retrieve"\n'
                        f'backend = "dense"\nindex_name = "clash"\n')

    for table, stage in ((f'encoder = "{tiny_encoder}"\n', f'encoder = "{copy}"\n'),
                         (f'encoder = "{tiny_encoder}"\n', f'encoder = "{tiny_encoder}/../{Path(tiny_encoder).name}"\n'),
                         (f'encoder = "{tiny_encoder}"\n', ""), ("", f'encoder = "{default_encoder_path()}"\n')):
        written(table, stage)
        load_pipeline(spec)
    written(f'encoder = "{tiny_encoder}"\n', f'encoder = "{default_encoder_path()}"\n', "elsewhere")  # another index
    load_pipeline(spec)
    written("", f'encoder = "{tiny_encoder}"\n')
    with pytest.raises(DataError, match=re.escape(f"stage 'dense' searches the dense index 'clash' with encoder "
                                                  f"{tiny_encoder}, and the [index] table builds it with the packaged "
                                                  "all-MiniLM-L6-v2: their vectors are not comparable")):
        load_pipeline(spec)
    written(f'encoder = "{tiny_encoder}"\n', f'encoder = "{default_encoder_path()}"\n')
    done = rerank("run", str(spec), check=False)
    assert done.returncode == 1 and done.stdout == "" and done.stderr == (
        f"rerank: error: {spec}: stage 'dense' searches the dense index 'clash' with encoder {default_encoder_path()}, "
        f"and the [index] table builds it with {tiny_encoder}: their vectors are not comparable; give the stage the "
        "[index] table's encoder, or none (a stage without one searches with the encoder its index was built with)\n")
    assert not (home / "indexes" / "cacm" / "dense-clash").exists()


@pytest.mark.data
def test_a_dense_build_through_the_cli_skips_and_counts_documents_without_title_or_text(rerank, home, tiny_encoder,
                                                                                        tmp_path):
    """A BEIR record whose title and text are both empty (or white space) is left out of a dense index, counted, as
    Lucene leaves it out; one with a title alone is indexed."""
    from rerank.retrieve import api

    corpus = tmp_path / "blank.jsonl"
    records = [{"_id": "a", "title": "Alpha", "text": "beta gamma"}, {"_id": "b", "title": "", "text": ""},
               {"_id": "c", "title": "Only a title", "text": ""}, {"_id": "d", "title": " ", "text": "\t\n"}]
    corpus.write_text("".join(json.dumps(record) + "\n" for record in records))
    said = {}
    for backend in ("dense", "lucene"):
        extra = ("--encoder", tiny_encoder) if backend == "dense" else ()
        said[backend] = rerank("index", "blankcli", "--backend", backend, "--corpus", str(corpus), *extra,
                               "--overwrite").stderr
        assert f"indexed 2 documents into index 'blankcli' ({backend}); 2 documents without text were skipped" in \
            said[backend]
    folder = home / "indexes" / "blankcli" / "dense"
    assert (folder / "docids.txt").read_text().split() == ["a", "c"]
    assert json.loads((folder / "rerank-index.json").read_text())["source"]["empty_documents_skipped"] == 2
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\talpha\n")
    found = api.retrieve("blankcli", "dense", k=10, topics=str(topics), encoder=tiny_encoder).rankings
    assert [sorted(ranking.docids) for ranking in found] == [["a", "c"]]


def test_a_dense_index_records_the_packages_that_encoded_it_and_its_runs_name_them(home, cacm_slice,  # noqa: F811
                                                                                   tiny_encoder, tmp_path):
    """A dense stage's `packages` named the torch that embedded its queries and the faiss that searched, not what
    encoded the corpus: vectors built under another torch (another machine's, months before) passed for the
    search's own. The manifest now records the versions that encoded them (`encoded_with`), which a search names
    beside its own; an --overwrite that takes the vectors keeps their record, and an index built before records were
    kept is searched as before, naming none."""
    import torch

    from rerank import installed_versions
    from rerank.retrieve import api, dense

    docs = _documents(cacm_slice, 20)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))
    source = {"corpus": str(corpus)}
    info = dense.build("encodedwith", iter(docs), source, encoder=tiny_encoder)
    versions = installed_versions("faiss", "torch", "transformers", "tokenizers")
    assert info.source["encoded_with"] == versions and all(versions.values())
    manifest = home / "indexes" / "encodedwith" / "dense" / "rerank-index.json"

    def searched() -> dict:
        stream = api.retrieve("encodedwith", "dense", k=3, topics=str(cacm_slice / "topics.tsv"), encoder=tiny_encoder)
        assert all(len(ranking) == 3 for ranking in stream.rankings)
        return stream.header.stages[-1]

    assert searched()["encoded_with"] == versions == searched()["packages"]
    record = json.loads(manifest.read_text())
    record["source"]["encoded_with"] = {**versions, "torch": "1.13.0"}  # encoded elsewhere, under another torch
    manifest.write_text(json.dumps(record))
    entry = searched()
    assert entry["encoded_with"]["torch"] == "1.13.0" and entry["packages"]["torch"] == torch.__version__
    info = dense.build("encodedwith", iter(docs), source, encoder=tiny_encoder, hnsw=8, overwrite=True)
    assert info.source[dense.REUSED] and info.source["encoded_with"]["torch"] == "1.13.0"
    record = json.loads(manifest.read_text())
    del record["source"]["encoded_with"]  # as a rerank before records were kept built it
    manifest.write_text(json.dumps(record))
    assert "encoded_with" not in searched()
    info = dense.build("encodedwith", iter(docs), source, encoder=tiny_encoder, overwrite=True)
    assert info.source[dense.REUSED] and "encoded_with" not in info.source  # what encoded them is not known


def test_shards_saved_under_other_package_versions_are_encoded_again(home, cacm_slice, tiny_encoder,  # noqa: F811
                                                                     monkeypatch):
    """A build interrupted, then resumed after torch was upgraded, would hold vectors of two torches under one
    record of what encoded them: its saved shards are encoded again, as those of another encoder are."""
    from rerank.retrieve import dense

    monkeypatch.setattr(dense, "SHARD", 20)
    docs = _documents(cacm_slice, 50)

    def interrupted():
        yield from docs[:45]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dense.build("upgraded", interrupted(), {"corpus": "slice"}, encoder=tiny_encoder)
    state_file = home / "indexes" / "upgraded" / ".dense.partial" / dense.BUILD_STATE
    state = json.loads(state_file.read_text())
    state["encoded_with"]["torch"] = "1.13.0"
    state_file.write_text(json.dumps(state, sort_keys=True))
    info = dense.build("upgraded", iter(docs), {"corpus": "slice"}, encoder=tiny_encoder)
    assert info.source["resumed_documents"] == 0 and info.source["encoded_with"]["torch"] != "1.13.0"


def test_minilm_bi_names_the_packages_that_encoded_the_passages_it_looks_up(home, cacm_slice,  # noqa: F811
                                                                            tiny_encoder, tmp_path):
    """`score --model minilm-bi` reading a dense index's passage vectors named its own torch only: the stored
    vectors' own record now goes into its entry (`encoded_with`); embedding every passage itself, it names none."""
    from rerank.models.bert import BiEncoderReranker
    from rerank.retrieve import dense
    from rerank.runs import QueryRanking, RunHeader, Stream
    from rerank.score import score_stream

    docs = _documents(cacm_slice, 20)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.contents}) + "\n" for d in docs))
    info = dense.build("bipackages", iter(docs), {"corpus": str(corpus.resolve())}, encoder=tiny_encoder)
    header = RunHeader({"index": "bipackages", "corpus": str(corpus.resolve())}).with_stage({"name": "dense"})
    for on_the_fly in (False, True):
        ranking = QueryRanking.from_scores("q", [d.docid for d in docs[:5]], range(5))
        model = BiEncoderReranker(max_length=dense.MAX_LENGTH, path=tiny_encoder, on_the_fly=on_the_fly)
        scored = score_stream(Stream(header, [ranking]), model, 5, cache=False, queries={"q": "time sharing"})
        entry = scored.header.stages[-1]
        assert len(next(iter(scored.rankings))) == 5
        if on_the_fly:
            assert entry["passages"] == "on the fly (asked for)" and "encoded_with" not in entry
        else:
            assert entry["passages"].startswith("stored (") and entry["encoded_with"] == info.source["encoded_with"]

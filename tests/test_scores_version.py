"""Each model's scores on fixed pairs, recorded with its scores version (its `ModelSpec.scores_version`).

The version keys the score cache, a pipeline score stage's fingerprint, TK's stored encodings and dense vectors:
a change to what a model computes that leaves its number alone lets scores computed by the old code pass for the
new code's. This test fails when a model's scores move and its number did not. After a deliberate change, bump
the model's number and record the scores the failure prints.

The weights are fixed without training (MiniLM's packaged encoder with a seeded head; tiny seeded TK modules), so
only scoring code moves these numbers; the texts reach the corners where fixes were made (TKL's last window, a
capital İ, stop words, an empty passage, a passage past the length limits).
"""

from __future__ import annotations

import pytest
import torch

from rerank.models.base import load_model, model_spec, registered
from rerank.checkpoint import write_checkpoint

QUERIES = ["how does kernel ranking work", "İzmir is the KERNEL of ranked models?"]
TEXTS = [
    "the transformer kernel model ranks passages by soft term matches",
    "kernel pooling counts cosine similarities between query and document terms " * 6,
    "",
    "a recipe for bread with flour water salt and yeast",
    "ranking ranking ranking kernel",
    "bread and flour " * 13 + "kernel ranking",  # 41 tokens: TKL's 8-token windows by 2 reach the last only now
    "Istanbul kernels: the models were ranked",
]
TINY_TK = {"layers": 1, "heads": 2, "feedforward": 16, "dropout": 0.0, "max_doc": 60}
TINY_TKL = {**TINY_TK, "window": 8, "stride": 2, "chunk": 10, "overlap": 2, "regions": 2}
TINY_CTRN = {"projection": 8, "filters": 8, "hidden": 8, "dropout": 0.0}
# next-query generators: a query is a session (one query here), TEXTS its candidate next queries
TINY_GENERATOR = {"texts": QUERIES + TEXTS, "d_model": 16, "heads": 2, "ff": 32, "dropout": 0.0, "max_query_tokens": 8}

# configuration -> (the scores version recorded with, its scores: each query's TEXTS in order)
RECORDED: dict[str, tuple[int, list[float]]] = {
    'bert': (1, [0.350994, 0.511502, 0.357576, 0.275929, 0.238486, 0.235594, 0.282808, 0.413621, 0.503559, 0.42866, 0.291024, 0.351958, 0.287037, 0.325207]),
    'minilm-bi': (1, [0.552407, 0.404445, 0.020424, 0.039753, 0.838896, 0.411537, 0.438577, 0.40693, 0.236411, 0.08161, 0.048493, 0.54645, 0.250657, 0.514814]),
    'tk': (1, [-4.056103, -4.598112, -39.963791, -8.570865, -18.556179, -2.19105, -5.160953, -11.936012, -17.430931, -56.464844, -20.804836, -33.632206, -12.543522, -11.939107]),
    'tk, minilm-context': (1, [-7.641547, -19.02916, -38.652622, -38.013527, -5.800934, -11.426371, -11.410784, -28.80632, -43.746441, -53.859215, -53.642197, -34.18697, -38.547249, -25.954103]),
    'tk, idf gate': (1, [-3.750671, -4.326197, -34.848465, -11.148323, -9.89825, -2.238982, -3.12562, -26.311508, -30.859463, -55.074661, -35.01289, -32.439785, -25.261021, -24.827095]),
    'tkl': (1, [0.255017, 0.240591, 0.0, 0.24485, 0.360969, 0.424643, 0.120441, 0.650864, 0.426142, 0.124984, 0.495072, 0.216687, 0.527235, 0.575912]),
    'ctrn': (1, [-0.215564, -0.216471, -0.21615, -0.214749, -0.204977, -0.206476, -0.215574, -0.21806, -0.219337, -0.216121, -0.21473, -0.217914, -0.219416, -0.212577]),
    'ctrn, minilm-context, no overlap': (1, [0.035927, 0.036177, 0.036403, 0.035794, 0.035451, 0.03628, 0.036032, 0.035449, 0.035703, 0.035961, 0.03528, 0.03502, 0.035757, 0.035548]),
    'qrnn': (1, [-0.21095, -0.21718, -0.215861, -0.210812, -0.195179, -0.207211, -0.213293, -0.211878, -0.218243, -0.214597, -0.209548, -0.206308, -0.215312, -0.208735]),
    'overlap': (1, [0.293526, 0.293526, 0.0, 0.0, 0.53112, 0.53112, 0.0, 0.235981, 0.235981, 0.0, 0.0, 0.235981, 0.235981, 0.370591]),
    'last-query': (1, [0.0] * 14),
    'cooccurrence': (1, [0.0] * 14),
    'mtn': (1, [-35.34103, -35.527313, -3.267323, -36.854813, -17.522409, -35.456646, -28.061386, -35.810471, -35.155552, -3.402029, -36.512466, -17.82868, -35.033447, -28.387539]),
    'transformer': (1, [-36.492607, -36.863575, -3.112556, -36.619537, -15.412909, -37.147243, -26.420597, -37.261379, -36.874657, -3.248336, -36.655247, -15.48554, -37.572285, -26.779301]),
    'seq2seq': (1, [-34.943314, -34.519089, -3.862048, -34.876472, -18.860077, -34.786919, -26.928202, -34.928635, -34.319107, -3.922338, -34.91909, -19.071722, -34.830925, -26.835434]),
    'hred': (1, [-34.690418, -34.3764, -3.785147, -35.087406, -18.67387, -34.844742, -26.64929, -34.76889, -34.450817, -3.792901, -35.024685, -18.506123, -34.962822, -26.628408]),
}

# configuration -> the options its fresh weights are made with (the model's trainer's, as `rerank train -O` gives them)
CONFIGURATIONS = {
    "bert": {"max_length": 64},
    "minilm-bi": {},
    "tk": TINY_TK,
    "tk, minilm-context": {**TINY_TK, "embeddings": "minilm-context", "query_stopwords": False},
    "tk, idf gate": {**TINY_TK, "term_weights": "idf", "query_stopwords": False, "fold_plurals": True,
                     "oov_buckets": 4},
    "tkl": TINY_TKL,
    "ctrn": TINY_CTRN,
    "ctrn, minilm-context, no overlap": {**TINY_CTRN, "embeddings": "minilm-context", "overlap": False},
    "qrnn": TINY_CTRN,
    "overlap": {},
    "last-query": {},
    "cooccurrence": {},
    **{family: TINY_GENERATOR for family in ("mtn", "transformer", "seq2seq", "hred")},
}


def model_of(configuration: str) -> str:
    return configuration.split(",")[0]


def scorer(configuration: str, folder):
    """The configuration's re-ranker, loaded as `rerank score` loads it, from weights made without training: seeded
    fresh weights of its trainer, a pretrained model's fresh head seeded here (not by transformers' initialisation,
    which may change)."""
    model, options = model_of(configuration), CONFIGURATIONS[configuration]
    spec = model_spec(model)
    if not spec.needs_checkpoint:
        return load_model(model)
    folder.mkdir()
    torch.manual_seed(0)
    trainable = spec.new_trainable(**options)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in getattr(trainable, "head_parameters", list)():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    config = trainable.eval().save(folder)
    write_checkpoint(folder, model, config, {"note": "test_scores_version"})
    return load_model(model, str(folder))


def test_every_registered_model_is_guarded():
    """A model registered without a configuration here would change its scores unnoticed: every model that scores
    (query, document) pairs, whose scores version keys the score cache, pipelines and stored vectors."""
    scorers = {name for name, spec in registered().items() if spec.kind == "pair"}
    assert scorers <= {model_of(configuration) for configuration in CONFIGURATIONS}


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_scores_change_only_with_their_version(configuration, tmp_path):
    model = model_of(configuration)
    reranker = scorer(configuration, tmp_path / "checkpoint")
    docids = [f"d{i}" for i in range(len(TEXTS))]
    scores = [round(s, 6) for query in QUERIES for s in reranker.score(query, docids, TEXTS)]
    current = model_spec(model).scores_version
    record = f"{configuration!r}: ({current}, {scores}),"
    assert configuration in RECORDED, f"no scores recorded for {configuration}; record them: {record}"
    version, recorded = RECORDED[configuration]
    assert version == current, (
        f"{model}'s scores version is now {current}, and the scores recorded are version {version}'s; "
        f"record this version's: {record}")
    assert scores == pytest.approx(recorded, rel=1e-4, abs=1e-5), (
        f"{configuration}'s scores changed, and {model}'s scores version is still {version}: if the change is meant, "
        f"bump scores_version in {model}'s ModelSpec, then record the new scores: {record}")


def test_a_bumped_version_keys_the_cache_the_header_and_a_pipeline_stage_apart(tmp_path, monkeypatch):
    """Scores cached, and pipeline runs saved, by code that computed otherwise were reused after a fix to what a model
    computes (TK's 'İ' fix changed scores that stayed cached under the old key)."""
    from rerank.pipeline import _fingerprint
    from rerank.score import cache_namespace, stage_provenance

    reranker = scorer("tkl", tmp_path / "checkpoint")
    stage = {"kind": "score", "model": "tkl", "checkpoint": str(tmp_path / "checkpoint")}
    before = cache_namespace(reranker), _fingerprint("cacm", stage, "up")
    spec = model_spec("tkl")
    assert stage_provenance(reranker)["scores_version"] == spec.scores_version
    monkeypatch.setattr(spec, "scores_version", spec.scores_version + 1)
    assert stage_provenance(reranker)["scores_version"] == spec.scores_version  # the run's header says which
    assert cache_namespace(reranker) != before[0] and _fingerprint("cacm", stage, "up") != before[1]


def test_stored_encodings_of_another_scores_version_are_not_used(tmp_path, monkeypatch):
    """TK's stored document vectors outlived a change to how documents are encoded: scores from the store would have
    been the old code's."""
    from rerank.encodings import encode_collection, find_store, open_store, store_folder
    from rerank.errors import UsageError
    from rerank.runs import RunHeader

    monkeypatch.setenv("RERANK_HOME", str(tmp_path))
    reranker = scorer("tk", tmp_path / "checkpoint")
    documents = list(zip(["d1", "d2", "d3"], TEXTS))
    source = {"corpus": str(tmp_path / "c.jsonl")}
    encode_collection("toy", lambda: iter(documents), 3, reranker, progress=False, source=source)
    folder = store_folder("toy", "tk", reranker.checkpoint_hash)
    header = RunHeader({"index": "toy"})
    assert find_store(header, source, reranker.checkpoint_hash, "tk")[0] is not None
    monkeypatch.setattr(model_spec("tk"), "scores_version", model_spec("tk").scores_version + 1)
    found, note = find_store(header, source, reranker.checkpoint_hash, "tk")
    assert found is None and note.startswith("on the fly") and "scores version 1" in note and "--overwrite" in note
    with pytest.raises(UsageError, match="not used: they were computed by a rerank whose tk is scores version 1"):
        open_store(folder, reranker.checkpoint_hash, "tk")
    with pytest.raises(UsageError, match="holds encodings computed by .* pass --overwrite"):
        encode_collection("toy", lambda: iter(documents), 3, reranker, progress=False, source=source)
    manifest = encode_collection("toy", lambda: iter(documents), 3, reranker, progress=False, source=source,
                                 overwrite=True)
    assert manifest["scores_version"] == model_spec("tk").scores_version
    assert find_store(header, source, reranker.checkpoint_hash, "tk")[0] is not None

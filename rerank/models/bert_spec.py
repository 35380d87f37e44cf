"""The MiniLM models of rerank/models/bert.py, declared."""

from .base import ModelSpec, register

BERT = register(ModelSpec(
    name="bert", help="MiniLM-L6 cross-encoder, fine-tuned with rerank train",
    loader="rerank.models.bert:load_bert", needs_checkpoint=True,
    score_options=frozenset({"quantize", "precision", "compile", "max_length", "device"}),
    trainer="rerank.models.bert:new_trainable", lr=3e-5, train_devices=("cpu", "cuda"),
    train_options=frozenset({"max_length"}), precheck="rerank.models.bert:check_cross_encoder_unloaded"))

# Its code also embeds for the dense back end, whose vectors its scores version keys.
MINILM_BI = register(ModelSpec(
    name="minilm-bi", help="MiniLM-L6 bi-encoder, zero-shot (cosine of mean-pooled vectors)",
    loader="rerank.models.bert:load_minilm_bi", score_options=frozenset({"max_length", "on_the_fly"}),
    stored_vectors="dense", precheck="rerank.models.bert:check_bi_encoder_unloaded"))

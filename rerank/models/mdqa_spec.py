"""The readers of the answer stage (rerank/answer.py), declared: the retrieval-only baseline and the iterative
multi-document attention model of rerank/models/mdqa.py."""

from .base import ModelSpec, Option, register

register(ModelSpec(
    name="frequency", kind="reader", loader="rerank.answer:load_frequency",
    help="retrieval-only answerer: entities ranked by how often and how highly retrieved facts hold them",
    architecture=(Option("weighting", str, "reciprocal-rank", "each fact holding an entity adds 1/rank, or 1",
                         ("reciprocal-rank", "count")),)))

register(ModelSpec(
    name="mdqa", kind="reader", loader="rerank.models.mdqa:load_mdqa", needs_checkpoint=True,
    help="iterative multi-document attention QA (Greco et al. 2016): answer entities from retrieved facts",
    trainer="rerank.models.mdqa:new_mdqa", lr=2e-3,  # trained from scratch
    train_example="--candidates qa-train.run --dev qa-valid.run",
    architecture=(
        Option("steps", int, 3, "inference steps T (1: a single query and document read)"),
        Option("hidden", int, 64, "GRU units per direction, and of the inference state"),
        Option("ffn", int, 128, "hidden units of the 2-layer feed-forward answer net"),
        Option("max_fact", int, 40, "tokens read of each fact"),
        Option("direct", bool, True, "add the log of each entity's accumulated attention to its output logit (a skip "
                                     "past the feed-forward net, for entities never seen as training answers)"),
    )))

"""CTRN, QRNN and word overlap of rerank/models/ctrn.py, declared."""

from .base import ModelSpec, Option, register

ARCHITECTURE = (
    Option("embeddings", str, "glove", "frozen token vectors: GloVe 50-d, or MiniLM's contextual ones",
           ("glove", "minilm-context")),
    Option("overlap", bool, True, "append the four word-overlap features before the MLP"),
    Option("projection", int, 64, "width of the learned projection of the embeddings"),
    Option("filters", int, 128, "filters of each of the three gate convolutions (the hidden width)"),
    Option("filter_width", int, 2, "steps each gate convolution reads"),
    Option("mlp_layers", int, 1, "hidden layers of the MLP before the 2-class softmax"),
    Option("hidden", int, 64, "width of the MLP's hidden layers"),
    Option("dropout", float, 0.2, "dropout before and inside the MLP"),
    Option("max_query", int, 40, "question tokens read"),
    Option("max_answer", int, 80, "answer tokens read"),
)

for name, what in (("ctrn", "Cross Temporal Recurrent Network answer ranker (Tay et al. 2018)"),
                   ("qrnn", "quasi-recurrent answer ranker, CTRN without the crossing")):
    register(ModelSpec(
        name=name, help=what, loader=f"rerank.models.ctrn:load_{name}", needs_checkpoint=True,
        trainer=f"rerank.models.ctrn:new_{name}", lr=1e-3, loss="pointwise", architecture=ARCHITECTURE,
        train_example="--train trecqa-train --dev trecqa-dev"))

register(ModelSpec(name="overlap", help="IDF-weighted word overlap of the question's non-stop words (nothing to train)",
                   loader="rerank.models.ctrn:load_overlap"))

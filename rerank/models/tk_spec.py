"""TK and TKL of rerank/models/tk.py, declared."""

from .base import ModelSpec, register

for name, what in (("tk", "transformer-kernel ranker over stored document encodings"),
                   ("tkl", "TK for long documents (windows and relevance regions)")):
    register(ModelSpec(
        name=name, help=what, loader=f"rerank.models.tk:load_{name}", needs_checkpoint=True,
        score_options=frozenset({"on_the_fly"}), trainer=f"rerank.models.tk:new_{name}",
        lr=2e-3,  # trained from scratch: a far larger step than fine-tuning takes
        stored_vectors="encode"))

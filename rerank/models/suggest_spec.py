"""The next-query suggesters (rerank/models/suggesters.py, rerank/models/generators.py), declared."""

from .base import ModelSpec, Option, register

_EXAMPLE = "--train aol-missions"

register(ModelSpec(name="last-query", help="suggests the session's last query again (baseline)",
                   loader="rerank.models.suggesters:load_last_query", kind="generator", train_example=_EXAMPLE))
register(ModelSpec(name="cooccurrence", help="the query that most often followed the last one in the training log",
                   loader="rerank.models.suggesters:load_cooccurrence", kind="generator", train_example=_EXAMPLE))

# Sizes for 2 CPU cores and a log of a few thousand queries; the paper's: d_model 512, 3+2 encoder layers, 3 decoder
_SIZES = (Option("d_model", int, 128, "width of every layer"), Option("heads", int, 4, "attention heads"),
          Option("ff", int, 256, "feed-forward width"), Option("dropout", float, 0.1, "dropout"),
          Option("decoder_layers", int, 1, "decoder layers"),
          Option("max_query_tokens", int, 10, "tokens per query; longer ones are cut (and counted)"),
          Option("max_queries", int, 8, "the session's last queries read"),
          Option("min_count", int, 1, "a word's count in the training pairs to enter the vocabulary"))
_ENCODERS = (Option("query_layers", int, 1, "query-level encoder layers (transformer: encoder layers are "
                                            "query_layers + session_layers)"),
             Option("session_layers", int, 1, "masked session-level encoder layers"))

for name, what in (("mtn", "Multiresolution Transformer Network: query, session and decoder levels"),
                   ("transformer", "flat Transformer encoder-decoder over the concatenated session, MTN's depth"),
                   ("seq2seq", "GRU encoder-decoder with attention over the concatenated session"),
                   ("hred", "hierarchical recurrent encoder-decoder (query GRU, session GRU, GRU decoder)")):
    register(ModelSpec(
        name=name, help=f"{what} (next-query suggestion)", loader=f"rerank.models.generators:load_{name}",
        kind="generator", needs_checkpoint=True, trainer=f"rerank.models.generators:new_{name}", lr=1e-3,
        architecture=_SIZES + _ENCODERS, train_example=_EXAMPLE))

"""Text and heat-map views of `TKReranker.explain()`: which document terms matched which query terms."""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def render_text(explanation: dict[str, Any], top: int = 3) -> str:
    q_terms, d_terms, cosine = explanation["query_terms"], explanation["doc_terms"], explanation["cosine"]
    lines = [f"model {explanation['model']}  score {explanation['score']:.4f}  document encodings: "
             f"{explanation['encodings']}", ""]
    for name in ("query", "document"):
        read = explanation["query_read" if name == "query" else "doc_read"]
        if not read["tokens"]:
            lines.append(f"the {name} has no token the tokenizer reads: it is scored as one unknown token [unk]")
        elif read["ignored_from"] is not None:
            lines.append(f"the {name} has {read['tokens']} tokens; the model reads the first {read['read']} "
                         f"({read['limit']}) and ignores the rest, from character {read['ignored_from']}: "
                         f"{read['ignored_text']!r}")
    if explanation["query_stopwords_removed"]:
        lines.append("query stopwords left out (query_stopwords=false): "
                     + ", ".join(explanation["query_stopwords_removed"]))
    for name in ("query", "document"):
        words = explanation["query_words" if name == "query" else "doc_words"]
        if words["unknown"]:
            lines.append(f"{name} words GloVe lacks, read as one shared vector (they match each other): "
                         + ", ".join(dict.fromkeys(words["unknown"])))
        if words["folded"]:
            lines.append(f"{name} plurals read as their singular (fold_plurals): "
                         + ", ".join(f"{plural}->{singular}" for plural, singular in words["folded"].items()))
    if lines[-1]:
        lines.append("")
    contributions, weights = explanation["term_contributions"], explanation["term_weights"]
    gated = explanation["term_weighting"] != "none"  # else every term weighs 1
    lines.append("query term      " + ("  weight  " if gated else "") + "contribution  best-matching document terms (cosine)")
    for i, term in enumerate(q_terms):
        row = cosine[i, : len(d_terms)]
        best = np.argsort(-row)[:top]
        matches = ", ".join(f"{d_terms[j]}@{j} ({row[j]:.2f})" for j in best)
        weight = f"{weights[i]:8.4f}  " if gated else ""
        lines.append(f"{term[:15]:<15} {weight}{contributions[i]:+12.4f}  {matches}")
    for rank, region in enumerate(explanation.get("regions", []), 1):
        if rank == 1:
            lines += ["", "regions (TKL, best first; the score is the sum of their shares): tokens, characters, "
                          "region score x weight = share, text"]
        a, b = region["tokens"]
        c, d = region["chars"]
        lines.append(f"{rank}. tokens {a}-{b}  chars {c}-{d}  {region['score']:.4f} x {region['weight']:.4f} = "
                     f"{region['share']:+.4f}  {region['text'][:100]!r}")
    return "\n".join(lines) + "\n"


def render_json(explanation: dict[str, Any], **context: Any) -> str:
    """The whole explanation (arrays as nested lists) with `context` (ids, texts, checkpoint): enough to
    recompute the score from its parts."""
    plain = {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in explanation.items()}
    return json.dumps({**context, **plain}, ensure_ascii=False) + "\n"


def plot(explanation: dict[str, Any], path: str, title: str) -> None:
    """Cosine match matrix (query terms x document terms) with each term's contribution; TKL shades its
    chosen regions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ..atomic import atomic_output, plot_format

    q_terms, d_terms = explanation["query_terms"], explanation["doc_terms"]
    cosine = explanation["cosine"][: len(q_terms), : len(d_terms)]
    width = min(40, max(6, 0.22 * len(d_terms) + 2))
    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.35 * len(q_terms)))
    image = ax.imshow(cosine, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_yticks(range(len(q_terms)))
    ax.set_yticklabels([f"{t} ({c:+.3f})" for t, c in zip(q_terms, explanation["term_contributions"])])
    ax.set_xticks(range(len(d_terms)))
    ax.set_xticklabels(d_terms, rotation=90, fontsize=7)
    for rank, region in enumerate(explanation.get("regions", []), 1):
        a, b = region["tokens"]
        ax.add_patch(Rectangle((a - 0.5, -0.5), b - a, len(q_terms), fill=False, edgecolor="black", lw=2))
        ax.text(a - 0.3, -0.3, f"region {rank}", ha="left", va="top", fontsize=8,
                bbox={"facecolor": "white", "alpha": 0.8, "pad": 1})
    fig.colorbar(image, ax=ax, label="cosine", fraction=0.03)
    ax.set_title(f"{title}  (score {explanation['score']:.3f})", fontsize=9)
    fig.tight_layout()
    with atomic_output(path, "wb") as handle:
        fig.savefig(handle, format=plot_format(path), dpi=110)
    plt.close(fig)

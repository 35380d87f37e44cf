"""Re-ranking quality of the BERT cross-encoder against BM25 and the zero-shot MiniLM bi-encoder.

Runs the real CLI chain for each collection and evaluates with `rerank eval`:

    rerank retrieve trec-dl-2019 --candidates bm25 -o bm25.run
    rerank score --model minilm-bi bm25.run -o minilm-bi.run
    rerank score --model bert --checkpoint CK bm25.run -o bert.run
    rerank score --model bert --checkpoint CK --interpolate 0.5 minilm-bi.run -o bert+minilm-bi.run
    rerank eval bm25.run minilm-bi.run bert.run bert+minilm-bi.run -m nDCG@10 -m MRR@10 ...

The checkpoints come from `rerank train bert ...` (commands recorded in their checkpoint.json and
repeated in the results). Usage:

    python benchmarks/bert_quality.py --dl CK_DL20 [--trecqa CK_TRECQA] [--wikiqa CK_WIKIQA]

(writes benchmarks/results/bert_quality.{json,md}). A collection not given keeps its results and section from
the earlier files, and so do sections written by hand (e.g. "## Notes"): one suite can be re-run alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, write_results  # noqa: E402

SUITES = {  # option -> (test collection, candidate run, measures)
    "dl": ("trec-dl-2019", "bm25", ["nDCG@10", "MRR@10", "MAP", "Recall@100"]),
    "trecqa": ("trecqa-dev", "candidates", ["MAP", "MRR", "P@1"]),
    "wikiqa": ("wikiqa-dev", "candidates", ["MAP", "MRR", "P@1"]),
}


def rerank(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "rerank", *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"rerank {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def training_command(manifest: dict) -> str:
    t = manifest["training"]
    if "soup" in t:  # made by `rerank average`, not trained
        return "rerank average " + " ".join(f"CK_{i['hash']}" for i in t["soup"]) + " -o CHECKPOINT"
    parts = [f"rerank train bert --train {t['train']}"]
    parts += [f"--dev {t['dev']}"] if t.get("dev") else []
    parts += [f"--dev-fraction {t['dev_fraction']}"] if t.get("dev_fraction") else []
    parts += [f"--dev-fold {t['dev_fold']}"] if t.get("dev_fold") else []
    has_dev = t.get("dev") or t.get("dev_fraction") or t.get("dev_fold")
    dev_options = ("eval_every", "patience", "dev_depth") if has_dev else ()
    for key in ("steps", "batch_groups", "negatives", "lr", "loss", *dev_options, "seed"):  # train refuses dev ones alone
        parts.append(f"--{key.replace('_', '-')} {t[key]}")
    if t.get("head_lr_scale", 1) != 1:
        parts.append(f"--head-lr-scale {t['head_lr_scale']}")
    if t.get("teacher"):
        parts.append(f"--teacher {t['teacher']} --distill {t['distill']} --teacher-scale {t.get('teacher_scale', 1)} "
                     f"--distill-weight {t['distill_weight']}")
        if t.get("teacher_min_score") is not None:
            parts.append(f"--teacher-min-score {t['teacher_min_score']}")
    if t.get("model_options", {}).get("base"):
        parts.append(f"--init {t['model_options']['base']}")
    if t.get("max_minutes"):
        parts.append(f"--max-minutes {t['max_minutes']}")
    if t.get("precision", "fp32") != "fp32":
        parts.append(f"--precision {t['precision']}")
    if t.get("device", "cpu") != "cpu":
        parts.append(f"--device {t['device']}")
    parts.append(f"--max-length {manifest['config']['max_length']} -o CHECKPOINT")
    return " ".join(parts)


def recorded_training(manifest: dict) -> dict:
    """A checkpoint's training record for the results file, less `query_space` (a digest per training query,
    which `score` reads from the checkpoint itself: 160 KB of hex that tells a reader of the results nothing), and a
    soup's copies of its ingredients' (`ingredient_queries`; `soup` names the ingredients by hash)."""
    left_out = ("query_space", "ingredient_queries")
    return {key: value for key, value in manifest["training"].items() if key not in left_out}


def provenance(manifest: dict) -> str:
    """How a checkpoint came about, in a sentence: its training run, or the checkpoints it averages."""
    t = manifest["training"]
    if "soup" in t:
        return f"the weight average of {len(t['soup'])} checkpoints (`rerank average`)"
    dev = (f"held-out {t['dev_fraction']:.0%} of the {t['train']} queries"
           if t.get("dev_fraction") else (t.get("dev") or "none (last step kept)"))
    where = "the shared 2-core CPU" if t.get("device", "cpu") == "cpu" else f"a GPU ({t['device']})"
    transfer = f"; {t['transfer']}" if t.get("transfer") else ""
    return (f"{t['seconds']:.0f} s wall on {where}, best step {t['step']} of at most {t['steps']}, "
            f"early stopping on {dev} ({t.get('dev_measure')} = {t.get('dev_value') or 0:.4f}){transfer}")


def earlier_sections(markdown: str) -> dict[str, str]:
    """The `## ` sections of an earlier bert_quality.md, keyed by their heading's first word."""
    sections = {}
    for part in markdown.split("\n## ")[1:]:
        sections[part.split()[0]] = "## " + part.rstrip("\n") + "\n"
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for option in SUITES:
        parser.add_argument(f"--{option}", metavar="CHECKPOINT", action="append",
                            help=f"checkpoint to evaluate on {SUITES[option][0]} (repeatable; the first is the "
                                 "one chosen on the dev set, the others are shown for comparison)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rerank-bert-quality-"))
    results, lines = {}, ["# BERT cross-encoder re-ranking quality", ""]
    earlier_json, earlier_md = RESULTS / "bert_quality.json", RESULTS / "bert_quality.md"
    earlier = json.loads(earlier_json.read_text()) if earlier_json.exists() else {}
    kept = earlier_sections(earlier_md.read_text()) if earlier_md.exists() else {}
    for option, (dataset, candidates, measures) in SUITES.items():
        checkpoints = getattr(args, option)
        if not checkpoints:
            if dataset in earlier and dataset in kept:
                results[dataset] = earlier[dataset]
                lines += [kept[dataset]]
            continue
        kept.pop(dataset, None)
        manifests = [json.loads((Path(c) / "checkpoint.json").read_text()) for c in checkpoints]
        labels = ["bert"] + [f"bert-{Path(c).name}" for c in checkpoints[1:]]
        runs = {"bm25": work / f"{dataset}.bm25.run", "minilm-bi": work / f"{dataset}.bi.run"}
        rerank("retrieve", dataset, "--candidates", candidates, "-o", str(runs["bm25"]))
        rerank("score", "--model", "minilm-bi", "--depth", "100", str(runs["bm25"]), "-o", str(runs["minilm-bi"]))
        for label, checkpoint in zip(labels, checkpoints):
            runs[label] = work / f"{dataset}.{label}.run"
            rerank("score", "--model", "bert", "--checkpoint", checkpoint, "--depth", "100", "--name", label,
                   str(runs["bm25"]), "-o", str(runs[label]))
        # The chosen checkpoint as an ensemble with the zero-shot bi-encoder (the DL checkpoints' teacher): equal
        # weights of the z-scored scores (alpha 0.5, fixed before it was first measured), the score stage's
        # --interpolate. Its BERT scores come from the score cache filled by the "bert" run above.
        runs["bert+minilm-bi"] = work / f"{dataset}.bert-bi.run"
        rerank("score", "--model", "bert", "--checkpoint", checkpoints[0], "--depth", "100", "--interpolate", "0.5",
               "--name", "bert+minilm-bi", str(runs["minilm-bi"]), "-o", str(runs["bert+minilm-bi"]))
        table = json.loads(rerank("eval", *map(str, runs.values()), *sum((["-m", m] for m in measures), []),
                                  "--format", "json"))
        manifest = manifests[0]
        training = manifest["training"]
        results[dataset] = {"runs": {row["run"]: {m: row[m] for m in measures} for row in table},
                            "versus_bm25": {row["run"]: row["versus_baseline"] for row in table if not row["baseline"]},
                            "checkpoint_hash": manifest["hash"], "training": recorded_training(manifest),
                            "others": {label: {"hash": m["hash"], "training": recorded_training(m)}
                                       for label, m in zip(labels[1:], manifests[1:])}}
        first_stage = "BM25 top-100" if option == "dl" else "all candidates"
        lines += [f"## {dataset} (re-ranking {first_stage}; trained on {training.get('train', 'the data of the checkpoints it averages')})", "",
                  "| run | " + " | ".join(measures) + " |", "|---|" + "---|" * len(measures)]
        for row in table:
            lines.append(f"| {row['run']} | " + " | ".join(f"{row[m]:.4f}" for m in measures) + " |")
        if option == "trecqa":
            lines += ["", "The `candidates` row is the candidate list in a hashed, label-independent order (the "
                      "jacana files list the correct answers first, which would leak the labels)."]
        lines += ["", f"Training: {provenance(manifest)}; checkpoint hash {manifest['hash']}.", "",
                  f"    {training_command(manifest)}", ""]
        for label, other in zip(labels[1:], manifests[1:]):
            lines += [f"`{label}` (for comparison, not chosen): {provenance(other)}:", "",
                      f"    {training_command(other)}", ""]
    lines += [section for name, section in kept.items() if name not in results]  # hand-written ones
    write_results("bert_quality", results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

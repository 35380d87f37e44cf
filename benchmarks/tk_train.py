"""Train TK/TKL variants on TREC DL 2020 through the shared loop and compare embeddings on DL 2019.

    python benchmarks/tk_train.py [--teacher RUN] NAME:VARIANT:EMBEDDINGS[:PROJECTION[:OPTION=JSON ...]] ...

e.g. `tk-glove:tk:glove`, `tk-minilm:tk:minilm:64`, `tk-nostop:tk:glove:0:query_stopwords=false`,
`tk-lex:tk:glove:0:term_weights="query-idf":oov_buckets=50000:exact_sigma=0.01` (see results/tk_notes.md).

Each checkpoint goes to benchmarks/work/tk/NAME; early stopping uses 20% of the DL 2020 queries held
out (DL 2019 stays unseen until the final evaluation). Results: benchmarks/results/tk_train.json
(merged with earlier entries) and tk_train.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
WORK, RESULTS = HERE / "work" / "tk", HERE / "results"


def evaluate_dl19(checkpoint: Path, variant: str) -> dict:
    from rerank.evaluate.session import evaluate_runs, judgements_for
    from rerank.models.base import load_model
    from rerank.retrieve.api import candidates
    from rerank.runs import Run
    from rerank.score import score_stream

    model = load_model(variant, str(checkpoint))
    stream = score_stream(candidates("trec-dl-2019", "bm25"), model, 100, cache=False)
    run = Run(stream.header, {r.qid: r for r in stream.rankings}, variant)
    evaluations, named, _ = evaluate_runs([run], judgements_for([run], None, None), ["nDCG@10", "RR@10"])
    return {m.label: round(evaluations[0].overall(m.label), 4) for m in named}


def parse_spec(spec: str, threads: int) -> tuple[str, str, dict]:
    """NAME:VARIANT:EMBEDDINGS[:PROJECTION[:OPTION=JSON ...]] -> (name, variant, model options)."""
    name, variant, embeddings, *rest = spec.split(":")
    return name, variant, {"embeddings": embeddings, "projection": int(rest[0]) if rest else 0, "threads": threads,
                           **{k: json.loads(v) for k, v in (item.split("=", 1) for item in rest[1:])}}


def bm25_fold_means(folds: int) -> list[float]:
    """BM25's (the candidate order's) dev nDCG@10 on each fold, the baseline of the cross-validated curves."""
    from rerank.evaluate.measures import evaluate, parse_measure
    from rerank.runs import Run, RunHeader
    from rerank.train import _fold, judged_queries

    judged = judged_queries("trec-dl-2020", None)
    measure = parse_measure("nDCG@10", judged.min_rel)
    means = []
    for k in range(1, folds + 1):
        _, held = _fold(judged.queries, k, folds)  # the split `--dev-fold k/folds` holds out
        run = Run(RunHeader(), {q.qid: q.ranking for q in held}, "bm25")
        means.append(evaluate(run, {q.qid: judged.qrels[q.qid] for q in held}, [measure]).overall(measure.label))
    return means


def cross_validate(name: str, variant: str, options: dict, args, train_args) -> dict:
    """Train on n-1 folds of DL 2020 for each fold and repeat; DL 2019 is not looked at."""
    from statistics import mean

    began, finals, curves = time.perf_counter(), [], {}
    for repeat in range(args.repeats):
        for k in range(1, args.folds + 1):
            result = train_args(str(WORK / "cv" / name), dev_fraction=0.0, dev_fold=f"{k}/{args.folds}",
                                seed=args.seed + repeat, patience=args.steps)  # patience: never stop early
            finals.append(result.history[-1]["nDCG@10"])
            for point in result.history:
                curves.setdefault(point["step"], []).append(point["nDCG@10"])
    return {"variant": variant, **options, "teacher": args.teacher, "lr": args.lr, "steps": args.steps,
            "folds": args.folds, "repeats": args.repeats, "seed": args.seed,
            "cv_nDCG@10_last_step": round(mean(finals), 4),
            "cv_curve": {step: round(mean(values), 4) for step, values in sorted(curves.items())},
            "train_seconds": round(time.perf_counter() - began)}


def main() -> None:
    import torch

    from rerank.train import TrainArgs, train

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="+", help="NAME:VARIANT:EMBEDDINGS[:PROJECTION[:OPTION=JSON ...]]")
    parser.add_argument("--teacher", default=None)
    parser.add_argument("--teacher-min-score", type=float, default=None)
    parser.add_argument("--distill", default=None, help="with --teacher (default margin-mse)")
    parser.add_argument("--teacher-scale", type=float, default=None, help="with --teacher (default 1)")
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=42)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--folds", type=int, default=0,
                     help="cross-validate on DL 2020 (N folds, every run to --steps) into tk_cv.json; no DL 2019")
    how.add_argument("--all-queries", action="store_true",
                     help="train on every DL 2020 query for --steps (no dev, last step kept), then test on DL 2019")
    parser.add_argument("--repeats", type=int, default=1, help="with --folds: seeds per fold (seed, seed+1, ...)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    distill = {"teacher_min_score": args.teacher_min_score, "distill": args.distill, "teacher_scale": args.teacher_scale}
    if not args.teacher and any(value is not None for value in distill.values()):  # as rerank train refuses them
        parser.error("--distill, --teacher-scale and --teacher-min-score need --teacher")
    distill = distill if args.teacher else {}
    results_file = RESULTS / ("tk_cv.json" if args.folds else "tk_train.json")
    for spec in args.specs:
        name, variant, options = parse_spec(spec, args.threads)

        def train_args(output: str, **overrides):
            settings = {"dev_fraction": 0.2, "seed": args.seed, "patience": 10, **overrides}
            return train(variant, TrainArgs(train="trec-dl-2020", output=output, steps=args.steps, lr=args.lr,
                                            eval_every=args.eval_every, teacher=args.teacher, **distill,
                                            max_minutes=args.max_minutes, overwrite=True,
                                            model_options=options, **settings),
                         log=lambda m: print(m, file=sys.stderr, flush=True))

        if args.folds:
            entry = {**cross_validate(name, variant, options, args, train_args), **distill}
        else:
            output = WORK / name
            began = time.perf_counter()
            result = train_args(str(output), **({"dev_fraction": 0.0} if args.all_queries else {}))
            entry = {"variant": variant, **options, "teacher": args.teacher, **distill, "steps": result.steps,
                     "lr": args.lr, "seed": args.seed, "best_dev_nDCG@10_heldout_dl20": result.best,
                     "best_step": result.best_step, "all_queries": args.all_queries,
                     "train_seconds": round(time.perf_counter() - began), "dl19": evaluate_dl19(output, variant),
                     "checkpoint": str(output.relative_to(HERE.parent))}
        print(name, json.dumps(entry), flush=True)
        results = json.loads(results_file.read_text()) if results_file.exists() else {}  # others may have added
        results[name] = entry
        results_file.write_text(json.dumps(results, indent=2) + "\n")
    if args.folds:
        write_cv_markdown(results, args.folds)
    else:
        write_markdown(results)


SHOWN = ("term_weights", "fold_plurals", "oov_buckets", "exact_sigma", "saturation", "window", "regions")


def options_cell(e: dict) -> str:
    """The architecture options that differ from plain TK/TKL (GloVe, no projection, query stopwords kept)."""
    from rerank.models.tk import TKConfig

    plain = TKConfig()
    shown = [] if e["embeddings"] == "glove" else [e["embeddings"]]
    shown += [f"projection={e['projection']}"] if e["projection"] else []
    shown += ["no query stopwords"] if e.get("query_stopwords") is False else []
    shown += [f"{k}={e[k]}" for k in SHOWN if e.get(k, getattr(plain, k)) != getattr(plain, k)]
    return ", ".join(shown) or "-"


def write_markdown(results: dict) -> None:
    lines = ["| name | variant | options | teacher | lr | seed | steps | train s | held-out dev nDCG@10 "
             "| DL19 nDCG@10 | DL19 MRR@10 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in results.items():
        # runs that record their seed came after the held-out average was fixed; earlier values only rank
        dev = ("none (all queries)" if e.get("all_queries")
               else f"{e['best_dev_nDCG@10_heldout_dl20']:.4f}" if "seed" in e else "n/a")
        lines.append(f"| {name} | {e['variant']} | {options_cell(e)} | "
                     f"{Path(e['teacher']).stem if e['teacher'] else 'no'} | {e['lr']:g} | {e.get('seed', 42)} | "
                     f"{e['steps']} | {e['train_seconds']} | {dev} | {e['dl19']['nDCG@10']:.4f} | "
                     f"{e['dl19']['MRR@10']:.4f} |")
    (RESULTS / "tk_train.md").write_text(
        "# TK / TKL trained on TREC DL 2020 (20% held out for early stopping, unless trained on all queries),\n"
        "tested on DL 2019 top-100\n\n"
        "BM25 on the same candidates: nDCG@10 0.5058, MRR@10 0.7024 (held-out DL 2020 queries: 0.539). Rows with\n"
        "1 step are the initialisation, for reference (one optimiser step moves each weight by about the lr).\n"
        "Held-out dev values are shown for the runs made after the dev average was fixed (see tk_notes.md).\n\n"
        + "\n".join(lines) + "\n")


def write_cv_markdown(results: dict, folds: int) -> None:
    from statistics import mean

    lines = ["| name | variant | options | teacher | lr | steps | folds x seeds | train s "
             "| CV nDCG@10 at the last step | best step of the mean curve |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in sorted(results.items(), key=lambda item: -item[1]["cv_nDCG@10_last_step"]):
        step, value = max(e["cv_curve"].items(), key=lambda item: item[1])
        lines.append(f"| {name} | {e['variant']} | {options_cell(e)} | "
                     f"{Path(e['teacher']).stem if e['teacher'] else 'no'} | {e['lr']:g} | {e['steps']} | "
                     f"{e['folds']} x {e['repeats']} | {e['train_seconds']} | {e['cv_nDCG@10_last_step']:.4f} | "
                     f"{step} ({value:.4f}) |")
    (RESULTS / "tk_cv.md").write_text(
        f"# TK / TKL cross-validated on TREC DL 2020 ({folds} folds; DL 2019 not used)\n\n"
        "Each run trains on the other folds for all its steps; the CV value is the mean, over folds and seeds,\n"
        "of the held-out fold's nDCG@10 at the last step (so the final model can be trained on every DL 2020\n"
        f"query with the same steps: `tk_train.py --all-queries`). BM25 on the same folds: "
        f"{mean(bm25_fold_means(folds)):.4f}.\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Next-query suggestion on the aol-missions dev users: every system, judged by BLEU and as a ranking.

Trains (through the CLI) whatever checkpoint is not there yet under $RERANK_HOME/checkpoints/aol/, then for every
system: `rerank suggest` on the dev users (beam 5, 10 suggestions; suggestions per second from the run's own
per-prefix timings), `rerank score` of the candidate pool (`rerank retrieve aol-missions-dev --candidates pool`), and
`rerank eval` of both. Writes benchmarks/results/mtn.md and mtn.json with every command. One thread, `nice`; the
trainings take minutes each on a shared 2-core machine.

    python benchmarks/mtn.py [--seeds 42 43 44] [--recipe pretrained|plain] [--name mtn]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import write_results

HOME = Path(os.environ.get("RERANK_HOME", ".")).resolve()
OUT = HOME / "checkpoints" / "aol"
DATA = Path(os.environ.get("RERANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
MSMARCO = sorted(str(p) for p in (DATA / "msmarco-train-queries").glob("*.tsv.gz"))
TRAINED = ("mtn", "transformer", "seq2seq", "hred")
BASELINES = ("last-query", "cooccurrence")
GENERATION = ("BLEU", "1gram", "2gram", "3gram", "4gram", "MRR", "HITS@10")
RANKING = ("MRR", "HITS@1", "HITS@10")
COMMON = ["--steps", "1200", "--eval-every", "100", "--patience", "2", "--max-minutes", "6", "--threads", "1"]
RECIPES = {"plain": [], "pretrained": ["--pretrain-steps", "300", *(x for f in MSMARCO for x in ("--pretrain", f))]}

commands: list[str] = []


def rerank(*args: str, output: Path | None = None) -> subprocess.CompletedProcess:
    line = ["nice", "-n", "5", sys.executable, "-m", "rerank", *args]
    commands.append(shlex.join(["rerank", *args]))
    done = subprocess.run(line, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rerank {' '.join(args)} failed:\n{done.stderr}")
    return done


def train(model: str, seed: int, recipe: str) -> tuple[Path, float | None]:
    folder = OUT / f"{model}-{recipe}-s{seed}"
    if not (folder / "checkpoint.json").is_file():
        rerank("train", model, "--train", "aol-missions", "-o", str(folder), "--overwrite", "--seed", str(seed),
               *COMMON, *RECIPES[recipe])
    training = json.loads((folder / "checkpoint.json").read_text())["training"]
    return folder, training.get("total_seconds")


def per_prefix_rate(run: Path) -> float:
    """Session prefixes per second from the run's `# time:` lines (the model's work, not its loading)."""
    times = [float(line.split()[4]) for line in run.read_text().splitlines() if line.startswith("# time:")]
    return len(times) / (sum(times) / 1000) if times else float("nan")


def evaluate(runs: list[Path], measures: tuple[str, ...], baseline: str | None = None) -> list[dict]:
    args = ["eval", *map(str, runs), "--format", "json", *(x for m in measures for x in ("-m", m))]
    if baseline:
        args += ["--baseline", baseline, "--test", "t"]
    return json.loads(rerank(*args).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--recipe", choices=tuple(RECIPES), default="pretrained")
    parser.add_argument("--rnn-seeds", type=int, default=1, help="seq2seq and hred train for the first N seeds only")
    parser.add_argument("--name", default="mtn", help="results file name (benchmarks/results/NAME.md)")
    parser.add_argument("--models", nargs="+", choices=TRAINED, default=list(TRAINED), help="trained systems to run")
    options = parser.parse_args()
    runs = OUT / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    pool = runs / "pool.run"
    rerank("retrieve", "aol-missions-dev", "--candidates", "pool", "-o", str(pool))
    def seeds_of(model: str) -> list[int | None]:
        if model in TRAINED and model not in options.models:
            return []
        return [None] if model in BASELINES else options.seeds[: options.rnn_seeds] if model in ("seq2seq", "hred") \
            else options.seeds

    for seed in options.seeds:  # every model's first seed before any model's second
        for model in TRAINED:
            if seed in seeds_of(model):
                train(model, seed, options.recipe)
    systems: dict[str, list[dict]] = {}
    for model in (*BASELINES, *TRAINED):
        for seed in seeds_of(model):  # (a model left out has none)
            checkpoint, seconds = train(model, seed, options.recipe) if seed is not None else (None, None)
            name = model if seed is None else f"{model}-s{seed}"
            ck = ["--checkpoint", str(checkpoint)] if checkpoint else []
            suggested, ranked = runs / f"{name}.{options.recipe}.run", runs / f"{name}.{options.recipe}.pool.run"
            rerank("suggest", "--model", model, *ck, "--dataset", "aol-missions", "--split", "dev", "--beam", "5",
                   "-k", "10", "--name", name, "-o", str(suggested))
            rerank("score", str(pool), "--model", model, *ck, "--depth", "20", "--no-cache", "--name", name,
                   "-o", str(ranked))
            systems.setdefault(model, []).append({"name": name, "seed": seed, "train_seconds": seconds,
                                                  "suggested": suggested, "ranked": ranked,
                                                  "prefixes_per_second": per_prefix_rate(suggested)})
    every = [s for group in systems.values() for s in group]
    generation = {row["run"]: row for row in evaluate([s["suggested"] for s in every], GENERATION)}
    ranking = {row["run"]: row for row in evaluate([pool, *[s["ranked"] for s in every]], RANKING + ("Recall@20",))}
    first = {model: group[0]["name"] for model, group in systems.items()}
    tests = {}
    for against in ("transformer", "last-query"):
        picked = [next(s for s in every if s["name"] == first[m])["suggested"] for m in systems]
        tests[against] = {row["run"]: row.get("versus_baseline", {})
                          for row in evaluate(picked, ("BLEU",), baseline=first[against])}
    results = {"recipe": options.recipe, "seeds": options.seeds, "systems": {
        model: [{**{k: v for k, v in s.items() if k not in ("suggested", "ranked")},
                 "generation": generation[s["name"]], "ranking": ranking[s["name"]]} for s in group]
        for model, group in systems.items()}, "pool": ranking["pool"], "tests": tests, "commands": commands}
    write_results(options.name, results, markdown(results))


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def markdown(results: dict) -> str:
    lines = [f"# Next-query suggestion on aol-missions dev users ({time.strftime('%Y-%m-%d')})", "",
             "Dev figures (22 dev users, 428 session prefixes), made by `python benchmarks/mtn.py` "
             f"(recipe `{results['recipe']}`). Trained systems: mean ± standard deviation over the seeds listed "
             "(n = seeds); BLEU is corpus BLEU (sacrebleu, 0-1 scale), the n-gram precisions per-prefix means; MRR and "
             "HITS of the generation run count an exact match of a suggestion with the next query. Ranking: the "
             "candidate pool re-scored (`rerank score`, log-likelihood of each candidate given the session).", "",
             "| system | seeds | BLEU | 1-gram | 2-gram | 3-gram | 4-gram | gen. MRR | pool MRR | pool HITS@1 | "
             "pool HITS@10 | training s | prefixes/s (beam 5) |", "|" + "---|" * 13]
    for model, group in results["systems"].items():
        seeds = ", ".join(str(s["seed"]) for s in group if s["seed"] is not None) or "-"
        cells = [mean_sd([s["generation"][m] for s in group]) for m in GENERATION[:6]]
        cells += [mean_sd([s["ranking"][m] for s in group]) for m in RANKING]
        train_s = [s["train_seconds"] for s in group if s["train_seconds"]]
        cells.append(f"{statistics.mean(train_s):.0f}" if train_s else "-")
        cells.append(f"{statistics.mean(s['prefixes_per_second'] for s in group):.1f}")
        lines.append(f"| {model} | {seeds} | " + " | ".join(cells) + " |")
    pool = results["pool"]
    lines += ["", f"The pool (followers of the last query in the training users' log, then BM25 over the log's "
              f"distinct queries on the last query, 20 at most) holds the true next query for "
              f"{pool['Recall@20']:.1%} of the prefixes; in its own order it scores MRR {pool['MRR']:.4f}, "
              f"HITS@1 {pool['HITS@1']:.4f}, HITS@10 {pool['HITS@10']:.4f}. A prefix whose true next query is not "
              "in the pool counts 0.", "", "## Significance (first seed of each system, per-prefix sentence BLEU, "
              "paired t-test, Holm-corrected)", ""]
    for against, rows in results["tests"].items():
        for run, versus in rows.items():
            if "BLEU" in versus:
                v = versus["BLEU"]
                lines.append(f"- {run} vs {against}: mean sentence-BLEU difference {v['delta']:+.4f}, "
                             f"p = {v.get('holm_p', v.get('t_p')):.3g} (wins/ties/losses {v['wins']}/{v['ties']}/"
                             f"{v['losses']})")
    lines += ["", "## Commands", "", "```", *results["commands"], "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

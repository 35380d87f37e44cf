"""CTRN and QRNN against word overlap, the zero-shot bi-encoder and BERT on trecqa-dev and wikiqa-dev.

    python benchmarks/ctrn.py [--seeds 42,43,44,45,46] [--set-seeds wikiqa=42,43] [--sets trecqa,wikiqa]
                              [--only NAME,...] [--speed]

Every figure comes from the real CLI (`rerank train`, `rerank score`, `rerank eval`), one thread each; the
commands are written into the results. Early stopping uses a share of the *training* questions held out
(`--dev-fraction`, as benchmarks/bert_quality.py's BERT recipes), so the dev sets are not used to pick steps.
Checkpoints and runs go to benchmarks/work/ctrn/ and are reused when there (delete them to rerun). Results:
benchmarks/results/ctrn.json and ctrn.md (mean and standard deviation over the seeds run, training wall time,
scoring pairs per second from the score stage's own `# time:` lines, a leaderboard with significance marks
against QRNN on the first seed).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import write_results  # noqa: E402

WORK = HERE / "work" / "ctrn"
MEASURES = ["MAP", "RR", "P@1"]
LABELS = {"MAP": "MAP", "RR": "MRR", "P@1": "P@1"}
DEV_FRACTION = {"trecqa": 0.2, "wikiqa": 0.1}  # as the BERT recipes of bert_quality.md
TRAINING = ["--steps", "500", "--batch-groups", "8", "--negatives", "4", "--eval-every", "50", "--patience", "4",
            "--dev-depth", "50", "--threads", "1"]
# name -> (model, -O options, trained with several seeds)
TRAINED = {
    "qrnn": ("qrnn", [], True),
    "ctrn": ("ctrn", [], True),
    "ctrn-no-overlap": ("ctrn", ["-O", "overlap=false"], False),
    "ctrn-minilm-context": ("ctrn", ["-O", "embeddings=minilm-context"], False),
}
# the existing BERT figures, quoted (benchmarks/results/bert_quality.md, the runs named "bert" there)
BERT = {"trecqa": {"MAP": 0.8143, "RR": 0.8826, "P@1": 0.8000}, "wikiqa": {"MAP": 0.7574, "RR": 0.7612, "P@1": 0.6349}}


def run(args: list[str], stdin: Path | None = None, stdout: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(stdin or os.devnull) as given, open(stdout, "w") if stdout else open(os.devnull, "w") as out:
        done = subprocess.run(["nice", "-n", "5", sys.executable, "-m", "rerank", *args], stdin=given,
                              stdout=out if stdout else subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode:
        sys.exit(f"rerank {shlex.join(args)} failed:\n{done.stderr}")
    return done


def figures(run_file: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "rerank", "eval", *sum((["-m", m] for m in MEASURES), []),
                           "--format", "json", str(run_file)], capture_output=True, text=True, check=True)
    row = json.loads(done.stdout)[0]
    return {m: row[LABELS[m]] for m in MEASURES}


def pairs_per_second(run_file: Path) -> float:
    """From the score stage's `# time: QID STAGE MS PAIRS` lines: pairs over the time spent scoring them."""
    ms = pairs = 0.0
    for line in run_file.read_text().splitlines():
        if line.startswith("# time:"):
            ms, pairs = ms + float(line.split()[4]), pairs + int(line.split()[5])
    return pairs / ms * 1000


def score(dev_run: Path, out: Path, model: str, checkpoint: Path | None = None) -> list[str]:
    args = ["score", "--model", model, *(["--checkpoint", str(checkpoint)] if checkpoint else []), "--no-cache",
            "--threads", "1", "--depth", "1000", "-o", str(out), str(dev_run)]
    if not out.is_file():
        run(args)
    return ["rerank", *args]


def one_set(name: str, seeds: list[int], only: set[str] | None, skip: set[str]) -> dict:
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    dev_run = work / "dev.run"
    if not dev_run.is_file():
        run(["retrieve", f"{name}-dev", "--candidates", "candidates"], stdout=dev_run)
    result: dict = {"dev_run": f"rerank retrieve {name}-dev --candidates candidates > dev.run", "rows": {}}
    for model in ("overlap", "minilm-bi"):
        if only and model not in only or f"{name}:{model}" in skip:
            continue
        command = score(dev_run, work / f"{model}.run", model)
        result["rows"][model] = {"seeds": None, "figures": [figures(work / f"{model}.run")], "command": shlex.join(command),
                                 "pairs_per_second": pairs_per_second(work / f"{model}.run")}
    for label, (model, options, seeded) in TRAINED.items():
        if only and label not in only or f"{name}:{label}" in skip:
            continue
        row = {"seeds": seeds if seeded else seeds[:1], "figures": [], "train_seconds": [], "best_step": [],
               "pairs_per_second": []}
        for seed in row["seeds"]:
            checkpoint = work / f"{label}-s{seed}"
            train = ["train", model, "--train", f"{name}-train", "--dev-fraction", str(DEV_FRACTION[name]), *TRAINING,
                     "--seed", str(seed), *options, "-o", str(checkpoint)]
            if not (checkpoint / "checkpoint.json").is_file():
                began = time.perf_counter()
                run(train)
                print(f"{name} {label} seed {seed}: {time.perf_counter() - began:.0f} s", file=sys.stderr)
            manifest = json.loads((checkpoint / "checkpoint.json").read_text())
            command = score(dev_run, work / f"{label}-s{seed}.run", model, checkpoint)
            row["figures"].append(figures(work / f"{label}-s{seed}.run"))
            training = manifest["training"]
            row["train_seconds"].append(training.get("total_seconds", training["seconds"]))
            # "interrupted at step N" where a run was stopped (SIGTERM) before its steps or patience ran out
            row["best_step"].append(f"{training['step']}" + (f" ({training['ended']})" if training.get("ended")
                                                             and training["ended"].startswith("interrupted") else ""))
            row["pairs_per_second"].append(pairs_per_second(work / f"{label}-s{seed}.run"))
            row["command"] = f"rerank {shlex.join(train)}".replace(f"-s{seed}", "-sSEED").replace(
                f"--seed {seed}", "--seed SEED") + f"\n{shlex.join(command)}".replace(f"-s{seed}", "-sSEED")
            row["config"] = manifest["config"]
        result["rows"][label] = row
    return result


def speed(seed: int) -> dict:
    """Pairs per second of every model on the same pairs (trecqa-dev's 1,148), scored one after another, one thread,
    no cache. BERT's weights are a one-step checkpoint: its speed does not depend on them (max_length 128, as the
    recipes of bert_quality.md)."""
    work = WORK / "trecqa"
    bert = WORK / "bert-1step"
    train = ["train", "bert", "--train", "trecqa-train", "--steps", "1", "--batch-groups", "1", "--negatives", "1",
             "--max-length", "128", "--threads", "1", "-o", str(bert)]
    if not (bert / "checkpoint.json").is_file():
        run(train)
    models = {"bert": ("bert", bert), "minilm-bi": ("minilm-bi", None), "overlap": ("overlap", None),
              "qrnn": ("qrnn", work / f"qrnn-s{seed}"), "ctrn": ("ctrn", work / f"ctrn-s{seed}")}
    out = {"commands": [f"rerank {shlex.join(train)}"], "pairs_per_second": {}}
    for label, (model, checkpoint) in models.items():
        out["commands"].append(shlex.join(score(work / "dev.run", WORK / f"speed-{label}.run", model, checkpoint)))
        out["pairs_per_second"][label] = pairs_per_second(WORK / f"speed-{label}.run")
    return out


def cpu_speed(seed: int, queries: int = 5) -> dict:
    """Pairs per second of CPU time (`time.process_time`, one thread) of each model scoring the first `queries`
    questions of trecqa-dev in this process: on a machine shared with other jobs, wall-clock rates measure the load
    as much as the model, CPU time much less so."""
    import torch

    from rerank.data import get_dataset
    from rerank.models.base import load_model

    cached = WORK / f"cpu-speed-{queries}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    torch.set_num_threads(1)
    dataset = get_dataset("trecqa-dev")
    topics, texts = dataset.topics(), dataset.doc_texts()
    rankings = dataset.candidates()[:queries]
    work = WORK / "trecqa"
    models = {"bert": ("bert", WORK / "bert-1step"), "minilm-bi": ("minilm-bi", None), "overlap": ("overlap", None),
              "qrnn": ("qrnn", work / f"qrnn-s{seed}"), "ctrn": ("ctrn", work / f"ctrn-s{seed}")}
    out = {}
    for label, (model, checkpoint) in models.items():
        scorer = load_model(model, str(checkpoint) if checkpoint else None, threads=1)
        pairs, began = 0, time.process_time()
        for ranking in rankings:
            scorer.score(topics[ranking.qid], ranking.docids, [texts[d] for d in ranking.docids])
            pairs += len(ranking.docids)
        out[label] = pairs / (time.process_time() - began)
    result = {"queries": queries, "pairs": pairs, "pairs_per_cpu_second": out}
    cached.write_text(json.dumps(result))
    return result


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def leaderboard(name: str, seed: int) -> str:
    work = WORK / name
    runs = [f"{label}={work / f'{label}-s{seed}.run'}" for label in ("qrnn", "ctrn", "ctrn-no-overlap",
                                                                     "ctrn-minilm-context")
            if (work / f"{label}-s{seed}.run").is_file()]
    runs += [f"{label}={work / f'{label}.run'}" for label in ("overlap", "minilm-bi") if (work / f"{label}.run").is_file()]
    if not runs:
        return ""
    done = subprocess.run([sys.executable, "-m", "rerank", "eval", *runs, "--baseline", "qrnn",
                           *sum((["-m", m] for m in MEASURES), []), "--format", "markdown"],
                          capture_output=True, text=True, check=True)
    return done.stdout


def markdown(results: dict) -> str:
    lines = ["# CTRN and QRNN answer rankers (Tay et al., AAAI 2018)", "",
             "Dev figures: trecqa-dev (65 judged questions, the clean protocol) and wikiqa-dev (126 questions with a "
             "right answer), every candidate re-ranked. Trained models stop early on held-out *training* questions "
             "(`--dev-fraction`); the architecture's defaults were set before these runs and checked by one CTRN run on "
             "trecqa-dev (see the notes), so these are dev figures, not test figures. `python benchmarks/ctrn.py` made "
             "this file (paths below are relative to the repository).", ""]
    for name, result in results["sets"].items():
        lines += [f"## {name}-dev", "", "| run | seeds | MAP | MRR | P@1 | training wall s | best step | pairs/s |",
                  "|---|---|---|---|---|---|---|---|"]
        for label, row in result["rows"].items():
            cells = [mean_std([f[m] for f in row["figures"]]) for m in MEASURES]
            seeds = len(row["seeds"]) if row["seeds"] else "-"
            train = f"{statistics.mean(row['train_seconds']):.0f}" if row.get("train_seconds") else "-"
            step = "/".join(map(str, row["best_step"])) if row.get("best_step") else "-"
            speed = (statistics.mean(row["pairs_per_second"]) if isinstance(row["pairs_per_second"], list)
                     else row["pairs_per_second"])
            lines.append(f"| {label} | {seeds} | {' | '.join(cells)} | {train} | {step} | {speed:.0f} |")
        bert = BERT[name]
        lines.append(f"| bert (quoted) | 1 | {bert['MAP']:.4f} | {bert['RR']:.4f} | {bert['P@1']:.4f} | - | - | - |")
        lines += ["", "`bert (quoted)`: the row `bert` of benchmarks/results/bert_quality.md (its own recipe and "
                  "seed, not rerun here).", "", f"Leaderboard, seed {results['seeds'][0]}, against QRNN:", "",
                  result.get("leaderboard", "").strip(), "", "Commands:", ""]
        lines += [f"    {result['dev_run']}"]
        for label, row in result["rows"].items():
            lines += [f"    {line}" for line in row["command"].splitlines()]
        lines.append("")
    if "speed" in results:
        fast = results["speed"]["pairs_per_second"]
        lines += ["## Scoring speed on the same pairs", "",
                  "trecqa-dev's 1,148 pairs, one model after another, one thread, no cache, on the shared 2-core "
                  "machine (other developers' jobs ran meanwhile: ratios are rough).", "",
                  "| model | pairs/s | × BERT |", "|---|---|---|"]
        lines += [f"| {label} | {value:.0f} | {value / fast['bert']:.1f} |" for label, value in fast.items()]
        lines += ["", "Commands:", ""] + [f"    {line}" for line in results["speed"]["commands"]] + [""]
    if "cpu_speed" in results:
        cpu = results["cpu_speed"]["pairs_per_cpu_second"]
        lines += [f"Per CPU second instead (the first {results['cpu_speed']['queries']} questions of trecqa-dev, "
                  f"{results['cpu_speed']['pairs']} pairs, scored in one process, one thread, `time.process_time`; "
                  "less sensitive to the other jobs):", "", "| model | pairs per CPU second | × BERT |", "|---|---|---|"]
        lines += [f"| {label} | {value:.0f} | {value / cpu['bert']:.1f} |" for label, value in cpu.items()]
        lines.append("")
    return "\n".join(lines).replace(f"{HERE.parent}/", "") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="42,43,44,45,46")
    parser.add_argument("--sets", default="trecqa,wikiqa")
    parser.add_argument("--set-seeds", action="append", default=[], metavar="SET=SEEDS",
                        help="other seeds for one set, e.g. wikiqa=42,43")
    parser.add_argument("--skip", default="", help="SET:ROW,... not to compute, e.g. wikiqa:minilm-bi")
    parser.add_argument("--speed", action="store_true", help="also time every model on trecqa-dev's pairs")
    parser.add_argument("--only", default=None, help="rows to (re)compute: overlap, minilm-bi, qrnn, ctrn, ...")
    options = parser.parse_args()
    seeds = [int(s) for s in options.seeds.split(",")]
    only = set(options.only.split(",")) if options.only else None
    own = {name: [int(s) for s in given.split(",")] for name, _, given in (o.partition("=") for o in options.set_seeds)}
    results = {"seeds": seeds, "set_seeds": own, "skipped": options.skip, "training": TRAINING, "sets": {}}
    for name in options.sets.split(","):
        results["sets"][name] = one_set(name, own.get(name, seeds), only, set(options.skip.split(",")))
        results["sets"][name]["leaderboard"] = leaderboard(name, own.get(name, seeds)[0])
    if options.speed:
        results["speed"] = speed(seeds[0])
        results["cpu_speed"] = cpu_speed(seeds[0])
    write_results("ctrn", results, markdown(results))


if __name__ == "__main__":
    main()

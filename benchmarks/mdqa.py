"""Movie Dialog QA and recommendations: retrieval ceiling, the frequency baseline, mdqa with T=1 and T=3.

Everything runs through the CLI, on the validation part of each task's dev file (the train files are not available;
figures are dev figures): index movie-kb, retrieve every question's top 100 facts, answer from the top 30 with the
frequency baseline and with mdqa trained on the train part (early stopping on the first 300 validation questions,
a time budget per training run), evaluate HITS@1/10/100 and MRR. Also: the document granularity of the knowledge
base (fact / triple / entity: how often a right answer is in the top 30 retrieved, on 1,000 training questions),
how often a right answer is in the retrieved facts at all, training wall time, questions answered per second after
retrieval, and the retrieval time of all of a task's questions. Steps already done (a run or checkpoint in
benchmarks/work/mdqa/) are reused. Usage: python benchmarks/mdqa.py   (writes benchmarks/results/mdqa.{json,md})
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, write_results  # noqa: E402

WORK = Path(__file__).resolve().parent / "work" / "mdqa"
DEPTH, K = 10, 100  # facts a reader reads of the BM25 top K
CEILING_DEPTH = 30  # of the granularity comparison
TRAIN = {"steps": 1000, "batch": 16, "minutes": 7, "eval_every": 100, "dev_questions": 300}
ARCHITECTURE = ["hidden=32", "max_fact=24"]  # a step 5x cheaper than the defaults: the CPU is shared
METRIC = {"qa": "HITS@1", "recs": "HITS@100"}  # the measure each task is published with, for early stopping
MEASURES = ["HITS@1", "HITS@10", "HITS@100", "MRR"]
COMMANDS: list[str] = []


def rerank(*args: str, out: Path | None = None) -> float | None:
    """Run a rerank command (unless its output exists), record it, and return its wall time (that of the run that
    made a reused output; None if unknown)."""
    COMMANDS.append(" ".join(["rerank", *args]))
    timings = WORK / "seconds.json"
    known = json.loads(timings.read_text()) if timings.exists() else {}
    if out is not None and out.exists():
        return known.get(str(out))
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rerank", *args], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    took = round(time.perf_counter() - began, 1)
    if out is not None:
        timings.write_text(json.dumps({**known, str(out): took}, indent=1))
    return took


def leaderboard(runs: dict[str, Path]) -> str:
    """eval's leaderboard of the runs against the first, with paired t-tests (Holm-corrected)."""
    return subprocess.run([sys.executable, "-m", "rerank", "eval", *(f"{label}={path}" for label, path in runs.items()),
                           *(f"-m{m}" for m in MEASURES), "--baseline", next(iter(runs))], check=True,
                          capture_output=True, text=True).stdout


def evaluate(runs: dict[str, Path]) -> dict[str, dict[str, float]]:
    done = subprocess.run([sys.executable, "-m", "rerank", "eval", *(f"{label}={path}" for label, path in runs.items()),
                           *(f"-m{m}" for m in MEASURES), "--format", "json"], check=True, capture_output=True,
                          text=True)
    return {row["run"]: {m: row[m] for m in MEASURES} for row in json.loads(done.stdout)}


def ceiling(run: Path, depth: int, qrels: dict | None = None) -> float:
    """How often one right answer is among the entities of a question's top `depth` retrieved documents (any
    granularity: an entity is a field of a document's text)."""
    from rerank.data import get_dataset
    from rerank.data.movie_dialog import FIELD, entity_id
    from rerank.docstore import doc_store_for
    from rerank.runs import load_run, open_run_file

    with open_run_file(str(run)) as handle:
        loaded = load_run(handle, str(run))
    store = doc_store_for(loaded.header)
    qrels = qrels if qrels is not None else get_dataset(loaded.header.dataset).qrels()
    hits = 0
    for qid, ranking in loaded.queries.items():
        found = {entity_id(field) for text in store.texts(ranking.docids[:depth]).values() for field in text.split(FIELD)}
        hits += any(answer in found for answer in qrels.get(qid, {}))
    return round(hits / len(loaded.queries), 4)


def granularity() -> dict[str, float]:
    """The top-30 ceiling of each knowledge-base document granularity, on the first 1,000 training questions."""
    from rerank.data import get_dataset
    from rerank.data.movie_dialog import kb_documents

    dataset = get_dataset("movie-dialog-qa-train")
    topics = WORK / "granularity-topics.tsv"
    topics.write_text("".join(f"{qid}\t{text}\n" for qid, text in list(dataset.topics().items())[:1000]))
    out = {}
    for per in ("fact", "triple", "entity"):
        corpus = WORK / f"kb-{per}.jsonl"
        if not corpus.exists():
            corpus.write_text("".join(json.dumps({"id": d.docid, "contents": d.text}) + "\n"
                                      for d in kb_documents(dataset.files["kb"], per)))
        rerank("index", f"mdqa-kb-{per}", "--corpus", str(corpus), "--threads", "1",
               out=Path(os.environ.get("RERANK_HOME", ".")) / "indexes" / f"mdqa-kb-{per}")
        run = WORK / f"granularity-{per}.run"
        rerank("retrieve", f"mdqa-kb-{per}", "--topics", str(topics), "--k", str(CEILING_DEPTH), "--threads", "1",
               "-o", str(run), out=run)
        out[per] = ceiling(run, CEILING_DEPTH, dataset.qrels())
    return out


def answer_rate(run: Path) -> float:
    """Questions per second of the answer stage itself (its per-question timings), after retrieval."""
    ms = [float(line.split()[4]) for line in run.read_text().splitlines()
          if line.startswith("# time:") and line.split()[3] != "bm25"]
    return round(len(ms) / (sum(ms) / 1000), 1)


def task(name: str) -> dict:
    results: dict = {}
    runs = {part: WORK / f"{name}-{part}.run" for part in ("train", "valid")}
    seconds = {part: rerank("retrieve", f"movie-dialog-{name}-{part}", "--k", str(K), "--threads", "1", "-o",
                            str(runs[part]), out=runs[part]) for part in runs}
    questions = {part: sum(1 for line in runs[part].read_text().splitlines() if line.startswith("# time:"))
                 for part in runs}
    results["questions"] = questions
    if None not in seconds.values():
        results["retrieval_seconds_all_questions"] = round(sum(seconds.values()), 1)
    # the search itself, from the stage's per-question timings (amortised over its batch; no JVM start)
    results["retrieval_search_seconds"] = round(sum(
        float(line.split()[4]) for part in runs.values() for line in part.read_text().splitlines()
        if line.startswith("# time:")) / 1000, 1)
    results["answer_in_retrieved"] = {f"top{d}": ceiling(runs["valid"], d) for d in (DEPTH, CEILING_DEPTH, K)}
    # what readers read: training reads every fact of its runs
    read = WORK / f"{name}-train-top{DEPTH}.run"
    rerank("cat", "--depth", str(DEPTH), str(runs["train"]), "-o", str(read), out=read)
    dev = WORK / f"{name}-valid-first{TRAIN['dev_questions']}-top{DEPTH}.run"
    rerank("cat", "--first", str(TRAIN["dev_questions"]), "--depth", str(DEPTH), str(runs["valid"]), "-o", str(dev),
           out=dev)
    answers = {"frequency": WORK / f"{name}-valid.frequency.run"}
    rerank("answer", str(runs["valid"]), "--model", "frequency", "--depth", str(DEPTH), "-o",
           str(answers["frequency"]), out=answers["frequency"])
    results["train_seconds"] = {}
    for steps in (1, 3):
        label = f"mdqa-T{steps}"
        checkpoint = WORK / f"{name}-{label}"
        took = rerank("train", "mdqa", "--candidates", str(read), "--dev", str(dev), "-O", f"steps={steps}",
                      *(f"-O{option}" for option in ARCHITECTURE),
                      "--steps", str(TRAIN["steps"]), "--batch-groups", str(TRAIN["batch"]), "--eval-every",
                      str(TRAIN["eval_every"]), "--max-minutes", str(TRAIN["minutes"]), "--metric", METRIC[name],
                      "--threads", "1", "-o", str(checkpoint), out=checkpoint)
        manifest = json.loads((checkpoint / "checkpoint.json").read_text())
        results["train_seconds"][label] = manifest["training"].get("total_seconds", took)
        results.setdefault("train_steps", {})[label] = {key: manifest["training"].get(key)
                                                        for key in ("last_step", "step", "ended")}
        answers[label] = WORK / f"{name}-valid.{label}.run"
        rerank("answer", str(runs["valid"]), "--model", "mdqa", "--checkpoint", str(checkpoint), "--depth", str(DEPTH),
               "--threads", "1", "--name", label, "-o", str(answers[label]), out=answers[label])
    results["figures"] = evaluate(answers)
    results["leaderboard"] = leaderboard(answers)
    results["questions_per_second"] = {label: answer_rate(path) for label, path in answers.items()}
    return results


def markdown(results: dict) -> str:
    lines = ["# Movie Dialog: iterative multi-document attention QA (mdqa)", "",
             "Dev figures: the validation part (10%, seeded) of each task's dev file; mdqa trains on the rest of it "
             f"(the train files are not available), {TRAIN['batch']} questions a step, at most {TRAIN['steps']} steps "
             f"(-O {' -O '.join(ARCHITECTURE)}) "
             f"or {TRAIN['minutes']} minutes, early stopping on the first {TRAIN['dev_questions']} validation "
             f"questions (so those are not held out from model selection). Readers read the top {DEPTH} facts of "
             f"BM25's top {K}. One thread, on a shared 2-core machine. Anchors (the paper, on the full train files "
             "and the full knowledge base): task 1 HITS@1 86.8, task 2 HITS@100 30.0.", "",
             "## Knowledge-base documents", "",
             f"How often a right answer is in the top {CEILING_DEPTH} retrieved documents, first 1,000 training "
             "questions of task 1:",
             "", f"| one document per | answer in top {CEILING_DEPTH} |", "|---|---|"]
    lines += [f"| {per} | {value:.3f} |" for per, value in results["granularity"].items()]
    for name, what in (("qa", "Task 1, factoid QA"), ("recs", "Task 2, recommendations")):
        r = results[name]
        lines += ["", f"## {what} ({r['questions']['valid']} validation questions, {r['questions']['train']} training)",
                  "", "| system | HITS@1 | HITS@10 | HITS@100 | MRR | questions/s after retrieval | training s | "
                      "steps trained (kept) |", "|---|---|---|---|---|---|---|---|"]
        for label, row in r["figures"].items():
            steps = r.get("train_steps", {}).get(label)
            lines.append(f"| {label} | " + " | ".join(f"{row[m]:.4f}" for m in MEASURES)
                         + f" | {r['questions_per_second'][label]} | {r['train_seconds'].get(label, '-')} | "
                         + (f"{steps['last_step']} ({steps['step']}), {steps['ended']}" if steps else "-") + " |")
        lines += ["", "```", r["leaderboard"].rstrip("\n"), "```"]
        lines += ["", "A right answer among the entities of the retrieved facts: " + ", ".join(
            f"{key.replace('top', 'top ')} {value:.3f}" for key, value in r["answer_in_retrieved"].items()) + "."]
        lines.append(f"Searching all {sum(r['questions'].values())} questions of the task (train and validation "
                     f"parts; the stage's own timings): {r['retrieval_search_seconds']} s.")
        if "retrieval_seconds_all_questions" in r:
            lines.append(f"Retrieval of all {sum(r['questions'].values())} questions (two processes, JVM start "
                         f"included): {r['retrieval_seconds_all_questions']} s.")
    lines += ["", "## Commands", "", "```", *dict.fromkeys(COMMANDS), "```", ""]
    return "\n".join(lines)


def main() -> None:
    no_options(__doc__)
    WORK.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    index = Path(os.environ.get("RERANK_HOME", ".")) / "indexes" / "movie-kb" / "lucene"
    results["index_seconds"] = rerank("index", "movie-kb", "--threads", "1", out=index)
    results["granularity"] = granularity()
    for name in ("qa", "recs"):
        results[name] = task(name)
        (WORK / "partial.json").write_text(json.dumps(results, indent=2))
    write_results("mdqa", {**results, "commands": list(dict.fromkeys(COMMANDS)), "train": TRAIN}, markdown(results))


if __name__ == "__main__":
    main()

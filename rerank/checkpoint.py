"""The checkpoint folder format: what `rerank train` and `rerank average` write and every model reads.

A checkpoint is a folder of a model's own files (weights, tokenizer, config) and `checkpoint.json`: the model's name,
its config, the training record (arguments, the files read with their sha256, how training ended), the list of its
own files and their content hash. The hash keys the score cache and goes into run headers; files put into the folder
later are no part of it. The training record also tells which queries a checkpoint trained on and chose its step by
(`query_space`), so that `score` can say when it re-scores them.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from .atomic import atomic_dir, atomic_output, check_replaceable, check_writable
from .data import dataset_names, get_dataset
from .errors import DataError, RerankError, UsageError
from .paths import file_sha256, read_json_object
from .runs import load_run, open_run_file

if TYPE_CHECKING:
    from .docstore import DocStore

CHECKPOINT_FILE = "checkpoint.json"


def checkpoint_files(folder: Path) -> list[str]:
    """Every file under a folder but checkpoint manifests, as relative paths in the order the content hash reads
    them: what a checkpoint is made of when it is written, and, for one written before checkpoints listed their
    files, what it is taken to be made of."""
    found = sorted(path.relative_to(folder) for path in Path(folder).rglob("*")
                   if path.is_file() and path.name != CHECKPOINT_FILE)
    return [path.as_posix() for path in found]


def content_hash(folder: Path, files: list[str] | None = None) -> str:
    """sha256 over the names and bytes of a checkpoint's `files` (relative paths; None: `checkpoint_files`), in
    the order of their paths. A list of the files that are there gives what hashing them all gave before
    checkpoints listed their files, so recorded hashes, and the caches keyed on them, stand."""
    digest = hashlib.sha256()
    for name in sorted(files, key=PurePosixPath) if files is not None else checkpoint_files(folder):
        digest.update(str(PurePosixPath(name)).encode() + b"\x00")
        with open(Path(folder) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def own_files(folder: Path, manifest: dict) -> list[str]:
    """The files a checkpoint was written with, as its manifest lists them, so that what a user adds to the folder
    later (a run scored with it, notes, .DS_Store) is no part of it; every file for a checkpoint written before
    manifests listed them. A listed file that is gone is an error, as a changed one is."""
    listed = manifest.get("files")
    if listed is None:
        return checkpoint_files(folder)
    if not (isinstance(listed, list) and all(isinstance(name, str) and name and not PurePosixPath(name).is_absolute()
                                             and ".." not in PurePosixPath(name).parts for name in listed)):
        raise DataError(f"checkpoint {folder}: its {CHECKPOINT_FILE} lists its files as something other than paths "
                        "inside it; retrain or copy it again")
    missing = [name for name in listed if not (Path(folder) / name).is_file()]
    if missing:
        raise DataError(f"checkpoint {folder}: {', '.join(missing)} that {CHECKPOINT_FILE} lists "
                        f"{'is' if len(missing) == 1 else 'are'} missing: changed or cut short since written; "
                        "retrain or copy it again")
    return listed


def package_versions() -> dict[str, str | None]:
    """What a rerun needs to match, besides the seed: the same data can train to other weights under another
    torch or transformers (kernels, tokenizers, initialisation order)."""
    import platform

    from . import code_version, installed_versions

    # rerank's own from the code that runs: an installed package's metadata may be another checkout's
    return {"python": platform.python_version(), "rerank": code_version(),
            **installed_versions("torch", "transformers", "tokenizers", "numpy")}


def config_hash(config: dict) -> str:
    """A digest of the config a model is built from: it lives in checkpoint.json, outside the content hash."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def write_checkpoint(folder: Path, model: str, config: dict, training: dict) -> dict:
    files = checkpoint_files(folder)
    manifest = {"model": model, "config": config, "training": training, "files": files,
                "hash": content_hash(folder, files), "config_hash": config_hash(config)}
    (Path(folder) / CHECKPOINT_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def record_ending(folder: Path, **fields: Any) -> None:
    """Add to a kept checkpoint's training record how its training ended and every dev evaluation, the ones
    after the best too (as Hugging Face's trainer_state.json keeps its log). The manifest is outside the
    content hash, so the hash, and the score cache keyed on it, stand."""
    path = Path(folder) / CHECKPOINT_FILE
    manifest = json.loads(path.read_text())
    manifest["training"].update(fields)
    with atomic_output(str(path)) as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_checkpoint(folder: str | Path, model: str | None) -> dict:
    """The manifest of a checkpoint folder made for `model` (None: for any model); anything else is a
    clear error."""
    path = Path(folder)
    how = f"train one with: rerank train {model or 'MODEL'} ..."
    if path.is_file():  # a run or weights file given for the folder: training -o onto it would be refused too
        raise UsageError(f"checkpoint {path} is a file, not a checkpoint folder; give the folder that rerank train "
                         f"{model or 'MODEL'} -o wrote")
    if not path.is_dir():
        raise UsageError(f"checkpoint {path} does not exist; {how} -o {path}")
    manifest_path = path / CHECKPOINT_FILE
    if not manifest_path.is_file():
        raise UsageError(f"{path} is not a checkpoint (no {CHECKPOINT_FILE}); {how}")
    manifest = read_json_object(manifest_path, "retrain or copy it again")
    if model is not None and manifest.get("model") != model:
        raise UsageError(f"checkpoint {path} was trained for model {manifest.get('model')!r}, not {model!r}")
    # The hash keys the score cache and goes into run headers: weights edited, copied in or cut short since it
    # was written would otherwise get another model's cached scores (or a traceback from the weights loader).
    actual = content_hash(path, own_files(path, manifest))
    if manifest.get("hash") != actual:
        raise DataError(f"checkpoint {path}: its files are not those {CHECKPOINT_FILE} describes (hash {actual}, "
                        f"recorded {manifest.get('hash')}): changed or cut short since written; retrain or copy it again")
    return _keyed_by_config(path, manifest)


_EDITS_NOTED: set[Path] = set()


def _keyed_by_config(path: Path, manifest: dict) -> dict:
    """A config edited by hand since training (TK builds its model from it: `max_doc`, `chunk`...) makes the
    same weights another model. It gets a hash of its own, so its scores and stored encodings never mix with the
    trained config's, and a note once per process. Checkpoints written before configs were hashed keep theirs."""
    recorded = manifest.get("config_hash")
    edited = config_hash(manifest.get("config", {}))
    if recorded is None or recorded == edited:
        return manifest
    keyed = hashlib.sha256(f"{manifest['hash']} {edited}".encode()).hexdigest()[:16]
    if path.resolve() not in _EDITS_NOTED:
        _EDITS_NOTED.add(path.resolve())
        print(f"rerank: note: checkpoint {path}: the config in its {CHECKPOINT_FILE} was edited since training, so "
              f"it is keyed as hash {keyed} (trained: {manifest['hash']}); its scores and encodings are kept apart",
              file=sys.stderr)
    return {**manifest, "hash": keyed}


def refuse_output_in(output: str, checkpoint: str, is_it: str) -> None:
    """An -o that is a checkpoint being read would lose the weights and record it was read for."""
    if Path(output).resolve() == Path(checkpoint).resolve():
        raise UsageError(f"{output} is {is_it}; write the result to a new folder")


def enclosing_checkpoint(path: str) -> Path | None:
    """The checkpoint folder that `path` would be written inside, if any."""
    return next((folder for folder in Path(path).resolve().parents if (folder / CHECKPOINT_FILE).is_file()), None)


def refuse_a_checkpoint_kept(output: str, overwrite: bool) -> None:
    if (Path(output) / CHECKPOINT_FILE).is_file() and not overwrite:  # runs name it by its hash
        raise UsageError(f"{output} holds a checkpoint already; pass --overwrite to replace it, or choose another -o")


def check_output(output: str, overwrite: bool) -> None:
    """A folder training may write its checkpoint to: checked now, not after the first dev evaluation."""
    check_replaceable(output, CHECKPOINT_FILE)
    refuse_output_inside_a_checkpoint(output)
    refuse_a_checkpoint_kept(output, overwrite)
    check_writable(output)


def refuse_output_inside_a_checkpoint(output: str) -> None:
    """An -o inside a checkpoint folder (`-o A/soup`) is deleted with it when that checkpoint is replaced (`train -o A
    --overwrite`), and adds files to the content hash of one written before checkpoints listed their files, which
    refuses it as changed from then on: any checkpoint's, not only one being read (`rerank train tk -o CK/tk` spoiled
    CK)."""
    holder = enclosing_checkpoint(output)
    if holder is not None:
        raise UsageError(f"{output} is inside the checkpoint {holder}, which would delete it when replaced; write the "
                         "result outside it")


def refuse_spoiling_an_unlisted_checkpoint(output: str | None) -> None:
    """A file written inside a checkpoint written before checkpoints listed their files (`score -o CK/scored.run`, a
    budget report or plot there): its hash covers every file in its folder, so the file had it refused as "changed
    or cut short" from then on. One that lists its files is not changed by it, and is left alone."""
    folder = enclosing_checkpoint(output) if output not in (None, "-") else None
    if folder is None:
        return
    try:
        listed = "files" in read_json_object(folder / CHECKPOINT_FILE, "")
    except (DataError, OSError):  # not readable as one: reading it as a checkpoint will say why
        return
    if not listed:
        raise UsageError(f"{output} is inside the checkpoint {folder}, whose content hash covers every file in its "
                         "folder (it was written before checkpoints listed their files): a file written there would "
                         "make it refused as changed; write it outside")


def refuse_a_checkpoint_twice(folders: list[str], manifests: list[dict]) -> None:
    """`average CK CK` (or CK and a copy of it: the same files, by their content hash) wrote CK again as a "soup":
    averaging a checkpoint with itself changes nothing, and beside others only weighs it twice."""
    first: dict[str, int] = {}  # content hash -> where it was first given
    for i, manifest in enumerate(manifests):
        j = first.setdefault(manifest["hash"], i)
        if j == i:
            continue
        once = "give each checkpoint once (averaging one with itself changes nothing)"
        if Path(folders[j]).resolve() == Path(folders[i]).resolve():
            raise UsageError(f"checkpoint {folders[i]} is given twice; {once}")
        raise UsageError(f"checkpoints {folders[j]} and {folders[i]} are one checkpoint (the same files, hash "
                         f"{manifest['hash']}); {once}")


def average_checkpoints(folders: list[str], output: str, overwrite: bool = False) -> dict:
    """A "model soup": the uniform average of the weights of checkpoints of one model and architecture
    (e.g. continuations of one parent with other seeds), written as a checkpoint folder like a trained one.

    Children fine-tuned from one parent stay in one basin of the loss, where the average of their weights
    is a working model that can generalise better than each (Wortsman et al. 2022, "Model soups"; for the DL
    BERT here it matched its children's mean: benchmarks/results/bert_quality.md). Weight files
    are `*.safetensors` (BERT) or `*.pt` state dicts (TK); every other of the first checkpoint's own files
    (tokenizer, config) is copied from it.
    """
    import shutil

    if len(folders) < 2:
        raise UsageError("give at least two checkpoints to average")
    for folder in folders:
        refuse_output_in(output, folder, "one of the checkpoints to average")
    refuse_output_inside_a_checkpoint(output)
    refuse_a_checkpoint_kept(output, overwrite)
    manifests = [read_checkpoint(f, None) for f in folders]
    refuse_a_checkpoint_twice(folders, manifests)
    model = manifests[0]["model"]

    def architecture(manifest: dict) -> dict:  # the config less where its training started
        return {k: v for k, v in manifest["config"].items() if k != "base"}

    reference = architecture(manifests[0])
    for folder, manifest in zip(folders, manifests):
        if manifest.get("model") != model:  # said alone: every config key of one model differs from another's
            raise UsageError(f"checkpoint {folder} is a {manifest.get('model')} checkpoint, {folders[0]} a {model} "
                             "one; a soup averages checkpoints of one model")
        this = architecture(manifest)
        differ = [f"{key} {this.get(key)!r} vs {reference.get(key)!r}" for key in sorted({*reference, *this}, key=str)
                  if this.get(key) != reference.get(key)]
        if differ:  # named: a --max-length apart looked like another architecture
            raise UsageError(f"checkpoint {folder} is not the same architecture as {folders[0]} "
                             f"({', '.join(differ)})")
    first = Path(folders[0])
    # its own files at its top, as written: a run scored into its folder, or a notes.txt, is no part of the soup
    first_files = [name for name in own_files(first, manifests[0]) if "/" not in name]
    weight_files = sorted(name for name in first_files if Path(name).suffix in (".safetensors", ".pt"))
    if not weight_files:
        raise UsageError(f"{first} has no weight files (*.safetensors, *.pt) to average")
    import torch  # only now, its import taking seconds: what is refused above is said without that wait
    from safetensors.torch import load_file, save_file

    def load(path: Path) -> dict:
        if not path.is_file():
            raise UsageError(f"checkpoint {path.parent} lacks {path.name}, which {first} has")
        try:
            if path.suffix == ".safetensors":
                return load_file(path)
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # safetensors' and torch's unreadable-file errors are of many types
            raise DataError(f"cannot read the weights {path} ({type(error).__name__}); is the checkpoint damaged?") from None

    with atomic_dir(output, CHECKPOINT_FILE) as tmp:
        for name in first_files:
            if name not in weight_files:
                shutil.copy2(first / name, Path(tmp) / name)
        for name in weight_files:
            states = [load(Path(f) / name) for f in folders]
            if any(s.keys() != states[0].keys() or any(s[k].shape != states[0][k].shape for k in s) for s in states):
                raise UsageError(f"{name} differs in its tensors between the checkpoints; they are not one architecture")
            average = {k: (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
                       if states[0][k].is_floating_point() else states[0][k] for k in states[0]}
            if name.endswith(".safetensors"):
                save_file(average, Path(tmp) / name, metadata={"format": "pt"})
            else:
                torch.save(average, Path(tmp) / name)
        soup = {"soup": [{"checkpoint": str(Path(f).resolve()), "hash": m["hash"]} for f, m in zip(folders, manifests)]}
        train_sets = {m["training"].get("train") for m in manifests}
        if len(train_sets) == 1 and None not in train_sets:  # the data the ingredients share, for reports
            soup["train"] = train_sets.pop()
        soup["ingredient_queries"] = ingredient_queries(manifests)
        manifest = write_checkpoint(tmp, model, manifests[0]["config"], soup)
    return manifest


# What of a training record tells the queries a checkpoint trained on and chose its step by (`queries_seen`, and for
# checkpoints from before `query_space`, `trained_qids`), and the weights it continued (`init_trained_on_dev`)
QUERY_RECORD = ("query_space", "held_out_qids", "train_source", "dev_source", "train", "candidates", "qrels", "min_rel",
                "file_sha256", "model_options", "init_hash")


def query_records(training: dict) -> list[dict]:
    """The training records that tell which queries a checkpoint trained on and chose its step by: its own, or a
    soup's ingredients' (`ingredient_queries`); a soup from before they were recorded tells none, as before."""
    return training.get("ingredient_queries", [training])


def ingredient_queries(manifests: list[dict]) -> list[dict]:
    """The soup's record of its ingredients' queries, in the soup's own checkpoint.json so that it outlives their
    folders: each ingredient's QUERY_RECORD (a soup's, its ingredients'), once each, since children of one parent
    mostly share theirs (a digest per training query)."""
    records: list[dict] = []
    for manifest in manifests:
        for training in query_records(manifest["training"]):
            record = {key: training[key] for key in QUERY_RECORD if key in training}
            if record not in records:
                records.append(record)
    return records


# ------------------------------------------------------------------------------------ the queries it saw

def ranked_over(dataset: str | None, store: DocStore) -> dict:
    """The documents a run's queries were ranked over, as a checkpoint's `query_space` records them and `score`
    looks them up: a known data set its header names (its ids name its queries, whatever file --corpus gave their
    texts from), else the texts' store's `origin` (an index or corpus file of one's own)."""
    from .retrieve.store import origin

    return {"dataset": dataset} if dataset in dataset_names() else origin(store.origin)


def trained_qids(training: dict) -> set[str] | None:
    """The ids of the judged queries a checkpoint trained on, from its checkpoint.json's `training` record: those
    of its training data less the ones it held out (`held_out_qids`); None where that data cannot be read again
    (a candidate run file, or its --qrels, since moved or changed, or read from a pipe)."""
    from .evaluate.session import judgements_for

    files = training.get("file_sha256") or {}
    candidates, name = training.get("candidates"), training.get("train")
    if "candidates" in files:
        path = Path(candidates)
        if any(not Path(training[key]).is_file() or file_sha256(Path(training[key])) != files[key]
               for key in ("candidates", "qrels") if key in files):
            return None
        with open_run_file(path) as handle:
            run = load_run(handle, str(path))
        try:  # judged as training judged it (judged_run_file): a query without judgements made no training group
            qrels = judgements_for([run], training.get("qrels"), training.get("min_rel"), fallback_dataset=name).qrels
        except RerankError:
            return None
        qids = {qid for qid in run.queries if qrels.get(qid)}
    elif name in dataset_names() and (candidates is None or candidates in get_dataset(name).run_files):
        qids = set(get_dataset(name).qrels())  # a run it ships holds its judged queries, or a subset of them
    else:
        return None
    return qids - set(training.get("held_out_qids") or ())


def query_digest(text: str) -> str:
    """A query's words by content (spacing aside), as a checkpoint records the queries it saw: an id alone names
    other words in another topics file of one's own over the same documents (both numbered from 1)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:16]


def query_space(documents: dict, queries: dict[str, str]) -> dict:
    """A checkpoint's record of a set of queries (id -> words): the documents they were ranked over, and each one's
    words by id."""
    return {"documents": documents, "text_sha256": {qid: query_digest(text) for qid, text in queries.items()}}


def queries_seen(training: dict, documents: dict, texts: dict[str, str]) -> tuple[set[str], set[str]] | None:
    """Of the queries `texts` (id -> words) ranked over `documents`, those the checkpoint whose training record is
    `training` trained on, and those its dev evaluation chose its step by (held out of them, or --dev's): the same
    id and words over the same documents, whether a data set names them or they are one's own collection's. None
    for checkpoints from before that record (`query_space`)."""
    spaces = training.get("query_space")
    if spaces is None:
        return None

    def same(space: dict | None) -> set[str]:
        if not space or not documents or space["documents"] != documents:
            return set()
        return {qid for qid, digest in space["text_sha256"].items()
                if qid in texts and query_digest(texts[qid]) == digest}

    in_training = same(spaces["train"])
    held_out = in_training & set(training.get("held_out_qids") or ())
    # a teacher run's unjudged queries were trained on too, by its scores (`distilled`: none before it was recorded)
    trained = (in_training - held_out) | same(spaces.get("distilled"))
    return trained, (held_out | same(spaces["dev"])) - trained

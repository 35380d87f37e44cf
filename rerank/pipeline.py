"""Declarative experiments: a TOML file names a data set, stages and measures; `rerank run` executes it.

    dataset = "vaswani"
    measures = ["MAP", "MRR", "P@1", "nDCG@10"]
    baseline = "bm25"
    tests = ["t", "randomization"]  # optional: how differences to the baseline are marked (eval --test)
    correction = "holm"          # optional: eval --correction
    [index]                      # optional: build indexes/<dataset> first if it is missing
    backend = "lucene"           # or "dense", with index_name, encoder and hnsw as `rerank index` takes them
    [[stage]]
    name = "bm25"                # also the run's file name: runs/<pipeline>/<name>.run
    kind = "retrieve"            # a kind declared by a StageSpec (rerank/stages.py)
    k = 1000
    [[stage]]
    name = "bert"
    kind = "score"
    input = "bm25"               # the stage whose run this one reads
    ...

Each run file records a fingerprint of its stage's parameters and of everything upstream, so a
re-run reuses a run whose fingerprint is unchanged and recomputes the rest. Its stage's entry names the pipeline
file that ran it, with the sha256 of its content (`pipeline`, `pipeline_sha256`), which describes and keys nothing:
a file that only gains a comment makes no saved run out of date, and those runs keep naming the content they were
made by.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Callable

from .atomic import atomic_output
from .data import dataset_names, get_dataset
from .errors import DataError, MissingIndexError, ParameterError, RerankError, UnknownDatasetError, UsageError
from .evaluate import report
from .evaluate.measures import label_among, parse_measures, sort_among
from .evaluate.session import evaluate_runs, judgements_for
from .evaluate.significance import CORRECTIONS, TESTS
from .models.base import scores_version_of
from .paths import file_state, runs_dir
from .retrieve import api
from .retrieve.store import MANIFEST, IndexInfo, build_command, source_state
from .runs import END_TEXT, PIPELINE_KEY, Run, RunReader, Stream, file_fields, load_run
from .stages import stage_specs

LOCAL_BACKENDS = ("lucene", "dense")  # indexes under indexes/ (an Elasticsearch index lives on its server)
INDEX_TABLE = {"backend": str, "index_name": str, "encoder": str, "hnsw": int}  # [index]: rerank index's options
DENSE_INDEX_KEYS = ("index_name", "encoder", "hnsw")  # of those, the dense back end's alone
EVERY_STAGE = {"name": str, "kind": str, "input": str, "evaluate": bool}
# The keys that make the leaderboard alone (no stage's run depends on them): rerank run's options override them.
LEADERBOARD_KEYS = ("measures", "baseline", "sort", "tests", "correction")
PIPELINE_KEYS = {"dataset": str, "stage": list, "measures": list, "baseline": str, "sort": str, "qrels": str,
                 "min_rel": int, "index": dict, "tests": list, "correction": str}
RUNS_OWNER = ".pipeline"  # in runs/<pipeline>/: the path of the pipeline file whose runs these are
# in a train stage's checkpoint folder (no file of the checkpoint): the fingerprint it was trained for, and its hash
FINGERPRINT_FILE = ".pipeline-fingerprint"
_STAGE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")  # a file name in runs/<pipeline>/ and a run tag
_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
               dict: "a table"}


def _written(key: str, schema: dict[str, type]) -> str:
    """How a key is written in the file: the stage list as its table header."""
    return f"[[{key}]]" if key == "stage" else f"[{key}]" if schema.get(key) is dict else key


def _unknown_key(key: str, schema: dict[str, type], elsewhere: tuple[dict[str, type], str] | None) -> str:
    """Why `key` is unknown, where that can be told: a key of the other level (a pipeline key below a [[stage]]
    line, which TOML gives to that stage; a stage key at the top, which sets no stage), a command-line flag's
    spelling (`fb-terms`, `"--rm3"`), or a near miss (`fb_term`); else the known keys."""
    known = f"known: {', '.join(schema)}"
    if elsewhere is not None and key in elsewhere[0] and key not in schema:
        return f"unknown key {key!r}: {elsewhere[1].format(key=key)}"
    flag = key.lstrip("-").replace("-", "_")
    negated = flag.removeprefix("no_")
    if flag in schema and flag != key:
        value = " = true" if schema[flag] is bool and key.startswith("--") else ""
        return f"unknown key {key!r}: write it {flag}{value} (a key in the file, not a command-line flag); {known}"
    if flag.startswith("no_") and schema.get(negated) is bool:  # --no-cache, no-cache, no_cache
        return f"unknown key {key!r}: write it {negated} = false (a key in the file, not a command-line flag)"
    near = difflib.get_close_matches(key, list(schema), n=1, cutoff=0.75) if len(key) >= 4 else []
    if near:
        return f"unknown key {key!r}: did you mean {_written(near[0], schema)}? {known}"
    return f"unknown key {key!r}; {known}"


def _check_types(where: str, table: dict, schema: dict[str, type],
                 elsewhere: tuple[dict[str, type], str] | None = None) -> None:
    """Every key of `table` is in `schema`, with its type (TOML's booleans are not integers here). An integer
    where a number is wanted becomes a float: `mu = 50` and `mu = 50.0` are one stage, with one fingerprint.
    `elsewhere`: the keys of the other level of the file, and what to say of one found here."""
    for key, value in table.items():
        if key not in schema:
            raise DataError(f"{where}: {_unknown_key(key, schema, elsewhere)}")
        wanted = schema[key]
        if key == "stage" and isinstance(value, dict):
            raise DataError(f"{where}: stage must be a list of [[stage]] tables: write [[stage]], with two brackets, "
                            "above each stage ([stage] makes one table)")
        fits = (isinstance(value, (int, float)) and not isinstance(value, bool) if wanted is float
                else isinstance(value, wanted) and not (wanted is int and isinstance(value, bool)))
        if not fits:
            raise DataError(f"{where}: {key} must be {_TYPE_WORDS[wanted]}, not {value!r}")
        if wanted is float:
            table[key] = float(value)


def stage_function(kind: str) -> Callable:
    return stage_specs()[kind].run_function()


def _writes_run(stage: dict) -> bool:
    """Whether the stage writes a run (<name>.run); else a checkpoint folder (<name>/, a train stage)."""
    return stage_specs()[stage["kind"]].output == "run"


def _evaluated(stage: dict) -> bool:
    """On the leaderboard: a stage that writes a run, unless it says evaluate = false."""
    return _writes_run(stage) and stage.get("evaluate", True)


def _trained_by(stage: dict, earlier: dict[str, dict]) -> dict | None:
    """The earlier stage whose checkpoint the stage's `checkpoint` names (as `input` names a run), or None (a
    folder of one's own)."""
    named = earlier.get(stage.get("checkpoint"))
    return named if named is not None and not _writes_run(named) else None


def _checkpoint_reused(folder: Path, fingerprint: str) -> bool:
    """Whether a train stage's checkpoint is there, complete, and was trained with these keys and files."""
    record, manifest = folder / FINGERPRINT_FILE, folder / "checkpoint.json"
    try:
        kept = json.loads(record.read_text(encoding="utf-8"))
        return kept == {"fingerprint": fingerprint, "hash": json.loads(manifest.read_text())["hash"]}
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _index_table_backend(spec: dict) -> str | None:
    """The back end whose index the pipeline's [index] table builds (lucene unless it says), or None without one."""
    return spec["index"].get("backend", "lucene") if "index" in spec else None


def _index_table_options(spec: dict) -> dict:
    """The options the pipeline's [index] table builds its index with (a dense index name, encoder, HNSW M)."""
    return {key: value for key, value in spec.get("index", {}).items() if key != "backend"}


def _index_label(backend_name: str, index_name: str | None) -> str:
    """'lucene index', 'dense index', or "dense index 'tasb'" (one of several dense indexes of the data set)."""
    return f"{backend_name} index" + (f" {index_name!r}" if index_name is not None else "")


def _check_index_there(spec: dict, backend_name: str, options: dict | None = None) -> None:
    """A local index the pipeline searches (with a stage's `options`: a dense index name) is built, or its [index]
    table builds it: a missing one only, so a folder there must be a complete index (an Elasticsearch index lives
    on its server: `_check_server_indexes`)."""
    if backend_name not in LOCAL_BACKENDS:
        return
    options = options or {}
    index_name, built = options.get("index_name"), _index_table_backend(spec)
    of_table = (backend_name, index_name) == (built, _index_table_options(spec).get("index_name"))
    folder = api.manifest_folder(spec["dataset"], backend_name, options)
    # a stage without `encoder` searches with its index's, which the [index] table builds it with
    encoder = options.get("encoder") or (_index_table_options(spec).get("encoder") if of_table else None)
    rebuild = "" if backend_name == "lucene" else api.backend(backend_name).build_options(index_name, encoder)
    if folder.exists():
        IndexInfo.read(folder, spec["dataset"], backend_name, rebuild or None)
    elif not of_table:
        table_builds = _index_label(built, _index_table_options(spec).get("index_name")) if built else ""
        table = (f" (the pipeline's [index] table builds its {table_builds}: one "
                 f"{'back end' if built != backend_name else 'index'} per pipeline)" if built
                 else ", or give the pipeline an [index] table" if spec["dataset"] in dataset_names() else "")
        raise MissingIndexError(f"no complete {_index_label(backend_name, index_name)} at {folder}; build it with: "
                                f"{build_command(spec['dataset'], rebuild)}{table}")


_FLAG = re.compile(r"(?<![\w-])--(no-)?([a-z][a-z0-9-]*)")  # not inside a word: a path's bm25--k/ is no flag
# Kept as written: a command line a message suggests (its flags stay flags), and text a message quotes from the
# user's files (an id '--depth 1' in a topics file is no flag); a quote starts and ends outside a word ("run's").
_KEPT = re.compile(r"""(rerank [a-z]+[^,;)]*|(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)"[^"\n]*"(?!\w))""")


def _off_switches(kind: str) -> dict[str, str]:
    """Flags that turn a key off under a name of their own (--es-insecure sets es_verify_certs)."""
    return {option.flag.removeprefix("--"): option.name for option in stage_specs()[kind].parameters
            if option.flag_value is False and not option.flag.startswith("--no-")}


def _in_pipeline_terms(message: str, kind: str) -> str:
    """A stage's error in the pipeline file's words. The checks are the commands' own, so they name flags
    ("--fb-terms sets RM3 feedback: add --rm3"); a flag that is a key of this kind of stage becomes that key
    ("fb_terms ...: add rm3 = true", a switch to add or pass with its value), except in a command line the
    message suggests running or in text it quotes. A --no- switch always keeps its value: "pass cache" would say
    the opposite."""
    keys, off_switches = {**stage_specs()[kind].schema(), **EVERY_STAGE}, _off_switches(kind)

    def as_key(match: re.Match) -> str:
        off = bool(match.group(1)) or match.group(2) in off_switches
        key = off_switches.get(match.group(2), match.group(2).replace("-", "_"))
        if key not in keys:
            return match.group(0)
        if keys[key] is bool and (match.group(1) or match.string[:match.start()].endswith(("add ", "pass "))):
            return f"{key} = {'false' if off else 'true'}"
        return key

    pieces = _KEPT.split(message)  # odd pieces are the commands and quotations
    return "".join(piece if i % 2 else _FLAG.sub(as_key, piece) for i, piece in enumerate(pieces))


def _stage_error(stage: dict, error: RerankError, hint: str = "") -> RerankError:
    """A stage's error named by its stage, in the pipeline file's words, with the original's exit status: an error
    that names its parameters names them as keys; the words of others are rewritten (`_in_pipeline_terms`)."""
    words = (error.worded(str) if isinstance(error, ParameterError)
             else _in_pipeline_terms(str(error), stage["kind"]))
    named = RerankError(f"stage {stage['name']!r}: {words}{hint}")
    named.exit_code = error.exit_code
    return named


def _stage_parameters(stage: dict) -> dict:
    """What a stage's function takes of its table (and its fingerprint reads): all but how it is wired and judged."""
    return {k: v for k, v in stage.items() if k not in ("kind", "input", "evaluate")}


def _resolved_parameters(stage: dict, runs_folder: Path, earlier: dict[str, dict]) -> dict:
    """What the stage's function takes: its parameters, with its own checkpoint folder (a train stage's `output`),
    or the folder of the earlier train stage its `checkpoint` names."""
    params = _stage_parameters(stage)
    if not _writes_run(stage):
        params["output"] = str(runs_folder / stage["name"])
    trained = _trained_by(stage, earlier)
    if trained is not None:
        params["checkpoint"] = str(runs_folder / trained["name"])
    return params


def check_stages(spec: dict, pipeline_folder: Path, runs_folder: Path) -> set[str]:
    """Every stage's parameters and the files the pipeline names, before any stage runs. Returns the stages left to
    check when they run: those whose checkpoint an earlier train stage has yet to write."""
    earlier: dict[str, dict] = {}
    waiting = set()
    for stage in spec["stage"]:
        params = _resolved_parameters(stage, runs_folder, earlier)
        if _trained_by(stage, earlier) is not None and not (Path(params["checkpoint"]) / "checkpoint.json").is_file():
            waiting.add(stage["name"])
        else:
            _check_stage(spec, stage, params, pipeline_folder)
        earlier[stage["name"]] = stage
    if spec.get("qrels") is not None and not Path(spec["qrels"]).is_file():
        raise DataError(f"qrels file not found: {spec['qrels']}{_beside_the_file([spec['qrels']], pipeline_folder)}")
    evaluated = any(_evaluated(stage) for stage in spec["stage"])
    if spec.get("qrels") is None and evaluated and spec["dataset"] not in dataset_names():
        # an index of one's own has no judgements: the leaderboard would fail only after every stage had run
        raise UsageError(f"{spec['dataset']!r} is an index of your own, not a data set with qrels: its runs are "
                         "judged by the file's qrels = FILE")
    return waiting


def _check_stage(spec: dict, stage: dict, params: dict, pipeline_folder: Path) -> None:
    """What the stage's kind would refuse of its parameters, named by the stage in the file's words."""
    try:
        stage_specs()[stage["kind"]].check_function()(spec["dataset"], params)
        if stage["kind"] == "retrieve":
            _check_index_there(spec, stage.get("backend", "lucene"), params)
    except UnknownDatasetError as error:
        if error.name != spec["dataset"]:
            raise _stage_error(stage, error) from None
        raise _unknown_dataset(stage, error) from None
    except RerankError as error:  # a pipeline file's mistake, named by its stage
        raise _stage_error(stage, error, _beside_the_file(params.values(), pipeline_folder)) from None


def _unknown_dataset(stage: dict, error: UnknownDatasetError) -> UsageError:
    """The file's `dataset` key names no data set: said of that key, where the misspelling is, not of the first
    stage that read it (which was named as if its own table were wrong)."""
    own = (f"; for an index of your own, {_in_pipeline_terms(error.own_index, stage['kind'])} in stage "
           f"{stage['name']!r}" if error.own_index else "")
    return UsageError(f"dataset {error.name!r} is not a known data set ({_near_data_set(error.name, '? ')}known: "
                     f"{', '.join(dataset_names())}){own}")


def _near_data_set(name: str, then: str) -> str:
    """'did you mean 'vaswani'' (and `then`) for a misspelt data set's name, else nothing."""
    near = difflib.get_close_matches(name, dataset_names(), n=1)
    return f"did you mean {near[0]!r}{then}" if near else ""


def _beside_the_file(values, pipeline_folder: Path) -> str:
    """A hint for relative paths that are missing from the working directory, which they are read from (as the
    command line's are), but lie beside the pipeline file, where a user who wrote them there may expect them read."""
    beside = [value for value in values if isinstance(value, str) and value and not Path(value).is_absolute()
              and not Path(value).exists() and (pipeline_folder / value).exists()]
    if not beside or pipeline_folder.resolve() == Path.cwd().resolve():
        return ""
    return (f" ({', '.join(beside)} {'is' if len(beside) == 1 else 'are'} beside the pipeline file, but its paths are "
            f"read from the working directory, as the command line's are: run it from {pipeline_folder} or give "
            f"{', '.join(str(pipeline_folder / value) for value in beside)})")


def _fingerprint(dataset: str, stage: dict, upstream: str) -> str:
    """What a run depends on: its parameters, its upstream runs, the files it reads, and for a score stage what its
    model computes. A checkpoint retrained, a topics file edited, the data set's files changed (or another
    --data-root), the index rebuilt, or a model's scores version bumped must invalidate it."""
    blob = json.dumps({"dataset": dataset, "params": stage, "upstream": upstream}, sort_keys=True)
    if stage["kind"] == "score":  # a run scored by code that computed otherwise (its scores version bumped since)
        blob += f"scores version {scores_version_of(stage.get('model'))}"
    for value in stage.values():
        if not isinstance(value, str):
            continue
        manifest = Path(value) / "checkpoint.json"
        if manifest.is_file():
            blob += manifest.read_text()
        elif Path(value).is_file():
            blob += file_state(Path(value))
    blob += "".join(source_state({"dataset": dataset}))
    if stage_specs()[stage["kind"]].output == "checkpoint":  # what it trains on (train, dev): judgements too
        blob += "".join(state for value in stage.values() if isinstance(value, str) and value in dataset_names()
                        for state in source_state({"dataset": value}, ()))
    if stage["kind"] == "retrieve":  # every build writes a new manifest (its creation time among it)
        index = api.manifest_folder(dataset, stage.get("backend", "lucene"), stage) / MANIFEST
        blob += index.read_text() if index.is_file() else ""
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _existing_fingerprint(path: Path) -> str | None:
    """The fingerprint a saved run records; None (run it again) if there is none or the file cannot be read."""
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            header = RunReader(handle, str(path)).header
        if header.promises_end and not _ends_complete(path):
            return None
        return header.get("fingerprint")
    except (RerankError, OSError):
        return None


def _ends_complete(path: Path) -> bool:
    """Whether the file's last line is the end line (read from the end: runs can be large)."""
    with open(path, "rb") as handle:
        handle.seek(max(0, handle.seek(0, 2) - 256))
        lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    return bool(lines) and lines[-1].strip() == f"# {END_TEXT}"


def load_pipeline(path: str | Path, overrides: dict | None = None) -> dict:
    """A pipeline file, checked whole before any stage runs: its leaderboard keys as `overrides` (rerank run's
    options) leave them, so that an option can stand in for a key the file gets wrong."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"pipeline file not found: {p}")
    try:
        spec = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: not valid TOML ({exc})") from None
    every_stage_key = {key: object for kind in stage_specs().values() for key in kind.schema()} | EVERY_STAGE
    _check_types(str(p), spec, PIPELINE_KEYS, (every_stage_key, "{key} is a stage key; set it in each [[stage]] that "
                                                                "takes it"))
    if "dataset" not in spec or not spec.get("stage"):
        raise DataError(f"{p}: a pipeline needs 'dataset' and at least one [[stage]]")
    _check_types(f"{p}: [index]", spec.get("index", {}), INDEX_TABLE)
    built = _index_table_backend(spec)
    dense_only = [key for key in DENSE_INDEX_KEYS if key in spec.get("index", {})]
    if dense_only and built != "dense":  # it would be refused after the [index] table's back end had been checked
        raise DataError(f"{p}: [index] {', '.join(dense_only)}: a dense index's; give backend = \"dense\", or leave "
                        f"{'it' if len(dense_only) == 1 else 'them'} out")
    if built == "elasticsearch":  # it would build at $RERANK_ES_URL, once per machine
        raise UsageError(f"{p}: [index] builds an index under indexes/ ({' or '.join(LOCAL_BACKENDS)}); an "
                         "Elasticsearch index lives on its server: build it once with "
                         f"{build_command(spec['dataset'], ' --backend elasticsearch --es-url URL')}, and leave the "
                         "[index] table out")
    if built is not None and built not in LOCAL_BACKENDS:  # it said "unknown back end", naming neither file nor table
        raise DataError(f"{p}: [index] backend {built!r} is unknown; known: {', '.join(LOCAL_BACKENDS)}")
    if built is not None and spec["dataset"] not in dataset_names():  # it said "give the documents with --corpus FILE",
        # which the table does not take, after the runs folder was claimed
        guess = _near_data_set(spec["dataset"], "?")
        raise UsageError(f"{p}: [index] builds a data set's index, and dataset {spec['dataset']!r} is not one"
                         f"{f' ({guess})' if guess else ''}: build your own once with {build_command(spec['dataset'])}, "
                         "and leave the [index] table out")
    for key in ("measures", "stage"):
        if not all(isinstance(item, str if key == "measures" else dict) for item in spec.get(key, [])):
            raise DataError(f"{p}: {key} must be a list of {'strings' if key == 'measures' else '[[stage]] tables'}")
    names = set()
    for i, stage in enumerate(spec["stage"], 1):
        if "name" not in stage or "kind" not in stage:
            raise DataError(f"{p}: stage {i} needs 'name' and 'kind'")
        if not isinstance(stage["name"], str) or not _STAGE_NAME.match(stage["name"]):
            raise DataError(f"{p}: stage {i}: name {stage['name']!r} must be one word of letters, digits and _ . + - "
                            "(it names the run file and tags its lines)")
        if stage["kind"] not in stage_specs():
            raise DataError(f"{p}: stage {stage['name']!r} has unknown kind {stage['kind']!r}; known: "
                            f"{', '.join(stage_specs())}")
        _check_types(f"{p}: stage {stage['name']!r}", stage, {**EVERY_STAGE, **stage_specs()[stage["kind"]].schema()},
                     (PIPELINE_KEYS, "{key} is a pipeline key, and TOML gives every key below a [[stage]] line to "
                                     "that stage; move it above the first [[stage]]"))
        _check_inputs(str(p), stage)
        for upstream in [stage["input"]] if stage.get("input") is not None else stage.get("inputs", []):
            if upstream not in names:
                raise DataError(f"{p}: stage {stage['name']!r} reads {upstream!r}, which no earlier stage makes")
        if stage["name"] in names:
            raise DataError(f"{p}: two stages are named {stage['name']!r}")
        _check_checkpoint_named(str(p), stage, spec["stage"][:i - 1])
        names.add(stage["name"])
    searched = sorted({(stage.get("backend", "lucene"), stage.get("index_name")) for stage in spec["stage"]
                       if stage["kind"] == "retrieve"}, key=str)
    table_builds = (built, _index_table_options(spec).get("index_name"))
    if built is not None and table_builds not in searched:  # it was built all the same: minutes to hours, for nothing
        they = ", ".join(backend + (f" {index_name!r}" if index_name else "") for backend, index_name in searched)
        raise DataError(f"{p}: [index] builds a {_index_label(*table_builds)}, which no retrieve stage searches ("
                        + (f"they search {they}" if searched else "no stage retrieves")
                        + "); leave the [index] table out, or give it the back end (and index name) a stage searches")
    if built == "dense":
        _check_dense_encoders(str(p), spec)
    _check_leaderboard(str(p), leaderboard_spec(spec, overrides or {}))
    return spec


def _check_dense_encoders(source: str, spec: dict) -> None:
    """A dense stage that searches the index the [index] table builds, with another encoder than the table's, was
    refused when it ran (the vectors are not comparable): after the build and every stage before it. A stage
    without `encoder` searches with the one its index was built with, the table's."""
    table = _index_table_options(spec)
    dense = api.backend("dense")
    for stage in spec["stage"]:
        if (stage["kind"] == "retrieve" and stage.get("backend") == "dense" and "encoder" in stage
                and stage.get("index_name") == table.get("index_name")
                and not dense.same_encoder(stage["encoder"], table.get("encoder"))):
            builds = table.get("encoder", "the packaged all-MiniLM-L6-v2")
            raise DataError(f"{source}: stage {stage['name']!r} searches the "
                            f"{_index_label('dense', table.get('index_name'))} with encoder {stage['encoder']}, and "
                            f"the [index] table builds it with {builds}: their vectors are not comparable; give the "
                            "stage the [index] table's encoder, or none (a stage without one searches with the "
                            "encoder its index was built with)")


def _check_inputs(source: str, stage: dict) -> None:
    """A stage reads what its kind reads: a score stage one `input`, a fuse stage two or more `inputs` (names of
    earlier stages), a first stage nothing (an `input` there would be ignored, yet change its fingerprint)."""
    where = f"{source}: stage {stage['name']!r}"
    kind = stage["kind"]
    if kind == "fuse":
        inputs = stage.get("inputs", [])
        if "input" in stage or len(inputs) < 2 or not all(isinstance(i, str) for i in inputs):
            raise DataError(f"{where}: a fuse stage reads `inputs`, a list of two or more earlier stages' names")
    elif kind == "score":
        if "input" not in stage:
            raise DataError(f"{where}: a score stage needs `input`, the earlier stage whose run it re-ranks")
    elif "input" in stage:
        raise DataError(f"{where}: a {kind} stage reads no earlier stage's run; remove `input`")


def _check_checkpoint_named(source: str, stage: dict, earlier: list[dict]) -> None:
    """A train stage is no run to evaluate; a `checkpoint` that names a train stage names an earlier one of the
    same model (the folder it names does not exist before the pipeline runs)."""
    where = f"{source}: stage {stage['name']!r}"
    if not _writes_run(stage) and "evaluate" in stage:
        raise DataError(f"{where}: a {stage['kind']} stage writes a checkpoint, not a run to evaluate; remove "
                        "`evaluate`")
    by_name = {other["name"]: other for other in earlier}
    trained = _trained_by(stage, by_name)
    if stage.get("checkpoint") in by_name and trained is None:
        raise DataError(f"{where}: checkpoint {stage['checkpoint']!r} is a stage that writes a run, not a "
                        "checkpoint; name a train stage, or a checkpoint folder")
    if trained is not None and trained.get("model") != stage.get("model"):
        raise DataError(f"{where}: checkpoint {trained['name']!r} trains model {trained.get('model')!r}, not "
                        f"{stage.get('model')!r}")


def _check_leaderboard(source: str, spec: dict) -> None:
    """Measures, baseline and sort are used only after every stage has run: check them before any does."""
    from .evaluate.session import check_min_rel

    try:
        check_min_rel(spec.get("min_rel"), "min_rel")
    except UsageError as error:
        raise DataError(f"{source}: {error}") from None
    if spec.get("measures") == []:  # it fell back to the data set's measures, where `tests = []` is refused
        raise DataError(f"{source}: measures []: name one or more (e.g. [\"MAP\", \"nDCG@10\"]), or leave the key "
                        "out for the data set's")
    try:
        labels = _measure_labels(spec)
    except UsageError as error:  # the -m message, named by the file's key
        raise DataError(f"{source}: measures: {error}") from None
    evaluated = [s["name"] for s in spec["stage"] if _evaluated(s)]
    if not evaluated:
        raise DataError(f"{source}: every stage has evaluate = false: the leaderboard needs at least one evaluated "
                        "stage")
    if spec.get("baseline", evaluated[0]) not in evaluated:
        raise DataError(f"{source}: baseline {spec.get('baseline')!r} is not an evaluated stage "
                        f"({', '.join(evaluated)})")
    if labels and "sort" in spec:
        try:
            sort_among(spec["sort"], labels, "sort")
        except UsageError as error:
            raise DataError(f"{source}: {error}") from None
    unknown = [t for t in spec.get("tests", []) if not isinstance(t, str) or t not in TESTS]
    if unknown or spec.get("tests") == []:
        raise DataError(f"{source}: tests {spec['tests']!r}: name one or more of {', '.join(TESTS)}")
    if spec.get("correction", "holm") not in CORRECTIONS:
        raise DataError(f"{source}: correction {spec['correction']!r} is not one of {', '.join(CORRECTIONS)}")


def _measure_labels(spec: dict) -> list[str]:
    """The labels of the measures the leaderboard shows: the spec's `measures`, or its data set's."""
    from .data.registry import ADHOC_MEASURES

    default = get_dataset(spec["dataset"]).measures if spec["dataset"] in dataset_names() else ADHOC_MEASURES
    return [m.label for m in parse_measures(spec.get("measures") or list(default), 1)]


def leaderboard_spec(spec: dict, overrides: dict) -> dict:
    """The keys the leaderboard is made with: the file's, with those `overrides` gives (rerank run's -m, --baseline,
    --sort, --test and --correction; None or empty: not given) in their place, checked as eval checks its options.
    The stages are left as they are, so no fingerprint changes and saved runs are reused. A file's `sort` that is
    not among the measures -m gives falls back to the default, the first measure that is not a count."""
    unknown = set(overrides) - set(LEADERBOARD_KEYS)
    if unknown:
        raise ValueError(f"not a leaderboard key: {', '.join(sorted(unknown))}")
    given = {key: value for key, value in overrides.items() if value is not None and value != () and value != []}
    board = {**spec, **{key: list(value) if key in ("measures", "tests") else value for key, value in given.items()}}
    if "sort" in given or "measures" in given:  # the file's own measures are load_pipeline's to check, in its words
        labels = _measure_labels(board)  # -m's message if a measure cannot be read, as eval's
        if "sort" in given:
            sort_among(given["sort"], labels)
        elif "sort" in spec and label_among(spec["sort"], labels) is None:
            del board["sort"]
    if "baseline" in given:
        every = [stage["name"] for stage in spec["stage"]]
        evaluated = [stage["name"] for stage in spec["stage"] if _evaluated(stage)]
        if given["baseline"] in every and given["baseline"] not in evaluated:
            raise UsageError(f"--baseline {given['baseline']!r} is a stage with evaluate = false, not on the "
                             f"leaderboard; evaluated stages: {', '.join(evaluated)}")
        if given["baseline"] not in evaluated:
            which = "evaluated stages" if len(evaluated) < len(every) else "stages"
            raise UsageError(f"--baseline {given['baseline']!r} names none of the pipeline's {which}: "
                             f"{', '.join(evaluated)}")
    return board


def _run_checkpoint_stage(dataset: str, stage: dict, params: dict, fingerprint: str, force: bool) -> str:
    """Train into the stage's folder unless the checkpoint there was trained for this fingerprint; its hash, which
    the fingerprints of the stages that score with it include."""
    import click

    target = Path(params["output"])
    if not force and _checkpoint_reused(target, fingerprint):
        click.echo(f"rerank: {stage['name']}: up to date ({target})", err=True)
    else:
        click.echo(f"rerank: {stage['name']}: running {stage['kind']} -> {target}", err=True)
        try:
            said = stage_function(stage["kind"])(dataset, params, None)
        except RerankError as error:
            raise _stage_error(stage, error) from None
        click.echo(f"rerank: {stage['name']}: {said}", err=True)
    record = {"fingerprint": fingerprint, "hash": json.loads((target / "checkpoint.json").read_text())["hash"]}
    with atomic_output(target / FINGERPRINT_FILE) as out:
        out.write(json.dumps(record))
    return record["hash"]


def _claim_runs_folder(folder: Path, pipeline: Path) -> None:
    """runs/<name>/ is named by the pipeline file's name alone: a second file of that name elsewhere would re-run its
    stages over the first's runs, with nothing changed, and be told to delete the first's other runs as stale. It
    is refused while the first file is there; a file that moved (the first gone) takes the runs over."""
    owner_file = folder / RUNS_OWNER
    ours = str(pipeline.resolve())
    owner = owner_file.read_text(encoding="utf-8").strip() if owner_file.is_file() else None
    if owner and owner != ours and Path(owner).is_file():
        raise DataError(f"{pipeline}: {folder} holds the runs of {owner}, a pipeline file of the same name; rename "
                        "one of them (a pipeline's runs go to runs/<its file name>/)")
    if owner != ours:
        with atomic_output(owner_file) as out:
            out.write(f"{ours}\n")


def _check_server_indexes(spec: dict, folder: Path, force: bool) -> None:
    """Open the Elasticsearch index of each stage that will search one, before any stage runs: a misspelt index name,
    or a server that does not answer, stopped the pipeline only when that stage ran, after the stages before it. A
    stage whose saved run is up to date is not asked for (its server may be away; a retrieve stage has no upstream,
    so its fingerprint is known now)."""
    for stage in spec["stage"]:
        params = _stage_parameters(stage)
        if stage["kind"] != "retrieve" or params.get("backend", "lucene") in LOCAL_BACKENDS:
            continue
        target = folder / f"{stage['name']}.run"
        if not force and _existing_fingerprint(target) == _fingerprint(spec["dataset"], {**params, "kind": "retrieve"},
                                                                       ""):
            continue
        search = {key: value for key, value in params.items() if key not in ("name", "backend")}
        try:
            api.backend(params["backend"]).open_index(spec["dataset"], **search)
        except RerankError as error:
            raise _stage_error(stage, error) from None


def run_pipeline(path: str | Path, fmt: str = "table", force: bool = False, per_query: bool = False,
                 overrides: dict | None = None, report_path: str | None = None) -> str:
    """Run the stages that are not up to date; the leaderboard, or with `per_query` eval --per-query's table (each
    query's difference to the baseline, ordered by the file's `sort` if it has one). `overrides`: leaderboard keys
    that replace the file's (`leaderboard_spec`), refused before any stage runs if eval would refuse them.
    `report_path`: where `rerank report`'s page of the evaluated stages is written too."""
    import click

    spec = load_pipeline(path, overrides)
    board = leaderboard_spec(spec, overrides or {})
    dataset = spec["dataset"]
    folder = runs_dir() / Path(path).stem
    waiting = check_stages(spec, Path(path).parent, folder)
    _claim_runs_folder(folder, Path(path))
    _check_server_indexes(spec, folder, force)
    built = _index_table_backend(spec)
    if built is not None and not api.manifest_folder(dataset, built, _index_table_options(spec)).is_dir():
        api.build_index(dataset, built, **_index_table_options(spec))
    fingerprints: dict[str, str] = {}
    made_by = file_fields(**{PIPELINE_KEY: str(path)})  # as a stage names its topics file: path, sha256's 16 digits
    earlier: dict[str, dict] = {}
    for stage in spec["stage"]:
        params = _resolved_parameters(stage, folder, earlier)
        name, upstream, trained = stage["name"], stage.get("input"), _trained_by(stage, earlier)
        earlier[name] = stage
        upstreams = [upstream] if upstream is not None else list(stage.get("inputs", []))  # `inputs`: several (fuse)
        upstreams += [trained["name"]] if trained is not None else []  # its checkpoint's hash
        fingerprint = _fingerprint(dataset, {**_stage_parameters(stage), "kind": stage["kind"]},
                                   "+".join(fingerprints.get(u, "") for u in upstreams))
        fingerprints[name] = fingerprint
        if not _writes_run(stage):
            fingerprints[name] = _run_checkpoint_stage(dataset, stage, params, fingerprint, force)
            continue
        if name in waiting:  # its checkpoint is trained now
            _check_stage(spec, stage, params, Path(path).parent)
        if "inputs" in params:
            params["inputs"] = [str(folder / f"{u}.run") for u in params["inputs"]]
        target = folder / f"{name}.run"
        if not force and _existing_fingerprint(target) == fingerprint:
            click.echo(f"rerank: {name}: up to date ({target})", err=True)
            continue
        click.echo(f"rerank: {name}: running {stage['kind']} -> {target}", err=True)
        source = None
        handle = None
        if upstream is not None:
            handle = open(folder / f"{upstream}.run", encoding="utf-8")
            reader = RunReader(handle, str(folder / f"{upstream}.run"))
            source = Stream(reader.header, reader)
        try:
            stream = stage_function(stage["kind"])(dataset, params, source)
            stream.header.fields["fingerprint"] = fingerprint
            stream.header.stages[-1].update(made_by)  # beside the fingerprint, not in it: it describes the stage
            with atomic_output(target) as out:
                stream.write(out)
        except RerankError as error:  # what only running finds (a model's position table, a server's answer)
            raise _stage_error(stage, error) from None
        finally:
            if handle is not None:
                handle.close()
    runs: list[Run] = []
    for stage in spec["stage"]:
        if _evaluated(stage):
            with open(folder / f"{stage['name']}.run", encoding="utf-8") as handle:
                runs.append(load_run(handle, stage["name"]))
    judgements = judgements_for(runs, spec.get("qrels"), spec.get("min_rel"), dataset)
    evaluations, named, warnings = evaluate_runs(runs, judgements, board.get("measures"))
    own = [run.name for run in runs if not run.header.dataset and not spec.get("qrels")]
    if own:  # eval would ask for qrels: the file's data set stands for them (query variants keep its ids)
        warnings.insert(0, f"{', '.join(own)}: from a topics file whose queries are not all {dataset}'s (their ids "
                           f"with the same words), judged by {dataset}'s qrels, the pipeline's data set; set qrels = "
                           "FILE if they are not its queries")
    made = {stage["name"] for stage in spec["stage"]}
    stale = sorted(str(p) for p in folder.glob("*.run") if p.stem not in made)
    stale += sorted(str(p.parent) for p in folder.glob(f"*/{FINGERPRINT_FILE}") if p.parent.name not in made)
    if stale:  # a renamed stage's old run: `rerank budget runs/NAME/*.run` would read it with the current ones
        warnings.append(f"{', '.join(stale)}: of no stage of {path} now (a stage renamed or removed?); delete "
                        f"{'it' if len(stale) == 1 else 'them'} if so")
    for warning in warnings:
        click.echo(f"rerank: note: {warning}", err=True)
    names = [r.name for r in runs]
    baseline = board.get("baseline", names[0])
    if baseline not in names:
        raise UsageError(f"{path}: baseline {baseline!r} is not an evaluated stage ({', '.join(names)})")
    base = names.index(baseline)
    significance = report.Significance.chosen(board.get("tests", ()), board.get("correction", "holm"))
    if report_path is not None:
        from .evaluate import html_report

        html_report.write(html_report.Compared(runs, judgements, evaluations, named, base, board.get("sort"),
                                                 significance, warnings, dataset=dataset), report_path)
    if per_query:
        sort_label = label_among(board["sort"], [m.label for m in named]) if board.get("sort") else None
        return report.render_per_query(evaluations, named, fmt, base, sort_label)
    rows = report.leaderboard(evaluations, named, base, board.get("sort"), significance)
    return report.render(rows, named, fmt, baseline, significance)

"""The suggest stage: a suggester's top next queries for every session prefix of a data set, as a run stream.

Each prefix is a query (`USER-SESSION-N`); its suggestions are the records, best first, each suggestion's text
in the docid column (`data.sessions.docid`: percent-encoded, spaces as `+`), its score the model's (a generator's
length-normalised log-probability). `rerank eval` reads the texts back for BLEU, and ranks them against the true
next query for MRR and HITS. Every prefix gets a `# time:` line.
"""

from __future__ import annotations

import time
from typing import Iterator

from .data.session_sets import SessionDataset
from .data.sessions import docid
from .models.suggesters import Suggester
from .params import Option
from .runs import QueryRanking, RunHeader, Stream, Timing, file_fields
from .score import stage_provenance
from .stages import StageSpec, register_stage


def suggest_stream(dataset: SessionDataset, model: Suggester, k: int, stage: str, options: dict) -> Stream:
    own = dataset.name == "custom"
    fields = file_fields(sessions=str(dataset.files["sessions"])) if own else {"dataset": dataset.name}
    header = RunHeader(fields).with_stage({"name": stage, "kind": "suggest", "k": k, **options,
                                           **stage_provenance(model)})
    model.for_dataset(dataset)
    pairs = dataset.log().pairs()

    def rankings() -> Iterator[QueryRanking]:
        for pair in pairs:
            began = time.perf_counter()
            found = dict(model.suggest(list(pair.source), k))  # one record per text
            ms = (time.perf_counter() - began) * 1000
            yield QueryRanking.from_scores(pair.qid, map(docid, found), found.values(), tag=stage,
                                           timings=[Timing(stage, ms, len(found))])

    return Stream(header, rankings())


def _suggester(dataset: str, params: dict) -> tuple[SessionDataset, Suggester | None]:
    from .data import get_dataset
    from .errors import UsageError
    from .models.base import model_spec

    sessions = get_dataset(dataset)
    if not isinstance(sessions, SessionDataset):
        raise UsageError(f"a suggest stage needs a data set of search sessions (aol-missions-dev), not {dataset}")
    if "model" not in params:
        raise UsageError("a suggest stage needs `model`")
    spec = model_spec(params["model"])
    if spec.kind != "generator":
        raise UsageError(f"a suggest stage's model writes queries; {params['model']} ranks passages")
    if spec.needs_checkpoint and "checkpoint" not in params:
        raise UsageError(f"a suggest stage with model {spec.name} needs `checkpoint` (rerank train {spec.name} "
                         f"{spec.train_example} -o DIR)")
    return sessions, spec


def check_suggest_stage(dataset: str, params: dict) -> None:
    """What a pipeline's suggest stage can get wrong, before any stage runs: the data set, model and checkpoint."""
    from .checkpoint import read_checkpoint

    _, spec = _suggester(dataset, params)
    if spec.needs_checkpoint:
        read_checkpoint(params["checkpoint"], spec.name)


def suggest_stage(dataset: str, params: dict, input: Stream | None) -> Stream:
    """Pipeline stage `kind = "suggest"`: `model`, `checkpoint`, `k` (10), `beam` (5), `threads` (1)."""
    from .models.base import set_threads

    sessions, spec = _suggester(dataset, params)
    set_threads(int(params.get("threads", 1)))
    options = {"beam": int(params.get("beam", 5))} if spec.needs_checkpoint else {}
    model = spec.load(params.get("checkpoint"), **options)
    return suggest_stream(sessions, model, int(params.get("k", 10)), params.get("name") or spec.name, options)


SUGGEST_STAGE = register_stage(StageSpec(
    kind="suggest", run="rerank.suggest:suggest_stage", check="rerank.suggest:check_suggest_stage",
    parameters=(Option("model", str, None, "Suggester: mtn, transformer, seq2seq, hred, cooccurrence, last-query."),
                Option("checkpoint", str, None, "Checkpoint folder (from rerank train), for trained models."),
                Option("k", int, 10, "Suggestions per session prefix."),
                Option("beam", int, 5, "Beam width of trained models (1: greedy)."),
                Option("threads", int, 1, "Torch threads."))))

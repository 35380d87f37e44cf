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
from .runs import QueryRanking, RunHeader, Stream, Timing, file_fields
from .score import stage_provenance


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

"""The score stage: re-score the top of each query's ranking with a model and keep the rest below it.

For each query the top `depth` candidates are scored by the model; the candidates below `depth` (and,
with `skip_missing`, candidates whose text the store lacks) keep their original order underneath,
with scores placed strictly below the lowest model score (one unit apart, by original rank), so the
order survives any evaluator's re-sort.

Scores are cached on disk (sqlite under `cache_dir()`), keyed on a hash of (model provenance, which
includes the checkpoint hash, score-changing options and the model's scores version, query text, document
text); re-running a pipeline scores nothing twice. Each query gets a `Timing` for the work actually done
for it: model scoring of the cache misses plus the cache look-ups. A fully cached query therefore costs ~0 ms; the
`# stage:` line says `"cache": true` so nobody mistakes those times for model latency — measure
latency budgets with `--no-cache` (cache disabled: every pair is scored by the model).

With `interpolate=α` the head's final score is `(1-α)·z(model) + α·z(first stage)`, both z-scored over
the re-scored head (the usual interpolation of a neural re-ranker with BM25, e.g. Birch); the cache
keeps the model's own scores, so changing α re-scores nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from .docstore import TEXTS_BUILD_KEY, DocStore, IndexStore, doc_store_for, queries_for
from .errors import DataError, ParameterError, UsageError, counted, verb
from .models.base import SCORE_OPTIONS, Reranker, load_model, registered
from .normalise import zscores
from .params import Option
from .paths import cache_dir
from .progress import Progress
from .retrieve.store import described, origin
from .runs import QueryRanking, Stream, Timing, descending, file_fields, stored_vectors_packages, used_packages
from .stages import StageSpec, register_stage

CACHE_FILE = "scores.sqlite"


class ScoreCache:
    """(model, query, document) -> score in one sqlite table; keys are truncated sha256 digests."""

    def __init__(self, namespace: str, path: Path | None = None):
        self.path = path or cache_dir() / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        try:  # a folder of that name, or a read-only .cache folder with no cache yet, was sqlite's traceback
            self._db = sqlite3.connect(self.path, timeout=60)
        except sqlite3.Error as exc:
            raise DataError(f"score cache {self.path} cannot be opened ({exc}): it must be a file in a folder you can "
                            "write; or pass --no-cache") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS scores (key BLOB PRIMARY KEY, score REAL NOT NULL)")
        except sqlite3.DatabaseError as exc:  # a damaged or foreign file: the user's to remove, not a traceback
            self._db.close()
            raise DataError(f"score cache {self.path} cannot be used ({exc}); delete it, or pass --no-cache") from None

    def key(self, query: str, text: str) -> bytes:
        blob = "\x00".join((self.namespace, query, text)).encode("utf-8")
        return hashlib.sha256(blob).digest()[:16]

    def get(self, keys: list[bytes]) -> dict[bytes, float]:
        found: dict[bytes, float] = {}
        with self._failing_as("read", "delete it"):
            for start in range(0, len(keys), 500):  # sqlite's limit on bound parameters
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found.update(self._db.execute(f"SELECT key, score FROM scores WHERE key IN ({marks})", chunk))
        return found

    def put(self, items: Iterable[tuple[bytes, float]]) -> None:
        with self._failing_as("written", "make it writable"), self._db:
            self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?)", items)

    @contextmanager
    def _failing_as(self, verb: str, remedy: str) -> Iterator[None]:
        """A cache that opened but fails later (read-only, a damaged page further in, locked past the timeout) is
        named in one line, not a traceback from the middle of the stream."""
        try:
            yield
        except sqlite3.Error as exc:
            raise DataError(f"score cache {self.path} cannot be {verb} ({exc}); {remedy}, or pass --no-cache") from None

    def close(self) -> None:
        self._db.close()


SCORE_NEUTRAL = ("checkpoint", "compile")


def stage_provenance(model: Reranker) -> dict[str, Any]:
    """The model's part of its stage's header line: its provenance and the version of what it computes."""
    return {**model.provenance(), "scores_version": model.scores_version}


def cache_namespace(model: Reranker) -> str:
    """Everything that changes a model's scores: its provenance (name, checkpoint hash, options) and the version
    of what rerank computes with them.

    Left out: the checkpoint's path (a moved checkpoint with the same hash scores the same) and whether
    the model was compiled (compiled scores equal eager ones to 1e-5).
    """
    return json.dumps({k: v for k, v in stage_provenance(model).items() if k not in SCORE_NEUTRAL}, sort_keys=True)


@dataclass
class ScoreStats:
    """What a score run did, for a summary line on stderr once the stream is written."""

    queries: int = 0
    pairs: int = 0
    cached: int = 0
    missing: int = 0
    missing_queries: list[str] = field(default_factory=list)
    below: int = 0  # queries with candidates below the depth, which keep their order there unscored

    def summary(self, stage: str, depth: int) -> str:
        text = (f"{stage}: scored {counted(self.pairs, 'pair')} over {counted(self.queries, 'query', 'queries')} "
                f"({self.cached} from the cache)")
        if self.missing:
            text += f"; skipped {counted(self.missing, 'candidate')} with no text in the store"
        if self.below:  # expected when re-ranking a 1000-deep run's top 100; a QA user expected every candidate
            text += (f"; {counted(self.below, 'query', 'queries')} had candidates below the top {depth}, "
                     "left unscored in their order (--depth to score more)")
        return text


def interpolated(head: list[str], model_scores: dict[str, float], first_stage: dict[str, float],
                 alpha: float) -> dict[str, float]:
    """(1-α)·z(model) + α·z(first stage) over the head documents."""
    if not head:
        return {}
    model_z = zscores([model_scores[d] for d in head])
    first_z = zscores([first_stage[d] for d in head])
    return {d: (1 - alpha) * m + alpha * f for d, m, f in zip(head, model_z, first_z)}


def head_over_tail(ranking: QueryRanking, scores: dict[str, float], **fields: Any) -> QueryRanking:
    """`ranking` with the documents of `scores` ordered by them and the rest below in their original order,
    one unit apart under the lowest score (the score stage's ranking; training's dev evaluation uses it too,
    so that its figure is the one `score | eval` gives).

    Only the head is sorted: the rest's scores fall strictly, from below the head's lowest, so trec_eval's order
    (score, then docid, descending) keeps them where they stand; sorting them again with the head was a second
    sort of every candidate the reader had sorted already. Scores too large for a unit to tell apart (past 2**53)
    tie, and the whole ranking is sorted as it was."""
    rest = [d for d in ranking.docids if d not in scores]
    floor = min(scores.values(), default=0.0)
    below = [floor - i for i in range(1, len(rest) + 1)]
    if below and not descending([floor, *below]):
        return QueryRanking.from_scores(ranking.qid, [*scores, *rest], [*scores.values(), *below], **fields)
    head = QueryRanking.from_scores(ranking.qid, scores, scores.values(), **fields)
    head.docids += rest
    head.scores += below
    return head


def handled(stage: dict[str, Any], ranking: QueryRanking) -> int | None:
    """How many candidates the `stage` (its header entry) handled for `ranking`'s query, as its `Timing` records (a
    first stage's found, a score stage's scored); None where the query has no time line of it."""
    timing = next((t for t in reversed(ranking.timings) if t.stage == stage.get("name")), None)
    return None if timing is None else timing.depth


def scored_count(stage: dict[str, Any], ranking: QueryRanking) -> int:
    """How many of a query's candidates the score `stage` (its header entry) gave the model's scores, at most the
    `ranking`'s length: the head it ranked on top, over the rest that head_over_tail kept in their order with filler
    scores (those below `depth`, and with `skip_missing` those without text). rescore's `Timing` counts them, from
    the cache or not; a query without one (its time lines removed) is taken at the stage's `depth`."""
    scored, depth = handled(stage, ranking), stage.get("depth")
    if scored is None:
        scored = depth if isinstance(depth, int) else len(ranking)
    return min(scored, len(ranking))


@dataclass
class Asked:
    """One query between its cache look-up and the model: what is asked of the model (`todo`), and what is known."""

    ranking: QueryRanking
    query: str
    texts: dict[str, str]
    head: list[str]
    missing: int
    keys: dict[str, bytes]
    scores: dict[str, float]  # from the cache
    todo: list[str]
    ms: float  # spent on it so far


@dataclass
class Rescoring:
    """What the score stage does to each query: the head's scores from the cache or the model, the rest below in
    their order, and a Timing. `ask` and `answer` are the parts before and after the model, so that the model may
    score elsewhere (`scaleout.py`: a Ray worker) while the cache and the ranking stay here."""

    model: Reranker
    depth: int
    stage: str
    cache: ScoreCache | None
    skip_missing: bool
    stats: ScoreStats
    interpolate: float | None = None

    def ask(self, ranking: QueryRanking, query: str, texts: dict[str, str]) -> Asked:
        began = time.perf_counter()
        top = ranking.docids[: self.depth]
        head = [d for d in top if d in texts]
        missing = len(top) - len(head)
        if missing and not self.skip_missing:
            absent = next(d for d in top if d not in texts)
            raise DataError(f"query {ranking.qid}: document {absent} is not in the document store "
                            f"({missing} of the {len(top)} to score {verb(missing, 'is', 'are')} "
                            "missing); pass --skip-missing to leave them unscored")
        keys: dict[str, bytes] = {}
        scores: dict[str, float] = {}
        if head and self.cache is not None:
            keys = {d: self.cache.key(query, texts[d]) for d in head}
            found = self.cache.get(list(keys.values()))
            scores = {d: found[k] for d, k in keys.items() if k in found}
            self.stats.cached += len(scores)
        todo = [d for d in head if d not in scores]
        return Asked(ranking, query, texts, head, missing, keys, scores, todo, (time.perf_counter() - began) * 1000)

    def answer(self, asked: Asked, fresh_scores: list[float], model_ms: float) -> QueryRanking:
        """The query's ranking, given the model's scores of `asked.todo` and the milliseconds they took."""
        began = time.perf_counter()
        ranking, scores = asked.ranking, dict(asked.scores)
        fresh = dict(zip(asked.todo, map(float, fresh_scores)))
        broken = next((d for d, s in fresh.items() if not math.isfinite(s)), None)
        if broken is not None:  # before the cache (its column is NOT NULL) or a run line ("nan") gets it
            raise DataError(f"query {ranking.qid}: {self.model.name} scored document {broken} {fresh[broken]} (not a "
                            f"finite number); its weights are broken (did its training diverge?)")
        scores.update(fresh)
        if fresh and self.cache is not None:
            self.cache.put((asked.keys[d], scores[d]) for d in asked.todo)
        if self.interpolate is not None:
            scores = interpolated(asked.head, scores, dict(zip(ranking.docids, ranking.scores)), self.interpolate)
        stats = self.stats
        stats.queries += 1
        stats.pairs += len(asked.head)
        stats.missing += asked.missing
        stats.below += len(ranking) > self.depth
        if asked.missing:
            stats.missing_queries.append(ranking.qid)
        ms = asked.ms + model_ms + (time.perf_counter() - began) * 1000
        timing = Timing(self.stage, ms, len(asked.head))
        return head_over_tail(ranking, scores, tag=self.stage, timings=[*ranking.timings, timing])

    def __call__(self, ranking: QueryRanking, query: str, texts: dict[str, str]) -> QueryRanking:
        """One query, its model scores computed here."""
        asked = self.ask(ranking, query, texts)
        began = time.perf_counter()
        fresh = self.model.score(query, asked.todo, [texts[d] for d in asked.todo]) if asked.todo else []
        return self.answer(asked, fresh, (time.perf_counter() - began) * 1000)

    def all(self, queries: Iterable[tuple[QueryRanking, str, dict[str, str]]]) -> Iterator[QueryRanking]:
        """Each (ranking, query text, texts) rescored, in order (an engine's `rescored` does the same elsewhere)."""
        return (self(*query) for query in queries)


def seen_in_training(model: Reranker, dataset: str | None, store: DocStore,
                     queries: dict[str, str]) -> tuple[set[str], set[str]]:
    """The ids of the `queries` (id -> words, ranked over `dataset`'s documents, or else over those of `store`: as
    training recorded its queries, `checkpoint.ranked_over`) the model's checkpoint
    was trained on (`train tk --train trec-dl-2019`, then scored and evaluated on trec-dl-2019; or a test split of
    one's own collection that shares queries with the training split), and those its dev evaluation chose the best
    step by (`--dev trecqa-dev`, or the training queries `--dev-fraction` held out): figures on the first are not
    held out, those on the second are dev figures, so scoring them is said, as train says of such dev queries.
    Checkpoints from before train recorded its queries' words and documents (`query_space`) tell `dataset`'s alone.
    A soup tells its ingredients' (`checkpoint.query_records`): a query one trained on is trained on, whoever held it out."""
    folder = model.provenance().get("checkpoint")
    manifest = Path(str(folder)) / "checkpoint.json" if folder else None
    if manifest is None or not manifest.is_file():
        return set(), set()
    from .checkpoint import query_records, ranked_over

    documents = ranked_over(dataset, store)
    trained: set[str] = set()
    chosen: set[str] = set()
    for training in query_records(json.loads(manifest.read_text()).get("training") or {}):
        seen = _seen_by(training, dataset, documents, queries)
        trained |= seen[0]
        chosen |= seen[1]
    return trained, chosen - trained


def _seen_by(training: dict, dataset: str | None, documents: dict,
             queries: dict[str, str]) -> tuple[set[str], set[str]]:
    """seen_in_training for one training record (`checkpoint.json`'s `training`, or a soup ingredient's)."""
    from .data import dataset_names, get_dataset
    from .checkpoint import queries_seen, trained_qids

    seen = queries_seen(training, documents, queries)
    if seen is not None:
        return seen
    if dataset is None:
        return set(), set()
    trained = (trained_qids(training) or set()) if training.get("train_source") == dataset else set()
    chosen = set(training.get("held_out_qids") or ()) if training.get("train_source") == dataset else set()
    if training.get("dev_source") == dataset and dataset in dataset_names():
        chosen |= set(get_dataset(dataset).qrels())
    return trained, chosen - trained


def check_score_options(depth: int, interpolate: float | None) -> None:
    if depth <= 0:
        raise ParameterError(f"{{depth}} must be a positive number of candidates, not {depth}", "depth")
    if interpolate is not None and not 0 <= interpolate <= 1:
        raise ParameterError(f"{{interpolate}} is the first stage's weight, between 0 and 1, not {interpolate}",
                             "interpolate")


def score_stream(stream: Stream, model: Reranker, depth: int = 100, cache: bool = True,
                 skip_missing: bool = False, stage: str | None = None, topics: str | None = None,
                 corpus: str | None = None, store: DocStore | None = None, queries: dict[str, str] | None = None,
                 stats: ScoreStats | None = None, interpolate: float | None = None, total: int | None = None,
                 say_training_overlap: bool = True, engine: Any = None) -> Stream:
    """A new stream whose rankings are re-scored lazily, query by query, as it is written (with progress on
    stderr; `total` queries, where known). `say_training_overlap`: warn of the queries the checkpoint trained on or
    chose its step by (budget's passes over the same queries at other depths say it once). `engine`: where the model
    scores, if not here (`scaleout.RayEngine`: its `rescored` and its `provenance` for the stage entry).

    Query and document texts come from `queries`/`store` when given, else from what the stream's
    header (or the `topics`/`corpus` files) name.
    """
    check_score_options(depth, interpolate)
    stage = model.name if stage is None else stage  # --name '' is refused as a name, not taken for none
    queries = queries if queries is not None else queries_for(stream.header, topics)
    store = store or doc_store_for(stream.header, corpus)
    stale = store.outdated() if isinstance(store, IndexStore) else None
    if stale:  # a run from a dense index rebuilt since then is re-scored with texts it was not ranked by
        import click

        click.echo(f"rerank: warning: {stale}; until then the texts scored are those of its build", err=True)
    stats = stats if stats is not None else ScoreStats()
    model.attach(stream.header, store)  # before provenance: a model may take stored encodings of those texts
    trained, chosen = seen_in_training(model, stream.header.dataset, store, queries)
    # Files given for the texts go into the header, so the next stage (or eval) finds them as this one did
    files = file_fields(topics=topics or None, corpus=corpus or None)
    # the packages' versions (its own, and those that encoded the stored vectors it reads) and the build of the index
    # its texts come from, beside the provenance, not in it: they describe, and key no cache (`used_packages`)
    texts_build = store.build if isinstance(store, IndexStore) else None
    header = stream.header.with_stage({"name": stage, "stage": "score", "depth": depth, "cache": cache,
                                       "skip_missing": skip_missing, **stage_provenance(model),
                                       **used_packages(model.packages), **stored_vectors_packages(model.encoded_with()),
                                       **({TEXTS_BUILD_KEY: texts_build} if texts_build else {}),
                                       **({"interpolate": interpolate} if interpolate is not None else {}),
                                       **(engine.provenance() if engine is not None else {})}, **files)

    def rankings() -> Iterator[QueryRanking]:
        score_cache = ScoreCache(cache_namespace(model)) if cache else None
        progress = Progress(f"scoring with {stage}", "query", total, units="queries")
        pairs, missing = stats.pairs, stats.missing  # what earlier streams counted into `stats`
        seen = picked = done = 0  # queries re-scored here that the checkpoint trained on, chose by; all
        rescoring = Rescoring(model, depth, stage, score_cache, skip_missing, stats, interpolate)

        def asked() -> Iterator[tuple[QueryRanking, str, dict[str, str]]]:
            nonlocal seen, picked, done
            for ranking in stream.rankings:
                if ranking.qid not in queries:
                    raise DataError(f"query {ranking.qid} has no text in the topics ({len(queries)} known)")
                seen, picked, done = seen + (ranking.qid in trained), picked + (ranking.qid in chosen), done + 1
                yield ranking, queries[ranking.qid], store.texts(ranking.docids[:depth])

        try:
            for rescored in (engine.rescored(rescoring, asked()) if engine is not None else rescoring.all(asked())):
                progress.update()
                yield rescored
            progress.close()
            if stats.pairs == pairs and stats.missing > missing:
                # skip_missing let every candidate through unscored: the first stage's order under the model's
                # name. Raised before the stream's end line, so its readers refuse what went out already.
                raise DataError(f"no candidate's text was found in {store.source} (all "
                                f"{counted(stats.missing - missing, 'candidate')} skipped, none re-scored); is it the "
                                "run's document store? Pass the right --corpus, or a run whose header names its index "
                                "or data set")
            if say_training_overlap and (seen or picked):
                import click

                collection = stream.header.dataset or stream.header.get("index") or described(origin(store.origin))
                checkpoint, of = model.provenance()["checkpoint"], f"({collection}'s)"
                if seen:
                    click.echo(f"rerank: warning: {stage}: its checkpoint {checkpoint} was trained on {seen} of the "
                               f"{counted(done, 'query', 'queries')} re-scored here {of}: figures on them are not "
                               "held out", err=True)
                if picked:
                    click.echo(f"rerank: note: {stage}: its checkpoint {checkpoint} chose its best training step by "
                               f"{picked} of the {counted(done, 'query', 'queries')} re-scored here {of}: figures on "
                               "them are dev figures, not test figures", err=True)
        finally:
            progress.close(said=False)  # (said below where all went well)
            if score_cache is not None:
                score_cache.close()

    return Stream(header, rankings())


SCORE_STAGE = register_stage(StageSpec(
    kind="score", run="rerank.score:score_stage", check="rerank.score:check_score_stage",
    parameters=(
        Option("model", str, None, f"Re-ranker: {', '.join(registered())}."),
        Option("checkpoint", str, None, "Checkpoint folder (from rerank train)."),
        Option("depth", int, 100, "Candidates per query to re-score; the rest keep their order below."),
        Option("cache", bool, True, "Use the score cache; off (--no-cache), every pair is scored by the model: to "
               "measure latency.", cli_flag="--no-cache"),
        Option("skip_missing", bool, False, "Leave candidates without text unscored (below the rest) instead of "
               "failing."),
        Option("topics", str, None, "Query texts (default: the data set named in the run header).", path="file"),
        Option("corpus", str, None, "Document texts (default: the index / data set in the run header).", path="file"),
        Option("interpolate", float, None, "Final score (1-ALPHA)·z(model) + ALPHA·z(first-stage score), z over the "
               "re-scored candidates."),
        *SCORE_OPTIONS)))
MODEL_OPTIONS = [option.name for option in SCORE_OPTIONS]  # what of a score stage's table reaches the model


def check_score_stage(_dataset: str, params: dict) -> None:
    """What a pipeline's score stage can get wrong, checked before any stage runs: the model, its options and
    checkpoint, depth, interpolation and the files it names."""
    from .data import files_dataset
    from .models.base import check_checkpoint_given, checked_model_options, model_spec
    from .checkpoint import read_checkpoint

    if "model" not in params:
        raise UsageError("a score stage needs `model`")  # the pipeline names the stage
    options = checked_model_options(params["model"], {k: params[k] for k in MODEL_OPTIONS if k in params})
    check_checkpoint_given(params["model"], params.get("checkpoint"))
    if "checkpoint" in params:
        read_checkpoint(params["checkpoint"], params["model"])
    model_spec(params["model"]).check_unloaded(params.get("checkpoint"), options)
    check_score_options(int(params.get("depth", 100)), params.get("interpolate"))
    named = files_dataset(corpus=params.get("corpus"), topics=params.get("topics"))  # names a file that is not there
    # a file of another format fails at its first record here, not after the stages before this one have run:
    # the topics whole (they are small), the corpus up to its first document
    if "topics" in named.files:
        named.topics()
    if "corpus" in named.files:
        next(iter(named.documents()), None)


def score_stage(dataset: str, params: dict, input: Stream | None) -> Stream:
    """Pipeline stage `kind = "score"`: `model`, optional `checkpoint`, `depth`, `cache`, `interpolate`, model options
    (checked by check_score_stage before the pipeline ran any stage)."""
    if input is None:
        raise UsageError("a score stage needs an `input` stage to re-rank")
    options = {k: params[k] for k in MODEL_OPTIONS if k in params}
    model = load_model(params["model"], params.get("checkpoint"), **options)
    return score_stream(input, model, int(params.get("depth", 100)), bool(params.get("cache", True)),
                        bool(params.get("skip_missing", False)), stage=params.get("name"),
                        topics=params.get("topics"), corpus=params.get("corpus"),
                        interpolate=float(params["interpolate"]) if "interpolate" in params else None)

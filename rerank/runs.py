"""The run stream: TREC run lines grouped by query, with provenance and per-query timings.

Format (every extension is a `#` comment line, so it survives `tee`, `grep` and files alike)::

    # rerank-run: 2
    # dataset: "vaswani"
    # stage: {"name": "bm25", "backend": "lucene", "index": "indexes/vaswani", "k": 1000}
    # time: 1 bm25 12.874 1000
    1 Q0 1239 1 12.3456 bm25
    1 Q0 4462 2 11.0021 bm25
    # end of run

- Header: `# key: JSON` lines before the first record; `stage` repeats, one per stage, in order (a first stage's
  with the number of `queries` it wrote, which later stages' progress counts to), each entry with
  the `rerank_version` that ran it (and a score or dense stage's `packages`: the versions of torch, transformers or
  faiss it computed with, and a stage that read stored vectors the versions that encoded them, `encoded_with`; a
  stage `rerank run` ran, its `pipeline` file and `pipeline_sha256`); a file a stage read is named with its content's
  sha256 (`topics_sha256`).
- Timing: `# time: QID STAGE MS DEPTH` — milliseconds one stage spent on one query and how many candidates
  it handled; written just before that query's records, so a stage can emit them as it streams. A query
  the stage found nothing for has its time lines and no records; readers give it an empty ranking.
- Records: standard six columns. Within a query they are ordered as trec_eval orders them (score
  descending, ties by docid descending) and ranked 1..n, so the rank column never disagrees with what
  an evaluator sees. `rerank cat --trec` drops every `#` line for tools that want pure TREC.
- End: `# end of run`, written once every query is out (format 2 on). A stage that fails mid-stream leaves
  its partial output without it, so the next stage in a pipe refuses to score half a run (format 1 files,
  written before the line existed, are read without it).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import io
import itertools
import json
import math
import operator
import re
from array import array
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Iterator, Sequence

from . import code_version
from .errors import FormatError, UsageError

MAGIC_KEY = "rerank-run"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
END_TEXT = "end of run"  # from format 2 on, the last line of a complete stream
TIME_KEY = "time"
TEXT_FIELDS = ("dataset", "index", "topics", "corpus", "qrels")  # header fields that name a data set, index or file
VERSION_KEY = "rerank_version"  # in each stage entry: the version of rerank that ran the stage
PACKAGES_KEY = "packages"  # in a stage entry that computed with torch, transformers or faiss: their versions
# in a manifest of stored vectors (a dense index's, TK's encodings): the versions of the packages that encoded them;
# in the stage entry that read them: the same record, beside its own `packages`
ENCODED_WITH_KEY = "encoded_with"
PIPELINE_KEY = "pipeline"  # in a stage entry `rerank run` wrote: the pipeline file's path (and `pipeline_sha256`)
CUT_KEY = "cut"  # header field: what `rerank cat --first/--depth` kept of a stream ({"queries": N, "depth": K})
MSMARCO_TAG = "msmarco"  # the tag of a run read from MS MARCO's 'qid docid rank' lines, which carry none
RANX_TAG = "ranx"  # the tag of a run read from ranx's JSON, which carries none
BYTE_ORDER_MARK = "\ufeff"  # Windows editors start UTF-8 files with one; it is not part of the first qid


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a whole run or its judgements become Python objects (lists, dicts and
    rankings, none of them in a cycle). Each collection walks every young list and dict item by item, and the
    full ones every object made so far: collections that freed nothing took 0.18 s of eval's 1.3 s on a 1M-line
    run, and 1.6 of its 11 CPU seconds at 7M lines. Nested uses leave it as the outermost found it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Timing:
    """Milliseconds that one stage spent on one query, and how many candidates it handled."""

    stage: str
    ms: float
    depth: int


@dataclass
class QueryRanking:
    """One query's ranked candidates (parallel docid/score lists, best first)."""

    qid: str
    docids: list[str]
    scores: list[float]
    tag: str = "rerank"
    timings: list[Timing] = field(default_factory=list)

    @classmethod
    def from_scores(cls, qid: str, docids: Iterable[str], scores: Iterable[float], **kw) -> "QueryRanking":
        """Order (docid, score) pairs as trec_eval does: score descending, ties by docid descending. Pairs whose
        scores fall strictly are in that order as given (a stage's output, as the next stage reads it), and are kept
        without a sort: sorting them again was 0.2 s per million lines of every stage that reads a stream."""
        floats, docids = [float(s) for s in scores], list(docids)
        if len(floats) == len(docids) and descending(floats):
            return cls(qid, docids, floats, **kw)
        pairs = sorted(zip(floats, docids), reverse=True)
        return cls(qid, [d for _, d in pairs], [s for s, _ in pairs], **kw)

    def __len__(self) -> int:
        return len(self.docids)

    def head(self, k: int) -> "QueryRanking":
        return QueryRanking(self.qid, self.docids[:k], self.scores[:k], self.tag, list(self.timings))

    def as_trec_eval_reads(self) -> "QueryRanking":
        """This ranking in the order trec_eval (and pytrec_eval) evaluates: it keeps scores as C floats, so scores
        less than a float apart tie there and fall to docid descending (100.000002 and 100.000001; Anserini's ties
        set 1e-6 apart above a score of 16). Evaluation, and its -M cut, use this order; streams keep the doubles'."""
        as_floats = array("f", self.scores)  # out of a float's range: inf, as C's conversion gives
        # the floats alone fix this order: the usual case (map over C comparisons: a million scores in 0.05 s)
        if descending(as_floats):
            return self
        if descending(as_floats, strictly=False):
            order = self._tied_floats_by_docid(as_floats)
        else:  # not in score order at all: sort it whole
            order = sorted(range(len(self.docids)), key=lambda i: (as_floats[i], self.docids[i]), reverse=True)
        if order is None:
            return self
        return QueryRanking(self.qid, [self.docids[i] for i in order], [self.scores[i] for i in order], self.tag,
                            list(self.timings))

    def _tied_floats_by_docid(self, as_floats: array) -> list[int] | None:
        """For floats in descending order with ties: the order with each run of equal floats by docid descending,
        or None where every run is so already: scores rounded to 4 decimals tie in most 1000-deep queries, and a
        whole sort of each query took 0.18 s of eval's time per million lines, where this takes 0.10 s."""
        docids = self.docids
        following = itertools.islice(as_floats, 1, None)
        tied = list(itertools.compress(itertools.count(), map(operator.eq, as_floats, following)))
        if all(docids[i] > docids[i + 1] for i in tied):
            return None
        order = list(range(len(docids)))
        for start, end in _runs_of_ties(tied):
            order[start:end] = sorted(order[start:end], key=docids.__getitem__, reverse=True)
        return order


def descending(values: Sequence[float], strictly: bool = True) -> bool:
    """Whether each value is below the one before it (`strictly`; else not above it): trec_eval's order as given, so
    that no sort is needed. NaN compares false, so a ranking holding one is never taken as in order."""
    return all(map(operator.gt if strictly else operator.ge, values, itertools.islice(values, 1, None)))


def _runs_of_ties(tied: list[int]) -> Iterator[tuple[int, int]]:
    """(start, end) slices of the runs of equal neighbours, from the positions `i` whose value equals the next one."""
    for _, group in itertools.groupby(enumerate(tied), key=lambda pair: pair[1] - pair[0]):
        positions = [i for _, i in group]
        yield positions[0], positions[-1] + 2


@dataclass
class RunHeader:
    """Provenance carried at the top of a stream: data set, files, and the stages applied so far."""

    fields: dict[str, Any] = field(default_factory=dict)
    stages: list[dict[str, Any]] = field(default_factory=list)
    version: int | None = None  # the format version read (None: no '# rerank-run' line, a plain TREC run)

    @property
    def promises_end(self) -> bool:
        """Whether a complete stream with this header ends with the end line (format 2 on)."""
        return self.version is not None and self.version >= 2

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def dataset(self) -> str | None:
        return self.fields.get("dataset")

    def with_stage(self, stage: dict[str, Any], **fields: Any) -> "RunHeader":
        """A copy with one more stage appended (and optional fields set), for the next stage's output. The stage
        entry records the rerank that ran it (`rerank_version`), so a reviewer holding the file alone knows which
        code to run again; a pipe's stages may have been run by different ones."""
        name = stage.get("name")
        if not isinstance(name, str) or not name or name.startswith("#") or any(c.isspace() for c in name):
            raise UsageError(f"stage name {name!r} must be one word (it becomes the run tag and timing label)")
        merged = {**self.fields, **{k: v for k, v in fields.items() if v is not None}}
        return RunHeader(merged, [*self.stages, {**stage, VERSION_KEY: code_version()}])

    def lines(self) -> list[str]:
        out = [f"# {MAGIC_KEY}: {FORMAT_VERSION}"]
        out += [f"# {k}: {json.dumps(v, sort_keys=True)}" for k, v in self.fields.items()]
        out += [f"# stage: {json.dumps(s, sort_keys=True)}" for s in self.stages]
        return out


def used_packages(modules: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """A stage entry's `packages`: the installed versions of the packages (import names) the stage computed with,
    none for a stage that used none. Scores that differ in the 5th decimal between two machines may be another
    torch's kernels; a reviewer holding the run alone can tell. Like `rerank_version` it describes and keys nothing:
    not the score cache (`score.cache_namespace`), a pipeline stage's fingerprint, a budget curve
    (`budget.MODEL_IDENTITY`) or what fusion compares, so runs with and without it stay alike."""
    from . import installed_versions

    versions = installed_versions(*modules)
    return {PACKAGES_KEY: versions} if versions else {}


def stored_vectors_packages(versions: object) -> dict[str, dict]:
    """A stage entry's `encoded_with`: the package versions that encoded the stored vectors it read (a dense index's,
    TK's encodings), as their build recorded them; none for a stage that read none, or vectors stored by a rerank
    that recorded none. Vectors encoded under another torch than the stage's own `packages` may differ in the 5th
    decimal from what it computes; a reviewer holding the run alone can tell. It describes and keys nothing, as
    `packages` does (`used_packages`)."""
    return {ENCODED_WITH_KEY: versions} if isinstance(versions, dict) and versions else {}


_OWN_KEYS = {MAGIC_KEY, "stage", CUT_KEY, *TEXT_FIELDS}  # header keys whose JSON values rerank reads
_JSON_MARKS = re.compile(r'["{}\[\]]')


def _parse_header_line(header: RunHeader, text: str, source: str, line_no: int) -> None:
    key, sep, value = text.partition(":")
    key = key.strip()
    if not sep or not key or " " in key:
        return  # a free-form comment: keep going, it carries nothing for us
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        parsed = value.strip()
        if key in _OWN_KEYS and _JSON_MARKS.search(parsed):  # (a bare word, `# dataset: vaswani`, is that string)
            problem = exc.msg.removesuffix(" starting at").lower()
            raise FormatError(source, line_no, f"a broken header line: '# {key}:' holds no JSON value (column "
                                               f"{exc.colno}: {problem})") from None
    if key == "stage":
        if not isinstance(parsed, dict):
            raise FormatError(source, line_no, "a '# stage:' line must hold a JSON object")
        if not isinstance(parsed.get("name", ""), str):  # it labels runs and curves: a list was a traceback
            raise FormatError(source, line_no, f"a '# stage:' line's name must be a JSON string, not "
                                               f"{json.dumps(parsed['name'])}")
        header.stages.append(parsed)
    elif key == MAGIC_KEY:
        if parsed not in READABLE_VERSIONS:  # a later format may mean things this reader would get wrong
            raise FormatError(source, line_no, f"run format version {parsed!r}; this rerank reads versions "
                                               f"{', '.join(map(str, READABLE_VERSIONS))} (a newer rerank wrote it?)")
        header.version = parsed
    else:
        if key in TEXT_FIELDS and not isinstance(parsed, str):  # names and paths: a list was a TypeError traceback
            raise FormatError(source, line_no, f"'# {key}:' must be a JSON string, not {value.strip()}")
        if key in header.fields and header.fields[key] != parsed:  # the last one won, without a word
            raise FormatError(source, line_no, f"a second '# {key}:' line ({json.dumps(parsed)}, after "
                                               f"{json.dumps(header.fields[key])}): a header has one")
        header.fields[key] = parsed


def _absorb_comment(line: str, header: RunHeader | None, timings: dict[str, list[Timing]], source: str,
                    line_no: int | None, ended: bool = False) -> bool:
    """One '#' line: a timing goes to its query; a `key: value` line goes to the header while the header
    is still open (`header` given: before the first record), and is a free comment after that. A run header
    after records, or after the end line (`ended`), starts a second run. Returns whether the line is the end line."""
    text = line[1:].strip()
    if text == END_TEXT:
        return True
    if text.startswith(TIME_KEY + ":"):
        qid, timing = _parse_timing(text[len(TIME_KEY) + 1 :], source, line_no)
        timings.setdefault(qid, []).append(timing)
    elif (header is None or ended) and text.startswith(MAGIC_KEY + ":"):
        raise FormatError(source, line_no, "a second run begins here (runs joined by cat, or one run's lines "
                                           "reordered by sort?); give each run as a file of its own, and sort a run "
                                           "with sort -s -k1,1, which keeps its # lines first")
    elif header is not None:
        _parse_header_line(header, text, source, line_no)
    return False


def _check_ended(header: RunHeader, ended: bool, source: str) -> None:
    if header.promises_end and not ended:
        raise FormatError(source, None, f"the run stops before its '# {END_TEXT}' line: the stage that wrote it "
                                        "failed (see its error) or the file was cut short; rerun that stage "
                                        "(to cut a run on purpose, keep it whole: rerank cat --first N or --depth K)")


def _parse_timing(text: str, source: str, line_no: int) -> tuple[str, Timing]:
    parts = text.split()
    if len(parts) != 4:
        raise FormatError(source, line_no, "a '# time:' line needs QID STAGE MS DEPTH")
    qid, stage, ms, depth = parts
    try:
        timing = Timing(stage, float(c_numeral(ms)), int(c_numeral(depth)))
    except ValueError:
        raise FormatError(source, line_no, f"non-numeric time or depth in '# time: {text.strip()}'") from None
    if not 0 <= timing.ms < math.inf or timing.depth < 0:  # budget curves sum and sort them: inf was a traceback
        raise FormatError(source, line_no, f"a time must be finite and not negative, and a depth not negative, "
                                           f"in '# time: {text.strip()}'")
    return qid, timing


def open_run_file(path: str) -> IO[str]:
    """A run file for reading, gunzipped if it is gzip (as TREC's archived runs are; topics and qrels are read the
    same way), UTF-16 if it starts with its byte-order mark. Other bytes that are not UTF-8 stay an error here,
    unlike in collections: a run is written by a program."""
    from .data.formats import open_gzip_text, sniffed

    gzipped, encoding = sniffed(path, "utf-8")
    return open_gzip_text(path, encoding=encoding) if gzipped else open(path, encoding=encoding)


def _not_utf8(source: str, error: UnicodeDecodeError, line_no: int | None = None) -> FormatError:
    from .data.formats import not_text_hint

    hint = not_text_hint(bytes(error.object[:2])) if error.start < 2 and line_no in (None, 1) else ""
    return FormatError(source, line_no, f"not UTF-8 text ({error.reason}){hint}")


def _utf8_buffer(handle: IO[str]) -> IO[bytes] | None:
    """The bytes under a UTF-8 text handle (a file, gzip, stdin), read unread: lines are then split at '\n' alone,
    as trec_eval splits them (a lone '\r' is whitespace there, not a line end), and bytes that are not UTF-8 are
    named with their line. None for another encoding (UTF-16) or a handle of text alone (io.StringIO)."""
    import codecs

    buffer, encoding = getattr(handle, "buffer", None), getattr(handle, "encoding", None)
    if buffer is None or encoding is None or codecs.lookup(encoding).name != "utf-8":
        return None
    return buffer


def _text_lines(handle: IO[str], source: str) -> Iterator[str]:
    """A run's lines, less a byte-order mark; bytes that are not UTF-8 become a FormatError naming the file and
    line, not a traceback."""
    buffer = _utf8_buffer(handle)
    if buffer is not None:
        for line_no, raw in enumerate(buffer, 1):
            try:
                line = raw.decode()
            except UnicodeDecodeError as exc:
                raise _not_utf8(source, exc, line_no) from None
            yield line.removeprefix(BYTE_ORDER_MARK) if line_no == 1 else line
        return
    lines = iter(handle)
    try:
        for line in lines:
            yield line.removeprefix(BYTE_ORDER_MARK)
            break
        yield from lines  # not a loop of its own here
    except UnicodeDecodeError as exc:
        raise _not_utf8(source, exc) from None


class RunReader:
    """Streams a run query by query; validates as it goes and names the line of any fault.

    `strict` also demands ranks that agree with scores (rank i before rank j implies
    score_i >= score_j) and consecutive ranks from 1. Lenient mode ignores the rank column, as
    trec_eval does. Records of one query must be contiguous (needed to stream); `load_run`
    accepts any order. Another `layout` reads another tool's run instead: "msmarco" (`_msmarco_record`), strictly,
    its ranks being its scores, or "ranx" (`_ranx_records`).
    """

    def __init__(self, handle: IO[str], source: str = "<stdin>", strict: bool = False, layout: str = "trec"):
        self.handle, self.source, self.strict, self.layout = handle, source, strict, layout
        self._first_ranks: tuple[int, str] | None = None  # an MS MARCO run's first rank (1, or 0), and its query
        self.header = RunHeader()
        self._line_no = 0
        self._ended = False
        self._pending: str | None = None
        self._timings: dict[str, list[Timing]] = {}
        self._line_iter = _text_lines(handle, source)
        self._read_header()

    def _read_header(self) -> None:
        for line in self._line_iter:
            self._line_no += 1
            if not line.startswith("#"):
                if line.strip():
                    self._pending = line
                    return
                continue
            self._absorb(line, self.header)

    def _absorb(self, line: str, header: RunHeader | None) -> bool:
        """One '#' line; returns whether it is the end line."""
        end = _absorb_comment(line, header, self._timings, self.source, self._line_no, self._ended)
        self._ended = self._ended or end
        return end

    def _records(self) -> Iterator[tuple[int, str, str, int, float, str]]:
        lines: Iterable[str] = self._line_iter
        if self._pending is not None:
            lines = itertools.chain([self._pending], self._line_iter)
            self._line_no -= 1
        if self.layout == "ranx":
            yield from self._ranx_records("".join(lines))
            return
        closed = False  # an end line after records (before them it is a run sorted by qid, `sort -s -k1,1`)
        for line in lines:
            self._line_no += 1
            if line.startswith("#"):
                closed = self._absorb(line, None) or closed
                continue
            plain = line.isascii()  # so are its numbers then; those of another line go through c_numeral
            parts = line.split() if plain else trec_columns(line)  # trec_columns, less a call per line
            if not parts:
                continue
            control = _CONTROL.search(line)
            if control:  # trec_eval would keep it in an id; a NUL before a qid made a query of its own
                raise FormatError(self.source, self._line_no, f"a control character ({control.group()!r}) in a "
                                                              "record: a binary file, or bytes damaged on the way?")
            if closed:  # a run appended to a finished one: its records would merge into this run's queries
                raise FormatError(self.source, self._line_no, f"a record after the '# {END_TEXT}' line (runs joined by "
                                                              "cat?); give each run as a file of its own")
            if self.layout == "msmarco":
                yield self._msmarco_record(parts)
                continue
            if len(parts) != 6:
                raise FormatError(self.source, self._line_no, f"expected 6 columns 'qid Q0 docid rank score tag', "
                                                              f"found {len(parts)}{_columns_hint(parts)}")
            qid, _, docid, rank, score, tag = parts
            try:
                score_value = float(score if plain and "_" not in score else c_numeral(score))
            except ValueError:
                hint = JSON_RUN_HINT if _JSON_RUN_START.match(line) else "" if whole_number(rank) is not None else \
                    " (a line of column names, which pandas' to_csv writes unless header=False?)"
                raise FormatError(self.source, self._line_no, f"score {score!r} is not a number"
                                                              f"{non_ascii_hint(score) or hint}") from None
            if not math.isfinite(score_value):  # no order or normalisation (z-scores, min-max) can use it
                raise FormatError(self.source, self._line_no, f"score is {score!r}, not a finite number")
            # ASCII digits, the usual rank, read as whole_number reads them, without its calls
            rank_value = int(rank) if plain and rank.isdigit() else whole_number(rank)
            if rank_value is None:  # the likeliest cause: score and rank columns swapped
                raise FormatError(self.source, self._line_no, f"rank {rank!r} is not an integer{non_ascii_hint(rank)}")
            if rank_value < 0:
                raise FormatError(self.source, self._line_no, f"rank {rank} is negative (ranks count from 1, or 0)")
            yield self._line_no, qid, docid, rank_value, score_value, tag

    def _msmarco_record(self, parts: list[str]) -> tuple[int, str, str, int, float, str]:
        """A line of an MS MARCO run, 'qid docid rank' (Pyserini's --output-format msmarco; PyTerrier's 'minimal'
        format ranks from 0), its score left to `_scored_by_rank`, which knows where the query's ranks start."""
        if len(parts) != 3:
            hint = " (a TREC run? leave out --msmarco)" if len(parts) == 6 else ""
            raise FormatError(self.source, self._line_no, f"expected 3 columns 'qid docid rank' (an MS MARCO run), "
                                                          f"found {len(parts)}{hint}")
        qid, docid, rank = parts
        rank_value = whole_number(rank)
        if rank_value is None or rank_value < 0:
            hint = non_ascii_hint(rank) or " (Pyserini ranks from 1, PyTerrier from 0)"
            raise FormatError(self.source, self._line_no, f"rank {rank!r} is not a whole number from 0 up{hint}")
        return self._line_no, qid, docid, rank_value, 0.0, MSMARCO_TAG

    def _ranx_records(self, text: str) -> Iterator[tuple[int, str, str, int, float, str]]:
        """The records of ranx's JSON run (`Run.save("run.json")`; pytrec_eval's run dict as json.dump writes it): one
        object {qid: {docid: score}}, read whole, as ranx reads it. A document's rank is its place in its query's
        object (what --strict checks against the scores); records have no line to name."""
        if not text.strip():  # an empty input, as the other layouts' (the note cat writes asks why)
            return
        try:
            run = loads_once_per_key(text, self.source)
        except json.JSONDecodeError as exc:
            hint = " (a TREC run? leave out --ranx)" if len(text.partition("\n")[0].split()) == 6 else \
                " (a JSON record a line? ranx's run is one object)" if exc.msg == "Extra data" else ""
            raise FormatError(self.source, self._line_no + exc.lineno, f"invalid JSON ({exc.msg}){hint}") from None
        if not isinstance(run, dict):
            raise FormatError(self.source, None, f"expected ranx's JSON run, an object {{qid: {{docid: score}}}}, "
                                                 f"found {_json_kind(run)}")
        for qid, ranking in run.items():
            _check_column(qid, "query id", self.source, first=True)
            if not isinstance(ranking, dict):
                raise FormatError(self.source, None, f"query {qid}: expected an object {{docid: score}}, "
                                                     f"found {_json_kind(ranking)}")
            for rank, (docid, score) in enumerate(ranking.items(), 1):
                _check_column(docid, f"query {qid}: document id", self.source)
                if isinstance(score, bool) or not isinstance(score, (int, float)):
                    raise FormatError(self.source, None, f"query {qid}, document {docid}: score {json.dumps(score)} "
                                                         "is not a number")
                try:
                    value = float(score)
                except OverflowError:  # an integer past a float's range
                    value = math.inf
                if not math.isfinite(value):
                    raise FormatError(self.source, None, f"query {qid}, document {docid}: score is {value}, not a "
                                                         "finite number")
                yield 0, qid, docid, rank, value, RANX_TAG

    def _scored_by_rank(self, qid: str, rows: list[tuple[int, str, int, float]]) -> list[tuple[int, str, int, float]]:
        """An MS MARCO run's query ranked 1..n and scored 1/rank: the score Pyserini's and Anserini's converters to
        TREC lines give it, which keeps the ranks' order. Its ranks start at 0 where its least rank is 0 (PyTerrier's
        numbering), at 1 otherwise, and where the run's first query's do: a run that mixes the two is refused."""
        lowest = min(rows, key=operator.itemgetter(2))
        first = 0 if lowest[2] == 0 else 1
        if self._first_ranks is None:
            self._first_ranks = first, qid
        run_first, run_qid = self._first_ranks
        if first != run_first and lowest[2] <= 1:  # (a least rank above 1 tells nothing: the cover check names it)
            raise FormatError(self.source, lowest[0], f"query {qid} ranks from {first}, query {run_qid} from "
                                                      f"{run_first}: one run numbers its ranks one way (Pyserini "
                                                      "from 1, PyTerrier from 0)")
        _check_ranks_cover(qid, rows, self.source, run_first)
        return [(line_no, docid, rank + 1 - run_first, 1 / (rank + 1 - run_first)) for line_no, docid, rank, _ in rows]

    def __iter__(self) -> Iterator[QueryRanking]:
        done: set[str] = set()
        current: str | None = None
        rows: list[tuple[int, str, int, float]] = []
        tag = ""
        for line_no, qid, docid, rank, score, tag_here in self._records():
            if qid != current:
                if current is not None:
                    yield self._finish(current, rows, tag)
                if qid in done:
                    raise FormatError(self.source, line_no,
                                      f"records of query {qid} are not contiguous; sort the run by qid "
                                      "first (e.g. sort -s -k1,1) or use a command that loads whole runs")
                done.add(qid)
                current, rows, tag = qid, [], tag_here
            rows.append((line_no, docid, rank, score))
        if current is not None:
            yield self._finish(current, rows, tag)
        yield from self._without_records(done)
        _check_ended(self.header, self._ended, self.source)

    def _without_records(self, done: set[str]) -> Iterator[QueryRanking]:
        """At the end, queries with '# time:' lines but no records (the stage found nothing for them) as empty
        rankings: their cost still counts in budget curves, and eval scores them 0 instead of losing them.
        (Not where they stand: a time line may come well before its query's records.)"""
        for qid in [q for q in self._timings if q not in done]:
            yield _empty_ranking(qid, self._timings.pop(qid))

    def _finish(self, qid: str, rows: list[tuple[int, str, int, float]], tag: str) -> QueryRanking:
        if self.layout == "msmarco":  # strictly, in its own way: its ranks are its scores
            _check_rows(qid, rows, self.source, strict=False)
            rows = self._scored_by_rank(qid, rows)
        else:
            _check_rows(qid, rows, self.source, self.strict)
        ranking = QueryRanking.from_scores(qid, (r[1] for r in rows), (r[3] for r in rows), tag=tag)
        ranking.timings = self._timings.pop(qid, [])
        return ranking


def _columns_hint(parts: list[str]) -> str:
    """What a run line of the wrong width most likely is, where its columns tell (the files other tools write)."""
    q0 = [part.upper() in ("Q0", "0") for part in parts[1:3]]  # where the second column stands
    if _JSON_RUN_START.match(" ".join(parts)):
        return JSON_RUN_HINT
    if _JSON_LIST_START.match(" ".join(parts)):
        return (" (a JSON list, as TREC DL's candidates with their texts are, [{query, hits}]? rerank retrieve NAME "
                "--candidates replays a data set's)")
    if len(parts) == 3:
        return " (an MS MARCO run, 'qid docid rank'? rerank cat --msmarco FILE converts it)"
    if looks_like_qrels(parts):  # `eval QRELS RUN`, trec_eval's order
        return " (a qrels file ('qid iter docid grade')? pass it with --qrels FILE, not as a run)"
    if len(parts) == 5 and q0[0]:
        return " (no run tag after the score? trec_eval needs one too)"
    if len(parts) == 7 and q0 == [False, True]:
        return ROW_NUMBERS_HINT
    if len(parts) > 6 and q0[0]:
        return " (a run tag with a space in it? make it one word)"
    if len(parts) == 1 and "," in parts[0]:
        return comma_separated_hint(" ")
    return ""


_JSON_RUN_START = re.compile(r'\{\s*("[^"]*"\s*:\s*\{|$)')  # ranx's JSON, indented ('{' alone) or on one line
_JSON_LIST_START = re.compile(r"\[\s*(\{|$)")  # a list of objects, indented ('[' alone) or on one line
JSON_RUN_HINT = " (ranx's JSON run, {qid: {docid: score}}? rerank cat --ranx FILE converts it)"


def _check_column(text: str, what: str, source: str, first: bool = False) -> None:
    """An id from JSON as a column of TREC lines: an empty one, or one with a space, would make other columns, and a
    first column's leading '#' a comment line."""
    if not text or _COLUMN_GAPS.search(text) or first and text.startswith("#"):
        raise FormatError(source, None, f"{what} {text!r} cannot be a column of TREC lines (empty, a space in it, or "
                                        "a query's leading '#')")


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words, for an error that expected another."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return kinds.get(type(value), "a number")


def loads_once_per_key(text: str, source: str) -> Any:
    """json.loads, refusing an object that gives a key twice, where json keeps the last without a word: a run's or
    qrels' query, or a query's document, given twice."""
    def once_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            key = next(key for key, count in collections.Counter(key for key, _ in pairs).items() if count > 1)
            raise FormatError(source, None, f"{key!r} is a key twice in one JSON object (a query, or a document of "
                                            "one, given twice)")
        return obj

    return json.loads(text, object_pairs_hook=once_per_key)


ROW_NUMBERS_HINT = " (a first column of row numbers, which pandas' to_csv writes unless index=False?)"


def comma_separated_hint(separator: str) -> str:
    """For a line of one column with commas in it (a run's, qrels', topics')."""
    return f" (comma-separated values, which pandas' to_csv writes unless sep={separator!r}?)"


def looks_like_qrels(parts: list[str]) -> bool:
    """Whether a line's columns are a TREC qrels line's, 'qid iter docid grade': what qrels given in a run's or
    topics' place start with."""
    return len(parts) == 4 and whole_number(parts[3]) is not None


def whole_number(text: str) -> int | None:
    """A rank or grade column's value: an integer, also written as a float (`1.0`: what pandas' rank() gives, and
    how pandas writes an integer column that held a gap), which trec_eval reads as that integer (it ignores the
    rank column, and reads a grade with atol); None for anything else (a grade `1.5` is refused, not cut to 1)."""
    try:
        return int(c_numeral(text))
    except ValueError:
        pass
    try:
        value = float(c_numeral(text))
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


_ASCII_WHITESPACE = " \t\n\r\v\f"  # C's isspace(), which trec_eval splits lines on
# Other control characters: no column holds one (str.split() also splits on \x1c-\x1f, where trec_eval does not)
_CONTROL_CHARACTERS = "".join(map(chr, [*range(0x09), *range(0x0e, 0x20), 0x7f]))
_CONTROL = re.compile(f"[{re.escape(_CONTROL_CHARACTERS)}]")
_COLUMN_GAPS = re.compile(f"[{_ASCII_WHITESPACE}]+")


def trec_columns(line: str) -> list[str]:
    """A run or qrels line's columns, split as trec_eval splits them: on ASCII whitespace alone. str.split() also
    splits on Unicode's (a no-break space in a Wikipedia title docid), and a line trec_eval reads was refused."""
    if line.isascii():  # the usual line: str.split() splits it alike, five times as fast as the pattern
        return line.split()
    stripped = line.strip(_ASCII_WHITESPACE)
    return _COLUMN_GAPS.split(stripped) if stripped else []


def nested_stages(stages: list[dict]) -> Iterator[dict]:
    """Every stage entry of a header, with those inside a fusion's inputs (each input's stages, as its file had
    them), in order: what fuse (a stage shared upstream) and budget (how stages timed) look through."""
    for stage in stages:
        yield stage
        inputs = stage.get("inputs")
        for fused in inputs if isinstance(inputs, list) else []:
            if isinstance(fused, dict):
                yield from nested_stages(fused.get("stages", []))


def c_numeral(text: str) -> str:
    """`text`, for int() or float() to read, where they read it as trec_eval's atoi and atof do: Python also reads
    `1_0` as 10 (atof: 1) and other scripts' digits, Arabic-Indic '٣' or fullwidth '３', as 3 (atoi: 0). Neither is
    what its writer meant, so such text is refused (ValueError) as not a number; `non_ascii_hint` says why."""
    if "_" in text or not text.isascii():
        raise ValueError(text)
    return text


def non_ascii_hint(text: str) -> str:
    """For a number refused for its digits (`c_numeral`), which read as one to the user."""
    return "" if text.isascii() else " (its digits must be ASCII 0-9: trec_eval reads others as no digits)"


def _empty_ranking(qid: str, timings: list[Timing]) -> QueryRanking:
    return QueryRanking(qid, [], [], timings[-1].stage, timings)


def _check_rows(qid: str, rows: list[tuple[int, str, int, float]], source: str, strict: bool) -> None:
    if len(set(map(operator.itemgetter(1), rows))) < len(rows):  # a duplicate: find its lines to name them
        seen: dict[str, int] = {}
        for line_no, docid, _, _ in rows:
            if docid in seen:
                raise FormatError(source, line_no,
                                  f"duplicate document {docid} for query {qid} (first at line {seen[docid]})")
            seen[docid] = line_no
    if not strict:
        return
    _check_ranks_cover(qid, rows, source)
    by_rank = sorted(rows, key=lambda r: r[2])
    for before, after in zip(by_rank, by_rank[1:]):
        if after[3] > before[3]:
            raise FormatError(source, after[0],
                              f"query {qid}: rank {after[2]} has a higher score than rank {before[2]}")


def _check_ranks_cover(qid: str, rows: list[tuple[int, str, int, float]], source: str, first: int = 1) -> None:
    """Ranks 1..n (or from another `first`: an MS MARCO run's from 0), each once. The fault is named at the line of
    a rank out of range or repeated, with the rank that is missing (comparing the ranks in sorted order named the
    line after a faulty one: 1, 7, 3, ... said 'rank 3 where rank 2 was expected' at rank 3's line, where line 2's
    rank 7 was the fault)."""
    last = first + len(rows) - 1
    first_at: dict[int, int] = {}
    fault = None
    for line_no, _, rank, _ in rows:
        if not first <= rank <= last:
            fault = line_no, f"rank {rank} is outside {first}..{last}"
        elif rank in first_at:
            fault = line_no, f"rank {rank} appears twice (first at line {first_at[rank]})"
        if fault:
            missing = min(set(range(first, last + 1)) - {row[2] for row in rows})
            raise FormatError(source, fault[0], f"query {qid}: {fault[1]}; rank {missing} is missing")
        first_at[rank] = line_no


class RunWriter:
    """Writes a header once, then query rankings (timings first, then records ranked 1..n), then the end line.

    The end line goes out when the writer is closed: by `write_all`, or on leaving a `with RunWriter(...)`
    block without an exception, so a failure part-way leaves the stream visibly incomplete."""

    def __init__(self, handle: IO[str], header: RunHeader | None = None, trec_only: bool = False):
        self.handle, self.trec_only = handle, trec_only
        self.wrote_header = header is not None and not trec_only
        self.closed = False
        if self.wrote_header:
            handle.write("\n".join(header.lines()) + "\n")

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()

    def write(self, ranking: QueryRanking) -> None:
        if self.closed:
            raise ValueError("write to a run stream after its end line")
        out = []
        if not self.trec_only:
            out += [f"# {TIME_KEY}: {ranking.qid} {t.stage} {t.ms:.3f} {t.depth}\n" for t in ranking.timings]
        qid, tag = ranking.qid, ranking.tag
        out += [f"{qid} Q0 {d} {i} {s!r} {tag}\n" for i, (d, s) in enumerate(zip(ranking.docids, ranking.scores), 1)]
        self.handle.write("".join(out))

    def close(self) -> None:
        """Mark the stream complete, once (a stream without a header, plain TREC, has no end line)."""
        if self.wrote_header and not self.closed:
            self.handle.write(f"# {END_TEXT}\n")
        self.closed = True

    def write_all(self, rankings: Iterable[QueryRanking]) -> int:
        count = 0
        for ranking in rankings:
            self.write(ranking)
            count += 1
        self.close()
        return count


@dataclass
class Run:
    """A whole run in memory (for evaluation and fusion), keyed by qid in file order."""

    header: RunHeader
    queries: dict[str, QueryRanking]
    source: str
    label: str | None = None  # overrides the stage name, e.g. to tell two runs of one stage apart

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.header.stages:
            return str(self.header.stages[-1].get("name", self.source))
        return self.source


def _run_bytes(handle: IO[str], source: str) -> tuple[bytes, bool]:
    """A whole run's bytes, less a byte-order mark, and whether they are UTF-8 (if not, the line reader names the
    first line at fault, which may be one before the bytes that are not)."""
    buffer = _utf8_buffer(handle)
    if buffer is None:
        try:
            return handle.read().removeprefix(BYTE_ORDER_MARK).encode(), True
        except UnicodeDecodeError as exc:
            raise _not_utf8(source, exc) from None
    raw = buffer.read().removeprefix(BYTE_ORDER_MARK.encode())
    if raw.isascii():
        return raw, True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return raw, False
    return raw, True


@collector_paused()
def load_run(handle: IO[str], source: str, strict: bool = False) -> Run:
    """Read a whole run; unlike streaming, records of a query may be scattered (as trec_eval allows).

    Outside `strict`, a run takes a vectorised path first (pyarrow's CSV reader, `_load_fast`); anything it
    cannot vouch for is read again line by line, which names the offending line.
    """
    raw, utf8 = _run_bytes(handle, source)
    if utf8 and not strict:
        fast = _load_fast(raw, source)
        if fast is not None:
            del raw  # the run's Python objects are made without its bytes beside them
            return _run_from(fast, source)
    reader = RunReader(io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"), source, strict)
    grouped: dict[str, list[tuple[int, str, int, float]]] = {}
    tags: dict[str, str] = {}
    for line_no, qid, docid, rank, score, tag in reader._records():
        grouped.setdefault(qid, []).append((line_no, docid, rank, score))
        tags.setdefault(qid, tag)
    queries = {qid: reader._finish(qid, rows, tags[qid]) for qid, rows in grouped.items()}
    queries.update((ranking.qid, ranking) for ranking in reader._without_records(set(queries)))
    _check_ended(reader.header, reader._ended, source)
    return Run(reader.header, queries, source)


@dataclass
class Stream:
    """What a stage produces: a header and rankings that may be computed lazily, query by query. A header of
    None writes no header lines (an empty input stays an empty output)."""

    header: RunHeader | None
    rankings: Iterable[QueryRanking]

    def write(self, handle: IO[str], trec_only: bool = False) -> int:
        writer = RunWriter(handle, self.header, trec_only)
        return writer.write_all(self.rankings)


def file_fields(**files: str | None) -> dict[str, str]:
    """Header fields for the files a stage read its queries or texts from (`topics=`, `corpus=`; None: not given):
    each one's absolute path, where later stages read it, and the sha256 of its content (`topics_sha256`, its first
    16 hex digits, as `paths.file_digest` remembers them: a corpus is read whole once per size and modification time,
    not on every score run), by which a reviewer holding the run alone tells whether a copy of it, or the file there
    now, is what the stage read."""
    from pathlib import Path

    from .paths import file_digest

    fields = {}
    for key, path in files.items():
        if path is not None:
            fields[key] = str(Path(path).resolve())
            fields[f"{key}_sha256"] = file_digest(Path(path))
    return fields


def made_for_held_queries(header: RunHeader) -> bool:
    """Whether a run was made for the queries it holds rather than for all its data set's: it came from a topics
    file, or was cut to its first queries (`rerank cat --first`). Evaluation then counts those queries alone."""
    cut = header.get(CUT_KEY)
    return bool(header.get("topics")) or (isinstance(cut, dict) and "queries" in cut)


def query_count(header: RunHeader) -> int | None:
    """How many queries a stream holds, where its first stage recorded it (`queries`: retrieve and candidates write a
    ranking for each; the stages after them keep every query), less a cut (`rerank cat --first`); None where no stage
    recorded it (a run of another tool, a fusion's)."""
    counts = [stage["queries"] for stage in header.stages if isinstance(stage.get("queries"), int)]
    if not counts:
        return None
    cut = header.get(CUT_KEY)
    kept = cut.get("queries") if isinstance(cut, dict) else None
    return min(counts[-1], kept) if isinstance(kept, int) else counts[-1]


def cut_stream(header: RunHeader, rankings: Iterable[QueryRanking], first: int | None, depth: int | None) -> Stream:
    """The first `first` queries of a stream, each cut to its top `depth` documents: a quick test on a few queries,
    or a shallower run, that is still a whole run (header, timings, end line), which `head` on a file is not. The
    header records the cut, the tighter of it and any earlier one. The rest of the input is still read, so that a
    stream its stage failed to finish is refused here as anywhere."""
    earlier = header.get(CUT_KEY)
    recorded = dict(earlier) if isinstance(earlier, dict) else {}
    for key, value in (("queries", first), ("depth", depth)):
        if value is not None:
            held = recorded.get(key)
            recorded[key] = min(value, held) if isinstance(held, int) else value

    def kept() -> Iterator[QueryRanking]:
        for count, ranking in enumerate(rankings):
            if first is None or count < first:
                yield ranking if depth is None else ranking.head(depth)

    return Stream(RunHeader({**header.fields, CUT_KEY: recorded}, header.stages, header.version), kept())


def _split_comments(raw: bytes) -> tuple[list[tuple[bool, str]], bytes]:
    """Pull out the '#' lines (a header and one per query: few) with C-speed scans, keep the records.
    Each comment comes with whether it stands before the first record (i.e. in the header). A '#' inside a record
    ends the scan: it stays in the records, which the Arrow path then refuses."""
    comments, pieces, pos, in_header = [], [], 0, True
    view = memoryview(raw)  # slices of it are not copies: a run's records are joined once, not copied twice
    while pos < len(raw):
        start = raw.find(b"#", pos)  # one byte, found by memchr: 30 ms less per million lines than b"\n#"
        if start == -1 or (start > 0 and raw[start - 1] != ord("\n")):
            break
        end = raw.find(b"\n", start) + 1 or len(raw)
        pieces.append(view[pos:start])
        in_header = in_header and not raw[pos:start].strip()
        comments.append((in_header, raw[start:end].decode().rstrip("\n")))
        pos = end
    if not comments:  # a plain TREC run: the records are the whole of it
        return comments, raw
    pieces.append(view[pos:])
    return comments, b"".join(pieces)


def _numbers(column: Any) -> Any:
    """A numeric Arrow column without nulls as a numpy array, read from its buffer: Arrow's own to_numpy imports
    pandas (a quarter of a second, as long as eval's whole evaluation of a 100,000-line run), which nothing else
    here needs."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks()
    dtype = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}[array.type]
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * np.dtype(dtype).itemsize)


def _in_trec_eval_order(table: Any) -> bool:
    """Whether a table of query codes (numbered in order of first appearance), docids and scores holds each query's
    records together, in trec_eval's order: the order its sort would give, found in a few vectorised passes (the
    sort and its take were a sixth of the time a 1M-line run took to load)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    codes, scores = _numbers(table["code"]), _numbers(table["score"])
    same_query = codes[1:] == codes[:-1]
    if (codes[1:] < codes[:-1]).any() or (same_query & (scores[1:] > scores[:-1])).any():
        return False
    tied = np.flatnonzero(same_query & (scores[1:] == scores[:-1]))  # (-0.0 ties with 0.0 here, as in the sort)
    if not tied.size:
        return True

    def docids_at(positions: Any) -> Any:  # an index array over numpy's buffer: take() given numpy imports pandas
        return table["docid"].take(pa.Array.from_buffers(pa.int64(), len(positions), [None, pa.py_buffer(positions)]))

    return pc.all(pc.greater(docids_at(tied), docids_at(tied + 1))).as_py()


@dataclass
class _FastRecords:
    """A run as the Arrow path read it, checked: nothing sends it to the line reader any more, so its Python objects
    are made from these without the run's text beside them (a 7M-line run's text was 250 MB of the load's peak)."""

    header: RunHeader
    timings: dict[str, list[Timing]]
    qids: list[str]  # in order of first appearance
    tags: list[str]
    docids: list[list[str]]  # each query's, in trec_eval's order
    starts: list[int]  # where each query's scores begin in `scores`
    scores: Any  # numpy float64, every record's in that order


def _run_from(fast: _FastRecords, source: str) -> Run:
    """The Run of records the Arrow path read: each query's ranking, and a ranking for each query with time lines
    alone."""
    queries = {}
    for qid, tag, block, start in zip(fast.qids, fast.tags, fast.docids, fast.starts):
        queries[qid] = QueryRanking(qid, block, fast.scores[start:start + len(block)].tolist(), tag,
                                    fast.timings.pop(qid, []))
    queries.update((qid, _empty_ranking(qid, spent)) for qid, spent in fast.timings.items() if qid not in queries)
    return Run(fast.header, queries, source)


def _load_fast(raw: bytes, source: str) -> _FastRecords | None:
    """The whole run via pyarrow's CSV reader (`_run_from` makes it a Run), or None when the text is not plainly
    well-formed (six columns, each separated by a single space or tab, numeric scores, ranks from 0, no duplicates,
    no other whitespace or control character): the line reader (`RunReader`) then reads it, and accepts or refuses
    each line as it would have. So both read every run alike.

    Why not pandas: its reader with string columns is ~5x slower here, and 1M-line runs are common.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    # Arrow's reader takes SIGINT/SIGTERM for itself while it reads and hands them back to Python through a call
    # whose error it ignores: Ctrl-C or a scheduler's SIGTERM was now and then lost. Reads are short; a signal
    # waits for the end of one.
    pa.enable_signal_handlers(False)
    comments, records = _split_comments(raw)
    if b"\r" in records:  # Windows' line ends; a '\r' elsewhere is whitespace to the line reader, a line end to Arrow
        records = records.replace(b"\r\n", b"\n")
        if b"\r" in records:
            return None
    if records.endswith(b"\n\n"):  # blank lines at the end (those between records go to the line reader)
        records = records.rstrip(b"\n") + b"\n"
    records = records.replace(b"\t", b" ")
    if b"#" in records or b"\x7f" in records:  # a '#' inside a record; wrong column counts fail the parse below
        return None
    if not records or records.isspace():  # no records: nothing for Arrow to read (the slow path names the empty input)
        return None
    # Every byte below ' ' must be a line's end: \v, \f, a lone \r (whitespace to the line reader) and other control
    # characters (refused there) are not; counted once, C-fast, and compared with the rows Arrow reads.
    line_ends = np.count_nonzero(np.frombuffer(records, np.uint8) < 0x20) + (not records.endswith(b"\n"))
    # Arrow's reader finishes with its input on a thread of its own, also after a failed read has returned. A
    # buffer over Python's bytes then needs the GIL to be released there; at interpreter exit that thread cannot
    # have it, and the process aborted ("terminate called without an active exception") after its error message.
    # A copy in Arrow's own memory needs no GIL.
    owned = pa.BufferOutputStream()
    owned.write(records)
    del records  # a copy of the run as large as its file, as is Arrow's: each is dropped once read
    columns = ["qid", "q0", "docid", "rank", "score", "tag"]
    types = {"qid": pa.string(), "q0": pa.string(), "docid": pa.string(), "rank": pa.int64(), "score": pa.float64(),
             "tag": pa.string()}
    try:  # an empty column (a space at a line's end instead of a tag, two spaces) is a null, which sends it on
        table = pacsv.read_csv(owned.getvalue(), read_options=pacsv.ReadOptions(column_names=columns),
                               parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False),
                               convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""],
                                                                    strings_can_be_null=True))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    finally:
        del owned
    # 'nan' and 'inf' are not finite, a negative rank no rank: the line reader names them
    if table.num_rows != line_ends or any(column.null_count for column in table.columns) \
            or not pc.all(pc.is_finite(table["score"])).as_py() or pc.min(table["rank"]).as_py() < 0:
        return None
    header = RunHeader()
    timings: dict[str, list[Timing]] = {}
    ended = False
    try:
        for in_header, comment in comments:  # a fault (a second run, say): the slow path names its line
            ended = _absorb_comment(comment, header if in_header else None, timings, source, None, ended) or ended
    except FormatError:
        return None
    if header.promises_end and not ended:
        return None
    last = raw[-1024:].rstrip().rpartition(b"\n")[2]  # (a slice: runs are large)
    ends = sum(not in_header and comment[1:].strip() == END_TEXT for in_header, comment in comments)
    if ends > 1 or ends and not (last.startswith(b"#") and last[1:].strip() == END_TEXT.encode()):  # records after?
        return None
    # Queries in order of first appearance; within each, trec_eval's order: score descending, ties by
    # docid descending. Sorting on integer query codes is cheaper than on the qid strings. Most runs stand in that
    # order already (every stage's output, Anserini's, most TREC runs), and are not sorted again.
    qid_codes = table["qid"].combine_chunks().dictionary_encode()
    table = pa.table({"code": qid_codes.indices, "docid": table["docid"], "score": table["score"], "tag": table["tag"]})
    tags = None
    if not _in_trec_eval_order(table):
        # a query's tag is that of its first line, as the line reader takes it (queries are coded in that order)
        codes = _numbers(table["code"])
        firsts = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1)).tolist()
        tags = [table["tag"][first].as_py() for first in firsts]
        table = table.take(pc.sort_indices(table, [("code", "ascending"), ("score", "descending"),
                                                   ("docid", "descending")]))
    # Arrow's allocator (mimalloc) keeps what Arrow frees (the file's copy, the parse, the unsorted table) for
    # Arrow's next use, not for Python's: the run's Python objects below came on top of it. Handed back first, it
    # is there for them (a 35 MB run's peak: 500 -> 340 MB).
    pool = pa.default_memory_pool()
    pool.release_unused()
    codes = _numbers(table["code"])
    starts = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist()]
    names = qid_codes.dictionary.to_pylist()
    qids = [names[code] for code in codes[starts].tolist()]
    tag_column = table["tag"]
    if tags is None:  # not take(starts): a list made into Arrow's imports pandas
        tags = [tag_column[start].as_py() for start in starts]
    scores = _numbers(table["score"]).copy()  # numpy's own: Arrow's memory goes back whole below
    docid_column = table["docid"]
    # every other view of Arrow's memory, handed back before the docids become Python's: a str a line is the load's
    # largest part (a 7M-line run's peak was its docids made beside the rest of the table: 1.39 -> 1.13 GB)
    del table, qid_codes, tag_column, codes
    pool.release_unused()
    docids = docid_column.to_pylist()
    del docid_column
    pool.release_unused()
    blocks = [docids[start:end] for start, end in zip(starts, [*starts[1:], len(docids)])]
    if any(len(set(block)) != len(block) for block in blocks):
        return None
    return _FastRecords(header, timings, qids, tags, blocks, starts, scores)

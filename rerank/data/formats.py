"""Readers for the file formats IR collections come in. Each names the file and line of a fault.

Documents: TREC SGML (`<DOC><DOCNO>`), JSONL (Pyserini's `{id, contents}`, BEIR's `{_id, title, text}`, ir_datasets'
and PyTerrier's ids), SMART/Glasgow (`.I id` records with `.T .W .A .B .X` fields), `docid<TAB>text` TSV (MS MARCO's
collection.tsv). Topics: `qid<TAB>text`, TREC `<top><num><title>`, XML `<topic number><query>`, JSONL (BEIR's
`queries.jsonl`, ir_datasets' and PyTerrier's), and the SGML `<DOC><DOCNO>` form some collections use for queries
(gzip or plain). Qrels: TREC, graded; under a header line naming the columns (BEIR's TSV, pandas' frames); ranx's
JSON.
Candidates with text: the TREC DL `retrieve_results_*.json` lists. Answer selection: TrecQA jacana
pseudo-XML and WikiQA TSVs, turned into queries, candidate "documents" and qrels.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import html
import io
import itertools
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

from ..errors import DataError, FormatError
from ..runs import (MAGIC_KEY, ROW_NUMBERS_HINT, collector_paused, comma_separated_hint, loads_once_per_key,
                    looks_like_qrels, non_ascii_hint, trec_columns, whole_number)


@dataclass(frozen=True)
class Document:
    docid: str
    text: str
    title: str = ""

    @property
    def contents(self) -> str:
        """Title and body as one text: what gets indexed and what re-rankers read."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


Qrels = dict[str, dict[str, int]]


def open_text(path: str | Path) -> IO[str]:
    """Open a text file, transparently gunzipping `.gz`; a missing file gets a clear error."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"file not found: {p}")
    if p.is_dir():
        raise DataError(f"{p} is a folder, not a file")  # a FIFO or /dev/stdin is read like a file
    # utf-8-sig: a byte-order mark (Windows editors write one) would otherwise become part of the first id
    gzipped, encoding = sniffed(p, "utf-8-sig")
    if gzipped:
        return open_gzip_text(p, encoding=encoding, errors=_replacing(str(p)))
    return open(p, encoding=encoding, errors=_replacing(str(p)))


GZIP_MAGIC = b"\x1f\x8b"  # no UTF-8 text starts with them (0x8b cannot begin a character)
UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # PowerShell's `>` writes UTF-16 with one


def sniffed(path: str | Path, text_encoding: str) -> tuple[bool, str]:
    """(gzipped, encoding) of a text file: gzipped where it is named .gz or starts with gzip's magic bytes (a
    compressed file saved under a plain name), UTF-16 where it starts with a UTF-16 byte-order mark, else
    `text_encoding`. Only a regular file is looked into: a pipe would lose what this reads."""
    p = Path(path)
    if p.suffix == ".gz":
        return True, text_encoding
    start = b""
    if p.is_file():
        with open(p, "rb") as handle:
            start = handle.read(2)
    if start == GZIP_MAGIC:
        return True, text_encoding
    return False, "utf-16" if start in UTF16_MARKS else text_encoding


def not_text_hint(start: bytes) -> str:
    """What bytes that are not UTF-8 are, where their start tells it (stdin, which is not sniffed)."""
    if start.startswith(GZIP_MAGIC):
        return ": it is gzip-compressed; give its file name instead of piping it, or gunzip it first"
    if start[:2] in UTF16_MARKS:
        return ": it is UTF-16; give its file name instead of piping it, or convert it first (iconv -f UTF-16 -t UTF-8)"
    return ""


class _CheckedGzip(gzip.GzipFile):
    """A gzip file whose faults name it: a cut or damaged file raises EOFError or zlib.error, which click turns
    into "interrupted" (it takes EOFError for an aborted prompt) or a traceback, and BadGzipFile names no file."""

    def _checked(self, read, *args):
        try:
            return read(*args)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataError(f"{self.name}: cannot be read as gzip ({exc})") from None

    def read(self, size=-1):
        return self._checked(super().read, size)

    def read1(self, size=-1):
        return self._checked(super().read1, size)

    def readline(self, size=-1):  # a run's lines are read as bytes (runs._text_lines)
        return self._checked(super().readline, size)


def open_gzip_text(path: str | Path, encoding: str = "utf-8", errors: str = "strict") -> IO[str]:
    """`gzip.open(path, "rt")`, with faults of the compressed data reported as DataError naming the file."""
    return io.TextIOWrapper(_CheckedGzip(path), encoding=encoding, errors=errors)


_UNDECODABLE: dict[str, list[int]] = {}  # file -> per reading of it, byte sequences that were not UTF-8


def _replacing(path: str) -> str:
    """The codecs error handler for a new reading of `path`: bytes that are not UTF-8 become U+FFFD, as Anserini's
    Java readers make them (old collections hold Latin-1 bytes; refusing them would make them unusable), and
    are counted so the command can say so instead of changing the text silently. (Per reading: a file whose
    format is sniffed first is read twice, and must not count twice; one handler per file, which counts for
    its latest reading, as readings of one file follow each other.)"""
    name = f"rerank-replace:{path}"
    if path not in _UNDECODABLE:
        def replace(error: UnicodeDecodeError) -> tuple[str, int]:
            _UNDECODABLE[path][-1] += 1
            return "\ufffd", error.end

        codecs.register_error(name, replace)
        _UNDECODABLE[path] = []
    _UNDECODABLE[path].append(0)
    return name


def undecodable_counts() -> dict[str, int]:
    """Files read so far with bytes that are not UTF-8, and how many such sequences each had."""
    return {path: max(readings) for path, readings in _UNDECODABLE.items() if max(readings)}


def refuse_pipe(path: Path) -> None:
    """A file whose format is told from its start is read twice, and a pipe (`--topics <(...)`) would lose that
    start to the first read."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise DataError(f"{path} is not a regular file: its format is told from its start, so it is read twice; "
                        "save it to a file first")


def _first_non_blank(path: Path, size: int = 4096) -> str:
    """The start of a file whose format is told from it."""
    refuse_pipe(path)
    with open_text(path) as handle:
        return handle.read(size).lstrip()


# ---------------------------------------------------------------------------------------------- documents

_SGML_TAGS = re.compile(r"<(/?)DOC>", re.I)
_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")


def _closed_records(content: str, tags: re.Pattern, tag: str, path: str | Path) -> Iterator[tuple[int, str]]:
    """(start, body) of each `<tag>body</tag>` record, each checked for a missing end tag: a record opening inside
    another would make the next record's id and text part of this one's text, and one opening after the last
    (a truncated copy) would be lost; both without a word. One pass over the opening and closing `tags`
    (`<(/?)tag>`): a lazy `<tag>(.*?)</tag>` scans to the end of the file from every unclosed record, which
    took minutes on a corpus that had lost its end tags."""
    opened = None
    for token in tags.finditer(content):
        if token.group(1):  # an end tag; one with no record open is left alone, as before
            if opened is not None:
                yield opened.start(), content[opened.end() : token.start()]
                opened = None
        elif opened is not None:
            raise FormatError(str(path), content.count("\n", 0, token.start()) + 1,
                              f"<{tag}> inside another <{tag}>; is a </{tag}> missing before it?")
        else:
            opened = token
    if opened is not None:
        raise FormatError(str(path), content.count("\n", 0, opened.start()) + 1,
                          f"<{tag}> without </{tag}>; is the file cut short?")


def read_trec_sgml(path: str | Path) -> Iterator[Document]:
    """`<DOC><DOCNO>id</DOCNO> text </DOC>`; other tags are stripped, their text kept."""
    with open_text(path) as handle:
        content = handle.read()
    found = False
    for start, body in _closed_records(content, _SGML_TAGS, "DOC", path):
        docno = _DOCNO.search(body)
        if not docno:
            line = content.count("\n", 0, start) + 1
            raise FormatError(str(path), line, "<DOC> without <DOCNO>")
        text = _TAG.sub(" ", body[: docno.start()] + body[docno.end() :])
        found = True
        yield Document(docno.group(1), " ".join(text.split()))
    if not found:
        raise FormatError(str(path), None, "no <DOC> records found")


def _json_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) of each JSON object line of a JSONL file; a line that is not one is named."""
    with open_text(path) as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FormatError(str(path), line_no, f"invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise FormatError(str(path), line_no, f"a record must be a JSON object, not {type(record).__name__}")
            yield line_no, record


def _record_field(record: dict, keys: tuple[str, ...], path: str | Path, line_no: int,
                  read: tuple[str, ...] = ()) -> tuple[str, object]:
    """(key, value) of the first of `keys` a JSONL record has, naming its other keys (those not `read` already) where
    it has none: each tool that writes such files names its fields its own way."""
    key = next((key for key in keys if key in record), None)
    if key is None:
        others = ", ".join(repr(key) for key in record if key not in read) or "none"
        wanted = " or ".join(filter(None, [", ".join(map(repr, keys[:-1])), repr(keys[-1])]))
        raise FormatError(str(path), line_no, f"record has no {wanted} (its other keys: {others})")
    return key, record[key]


def _record_id(record: dict, keys: tuple[str, ...], path: str | Path, line_no: int) -> str:
    _, value = _record_field(record, keys, path, line_no)
    if value is None:
        raise FormatError(str(path), line_no, "record's id is null")
    return str(value)


def _text_value(name: str, value: object, path: str | Path, line_no: int) -> str:
    if not isinstance(value, str):  # null would be indexed as the word "null", a number as digits
        raise FormatError(str(path), line_no, f"'{name}' must be a string, not {json.dumps(value)[:40]}")
    return value


# Pyserini's `id`, BEIR's `_id`, ir_datasets' `doc_id` (`ir_datasets export ... docs`), PyTerrier's `docno`
DOC_ID_KEYS = ("id", "_id", "docid", "doc_id", "docno")


def read_jsonl_docs(path: str | Path) -> Iterator[Document]:
    """JSONL with `{id, contents}` (Pyserini), `{_id, title, text}` (BEIR), `{doc_id, text}` (ir_datasets) or
    `{docno, text}` (PyTerrier)."""
    for line_no, record in _json_records(path):
        docid = _record_id(record, DOC_ID_KEYS, path, line_no)
        field_name, text = _record_field(record, ("contents", "text"), path, line_no, DOC_ID_KEYS)
        title = record.get("title") or "" if field_name == "text" else ""
        yield Document(docid, _text_value(field_name, text, path, line_no), _text_value("title", title, path, line_no))


_SMART_FIELD = re.compile(r"^\.([A-Z])(?:\s+(.*))?$")
SMART_TEXT_FIELDS = ("T", "W")


def read_smart(path: str | Path, fields: tuple[str, ...] = SMART_TEXT_FIELDS) -> Iterator[Document]:
    """SMART/Glasgow records (`.I id`, then `.T` title, `.W` text, `.A` authors, `.B`, `.X` ...).

    The title goes to `title`; the other chosen fields are joined as the text. Used for documents
    and for queries (whose text sits in `.W`) of CISI, Cranfield, Medline and the original CACM.
    """
    docid: str | None = None
    parts: dict[str, list[str]] = {}
    current: str | None = None

    def emit() -> Document:
        title = " ".join(" ".join(parts.get("T", [])).split()) if "T" in fields else ""
        body = " ".join(" ".join(parts.get(f, [])) for f in fields if f != "T")
        return Document(docid, " ".join(body.split()), title)

    with open_text(path) as handle:
        for line_no, line in enumerate(handle, 1):
            marker = _SMART_FIELD.match(line.rstrip("\n"))
            if marker:
                name, rest = marker.group(1), (marker.group(2) or "").strip()
                if name == "I":
                    if docid is not None:
                        yield emit()
                    if not rest:
                        raise FormatError(str(path), line_no, "'.I' without an id")
                    docid, parts, current = rest, {}, None
                    continue
                if docid is None:
                    raise FormatError(str(path), line_no, f"field .{name} before the first '.I id'")
                current = name
                if rest:
                    parts.setdefault(name, []).append(rest)
            elif current is not None:
                parts.setdefault(current, []).append(line.strip())
            elif line.strip() and docid is None:
                raise FormatError(str(path), line_no, "text before the first '.I id'")
    if docid is None:
        raise FormatError(str(path), None, "no '.I' records found")
    yield emit()


def read_tsv_docs(path: str | Path) -> Iterator[Document]:
    """`docid<TAB>text` lines: MS MARCO's collection.tsv, which Pyserini users otherwise convert to JSONL first.
    More columns (MS MARCO documents' `docid url title body`) are refused rather than guessed at."""
    with open_text(path) as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            columns = line.rstrip("\r\n").split("\t")
            if len(columns) != 2 or not columns[0].strip():
                raise FormatError(str(path), line_no, f"expected 'docid<TAB>text', found {len(columns)} column"
                                                      f"{'' if len(columns) == 1 else 's'}"
                                                      f"{'' if columns[0].strip() else ' and no docid'}")
            yield Document(columns[0].strip(), columns[1])


def sniff_documents(path: str | Path) -> Iterator[Document]:
    """Pick the document reader from the file's first bytes."""
    start = _first_non_blank(Path(path))
    if start.startswith("{"):
        return read_jsonl_docs(path)
    if start.upper().startswith("<DOC"):
        return read_trec_sgml(path)
    if start.startswith(".I"):
        return read_smart(path)
    if "\t" in start.partition("\n")[0]:
        return read_tsv_docs(path)
    raise DataError(f"{path}: cannot tell the document format (expected JSONL, TREC <DOC>, SMART .I records or "
                    "docid<TAB>text lines)")


# ---------------------------------------------------------------------------------------------- topics

_TOP_TAGS = re.compile(r"<(/?)top>", re.I)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*([^\s<]+)", re.I)
_TITLE = re.compile(r"<title>\s*(?:Topic:)?(.*?)(?=<(?!/?title)[a-z]+>|</top>|</title>|$)", re.S | re.I)


def read_topics(path: str | Path) -> dict[str, str]:
    """Topics in any of the usual forms, detected from the content; qid -> query text."""
    start = _first_non_blank(Path(path))
    if start.startswith("<") and _XML_TOPIC.search(start):
        return _read_xml_topics(path)
    if start.lower().startswith("<top"):
        return _read_trec_topics(path)
    if start.upper().startswith("<DOC"):
        return _record_topics(((d.docid, d.text) for d in read_trec_sgml(path)), path)
    if start.startswith(".I"):
        return _record_topics(((d.docid, d.contents) for d in read_smart(path)), path)
    if _json_first_line(start):
        return _read_jsonl_topics(path)
    return _read_tsv_topics(path)


# BEIR's queries.jsonl `{_id, text}`; ir_datasets' `{query_id, text}` (MS MARCO's) or `{query_id, title, description,
# narrative}` (TREC's, whose title is the query, as a <top>'s <title> is); PyTerrier's topics frame `{qid, query}`
TOPIC_ID_KEYS, TOPIC_TEXT_KEYS = ("_id", "id", "query_id", "qid"), ("text", "query", "title")


def _read_jsonl_topics(path: str | Path) -> dict[str, str]:
    topics: dict[str, str] = {}
    for line_no, record in _json_records(path):
        if not topics:
            _refuse_corpus_records(record, path)
        qid = _record_id(record, TOPIC_ID_KEYS, path, line_no)
        name, text = _record_field(record, TOPIC_TEXT_KEYS, path, line_no, TOPIC_ID_KEYS)
        _add_topic(topics, qid, _text_value(name, text, path, line_no), path, line_no)
    return topics


def _refuse_corpus_records(first: dict, path: str | Path) -> None:
    """A corpus given as topics (`--topics corpus.jsonl`, the two options swapped) was searched one document per
    query; its first record says what it is: Pyserini's `contents`, BEIR's corpus `title` (BEIR queries have neither;
    a record with ir_datasets' or PyTerrier's query id is a query, whose title may be its text). The record, not the
    file's first 4,096 characters, in which a long document's line did not fit and was read as topics."""
    if "query_id" in first or "qid" in first:
        return
    fields = [f for f in ("contents", "title") if f in first]
    if fields:
        raise FormatError(str(path), None, f"its records have {' and '.join(repr(f) for f in fields)}: a corpus, not "
                          "topics (JSONL topics are BEIR's queries.jsonl, {\"_id\", \"text\"}, ir_datasets' "
                          "{\"query_id\", ...} or PyTerrier's {\"qid\", \"query\"}); is it --corpus?")


def _json_first_line(start: str) -> bool:
    """Whether topics start with a JSON record. A TSV line may start with '{' too (a query id `{1}`); it has a
    tab, which JSON writers never put between tokens, and is no JSON."""
    line = start.partition("\n")[0]
    if not line.startswith("{"):
        return False
    if "\t" not in line:
        return True
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


UNREADABLE_ID = "tools that split a TREC run line's columns on whitespace could not read it"


def id_fault(value: str) -> str | None:
    """Why `value` cannot be a query or document id in a TREC run line (whose columns are split on whitespace,
    and where a leading '#' makes a rerank comment), or None."""
    if not value:
        return "is empty"
    if any(c.isspace() for c in value):
        return "holds whitespace"
    if value.startswith("#"):
        return "starts with '#'"
    return None


def distinct_ids(documents: Iterable[Document], source: str) -> Iterator[Document]:
    """Two documents under one id would both be indexed and both retrieved, and no run may hold a docid twice."""
    seen: set[str] = set()
    for document in documents:
        fault = id_fault(document.docid)
        if fault:
            raise DataError(f"{source}: document id {document.docid!r} {fault}: {UNREADABLE_ID}")
        if document.docid in seen:
            raise DataError(f"{source}: document id {document.docid!r} appears twice; ids must be unique")
        seen.add(document.docid)
        yield document


def _add_topic(topics: dict[str, str], qid: str, text: str, path: str | Path, line_no: int) -> None:
    """A query without text stops Anserini's topic reader, and a repeated id would silently replace the first."""
    fault = id_fault(qid)
    if fault:
        raise FormatError(str(path), line_no, f"query id {qid!r} {fault}: {UNREADABLE_ID}")
    if not text:
        raise FormatError(str(path), line_no, f"query {qid} has no text")
    if qid in topics:
        raise FormatError(str(path), line_no, f"query id {qid} appears twice")
    topics[qid] = text


def _record_topics(records: Iterator[tuple[str, str]], path: str | Path) -> dict[str, str]:
    """Queries kept as documents (SGML, SMART, JSONL) pass the checks of the other topic forms: a dict built directly
    let a repeated id silently replace the first, and sent Anserini an empty query or an id with a space.
    (These readers keep no line numbers; the message names the id.)"""
    topics: dict[str, str] = {}
    for qid, text in records:
        _add_topic(topics, qid, text, path, None)
    return topics


TSV_TOPICS_HEADER = ["qid", "query"]  # a pandas frame's column names, PyTerrier's for topics


def _read_tsv_topics(path: str | Path) -> dict[str, str]:
    """`qid<TAB>query text` lines, under an optional header line `qid<TAB>query` (a topics frame written by
    pandas), which would otherwise be searched as a query and cost the run its data set."""
    topics: dict[str, str] = {}
    with open_text(path) as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if not topics and [column.strip() for column in line.split("\t")] == TSV_TOPICS_HEADER:
                continue
            qid, sep, text = line.rstrip("\n").partition("\t")
            if not sep or not qid.strip():
                hint = comma_separated_hint("\t") if "," in line and "\t" not in line else _not_topics(line)
                raise FormatError(str(path), line_no, f"expected 'qid<TAB>query text'{hint}")
            columns = 1 + len(text.strip().split("\t"))
            if columns > 2:  # Anserini searches the second column alone; all of them made another run, silently
                hint = _not_topics(line) or "; keep the id and the query's column (cut -f1,2)"
                raise FormatError(str(path), line_no, f"expected 'qid<TAB>query text', found {columns} columns{hint}")
            _add_topic(topics, qid.strip(), text.strip(), path, line_no)
    if not topics:
        raise FormatError(str(path), None, "no topics found")
    return topics


_XML_TOPIC = re.compile(r"<topic[\s>]", re.I)
_TOPIC_TAGS = re.compile(r"<(/?)topic(?:\s[^>]*)?>", re.I)
_NUMBER_ATTRIBUTE = re.compile(r"""\bnumber\s*=\s*["']?([^"'\s>]+)""", re.I)
_NUMBER_ELEMENT = re.compile(r"<number>\s*([^\s<]+)", re.I)
_QUERY = re.compile(r"<query>(.*?)</query>", re.S | re.I)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)


def _xml_text(raw: str) -> str:
    """An element's text as an XML parser (Anserini's COVID topic reader's) reads it: entities decoded ('AT&amp;T' was
    searched with the word 'amp'), a CDATA section's text as written, without its markers."""
    pieces = _CDATA.split(raw)  # text, CDATA text, text, ...
    return "".join(piece if i % 2 else html.unescape(piece) for i, piece in enumerate(pieces))


def _read_xml_topics(path: str | Path) -> dict[str, str]:
    """The XML topics of TREC's Web tracks, TREC-COVID and later tracks: `<topic number="N">` (or a `<number>` in it)
    holding a `<query>`, the query searched (Anserini's web and COVID topic readers search it too)."""
    with open_text(path) as handle:
        content = handle.read()
    topics: dict[str, str] = {}
    line, counted = 1, 0
    for start, body in _closed_records(content, _TOPIC_TAGS, "topic", path):
        line, counted = line + content.count("\n", counted, start), start
        number = _NUMBER_ATTRIBUTE.search(_TOPIC_TAGS.match(content, start).group(0)) or _NUMBER_ELEMENT.search(body)
        query = _QUERY.search(body)
        if not number or not query:
            raise FormatError(str(path), line, '<topic> without a number (number="N" or <number>) or <query>')
        _add_topic(topics, number.group(1), " ".join(_xml_text(query.group(1)).split()), path, line)
    if not topics:
        raise FormatError(str(path), None, "no <topic> records found")
    return topics


def _read_trec_topics(path: str | Path) -> dict[str, str]:
    with open_text(path) as handle:
        content = handle.read()
    topics: dict[str, str] = {}
    line, counted = 1, 0  # lines counted on from the previous topic: from the top each time took minutes at 50,000
    for start, body in _closed_records(content, _TOP_TAGS, "top", path):
        num, title = _NUM.search(body), _TITLE.search(body)
        line, counted = line + content.count("\n", counted, start), start
        if not num or not title:
            raise FormatError(str(path), line, "<top> without <num> or <title>")
        qid = num.group(1)
        qid = str(int(qid)) if qid.isdigit() else qid  # Anserini reads <num> 051 as 51, as TREC's qrels have it
        _add_topic(topics, qid, " ".join(_TAG.sub(" ", title.group(1)).split()), path, line)
    if not topics:
        raise FormatError(str(path), None, "no <top> records found")
    return topics


# ---------------------------------------------------------------------------------------------- qrels

TREC_QRELS_COLUMNS = ("qid", "iter", "docid", "grade")
# The names a header line may give each column: BEIR's `query-id corpus-id score`, and a pandas frame's written with
# its header (PyTerrier's `qid docno label`; ir_datasets' `query_id doc_id relevance iteration`, in that order)
QRELS_HEADER_NAMES = {name: column for column, names in (("qid", ("query-id", "qid", "query_id")),
                                                          ("iter", ("iteration", "iter", "q0")),
                                                          ("docid", ("corpus-id", "docno", "doc_id", "docid")),
                                                          ("grade", ("score", "label", "relevance", "grade")))
                      for name in names}


def _qrels_header(parts: list[str]) -> tuple[str, ...] | None:
    """The columns a header line names (`TREC_QRELS_COLUMNS`' names, in its order), or None for a line that is not
    one: each of qid, docid and grade named once, and nothing else but an iteration."""
    columns = tuple(QRELS_HEADER_NAMES.get(part.lower()) for part in parts)
    if None in columns or sorted(column for column in columns if column != "iter") != ["docid", "grade", "qid"]:
        return None
    return columns


# trec_eval's code (pytrec_eval) counts judgements in an array of one slot per grade up to a query's highest:
# 2147483647 asked for 16 GiB, and where that could not be had, every query from there on scored 0, silently.
MAX_GRADE = 1_000_000


def _row_numbers(parts: list[str], columns: tuple[str, ...], header_indented: bool) -> bool:
    """Whether a line one column wider than `columns` starts with the row numbers pandas' to_csv writes unless
    index=False: its header line starts with the index's empty name, or, without a header, the iteration and grade
    of TREC's columns stand one further on."""
    if len(parts) != len(columns) + 1 or whole_number(parts[0]) is None:
        return False
    return header_indented or (columns == TREC_QRELS_COLUMNS and parts[2].upper() in ("0", "Q0")
                               and whole_number(parts[4]) is not None)


def _not_judgements(line: str) -> str:
    """What a line that is no judgement looks like instead, where it tells: `--qrels queries.jsonl` (or topics.tsv, the
    two files swapped) was told only that its line had 6 columns, or a grade that was a query's word."""
    fields = line.rstrip("\r\n").split("\t")
    if len(line.split()) == 1 and "," in line:
        return comma_separated_hint(" ")
    if line.lstrip().startswith("{"):
        return "; its lines are JSON records, as topics (BEIR's queries.jsonl) or a corpus are, not judgements"
    if len(fields) == 2 and len(fields[1].split()) > 1:
        return "; its lines are 'id<TAB>text', as topics or a corpus are, not judgements"
    if _looks_like_run(line.split()):
        return "; its lines are a run's, 'qid Q0 docid rank score tag': give it as a run, and the qrels with --qrels"
    return ""


def _not_topics(line: str) -> str:
    """What a line that is no topic looks like instead, where it tells: `retrieve --topics qrels.txt` (the file
    beside the topics) was told only that its line was no 'qid<TAB>query text', or to cut its columns."""
    parts = trec_columns(line)
    if looks_like_qrels(parts):
        return "; its lines are judgements (qrels), 'qid iter docid grade', not topics"
    if _looks_like_run(parts):
        return "; its lines are a run's, 'qid Q0 docid rank score tag', not topics"
    return ""


def _looks_like_run(parts: list[str]) -> bool:
    """Whether a line's columns are a TREC run line's, or the first line of a run rerank wrote (the likeliest run
    given in another file's place)."""
    return (parts[:2] == ["#", f"{MAGIC_KEY}:"]
            or len(parts) == 6 and whole_number(parts[3]) is not None and _is_number(parts[4]))


def file_kind(path: str | Path) -> str | None:
    """What a file is, where its first line tells ('a run file', 'a qrels file'): for an error about a file named
    where something else goes, such as a data set's name. Its first bytes alone are read, as they are."""
    try:
        with open(path, "rb") as handle:
            start = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    parts = trec_columns(start.lstrip().partition("\n")[0])
    return "a run file" if _looks_like_run(parts) else "a qrels file" if looks_like_qrels(parts) else None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@collector_paused()
def read_qrels(path: str | Path) -> Qrels:
    """TREC qrels `qid iter docid grade` (graded; negative grades kept: trec_eval reads them as pooled but
    unjudged, never relevant, and bpref skips them as it skips unjudged documents), or columns a header line names
    (`QRELS_HEADER_NAMES`): BEIR's `qrels/*.tsv`, `query-id corpus-id score` then `qid docid grade` lines, or a
    PyTerrier or ir_datasets qrels frame that pandas wrote; or ranx's JSON qrels (`_json_qrels`)."""
    with open_text(path) as handle:
        first = handle.readline()
        if not first.lstrip().startswith("{"):
            qrels = _qrels_lines(itertools.chain([first], handle), path)
        else:  # ranx's JSON qrels, or JSON records a line, which are no judgements (the line reader says so)
            text = first + handle.read()
            qrels = _json_qrels(text, path)
            if qrels is None:
                qrels = _qrels_lines(io.StringIO(text), path)
    if not qrels:
        raise FormatError(str(path), None, "no judgements found")
    return qrels


def _qrels_lines(lines: Iterable[str], path: str | Path) -> Qrels:
    qrels: Qrels = {}
    first_seen: dict[tuple[str, str], int] = {}
    columns = TREC_QRELS_COLUMNS
    at_qid, at_docid, at_grade = 0, 2, 3
    header_indented = False
    for line_no, line in enumerate(lines, 1):
        parts = trec_columns(line)
        if not parts:
            continue
        header = None if first_seen else _qrels_header(parts)
        if header:
            columns = header
            at_qid, at_docid, at_grade = map(columns.index, ("qid", "docid", "grade"))
            header_indented = line[:1].isspace()
            continue
        if len(parts) != len(columns):
            hint = ROW_NUMBERS_HINT if _row_numbers(parts, columns, header_indented) else _not_judgements(line)
            raise FormatError(str(path), line_no, f"expected {len(columns)} columns '{' '.join(columns)}', "
                                                  f"found {len(parts)}{hint}")
        qid, docid, grade_text = parts[at_qid], parts[at_docid], parts[at_grade]
        grade = whole_number(grade_text)
        if grade is None:
            raise FormatError(str(path), line_no, f"grade {grade_text!r} is not an integer"
                                                  f"{non_ascii_hint(grade_text) or _not_judgements(line)}")
        _check_grade_range(grade, f"grade {grade_text}", path, line_no)
        key = (qid, docid)
        if key in first_seen:  # trec_eval refuses these too
            raise FormatError(str(path), line_no, f"duplicate judgement of {key[1]} for query {key[0]} "
                              f"(first at line {first_seen[key]})")
        first_seen[key] = line_no
        qrels.setdefault(qid, {})[docid] = grade
    return qrels


def _json_qrels(text: str, path: str | Path) -> Qrels | None:
    """ranx's JSON qrels (`Qrels.save("qrels.json")`; pytrec_eval's qrels dict as json.dump writes it), one object
    {qid: {docid: grade}}; None for JSON of another shape, or a record a line (JSONL), which are no judgements."""
    try:
        judged = loads_once_per_key(text, str(path))
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a second JSON value: records a line
            return None
        raise FormatError(str(path), exc.lineno, f"invalid JSON ({exc.msg})") from None
    if not isinstance(judged, dict) or not all(isinstance(grades, dict) for grades in judged.values()):
        return None
    qrels: Qrels = {}
    for qid, grades in judged.items():
        for docid, grade in grades.items():
            what = f"query {qid}, document {docid}: grade {json.dumps(grade)}"
            if isinstance(grade, bool) or not isinstance(grade, (int, float)) or not float(grade).is_integer():
                raise FormatError(str(path), None, f"{what} is not an integer")
            _check_grade_range(int(grade), what, path, None)
            qrels.setdefault(qid, {})[docid] = int(grade)
    return qrels


def _check_grade_range(grade: int, what: str, path: str | Path, line_no: int | None) -> None:
    if not -(2**31 - 1) <= grade <= MAX_GRADE:  # pytrec_eval keeps grades in C ints: 4294967296 became 0
        raise FormatError(str(path), line_no, f"{what} is out of range (-2147483647 to {MAX_GRADE}): trec_eval's "
                                              "code keeps a counter for every grade up to a query's highest")


# ---------------------------------------------------------------------------------------------- TREC DL candidates

@dataclass
class CandidateList:
    """Queries, passage texts and the first-stage ranking from one `retrieve_results_*.json`."""

    topics: dict[str, str]
    docs: dict[str, Document]
    ranking: dict[str, list[tuple[str, float]]]


def read_dl_candidates(path: str | Path) -> CandidateList:
    with open_text(path) as handle:
        try:
            records = json.load(handle)
        except json.JSONDecodeError as exc:
            raise FormatError(str(path), exc.lineno, f"invalid JSON ({exc.msg})") from None
    out = CandidateList({}, {}, {})
    for entry in records:
        hits = entry.get("hits") or []
        if not hits:
            continue
        qid = str(hits[0]["qid"])
        out.topics[qid] = entry["query"]
        out.ranking[qid] = [(str(h["docid"]), float(h["score"])) for h in hits]
        for hit in hits:
            out.docs.setdefault(str(hit["docid"]), Document(str(hit["docid"]), hit["content"]))
    return out


# ---------------------------------------------------------------------------------------------- answer selection

@dataclass
class AnswerSelection:
    """A QA set in ranking form: each question a query, its candidate sentences the documents."""

    topics: dict[str, str]
    docs: dict[str, Document]
    qrels: Qrels
    ranking: dict[str, list[tuple[str, float]]]


def _qa_add(out: AnswerSelection, qid: str, question: str, sentences: list[tuple[str, int]], docids=None,
            keep_order: bool = True) -> None:
    """Add one question. The candidate "run" gives a re-ranker something to re-rank: the publisher's
    order when it means something (WikiQA: sentence order in the article), else (`keep_order=False`) a
    reproducible order that knows nothing of the labels (a hash of qid and docid)."""
    out.topics[qid] = question
    docids = docids or [f"{qid}-{i}" for i in range(len(sentences))]
    out.qrels[qid] = {}
    if keep_order:
        out.ranking[qid] = [(docid, float(len(sentences) - i)) for i, docid in enumerate(docids)]
    else:
        out.ranking[qid] = [(d, int(hashlib.sha1(f"{qid}/{d}".encode()).hexdigest()[:12], 16) / 16**12) for d in docids]
    for docid, (sentence, label) in zip(docids, sentences):
        out.docs[docid] = Document(docid, sentence)
        out.qrels[qid][docid] = label


_QAPAIR = re.compile(r"<QApairs id='([^']+)'>(.*?)</QApairs>", re.S)
_QA_PART = re.compile(r"<(question|positive|negative)>\s*\n(.*?)\n", re.S)


def read_jacana(path: str | Path) -> AnswerSelection:
    """TrecQA jacana pseudo-XML: per `<QApairs id>`, the first line of each block is the tokenised text.

    The candidate run is in hashed order, not the file's (which puts every right answer first)."""
    with open_text(path) as handle:
        content = handle.read()
    out = AnswerSelection({}, {}, {}, {})
    seen: set[str] = set()
    for match in _QAPAIR.finditer(content):
        qid, question, sentences = match.group(1), None, []
        if qid in seen:  # its candidates would silently replace the first's (files joined into one, say)
            line = content.count("\n", 0, match.start()) + 1
            raise FormatError(str(path), line, f"QApairs id {qid} appears twice")
        seen.add(qid)
        for part in _QA_PART.finditer(match.group(2)):
            text = " ".join(part.group(2).split("\t"))
            if part.group(1) == "question":
                question = text
            else:
                sentences.append((text, int(part.group(1) == "positive")))
        if question is None:
            line = content.count("\n", 0, match.start()) + 1
            raise FormatError(str(path), line, f"QApairs {qid} has no <question>")
        if sentences:  # jacana lists the right answers first: its order would leak the labels
            _qa_add(out, qid, question, sentences, keep_order=False)
    if not out.topics:
        raise FormatError(str(path), None, "no <QApairs> records found")
    return out


def read_wikiqa(path: str | Path, numbered: str) -> AnswerSelection:
    """WikiQA: `WikiQA-*.tsv` (with QuestionID/SentenceID) or `WikiQASent-*.txt` (question, sentence, label).

    The Sent files carry no ids, so questions are numbered after `numbered` in order of appearance (`dev-Q1`,
    `dev-Q2`, ..., their sentences `dev-Q1-0`, ...; consecutive rows with the same question text form one question).
    Every split's file starts at 1: numbered after its split, a run of one split matches no question of another.
    """
    out = AnswerSelection({}, {}, {}, {})
    grouped: dict[str, tuple[str, list[tuple[str, int]], list[str]]] = {}
    with open_text(path) as handle:
        first = handle.readline()
        with_ids = first.startswith("QuestionID\t")
        lines = handle if with_ids else itertools.chain([first], handle)
        start = 2 if with_ids else 1
        previous_question, counter = None, 0
        for line_no, line in enumerate(lines, start):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            try:
                if with_ids:
                    qid, question, _, _, sid, sentence, label = cols
                else:
                    question, sentence, label = cols
                    if question != previous_question:
                        counter += 1
                        previous_question = question
                    qid, sid = f"{numbered}{counter}", None
                grade = int(label)
            except ValueError:
                raise FormatError(str(path), line_no, "expected question<TAB>sentence<TAB>label (or the 7-column TSV)") from None
            entry = grouped.setdefault(qid, (question, [], []))
            entry[1].append((sentence, grade))
            entry[2].append(sid or f"{qid}-{len(entry[2])}")
    for qid, (question, sentences, docids) in grouped.items():
        _qa_add(out, qid, question, sentences, docids)
    if not out.topics:
        raise FormatError(str(path), None, "no question rows found")
    return out


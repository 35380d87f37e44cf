"""Format readers on small inline samples (the real files are covered in test_datasets.py)."""

import gzip
import re

import pytest

from rerank.data import formats
from rerank.errors import DataError, FormatError

SMART = """.I 1
.T
Preliminary Report-International Algebraic Language
.B
CACM December, 1958
.A
Perlis, A. J.
.W
A report on
an algebraic language.
.X
100	5	1
.I 2
.T
Extraction of Roots by Repeated Subtractions
.W
Roots by subtraction.
"""


def test_smart_records_with_title_and_text(tmp_path):
    path = tmp_path / "cacm.all"
    path.write_text(SMART)
    docs = list(formats.read_smart(path))
    assert [d.docid for d in docs] == ["1", "2"]
    assert docs[0].title == "Preliminary Report-International Algebraic Language"
    assert docs[0].text == "A report on an algebraic language."
    assert "Perlis" not in docs[0].contents  # .A not indexed by default
    assert list(formats.read_smart(path, ("T", "W", "A")))[0].contents.endswith("Perlis, A. J.")
    assert formats.read_topics(path)["2"] == "Extraction of Roots by Repeated Subtractions Roots by subtraction."


def test_smart_field_before_id_is_an_error(tmp_path):
    path = tmp_path / "bad.all"
    path.write_text(".T\nno id\n")
    with pytest.raises(FormatError, match="before the first"):
        list(formats.read_smart(path))


def test_trec_sgml_documents_and_a_cut_short_copy(tmp_path):
    path = tmp_path / "docs.trec"
    whole = "<DOC>\n<DOCNO> 1 </DOCNO>\nfirst <B>text</B>\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\nsecond\n</DOC>\n"
    path.write_text(whole)
    assert [(d.docid, d.text) for d in formats.read_trec_sgml(path)] == [("1", "first text"), ("2", "second")]
    path.write_text(whole[: whole.rindex("second")])  # the last document lost its end
    with pytest.raises(FormatError, match="docs.trec:5: <DOC> without </DOC>; is the file cut short"):
        list(formats.read_trec_sgml(path))


def test_trec_sgml_document_missing_its_end_is_named(tmp_path):
    """Without the check, document 2 (its id and text) silently became part of document 1's text."""
    path = tmp_path / "docs.trec"
    path.write_text("<DOC>\n<DOCNO>1</DOCNO>\nfirst\n<DOC>\n<DOCNO>2</DOCNO>\nsecond\n</DOC>\n")
    with pytest.raises(FormatError, match="docs.trec:4: <DOC> inside another <DOC>; is a </DOC> missing before it"):
        list(formats.read_trec_sgml(path))


def test_topics_forms_and_gzip(tmp_path):
    (tmp_path / "t.tsv").write_text("1\tfirst query\n2\tsecond\n")
    (tmp_path / "t.trec").write_text("<top>\n<num> Number: 301\n<title> Topic: foreign minorities\n<desc> ...\n</top>\n"
                                     "<top>\n<num> Number: 051\n<title> Topic: airbus subsidies\n</top>\n")
    with gzip.open(tmp_path / "t.tsv.gz", "wt") as handle:
        handle.write("7\tgz query\n")
    assert formats.read_topics(tmp_path / "t.tsv") == {"1": "first query", "2": "second"}
    # Anserini reads <num> 051 as 51, the id TREC's qrels use; a TSV id is kept as written
    assert formats.read_topics(tmp_path / "t.trec") == {"301": "foreign minorities", "51": "airbus subsidies"}
    assert formats.read_topics(tmp_path / "t.tsv.gz") == {"7": "gz query"}


def test_a_cut_or_foreign_gzip_file_is_named(tmp_path, rerank):
    """A cut .gz raised EOFError, which click reports as "rerank: interrupted" (exit 130): the user was told
    they had pressed Ctrl-C. A plain file named .gz gave gzip's message without the file's name."""
    (tmp_path / "cut.tsv.gz").write_bytes(gzip.compress(b"".join(b"%d\tquery %d\n" % (i, i) for i in range(9999)))[:500])
    (tmp_path / "plain.tsv.gz").write_text("1\tquery\n")
    for name, words in (("cut", "Compressed file ended"), ("plain", "Not a gzipped file")):
        with pytest.raises(DataError, match=f"{name}.tsv.gz: cannot be read as gzip .*{words}"):
            formats.read_topics(tmp_path / f"{name}.tsv.gz")
    qrels = tmp_path / "cut.qrels.gz"
    qrels.write_bytes(gzip.compress(b"".join(b"%d 0 d%d 1\n" % (i, i) for i in range(9999)))[:500])
    done = rerank("eval", "--qrels", str(qrels), input="1 Q0 a 1 2.5 t\n", check=False)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"rerank: error: {qrels}: cannot be read as gzip (Compressed file ended before the "
        "end-of-stream marker was reached)"]


@pytest.mark.parametrize("text, line, words", [
    ("1\tfirst\n2\t\n", 2, "query 2 has no text"),  # Anserini's topic reader stopped on it with a Java message
    ("1\tfirst\n1\tagain\n", 2, "query id 1 appears twice"),  # the second replaced the first
    ("<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 2\n<title>\n</top>\n", 5, "query 2 has no text"),
    ("<top>\n<num> 1\n<title> a\n</top>\n\n<top>\n<num> 2\n<title> b\n</top>\n<top><num> 1\n<title> c\n</top>\n", 10,
     "query id 1 appears twice"),
    # ids a TREC run line cannot carry: Anserini's run came back unreadable, or '#1' lost its results silently
    ("1\tfirst\nq 2\tsecond\n", 2, "query id 'q 2' holds whitespace"),
    ("#1\tfirst\n", 1, "query id '#1' starts with '#'"),
    # a missing </top> silently lost a query: the one inside another, or the last of a truncated copy
    ("<top>\n<num> 1\n<title> a\n<top>\n<num> 2\n<title> b\n</top>\n", 4, "<top> inside another <top>"),
    ("<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 2\n<title> b\n", 5, "<top> without </top>; is the file cut"),
])
def test_topics_without_text_or_twice_are_named(tmp_path, text, line, words):
    (tmp_path / "topics").write_text(text)
    with pytest.raises(FormatError, match=words) as info:
        formats.read_topics(tmp_path / "topics")
    assert info.value.line_no == line


def test_trec_topics_line_numbers_scan_the_file_once(tmp_path, monkeypatch):
    """Each <top>'s line number was counted from the top of the file: minutes for 50,000 topics."""
    scanned = []

    class Counting(str):
        def count(self, sub, start=0, end=None):
            end = len(self) if end is None else end
            scanned.append(end - start)
            return str.count(self, sub, start, end)

    text = "".join(f"<top>\n<num> {i}\n<title> query {i}\n</top>\n\n" for i in range(1, 2001))
    (tmp_path / "topics").write_text(text)
    real_open = formats.open_text

    class Handle:
        def __init__(self, path):
            self.inner = real_open(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.inner.close()

        def read(self, *size):
            return Counting(self.inner.read(*size))

    monkeypatch.setattr(formats, "open_text", Handle)
    assert len(formats.read_topics(tmp_path / "topics")) == 2000
    assert sum(scanned) <= len(text)


@pytest.mark.parametrize("text, words", [
    # the second silently replaced the first (a query lost), as TSV and <top> topics refuse
    ("<DOC>\n<DOCNO>1</DOCNO>\nfirst\n</DOC>\n<DOC>\n<DOCNO>1</DOCNO>\nagain\n</DOC>\n", "query id 1 appears twice"),
    (".I 1\n.W\nfirst\n.I 1\n.W\nagain\n", "query id 1 appears twice"),
    # Anserini's topic reader stopped on these with a Java message, or wrote a run rerank could not read
    ("<DOC>\n<DOCNO>1</DOCNO>\nfirst\n</DOC>\n<DOC>\n<DOCNO>2</DOCNO>\n</DOC>\n", "query 2 has no text"),
    (".I 1\n.W\nfirst\n.I 2\n.T\n", "query 2 has no text"),
    ("<DOC>\n<DOCNO>q 1</DOCNO>\nfirst\n</DOC>\n", "query id 'q 1' holds whitespace"),
])
def test_sgml_and_smart_topics_are_checked_like_the_others(tmp_path, text, words):
    (tmp_path / "topics").write_text(text)
    with pytest.raises(FormatError, match=words):
        formats.read_topics(tmp_path / "topics")


def test_qrels_errors_name_the_line(tmp_path):
    path = tmp_path / "qrels"
    path.write_text("1 0 d1 1\n1 0 d2 high\n")
    with pytest.raises(FormatError) as info:
        formats.read_qrels(path)
    assert info.value.line_no == 2
    path.write_text("1 0 d1 1\n1 0 d1 0\n")
    with pytest.raises(FormatError, match="duplicate judgement of d1 for query 1 .first at line 1."):
        formats.read_qrels(path)
    path.write_text("1 0 d1 1\n1 0 d2 1_0\n")  # Python's int() reads 10, trec_eval's atol 1
    with pytest.raises(FormatError, match="grade '1_0' is not an integer") as info:
        formats.read_qrels(path)
    assert info.value.line_no == 2
    # pandas writes an integer column that held a gap as 1.0 (trec_eval's atol reads 1); 1.5 is no grade
    path.write_text("1 0 d1 1.0\n1 0 d2 0.0\n1 0 d3 -1.0\n")
    assert formats.read_qrels(path) == {"1": {"d1": 1, "d2": 0, "d3": -1}}
    path.write_text("1 0 d1 1\n1 0 d2 1.5\n")
    with pytest.raises(FormatError, match="grade '1.5' is not an integer"):
        formats.read_qrels(path)


def test_beir_qrels_and_their_faults(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2\n")
    assert formats.read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    path.write_text("query-id\tcorpus-id\tscore\nq1\t0\td1\t1\n")  # TREC lines under a BEIR header
    with pytest.raises(FormatError, match="test.tsv:2: expected 3 columns 'qid docid grade', found 4"):
        formats.read_qrels(path)
    path.write_text("q1\td1\t1\n")  # BEIR lines without the header: not taken for TREC lines
    with pytest.raises(FormatError, match="test.tsv:1: expected 4 columns 'qid iter docid grade', found 3$"):
        formats.read_qrels(path)


@pytest.mark.parametrize("text", [
    "qid docno label\nq1 d1 1\nq1 d2 0\nq2 d1 2\n",  # a PyTerrier qrels frame, pandas' to_csv(sep=" ", index=False)
    "qid\titeration\tdocno\tlabel\nq1\t0\td1\t1\nq1\t0\td2\t0\nq2\tQ0\td1\t2\n",  # with its iteration
    # ir_datasets' qrels_iter() as a frame: its fields' order, the iteration last
    "query_id\tdoc_id\trelevance\titeration\nq1\td1\t1\t0\nq1\td2\t0\t0\nq2\td1\t2\t0\n",
])
def test_qrels_under_a_header_line_naming_their_columns(tmp_path, text):
    """A qrels frame written by pandas with its header was refused ('grade 'label' is not an integer', or 3 columns
    where 4 were expected); its column names say which is which, as BEIR's header does."""
    path = tmp_path / "qrels.txt"
    path.write_text(text)
    assert formats.read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    path.write_text(text.replace("q2", "q2 x", 1))  # a line of another width is named with the header's columns
    with pytest.raises(FormatError, match=f"qrels.txt:4: expected {len(text.split(chr(10))[0].split())} columns"):
        formats.read_qrels(path)


@pytest.mark.parametrize("text", [
    '{\n  "q1": {\n    "d1": 1,\n    "d2": 0\n  },\n  "q2": {\n    "d1": 2\n  }\n}',  # ranx's Qrels.save (orjson)
    '{"q2": {"d1": 2.0}, "q1": {"d2": 0, "d1": 1}}\n',  # pytrec_eval's qrels dict, json.dump'ed
])
def test_ranx_json_qrels_are_read(tmp_path, text):
    """ranx's Qrels.save("qrels.json") writes {qid: {docid: grade}}; it was refused as 'expected 4 columns, found 1;
    its lines are JSON records, as topics ... are'."""
    path = tmp_path / "qrels.json"
    path.write_text(text)
    assert formats.read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}


@pytest.mark.parametrize("text, words", [
    ('{"q1": {"d1": 1.5}}', "qrels.json: query q1, document d1: grade 1.5 is not an integer"),
    ('{"q1": {"d1": "1"}}', 'qrels.json: query q1, document d1: grade "1" is not an integer'),
    ('{"q1": {"d1": true}}', "qrels.json: query q1, document d1: grade true is not an integer"),
    ('{"q1": {"d1": 4294967296}}', "qrels.json: query q1, document d1: grade 4294967296 is out of range"),
    ('{"q1": {"d1": 1, "d1": 0}}', "qrels.json: 'd1' is a key twice in one JSON object"),
    ('{"q1": {"d1": 1}', "qrels.json:1: invalid JSON (Expecting ',' delimiter)"),
    ('{"q1": {}}', "qrels.json: no judgements found"),
    # JSON records a line, or one of another shape, are no judgements: the line reader says what they look like
    ('{"_id": "q1", "text": "x"}\n{"_id": "q2", "text": "y"}\n', "its lines are JSON records, as topics"),
    ('{"_id": "q1", "text": "x"}\n', "its lines are JSON records, as topics"),
])
def test_ranx_json_qrels_faults_are_named(tmp_path, text, words):
    path = tmp_path / "qrels.json"
    path.write_text(text)
    with pytest.raises(FormatError, match=re.escape(words)):
        formats.read_qrels(path)


@pytest.mark.parametrize("text", [
    "\tqid\tdocno\tlabel\n0\tq1\td1\t1\n",  # a PyTerrier qrels frame, pandas' to_csv(sep="\t")
    " query_id doc_id relevance iteration\n3 q1 d1 1 0\n",  # ir_datasets' frame (filtered: rows keep their numbers)
    "0 q1 0 d1 1\n",  # TREC's columns, to_csv(sep=" ", header=False)
])
def test_qrels_with_pandas_row_numbers_are_named_so(tmp_path, text):
    """to_csv writes the frame's index as a first column unless index=False (its header line then starts with the
    index's empty name); such qrels were refused with a bare 'expected 3 columns 'qid docid grade', found 4'."""
    path = tmp_path / "qrels.tsv"
    path.write_text(text)
    with pytest.raises(FormatError, match=re.escape("(a first column of row numbers, which pandas' to_csv writes "
                                                    "unless index=False?)")):
        formats.read_qrels(path)


@pytest.mark.parametrize("reader, text, words", [
    (formats.read_qrels, "qid,docno,label\nq1,d1,1\n", "comma-separated values, which pandas' to_csv writes unless "
                                                         "sep=' '?)"),
    (formats.read_topics, "qid,query\nq1,first query\n", "comma-separated values, which pandas' to_csv writes unless "
                                                          "sep='\\t'?)"),
])
def test_comma_separated_qrels_and_topics_are_named_so(tmp_path, reader, text, words):
    """pandas' to_csv writes commas unless told otherwise; the error said only how many columns it found."""
    path = tmp_path / "frame.csv"
    path.write_text(text)
    with pytest.raises(FormatError, match=re.escape(words)):
        reader(path)


@pytest.mark.parametrize("line, found", [('{"_id": "q1", "text": "what is x"}', "found 6; its lines are JSON records"),
                                         ("q1\twhat is x y", "found 5; its lines are 'id<TAB>text'"),
                                         ("q1\twhat is x", "grade 'x' is not an integer; its lines are 'id<TAB>text'")])
def test_topics_given_as_qrels_are_named_so(tmp_path, line, found):
    """--qrels queries.jsonl (the two files swapped) was told only of 6 columns, or of a query's word as a grade."""
    path = tmp_path / "queries"
    path.write_text(line + "\n")
    with pytest.raises(FormatError, match=f"{re.escape(found)}.*, not judgements$"):
        formats.read_qrels(path)


@pytest.mark.parametrize("text", [
    # TREC's Web tracks (2009-2014): a root element, then <topic number type> with <query>, <description>, <subtopic>s
    '<webtrack2009>\n<topic number="1" type="faceted">\n  <query>obama family tree</query>\n  <description>Find '
    'information on President Barack Obama\'s family history</description>\n  <subtopic number="1" type="nav">x'
    '</subtopic>\n</topic>\n<topic number="2" type="single">\n  <query>french lick\n resort and casino</query>\n'
    '</topic>\n</webtrack2009>\n',
    # TREC-COVID: an XML declaration; <topics> (which starts as <top> does) holding <topic number>
    '<?xml version="1.0" encoding="UTF-8"?>\n<topics task="COVIDSearch 2020" batch="5">\n  <topic number="1">\n'
    '    <query>obama family tree</query>\n    <question>q</question>\n  </topic>\n  <topic number="2">\n'
    '    <query>french lick resort and casino</query>\n  </topic>\n</topics>\n',
    # TREC's Health Misinformation track: the number an element of its own
    "<topics>\n<topic>\n<number>1</number>\n<query>obama family tree</query>\n</topic>\n<topic>\n<number>2</number>\n"
    "<query>french lick resort and casino</query>\n<description>d</description>\n</topic>\n</topics>\n",
])
def test_xml_topics_of_later_trec_tracks(tmp_path, text):
    """Pyserini reads these (its web and COVID topic readers); rerank took them for TSV ('expected qid<TAB>query
    text') or, from '<topics>', for <top> topics ('no <top> records found')."""
    path = tmp_path / "topics.xml"
    path.write_text(text)
    assert formats.read_topics(path) == {"1": "obama family tree", "2": "french lick resort and casino"}
    path.write_text(text.replace("<query>", "<title>", 1).replace("</query>", "</title>", 1))
    with pytest.raises(FormatError, match="topics.xml:[23]: <topic> without a number .* or <query>$"):
        formats.read_topics(path)


def test_xml_topics_are_read_as_xml_text(tmp_path):
    """An XML topic's query was taken as its raw markup: 'AT&amp;T' was searched with the word 'amp', and a CDATA
    section's markers were part of the query. An XML parser (Anserini's COVID topic reader) reads 'AT&T' and the
    CDATA's text; so does rerank, gzipped or with CRLF lines too."""
    text = ('<?xml version="1.0"?>\r\n<topics>\r\n<topic number="1">\r\n  <query>AT&amp;T &lt;5G&gt; caf&#233;</query>'
            '\r\n</topic>\r\n<topic number="2">\r\n  <query><![CDATA[R&D <lab> &amp;]]> plans</query>\r\n</topic>\r\n'
            '</topics>\r\n')
    path = tmp_path / "topics.xml.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert formats.read_topics(path) == {"1": "AT&T <5G> café", "2": "R&D <lab> &amp; plans"}


def test_beir_queries_are_topics(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"_id": "q1", "text": "first query", "metadata": {}}\n{"_id": "q2", "text": "second"}\n')
    assert formats.read_topics(path) == {"q1": "first query", "q2": "second"}
    path.write_text('{"_id": "q1", "text": "first"}\n{"_id": "q1", "text": "again"}\n')
    with pytest.raises(FormatError, match="q1"):
        formats.read_topics(path)


@pytest.mark.parametrize("records, topics", [
    # `ir_datasets export msmarco-passage/dev queries --format jsonl`
    (['{"query_id": "1048585", "text": "what is paula deen\'s brother"}'], {"1048585": "what is paula deen's brother"}),
    # `ir_datasets export ... queries --format jsonl` of TREC topics: the title is the query, as a <top>'s <title> is
    (['{"query_id": "301", "title": "International Organized Crime", "description": "Identify ...", "narrative": "A"}'],
     {"301": "International Organized Crime"}),
    (['{"qid": "q1", "query": "first query"}', '{"qid": "q2", "query": "second"}'],  # a PyTerrier topics frame's
     {"q1": "first query", "q2": "second"}),                                       # to_json(orient="records", lines=True)
])
def test_jsonl_topics_of_ir_datasets_and_pyterrier(tmp_path, records, topics):
    """ir_datasets' `query_id` was 'record has no 'id' or '_id'', and its TREC queries (with a title) were refused
    as 'a corpus, not topics'."""
    path = tmp_path / "queries.jsonl"
    path.write_text("\n".join(records) + "\n")
    assert formats.read_topics(path) == topics


@pytest.mark.parametrize("record, words", [
    ('{"qid": "q1", "body": "x"}', "record has no 'text', 'query' or 'title' (its other keys: 'body')"),
    ('{"query": "x"}', "record has no '_id', 'id', 'query_id' or 'qid' (its other keys: 'query')"),
    ('{"query_id": null, "text": "x"}', "record's id is null"),  # it was the query 'None'
])
def test_jsonl_topics_without_an_id_or_text_are_named(tmp_path, record, words):
    path = tmp_path / "queries.jsonl"
    path.write_text(record + "\n")
    with pytest.raises(FormatError, match=f"queries.jsonl:1: {re.escape(words)}$"):
        formats.read_topics(path)


@pytest.mark.parametrize("record, fields", [('{"id": "d1", "contents": "a document"}', "'contents'"),
                                            ('{"_id": "d1", "title": "T", "text": "body"}', "'title'"),
                                            # a first document longer than the 4,096 characters formats are told by
                                            ('{"_id": "d1", "title": "T", "text": "%s"}' % ("word " * 1000), "'title'")])
def test_a_corpus_given_as_topics_is_refused(tmp_path, record, fields):
    """Pyserini's and BEIR's corpus records were read as queries: `--topics corpus.jsonl` searched every document
    (still so where the first document's line was longer than the start of the file the format is told from)."""
    path = tmp_path / "corpus.jsonl"
    path.write_text(record + "\n")
    with pytest.raises(FormatError, match=f"corpus.jsonl: its records have {fields}: a corpus, not topics .*--corpus"):
        formats.read_topics(path)


def test_jsonl_every_tools_layout(tmp_path):
    """Pyserini's and BEIR's; ir_datasets' `doc_id` (`ir_datasets export ... docs --format jsonl`) and PyTerrier's
    `docno` were refused as 'record has no 'id' or '_id''."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "contents": "x y"}\n{"_id": "b", "title": "T", "text": "body"}\n'
                    '{"doc_id": "c", "text": "ir datasets"}\n{"docno": "d", "text": "pyterrier"}\n')
    docs = list(formats.sniff_documents(path))
    assert [(d.docid, d.contents) for d in docs] == [("a", "x y"), ("b", "T body"), ("c", "ir datasets"),
                                                     ("d", "pyterrier")]
    path.write_text('{"contents": "x"}\n')
    with pytest.raises(FormatError, match="record has no 'id', '_id', 'docid', 'doc_id' or 'docno' "
                                          r"\(its other keys: 'contents'\)$"):
        list(formats.sniff_documents(path))


@pytest.mark.parametrize("line, words", [
    ('[1, 2]', "a record must be a JSON object, not list"),  # was an AttributeError traceback
    ('{"id": "a", "contents": null}', "'contents' must be a string, not null"),  # indexed as the word "null"
    ('{"id": "a", "contents": 42}', "'contents' must be a string, not 42"),
    ('{"_id": "a", "title": null, "text": null}', "'text' must be a string, not null"),
    ('{"_id": "a", "title": ["x"], "text": "body"}', "'title' must be a string"),
])
def test_jsonl_records_that_are_not_text_documents_are_named(tmp_path, line, words):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "ok", "contents": "fine"}\n' + line + "\n")
    with pytest.raises(FormatError, match=words) as info:
        list(formats.read_jsonl_docs(path))
    assert info.value.line_no == 2


def test_qrels_from_a_pipe_and_topics_that_cannot_be(tmp_path):
    """`--qrels <(zcat q.gz)` was 'file not found'; topics are read twice (format detection), so a pipe is refused."""
    import os
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("1 0 a 1\n"))
    writer.start()
    assert formats.read_qrels(fifo) == {"1": {"a": 1}}
    writer.join()
    with pytest.raises(DataError, match="is not a regular file"):
        formats.read_topics(fifo)
    with pytest.raises(DataError, match="is a folder"):
        formats.read_qrels(tmp_path)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        formats.read_qrels(tmp_path / "nope")
    (tmp_path / "weird.txt").write_text("hello\n")
    with pytest.raises(DataError, match="cannot tell the document format"):
        formats.sniff_documents(tmp_path / "weird.txt")


def test_a_tsv_corpus_is_read_as_ms_marcos_collection_tsv(tmp_path):
    """MS MARCO's collection.tsv (`docid<TAB>text`) was refused as 'cannot tell the document format'; Pyserini
    users have it as it is. A line of other than two columns is refused, not guessed at."""
    path = tmp_path / "collection.tsv"
    path.write_text("0\tThe presence of communication amid scientific minds\n\n7\tManhattan Project\r\n")
    assert [(d.docid, d.text, d.title) for d in formats.sniff_documents(path)] == [
        ("0", "The presence of communication amid scientific minds", ""), ("7", "Manhattan Project", "")]
    path.write_text("D1\thttp://x\tA title\tA body\n")  # MS MARCO documents: docid url title body
    with pytest.raises(FormatError, match="collection.tsv:1: expected 'docid<TAB>text', found 4 columns"):
        list(formats.sniff_documents(path))


def test_tsv_topics_whose_first_id_starts_with_a_brace_are_not_json(tmp_path):
    """Since queries.jsonl was read, any topics starting with '{' went to the JSON reader: a TSV file whose first
    query id is `{1}` was refused as 'invalid JSON'."""
    path = tmp_path / "topics.tsv"
    path.write_text("{1}\tfirst query\n2\tsecond\n")
    assert formats.read_topics(path) == {"{1}": "first query", "2": "second"}
    path.write_text('{"_id": "q1",\t"text": "first"}\n')  # a tab between tokens, as a hand edit may leave
    assert formats.read_topics(path) == {"q1": "first"}


def test_tsv_topics_header_line_of_pandas_is_not_a_query(tmp_path):
    """A topics frame written by pandas (PyTerrier's columns, `to_csv(sep='\\t', index=False)`) starts with the
    line `qid<TAB>query`: it was searched as query 'qid', and the run lost its data set (eval asked for qrels)."""
    path = tmp_path / "topics.tsv"
    path.write_text("qid\tquery\n1\tfirst query\n2\tsecond\n")
    assert formats.read_topics(path) == {"1": "first query", "2": "second"}


def test_tsv_topics_with_more_columns_are_refused(tmp_path):
    """Anserini's TSV reader takes the second column alone; ours searched every column after the id as one query,
    so `qid title description` topics (ir_datasets' export) silently gave another run."""
    path = tmp_path / "topics.tsv"
    path.write_text("1\tfirst query\t\n2\tsecond\tits description\n")
    with pytest.raises(FormatError, match=r"topics.tsv:2: expected 'qid<TAB>query text', found 3 columns"):
        formats.read_topics(path)


def test_a_jacana_question_id_twice_is_named(tmp_path):
    """Two files joined into one: the second QApairs of an id replaced the first's candidates, silently."""
    block = "<QApairs id='{}'>\n<question>\nwho\t?\n</question>\n<positive>\n{}\n</positive>\n</QApairs>\n"
    path = tmp_path / "TEST.xml"
    path.write_text(block.format("1", "one") + block.format("2", "two") + block.format("1", "three"))
    with pytest.raises(FormatError, match="QApairs id 1 appears twice") as caught:
        formats.read_jacana(path)
    assert ":17" in str(caught.value)

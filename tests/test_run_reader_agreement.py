"""One reader for runs: `rerank eval` (whole runs, with a vectorised fast path) and `rerank cat` (streaming, line by
line) accept and refuse the same lines, and name file and line in every refusal."""

from __future__ import annotations

import io
import random

import pytest

from rerank.errors import FormatError
from rerank.runs import RunHeader, RunReader, RunWriter, Timing, _load_fast, load_run

NOT_CONTIGUOUS = "are not contiguous"  # streaming needs a query's records together; whole runs do not (trec_eval)


def _opened(data: bytes) -> io.TextIOWrapper:
    """Bytes as a run file is opened (UTF-8 text over its bytes)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


def _rankings(rankings) -> dict:
    return {r.qid: (r.docids, r.scores, r.tag, r.timings) for r in rankings}


def _line(message: str) -> float:
    """The line a refusal names; a fault of the whole run (no end line) is found after every line."""
    where = message.split(": ")[0].split(":")
    return int(where[1]) if len(where) > 1 else float("inf")


def eval_verdict(data: bytes) -> tuple[str, object]:
    try:
        return "accepted", _rankings(load_run(_opened(data), "f.run").queries.values())
    except FormatError as error:
        return "refused", str(error)


def cat_verdict(data: bytes) -> tuple[str, object]:
    try:
        return "accepted", _rankings(RunReader(_opened(data), "f.run"))
    except FormatError as error:
        return "refused", str(error)


@pytest.fixture(scope="module")
def dl_slice(data_root) -> bytes:
    """Twelve lines of the TREC DL 2019 BM25 run shipped with the data, across a change of query."""
    lines = (data_root / "trec-dl" / "bm25" / "trec_results_dl19.txt").read_bytes().split(b"\n")
    return b"\n".join(lines[94:106]) + b"\n"


def as_stream(plain: bytes) -> bytes:
    """The same records as a rerank stream: header, time lines and end line."""
    run = load_run(_opened(plain), "slice")
    out = io.StringIO()
    with RunWriter(out, RunHeader({"dataset": "trec-dl-2019"}).with_stage({"name": "bm25"})) as writer:
        for ranking in run.queries.values():
            ranking.timings = [Timing("bm25", 1.5, 100)]
            writer.write(ranking)
    return out.getvalue().encode()


BYTES = [b" ", b"\t", b"\n", b"\r", b"\r\n", b"\v", b"\f", b"\x00", b"\x1c", b"\x7f", b"\x85", b"\xc2\xa0", b"\xff",
         b"#", b"-", b"+", b".", b"e", b"_", b"0", b"x", b"Q0", b"nan", b"inf", b"# end of run\n", b"# time: ",
         b"# stage: {", b"\xef\xbb\xbf"]


def mutated(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out) + 1)
        kind = rng.random()
        if kind < 0.45:
            out[at:at] = rng.choice(BYTES)
        elif kind < 0.7:
            del out[at:at + rng.randint(1, 3)]
        else:
            out[at:at + 1] = rng.choice(BYTES)
    return bytes(out)


@pytest.mark.parametrize("layout", ["trec", "stream"])
def test_fuzzed_copies_of_a_real_run_get_the_same_verdict_from_eval_and_cat(dl_slice, layout):
    base = dl_slice if layout == "trec" else as_stream(dl_slice)
    assert eval_verdict(base) == cat_verdict(base) and eval_verdict(base)[0] == "accepted"
    rng = random.Random(46)
    refused = 0
    for _ in range(1500):
        data = mutated(rng, base)
        by_eval, by_cat = eval_verdict(data), cat_verdict(data)
        if by_cat[0] == "refused" and NOT_CONTIGUOUS in by_cat[1]:  # cat stops there; eval reads on
            assert by_eval[0] == "accepted" or _line(by_eval[1]) > _line(by_cat[1]), (data, by_eval, by_cat)
            continue
        assert by_eval == by_cat, data
        if by_eval[0] == "refused":
            refused += 1
            assert by_eval[1].startswith("f.run"), by_eval  # the file, and the line where there is one
    assert refused > 200  # the fuzzing reached the refusals, not only harmless changes


# Lines eval's fast path took and cat and trec_eval refuse, and other faults it read otherwise than cat.
WRONG_LINES = [
    (b"1 Q0 d2 2 1.0 \n", "f.run:2: expected 6 columns"),  # a trailing space instead of a tag
    (b"1 Q0 d2 2 1.0 \r\n", "f.run:2: expected 6 columns"),  # a carriage return as the tag
    (b"1 Q\f0 d2 2 1.0 t\n", "f.run:2: expected 6 columns"),  # a form feed in the Q0 column
    (b"1\v2 Q0 d2 2 1.0 t\n", "f.run:2: expected 6 columns"),  # a vertical tab in a qid
    (b"\x001 Q0 d2 2 1.0 t\n", "f.run:2: a control character ('\\x00')"),  # NUL before a qid: a new query
    (b"1 Q0 d2 -2 1.0 t\n", "f.run:2: rank -2 is negative"),
    (b"1 Q0 d\x1c2 2 1.0 t\n", "f.run:2: a control character ('\\x1c')"),  # str.split() splits there
    (b"1 Q0 d2 2 1.0 t\xff\n", "f.run:2: not UTF-8 text"),
]


@pytest.mark.parametrize("line, said", WRONG_LINES)
def test_eval_and_cat_refuse_a_faulty_line_naming_it(line, said):
    data = b"1 Q0 d1 1 2.0 t\n" + line + b"2 Q0 d3 1 0.5 t\n"
    for verdict in (eval_verdict(data), cat_verdict(data)):
        assert verdict[0] == "refused" and verdict[1].startswith(said), verdict


def test_a_line_past_arrows_block_that_is_not_utf8_is_named():
    """Python decodes a text file in blocks: its error named the file alone."""
    data = b"".join(f"1 Q0 d{i} {i} {-i}.5 t\n".encode() for i in range(1, 20001)) + b"2 Q0 \xe9 1 1.0 t\n"
    for verdict in (eval_verdict(data), cat_verdict(data)):
        assert verdict == ("refused", "f.run:20001: not UTF-8 text (invalid continuation byte)")


@pytest.mark.parametrize("variant", [b"1 Q0 d1 1 2.0 t\r\n1 Q0 d2 2 1.0 t\r\n",
                                     b"1\tQ0\td1\t1\t2.0\tt\n1 Q0 d2 2 1.0 t\n\n\n", b"1 Q0 d1 0 2.0 t\n1 Q0 d2 1 1.0 t"])
def test_ordinary_runs_keep_the_fast_path(variant):
    """Windows line ends, tabs, blank lines at the end, ranks from 0 and a last line without its end: read by Arrow,
    not sent to the line reader (which takes several times as long), and read as it reads them."""
    assert _load_fast(variant, "f.run") is not None
    assert eval_verdict(variant) == cat_verdict(variant)

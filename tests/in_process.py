"""`rerank train tk` and `rerank score` run in the test's own process, through the library calls the commands make,
for tests of what training and scoring do and say rather than of their command lines: torch (with the compiler
modules its optimiser imports) and GloVe load once per session here, where each command's start loads them again,
3 to 5 s of every `rerank train` or `rerank score`. Relative paths are read from the current folder, as the
commands read them."""

from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path

import pytest


@pytest.fixture
def in_process_home(home, data_root, monkeypatch) -> Path:
    """The data and the home that the `rerank` commands the test starts read, for its training and scoring here."""
    monkeypatch.setenv("RERANK_DATA", str(data_root))
    return home


def train_tk(output: str | Path, *, init: str | Path | None = None, threads: int | None = None, **fields) -> str:
    """Train GloVe TK into `output` as `rerank train tk -o OUTPUT` with the options `fields` (TrainArgs' names:
    `candidates="all.run"`, `eval_every=1`) does: tk's learning rate unless given, `--init`'s folder resolved and
    `--threads` as model options. Returns what it says, as the command writes it ("rerank: " before each line), less
    the command's closing summary ("trained tk for N steps ..."), which is its own."""
    from rerank.models.base import model_spec
    from rerank.train import TrainArgs, train

    options = {**({"threads": threads} if threads is not None else {}),
               **({"base": str(Path(init).resolve())} if init is not None else {})}
    said: list[str] = []
    train("tk", TrainArgs(**{"train": None, "lr": model_spec("tk").lr, **fields}, output=str(output),
                          model_options=options), log=lambda message: said.append(f"rerank: {message}\n"))
    return "".join(said)


def score(run: str, checkpoint: str | Path, model: str = "tk", *, depth: int = 100, cache: bool = True,
          topics: str | None = None, corpus: str | None = None, stage: str | None = None,
          **options) -> tuple[str, str]:
    """`rerank score --model MODEL --checkpoint CHECKPOINT` of the run text `run` (`stage`: its --name): the run it
    writes and what it says on stderr (its warnings and notes, less the command's closing summary of the pairs
    scored, which is its own)."""
    from rerank.models.base import load_model
    from rerank.runs import RunReader, Stream
    from rerank.score import score_stream

    reader = RunReader(io.StringIO(run), "<stdin>")
    rankings = iter(reader)
    first = [next(rankings)]  # the header is read with the first query
    said, written = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(said):
        scored = score_stream(Stream(reader.header, itertools.chain(first, rankings)),
                              load_model(model, str(checkpoint), **options), depth, cache=cache, stage=stage,
                              topics=topics, corpus=corpus)
        scored.write(written)
    return written.getvalue(), said.getvalue()

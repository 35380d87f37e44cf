"""Shared CLI plumbing: open run inputs (files or stdin) and write streams atomically."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import IO, Callable, Iterator

import click

from ..atomic import atomic_output
from ..errors import DataError, UsageError
from ..params import Option
from ..runs import RunReader, Stream, open_run_file


def declared_options(options, suffix: Callable[[Option], str] = lambda _option: "",
                     required: tuple[str, ...] = ()) -> Callable:
    """Click options made from declared parameters (a stage's or the models'): flag, type, default, choices and help
    said once, where the stage is declared. `suffix` adds to an option's help what the command knows of it."""
    def decorate(command: Callable) -> Callable:
        for option in reversed(list(options)):
            command = click.option(option.flag, option.name, help=option.help + suffix(option),
                                   required=option.name in required, **_click_kind(option))(command)
        return command
    return decorate


def _click_kind(option: Option) -> dict:
    if option.type is bool:  # a switch: given, it sets its flag_value (else the opposite of the default)
        value = option.flag_value if option.flag_value is not None else option.default is not True
        return {"flag_value": value, "default": option.default}
    shown = {"default": option.default, "show_default": option.default is not None}
    if option.choices:
        return {"type": click.Choice(option.choices), **shown}
    if option.path:
        return {"type": click.Path(dir_okay=option.path == "folder", file_okay=option.path == "file"), **shown}
    return {"type": option.type, **shown}


def in_existing_folder(_ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """A file output's check (-o, --plot), as click reads the option: its folder must be there already. A new folder
    was made for it, so a typo (`-o rusn/bm25.run`) put the run where nobody looked."""
    # a path ending in / names a folder, which the output's own check says
    folder = os.path.dirname(path) if path and path != "-" and not path.endswith("/") else ""
    if folder and not os.path.isdir(folder):
        state = (f"{folder} is not a folder" if os.path.exists(folder)
                 else f"folder {folder} does not exist; make it first (mkdir -p {folder})")
        raise UsageError(f"{param.opts[0]} {path}: {state}")
    return path


def run_output_options(command: Callable) -> Callable:
    """-o and --trec, for the stage commands that write a run stream (retrieve, score, fuse; cat words its own):
    its `#` lines carry what the next stage and eval read, and trec_eval stops at the first of them, so each option
    says which to use for what."""
    command = click.option("--trec", "trec_only", is_flag=True,
                           help="Plain TREC lines, as trec_eval reads them (no # header or timings; eval then "
                                "needs --qrels, and the next stage --topics/--corpus).")(command)
    return click.option("-o", "--output", type=click.Path(dir_okay=False), callback=in_existing_folder,
                        help="Write the run here instead of stdout (with # lines: see --trec).")(command)


def typed(*params: str) -> list[str]:
    """Which of the current command's `params` were typed on the command line (not left at their default): an
    option whose default is a value cannot otherwise be told from one given, and some are refused where they would
    be ignored."""
    context = click.get_current_context()
    return [param for param in params if context.get_parameter_source(param) is click.core.ParameterSource.COMMANDLINE]


def refuse_replacing_an_input(option: str, output: str | None, what: str,
                              inputs: list[tuple[str, str | None]]) -> None:
    """An output (`-o`, `--plot`) that names a file the command reads is a typo that loses that file: `retrieve
    --topics q.tsv -o q.tsv` left a run where the topics were, and the run's header named it as its topics.
    `inputs`: (how an input is called, 'the --topics file'; its path)."""
    if not output:
        return
    for called, path in inputs:
        if path and path != "-" and os.path.realpath(path) == os.path.realpath(output):
            raise UsageError(f"{option} {output} is {called}; the {what} would replace it: give it another file")


def check_dataset_option(name: str, runs: list[tuple[str | None, str]]) -> None:
    """`--dataset NAME` (eval, score) stands in for a header that names no data set (a plain TREC run from another
    tool, a QA set's, which ships no qrels file); it does not override a header that names another. `runs`: each
    run's header data set and its source."""
    from ..data import dataset_names, unknown_dataset

    if name not in dataset_names():
        raise unknown_dataset(name, option="--dataset")
    for named, source in runs:
        if named not in (None, name):
            raise UsageError(f"--dataset {name}: {source}'s header names the data set {named}")


def split_label(argument: str) -> tuple[str | None, str]:
    """'LABEL=FILE' -> (LABEL, FILE); a plain FILE (even one with '=' in its name) has no label."""
    label, sep, path = argument.partition("=")
    if Path(argument).exists() or not (sep and label and "/" not in label):
        return None, argument
    if not path:  # it said "run file not found: " (an empty name)
        raise UsageError(f"{argument!r}: LABEL=FILE needs a file after '='")
    return label, path


@contextlib.contextmanager
def open_run_input(path: str | None) -> Iterator[tuple[IO[str], str]]:
    """A run file (`open_run_file`) or stdin for None/'-'; refuses to wait on an interactive terminal."""
    if path in (None, "-"):
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no run given: name a run file or pipe a run stream into this command")
        if hasattr(sys.stdin, "reconfigure"):  # Python reads stdin with surrogateescape: bytes that are not UTF-8
            sys.stdin.reconfigure(errors="strict")  # (a gzipped run piped in) reached the readers as surrogates
        yield sys.stdin, "<stdin>"
        return
    try:
        handle = open_run_file(path)
    except FileNotFoundError:
        raise DataError(f"run file not found: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a folder, not a run file") from None
    with handle:
        yield handle, path


def open_run_inputs(stack: contextlib.ExitStack, paths: list[str | None],
                    labels: list[str | None] | None = None) -> list[tuple[IO[str], str]]:
    """Several runs (`open_run_input` each, closed with `stack`), one at most from stdin: a second '-' read what
    the first had left, nothing, and was called an empty input. `labels`: the LABEL of each LABEL=FILE, for the
    commands that take them (None: the command takes none)."""
    if list(paths).count("-") > 1:
        raise UsageError("only one of the runs can come from stdin ('-')")
    _refuse_a_run_twice(paths, labels)
    return [stack.enter_context(open_run_input(path)) for path in paths]


def _refuse_a_run_twice(paths: list[str | None], labels: list[str | None] | None) -> None:
    """One run file given twice under one name (as typed, or as ./a.run, its absolute path, a link to it): eval and
    budget compared it with itself, and fuse counted its documents twice. Copies labelled apart stay allowed."""
    seen = set()
    for path, label in zip(paths, labels or [None] * len(paths)):
        if path in (None, "-") or not os.path.isfile(path):  # stdin, a pipe, or missing: nothing to compare
            continue
        status = os.stat(path)
        if (label, status.st_dev, status.st_ino) in seen:
            remedy = f", or label the copies (A={path})" if labels is not None else ""
            raise UsageError(f"run {path} is given twice; give it once{remedy}")
        seen.add((label, status.st_dev, status.st_ino))


def write_no_queries(reader: RunReader, source: str, output: str | None, trec_only: bool, why: str) -> None:
    """What a stage writes for an input without queries (an empty output, exit 0: the score stage's rule), with a
    note that says what was written. An empty input is most often the nothing a failed stage upstream wrote: it
    must not come out as a run that looks whole (a header and `# end of run`), and the note asks. A header the
    input had (a stage that found nothing) is kept."""
    had_header = bool(reader.header.fields or reader.header.stages)
    written = f"the output{f' {output}' if output else ''} is"
    said = (f"holds no queries; {why}: {written} its header alone" if had_header else
            f"is empty (did the stage before it fail?); {why}: {written} empty")
    click.echo(f"rerank: note: {source} {said}", err=True)
    write_stream(Stream(reader.header if had_header else None, []), output, trec_only)


def write_stream(stream: Stream, output: str | None, trec_only: bool = False) -> int:
    """Write to stdout or (atomically) to a file; returns the number of queries written."""
    if output not in (None, "-"):  # rerank.checkpoint only then: a stream to stdout need not wait for its import
        from ..checkpoint import refuse_spoiling_an_unlisted_checkpoint

        refuse_spoiling_an_unlisted_checkpoint(output)
    with atomic_output(output) as handle:
        return stream.write(handle, trec_only)

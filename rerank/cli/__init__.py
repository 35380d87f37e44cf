"""The `rerank` command: a thin click layer over the library.

Each command family lives in its own module and registers itself on `cli`; this module turns
RerankError into one line on stderr and a non-zero exit, a closed pipe into a quiet exit, and
Ctrl-C or SIGTERM into an exit that leaves no temporary output behind.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys

import click

from ..errors import RerankError
from ..paths import DATA_ROOT_ENV


def _version(ctx: click.Context, _option: click.Parameter, given: bool) -> None:
    """`rerank --version`: the version run headers and checkpoints record (`rerank_version`), not the installed
    package's metadata, which said 0.1.0 of every commit."""
    if given and not ctx.resilient_parsing:
        from .. import code_version

        click.echo(f"rerank, version {code_version()}")
        ctx.exit()


class _OutputClosed(Exception):
    """A write met a closed pipe (`rerank cat X | head -1`), carried past click as an exception it does not know."""


class _Rerank(click.Group):
    """Two of click's own rules, met inside a command, are passed on to `main`'s, which hold for every command:
    click turned a closed pipe into exit 1, while a command whose last write was cut short (`eval | head -1`) exited
    0, so the same `| head` got either status (raised on as `_OutputClosed`); and it turned Ctrl-C into Abort after
    an empty line on stderr, a blank line before 'rerank: interrupted' in a log (`_interrupted` ends the line of a
    terminal's ^C echo where it has to)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _OutputClosed() from exc
        except KeyboardInterrupt:
            raise click.exceptions.Abort() from None


@click.group(cls=_Rerank, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-root", type=click.Path(file_okay=False), default=None,
              help=f"Folder of data sets in the documented layout (default: ${DATA_ROOT_ENV} or ../shared/data).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version, as run headers record it (with the commit of a git checkout), and exit.")
def cli(data_root: str | None) -> None:
    """Neural re-ranking and evaluation over TREC run streams.

    \b
    rerank retrieve vaswani | rerank eval
    rerank retrieve trec-dl-2019 --candidates bm25 | rerank score --model bert ... | rerank eval
    """
    if data_root:
        os.environ[DATA_ROOT_ENV] = data_root


class _Terminated(SystemExit):
    """SIGTERM (kill, a batch scheduler's time limit) unwinds like Ctrl-C, so temporary outputs are removed; it is
    said once unwound, after what the unwinding said (training's "interrupted at step N"), as Ctrl-C's is."""


def _terminated(signum: int, _frame) -> None:
    raise _Terminated(128 + signum)


def _interrupted() -> None:
    """Ctrl-C's one line; on a terminal, after ending the line that holds its ^C echo."""
    if sys.stderr.isatty():
        click.echo(err=True)
    click.echo("rerank: interrupted", err=True)
    sys.exit(130)


def _note_undecodable() -> None:
    from ..data.formats import undecodable_counts

    for path, count in undecodable_counts().items():
        click.echo(f"rerank: note: {path}: {count} invalid UTF-8 byte sequence(s) read as U+FFFD, the "
                   "replacement character", err=True)


class _ClosedOutput(io.TextIOBase):
    """Standard output closed by the shell (`>&-`), where Python leaves None: writing to it is one line's error,
    not an AttributeError traceback (a run) or nothing at all with exit 0 (click.echo skips None)."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed (>&-); redirect it instead, e.g. > /dev/null")


def _misplaced(exc: click.UsageError) -> str | None:
    """An option of `rerank` itself given after the command (`rerank eval RUN --data-root DIR`): click said "No such
    option '--data-root'. Did you mean '--dataset'?", as if it did not exist."""
    if not isinstance(exc, click.NoSuchOption) or exc.ctx is None or exc.ctx.parent is None:
        return None
    param = next((p for p in cli.params if exc.option_name in p.opts), None)
    if param is None:
        return None
    commands, ctx = [], exc.ctx
    while ctx.parent is not None:
        commands.insert(0, ctx.info_name)
        ctx = ctx.parent
    value = "" if getattr(param, "is_flag", False) else " ..."
    return (f"{exc.option_name} is an option of rerank itself: give it before the command "
            f"(rerank {exc.option_name}{value} {' '.join(commands)} ...)")


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    try:
        from . import commands  # noqa: F401  (registers the commands on `cli`; inside: Ctrl-C comes during it too)

        try:
            cli.main(standalone_mode=False)
        finally:  # before an error's line, which stays the last
            _note_undecodable()
    except (click.exceptions.Abort, KeyboardInterrupt):
        _interrupted()
    except _Terminated as exc:
        click.echo("rerank: terminated", err=True)
        sys.exit(exc.code)
    except click.UsageError as exc:  # a mistyped option or value: one line, as every other mistake gets
        where = f"; see {exc.ctx.command_path} --help" if exc.ctx is not None else ""
        click.echo(f"rerank: error: {_misplaced(exc) or exc.format_message().rstrip('.')}{where}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except RerankError as exc:
        click.echo(f"rerank: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (_OutputClosed, BrokenPipeError):
        # The reader went away (`| head`): it has what it wanted, so stop quietly and succeed, whichever command wrote
        # (a failed stage downstream fails the pipe by its own status). What is left to write goes to /dev/null, as
        # Python's documentation advises, so the flush at exit meets no closed pipe either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except OSError as exc:  # the file system said no (permissions, a full disk): the user's to fix, one line
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"rerank: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)

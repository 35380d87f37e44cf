"""Typed errors with messages meant for people.

Library code raises these; the CLI prints the message on one line and exits non-zero.
Anything else escaping is a bug in rerank, not a user mistake.
"""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 judged query', '3 judged queries': a count in a message, its noun agreeing ("1 judged queries have"
    read as a slip)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def verb(n: int, singular: str, plural: str) -> str:
    """The verb agreeing with a count: verb(1, "has", "have")."""
    return singular if n == 1 else plural


class RerankError(Exception):
    """Base class: a user-facing problem (bad input, missing file, unreachable service)."""

    exit_code = 1


class UsageError(RerankError):
    """Options that contradict each other or values out of range."""

    exit_code = 2


class DataError(RerankError):
    """A data set, file or record that cannot be read as promised."""


class UnknownDatasetError(UsageError):
    """A name that is no data set's (exit 2, as for any value outside an option's choices). `own_index`: what an
    index of one's own needs instead, in the command's words (a pipeline says it of the stage, and the name of its
    `dataset` key, where a misspelling is)."""

    def __init__(self, message: str, name: str, own_index: str = ""):
        super().__init__(message)
        self.name, self.own_index = name, own_index


class FormatError(DataError):
    """A malformed line in a run, qrels or topics file; names the file and line."""

    def __init__(self, source: str, line_no: int | None, problem: str):
        where = f"{source}:{line_no}" if line_no else source
        super().__init__(f"{where}: {problem}")
        self.source, self.line_no, self.problem = source, line_no, problem


class MissingIndexError(RerankError):
    """An index or store that has not been built yet."""


class BusyError(RerankError):
    """Another rerank process is writing the same output (an index, stored encodings, a checkpoint) now."""


class BackendError(RerankError):
    """A search back end (JVM, Elasticsearch, faiss) that cannot start or answer."""


class ParameterError(UsageError):
    """A refused value, its message naming the parameters by their library names in braces (`{max_length} must be
    ...`). Each front end words them: `worded(spell)`; the message itself is the command line's (`--max-length`),
    and a pipeline file says `max_length`."""

    def __init__(self, template: str, *parameters: str):
        self.template, self.parameters = template, parameters
        super().__init__(self.worded(flag))

    def worded(self, spell) -> str:
        return self.template.format(**{name: spell(name) for name in self.parameters})


def flag(parameter: str) -> str:
    """A parameter as the command line spells it: max_length -> --max-length."""
    return "--" + parameter.replace("_", "-")

"""Typed errors with messages meant for people.

Library code raises these; the CLI prints the message on one line and exits non-zero.
Anything else escaping is a bug in rerank, not a user mistake.
"""


class RerankError(Exception):
    """Base class: a user-facing problem (bad input, missing file, unreachable service)."""

    exit_code = 1


class UsageError(RerankError):
    """Options that contradict each other or values out of range."""

    exit_code = 2


class DataError(RerankError):
    """A data set, file or record that cannot be read as promised."""


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

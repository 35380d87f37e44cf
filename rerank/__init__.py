"""rerank: neural re-ranking and evaluation over TREC run streams."""

from functools import lru_cache

__version__ = "0.1.0"


@lru_cache(maxsize=1)
def code_version() -> str:
    """The version of the code that runs, as run headers and checkpoints record it: `__version__`, and where this
    package is a git checkout's rerank/ folder, its commit (`0.1.0+g1a2b3c4d5e6f`, `.dirty` when rerank/ differs from
    it). The package version alone did not tell a reviewer which code to run again: it has been 0.1.0 throughout."""
    import subprocess
    from pathlib import Path

    package = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            # --no-optional-locks: status would refresh and write the index (taking its lock) of a checkout
            done = subprocess.run(["git", "--no-optional-locks", "-C", str(package.parent), *args],
                                  capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):  # no git here, or it hangs
            return None
        return done.stdout if done.returncode == 0 else None

    found = (git("rev-parse", "--show-toplevel", "HEAD") or "").split()
    if len(found) != 2 or Path(found[0]).resolve() / package.name != package:  # installed, or inside another repo
        return __version__
    changed = git("status", "--porcelain", "--", package.name)
    return f"{__version__}+g{found[1][:12]}{'.dirty' if changed is None or changed.strip() else ''}"


def installed_versions(*modules: str) -> dict[str, str | None]:
    """The installed versions of the packages imported as `modules` (None: not installed), by import name: the
    distribution's name may differ (faiss is faiss-cpu or faiss-gpu-cu12). Read from the packages' metadata,
    importing nothing."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    def installed(module: str) -> str | None:
        try:
            return version(module)
        except PackageNotFoundError:  # not the distribution's name: look up which provides it (0.1 s)
            providers = packages_distributions().get(module)
            return version(providers[0]) if providers else None

    return {module: installed(module) for module in modules}

"""Pipeline stages, each declared once by a `StageSpec` beside its function and registered by one call.

A stage kind maps (data set, parameters, input stream or None) to an output stream. Its spec names that function,
the check that refuses what the stage would refuse (run on every stage before any runs: a misspelt model must not
wait for an hour of retrieval), and its parameters as declared `Option`s: a pipeline file's keys and types for
that kind, and the flags of the command that runs the same stage by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .params import Option, Registry, resolved

@dataclass(frozen=True)
class StageSpec:
    kind: str
    run: str  # "module:function"(dataset, params, input stream or None) -> Stream
    check: str  # "module:function"(dataset, params): what the stage would refuse, said before any stage runs
    parameters: tuple[Option, ...]
    # "run": `run` returns a Stream, written to runs/<pipeline>/<name>.run and evaluated; "checkpoint": `run` writes
    # a checkpoint folder at params["output"] (runs/<pipeline>/<name>/), which a later stage's `checkpoint` can name
    output: str = "run"

    def schema(self) -> dict[str, type]:
        """The keys a pipeline file's stage of this kind takes, with their TOML types."""
        return {option.name: option.type for option in self.parameters}

    def run_function(self) -> Callable[..., Any]:
        return resolved(self.run)

    def check_function(self) -> Callable[..., Any]:
        return resolved(self.check)


# The modules that declare stage kinds; imported on use, so that naming kinds imports no model (no torch).
_STAGES: Registry[StageSpec] = Registry("stage kind", ("rerank.retrieve.api", "rerank.score", "rerank.retrieve.fusion",
                                                       "rerank.suggest", "rerank.train_stage"))


def register_stage(spec: StageSpec) -> StageSpec:
    return _STAGES.add(spec.kind, spec)


def stage_specs() -> dict[str, StageSpec]:
    return _STAGES.all()

"""Pipeline stages, each declared once by a `StageSpec` beside its function and registered by one call.

A stage kind maps (data set, parameters, input stream or None) to an output stream. Its spec names that function,
the check that refuses what the stage would refuse (run on every stage before any runs: a misspelt model must not
wait for an hour of retrieval), and its parameters as declared `Option`s: a pipeline file's keys and types for
that kind, and the flags of the command that runs the same stage by hand.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .params import Option

# The modules that declare stage kinds; resolved on use, so that naming kinds imports no model (no torch).
STAGE_MODULES = ("rerank.retrieve.api", "rerank.score", "rerank.retrieve.fusion")


@dataclass(frozen=True)
class StageSpec:
    kind: str
    run: str  # "module:function"(dataset, params, input stream or None) -> Stream
    check: str  # "module:function"(dataset, params): what the stage would refuse, said before any stage runs
    parameters: tuple[Option, ...]

    def schema(self) -> dict[str, type]:
        """The keys a pipeline file's stage of this kind takes, with their TOML types."""
        return {option.name: option.type for option in self.parameters}

    def parameter(self, name: str) -> Option:
        return next(option for option in self.parameters if option.name == name)

    def run_function(self) -> Callable[..., Any]:
        return _function(self.run)

    def check_function(self) -> Callable[..., Any]:
        return _function(self.check)


def _function(where: str) -> Callable[..., Any]:
    module, _, function = where.partition(":")
    return getattr(importlib.import_module(module), function)


_STAGES: dict[str, StageSpec] = {}


def register_stage(spec: StageSpec) -> StageSpec:
    if spec.kind in _STAGES:
        raise ValueError(f"stage kind {spec.kind!r} is registered twice")
    _STAGES[spec.kind] = spec
    return spec


def stage_specs() -> dict[str, StageSpec]:
    for module in STAGE_MODULES:
        importlib.import_module(module)
    return dict(_STAGES)

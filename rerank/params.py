"""Declarations. A model's or a stage's options are each declared once, with type, default, allowed values and help
(as ir_measures declares a measure's parameters); the command line's flags, a pipeline file's keys and their checks
are made from them. Models and stage kinds are declared once each and registered by one call (`Registry`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from .errors import UsageError, flag


@dataclass(frozen=True)
class Option:
    name: str
    type: type = str
    default: Any = None  # the value that means "not asked for"
    help: str = ""
    choices: tuple = ()
    path: str = ""  # "file" or "folder": the command line checks it is not the other
    cli_flag: str = ""  # the command line's spelling where it is not --name (--no-cache sets cache)
    # a switch's value when given on the command line (--no-cache: False); None: the opposite of a bool's default
    flag_value: Any = None

    @property
    def flag(self) -> str:
        return self.cli_flag or flag(self.name)

    def check(self, value: Any, owner: str) -> Any:
        """`value` as this option's type (a `-O KEY=VALUE` option, named alike on the command line and in a file); a
        wrong type or a value outside `choices` is refused, naming both."""
        if self.type is bool and not isinstance(value, bool):  # bool("false") is True
            raise UsageError(f"{self.name} must be true or false, not {value!r} ({owner} option)")
        try:
            typed = value if isinstance(value, self.type) else self.type(value)
        except (TypeError, ValueError):
            raise UsageError(f"{self.name} must be {self.type.__name__}, not {value!r} ({owner} option)") from None
        if self.choices and typed not in self.choices:
            raise UsageError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, not {value!r} "
                             f"({owner} option)")
        return typed


def resolved(path: str) -> Callable[..., Any]:
    """A "module:function" string, imported only when used: naming a model imports that model alone."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


T = TypeVar("T")


class Registry(Generic[T]):
    """Declarations by name. The modules that declare them are imported when the registry is first read, so a
    declaration is made where its code is, by one `add` call."""

    def __init__(self, what: str, modules: tuple[str, ...]):
        self.what, self.modules, self._items = what, modules, {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item
        return item

    def all(self) -> dict[str, T]:
        for module in self.modules:
            importlib.import_module(module)
        return dict(self._items)

"""One way to register the named parts of the product: planners, bounds, allocators, forecasters and
command groups.

Each kind has one Registry, filled in one place (its package's `__init__` or registry module) with one
line per part:

    PLANNERS.register("mpc", "bsp_planner.planners.mpc:MpcPlanner.from_spec")
    ALLOCATORS.register("greedy", GreedyAllocator)

A factory is the object itself or a "module:attribute" string imported on first use, so parts with
heavy or optional dependencies cost nothing until asked for, and nothing registers itself as a side
effect of being imported. `get(name)` refuses an unknown name with an InputError listing the known
ones (naming the setting or flag the name came from).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .errors import InputError

T = TypeVar("T")


class NotInstalled(LookupError):
    """A registered part whose module is not part of this installation."""


def resolve(spec: str) -> Any:
    """The object a 'module:attribute' string names (NotInstalled if the module is absent)."""
    module, _, attr = spec.partition(":")
    if importlib.util.find_spec(module) is None:
        raise NotInstalled(module)
    obj: Any = importlib.import_module(module)  # a missing third-party dependency inside still raises
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named factories of one kind. kind: what a name names in errors ('strategy', 'allocator');
    field: the setting or flag names come from, for errors."""

    def __init__(self, kind: str, *, field: str | None = None) -> None:
        self.kind = kind
        self.field = field
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, factory: T | str) -> None:
        """Add a part; factory: the object, or 'module:attribute' to import when first asked for."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = factory

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)  # registration order

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str, *, hint: str = "") -> T:
        """The factory registered as `name`; an InputError listing the known names otherwise."""
        if name not in self._entries:
            raise InputError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}{hint}", field=self.field)
        entry = self._entries[name]
        if isinstance(entry, str):
            try:
                entry = resolve(entry)
            except NotInstalled as exc:
                raise InputError(
                    f"{self.kind} {name!r} is not part of this installation (module {exc.args[0]} is missing)",
                    field=self.field,
                ) from None
            self._entries[name] = entry
        return entry

    def installed(self) -> Iterator[tuple[str, T]]:
        """(name, factory) for every part whose module is installed, in registration order."""
        for name in list(self._entries):
            try:
                yield name, self.get(name)
            except InputError:
                continue

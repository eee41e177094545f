"""Optional parts of the package (planners, allocators, command groups) that register themselves."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


def import_optional(module: str) -> ModuleType | None:
    """Import a module of this package if it exists; None if it does not (a missing third-party
    dependency inside it still raises, so a broken install is never mistaken for an absent part)."""
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)

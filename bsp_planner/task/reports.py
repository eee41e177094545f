"""Checks of what a task reports (shared by the library and the command worker)."""

from __future__ import annotations

import math

from ..errors import InputError

#: a reported workload above this is refused as absurd (no BSP task has 10^9 units of work per step)
MAX_WORKLOAD = 1e9


def check_report_workload(value, what: str, key: str = "workload") -> float:
    """A finite number in 0..MAX_WORKLOAD, else an InputError naming `what` (task and step)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(float(value))
        or not 0 <= float(value) <= MAX_WORKLOAD
    ):
        raise InputError(f"{what} reported {key} {value!r}; expected a finite number in 0..{MAX_WORKLOAD:g}", field=key)
    return float(value)

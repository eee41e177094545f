"""Allocators: choose a CPU level per task for a time frame of predicted durations.

Every allocator is listed here, one line each (the exact MILP allocator is imported when first asked
for: it needs scipy's HiGHS).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.registry import Registry
from .base import Allocator

ALLOCATORS: Registry[Callable[[], Allocator]] = Registry("allocator", field="planner.allocator")
ALLOCATORS.register("greedy", "bsp_planner.allocation.greedy:GreedyAllocator")
ALLOCATORS.register("threshold", "bsp_planner.allocation.threshold:ThresholdAllocator")
ALLOCATORS.register("exact", "bsp_planner.allocation.exact:ExactAllocator")


def make_allocator(name: str) -> Allocator:
    return ALLOCATORS.get(name)()

"""Allocators: choose a CPU level per task for a time frame of predicted durations."""

from __future__ import annotations

from ..errors import InputError
from ..plugins import import_optional
from .base import Allocator, CpuLevels, discount_weights, frame_time
from .greedy import GreedyAllocator
from .threshold import ThresholdAllocator

ALLOCATORS: dict[str, type[Allocator]] = {"greedy": GreedyAllocator, "threshold": ThresholdAllocator}


def make_allocator(name: str) -> Allocator:
    if name not in ALLOCATORS:
        import_optional(f"{__name__}.exact")  # the exact (MILP) allocator registers itself
    if name not in ALLOCATORS:
        raise InputError(f"unknown allocator {name!r}; known: {', '.join(sorted(ALLOCATORS))}", field="planner.allocator")
    return ALLOCATORS[name]()


__all__ = ["Allocator", "CpuLevels", "GreedyAllocator", "ThresholdAllocator", "discount_weights", "frame_time", "make_allocator", "ALLOCATORS"]

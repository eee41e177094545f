"""`floor`: for every step, the exact minimum over all configurations within the budget (and the
nodes, on a cluster) of the slowest task's time (min-max), with no reconfiguration cost. No strategy
can beat it: the lower bound. The computation lives with the allocators (`allocation/floor.py`), which
use it too.
"""

from __future__ import annotations

import time

import numpy as np

from ..allocation.floor import floor_levels
from ..core.steps import StrategyResult
from .base import PlanningContext


def floor_result(ctx: PlanningContext, actual: np.ndarray, mode: str, settings: object = None) -> StrategyResult:
    """The per-step lower bound (min-max over all configurations, no reconfiguration cost); it has no
    parameters (settings: accepted like every bound's, unused)."""
    t0 = time.perf_counter()
    max_level = ctx.max_level if ctx.exppo_max_level is None else np.maximum(ctx.max_level, ctx.exppo_max_level)
    levels, times = floor_levels(actual, max_level, ctx.budget_steps, ctx.nodes)
    ms = (time.perf_counter() - t0) * 1e3
    m = ctx.steps
    return StrategyResult(
        strategy="floor",
        mode=mode,
        levels=levels,
        step_s=times,
        reconfigured=np.zeros(m, dtype=bool),
        penalty_s=ctx.penalty_s,
        decision_ms=np.zeros(m),
        actions=np.full(m, -1),
        prepare_ms=ms,
        notes={"bound": "per-step min-max, no reconfiguration cost"},
    )

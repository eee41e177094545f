"""The simulator: runs a planner over a job's supersteps and charges what the plan costs.

Before step t the planner decides a configuration from what it was told (forecasts); the step then
takes as long as its slowest task at the *actual* workloads under that configuration. Changing the
configuration after the first step costs the checkpoint penalty C. Pure computation: all inputs are
arrays built elsewhere (see scenario.py).
"""

from __future__ import annotations

import time

import numpy as np

from .allocation.floor import floor_levels
from .planners.base import Planner, PlanningContext
from .steps import StrategyResult as StrategyResult  # re-exported: other modules import it from here


def step_times(actual: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """actual: (tasks, levels, steps); levels: (steps, tasks) -> duration of each step (steps,)."""
    n, _, m = actual.shape
    times: np.ndarray = actual[np.arange(n)[None, :], levels, np.arange(m)[:, None]].max(axis=1)
    return times


def simulate(
    planner: Planner,
    ctx: PlanningContext,
    actual: np.ndarray,
    mode: str = "perfect",
    workloads: np.ndarray | None = None,
) -> StrategyResult:
    """Run one planner over every step. actual: (tasks, levels, steps) true durations; workloads:
    (tasks, steps) the workloads they were computed at (only reported, never planned on; None: zeros).

    The steps go through the one step loop (`loop.run_loop`) with the simulated executor."""
    from .executors.simulated import SimulatedExecutor
    from .loop import run_loop

    if workloads is None:
        workloads = np.zeros((actual.shape[0], actual.shape[2]))
    result = run_loop(planner, ctx, SimulatedExecutor(actual, workloads, ctx.penalty_s), mode=mode)
    result.notes.pop("reconfigure_s", None)  # always reconfigured * penalty_s here
    return result


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

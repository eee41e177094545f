"""The simulator: runs a planner over a job's supersteps and charges what the plan costs.

Before step t the planner decides a configuration from what it was told (forecasts); the step then
takes as long as its slowest task at the *actual* workloads under that configuration. Changing the
configuration after the first step costs the checkpoint penalty C. Pure computation: all inputs are
arrays built elsewhere (see scenario.py).
"""

from __future__ import annotations

import numpy as np

from ..core.steps import StrategyResult
from ..loop import run_loop
from ..planners.base import Planner, PlanningContext
from .executor import SimulatedExecutor


def simulate(
    planner: Planner,
    ctx: PlanningContext,
    actual: np.ndarray,
    mode: str = "perfect",
    workloads: np.ndarray | None = None,
    *,
    decide_ahead: bool = False,
) -> StrategyResult:
    """Run one planner over every step. actual: (tasks, levels, steps) true durations; workloads:
    (tasks, steps) the workloads they were computed at (only reported, never planned on; None: zeros);
    decide_ahead: each step decided while the one before runs (`loop.StepLoop`).

    The steps go through the one step loop (`loop.run_loop`) with the simulated executor."""
    if workloads is None:
        workloads = np.zeros((actual.shape[0], actual.shape[2]))
    executor = SimulatedExecutor(actual, workloads, ctx.penalty_s, ctx.structure)
    result = run_loop(planner, ctx, executor, mode=mode, decide_ahead=decide_ahead)
    result.notes.pop("reconfigure_s", None)  # always reconfigured * penalty_s here
    return result

"""Planners that set one configuration before the first step and never change it: `even` and `exppo`.

`even` is the baseline a user compares a planner against ("what if I had just divided the CPU?"): every
task gets the same CPU level, the highest one whose sum over the tasks fits the budget (capped at each
task's `max_level`); no prediction is read, so it runs online, in perfect and forecast mode alike.
`exppo` (the EXPPO baseline) sizes its configuration for the middle of the workload range.
"""

from __future__ import annotations

import numpy as np

from .base import Decision, Planner, PlanningContext


class EvenPlanner(Planner):
    name = "even"

    def configuration(self, ctx: PlanningContext) -> np.ndarray:
        """(tasks,) the same level for every task: budget_steps // tasks, capped at each task's max_level."""
        max_level = np.asarray(ctx.max_level, dtype=np.int64)
        levels: np.ndarray = np.minimum(max_level, int(ctx.budget_steps) // max(1, max_level.size))
        if ctx.min_level is None:
            return levels
        # Tasks with a floor above the even share hold their floor; the others share what is left evenly:
        # the highest common level whose total, floors included, fits the budget.
        low = np.asarray(ctx.min_level, dtype=np.int64)
        fits = [
            common
            for common in range(int(max_level.max()) + 1)
            if np.maximum(low, np.minimum(max_level, common)).sum() <= ctx.budget_steps
        ]
        out: np.ndarray = np.maximum(low, np.minimum(max_level, max(fits, default=0)))
        return out

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        self.levels = self.configuration(ctx)

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        return Decision(0 if current is not None else 1, self.levels)


class ExppoPlanner(EvenPlanner):
    name = "exppo"

    def configuration(self, ctx: PlanningContext) -> np.ndarray:
        assert ctx.mid_durations is not None  # the scenario always sets them
        max_level = ctx.exppo_max_level if ctx.exppo_max_level is not None else ctx.max_level
        d = ctx.mid_durations[:, :, None]  # one step at the mid-range workload
        levels: np.ndarray = ctx.allocator.allocate(d, np.ones(1), max_level, ctx.budget_steps)
        return levels

"""`even`: the budget split evenly among the tasks, set before the first step and never changed.

The baseline a user compares a planner against ("what if I had just divided the CPU?"): every task
gets the same CPU level, the highest one whose sum over the tasks fits the budget (capped at each
task's `max_level`); no prediction is read, so it runs online, in perfect and forecast mode alike.
"""

from __future__ import annotations

import numpy as np

from .base import Decision, Planner, PlanningContext


def even_levels(max_level: np.ndarray, budget_steps: int) -> np.ndarray:
    """(tasks,) the same level for every task: budget_steps // tasks, capped at each task's max_level."""
    max_level = np.asarray(max_level, dtype=np.int64)
    share = int(budget_steps) // max(1, max_level.size)
    levels: np.ndarray = np.minimum(max_level, share)
    return levels


class EvenPlanner(Planner):
    name = "even"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        self.levels = even_levels(ctx.max_level, ctx.budget_steps)

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        return Decision(0 if current is not None else 1, self.levels)

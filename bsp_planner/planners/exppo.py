"""EXPPO baseline: one configuration for the whole job, sized for the middle of the workload range."""

from __future__ import annotations

import numpy as np

from .base import Decision, Planner, PlanningContext


class ExppoPlanner(Planner):
    name = "exppo"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        assert ctx.mid_durations is not None  # the scenario always sets them
        max_level = ctx.exppo_max_level if ctx.exppo_max_level is not None else ctx.max_level
        d = ctx.mid_durations[:, :, None]  # one step at the mid-range workload
        self.levels: np.ndarray = ctx.allocator.allocate(d, np.ones(1), max_level, ctx.budget_steps)

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        return Decision(0 if current is not None else 1, self.levels)

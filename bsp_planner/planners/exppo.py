"""EXPPO baseline: one configuration for the whole job, sized for the middle of the workload range."""

from __future__ import annotations

import numpy as np

from .base import Decision, Planner


class ExppoPlanner(Planner):
    name = "exppo"

    def reset(self, ctx) -> None:
        super().reset(ctx)
        max_level = ctx.exppo_max_level if ctx.exppo_max_level is not None else ctx.max_level
        d = ctx.mid_durations[:, :, None]  # one step at the mid-range workload
        self.levels = ctx.allocator.allocate(d, np.ones(1), max_level, ctx.budget_steps)

    def decide(self, t, current):
        return Decision(0 if current is not None else 1, self.levels)

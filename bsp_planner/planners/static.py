"""`static:K` (thesis Algorithm 2): configure for the next K steps, every K steps."""

from __future__ import annotations

import numpy as np

from .base import Decision, Planner, PlanningContext, spec_number


class StaticWindowPlanner(Planner):
    """static:K; K (the window, in steps) is its only parameter."""

    def __init__(self, arg: str | None = None, params: object = None) -> None:
        self.params = params
        self.window = spec_number("static", arg, int, 1, lambda k: k >= 1, "static:K with a whole K >= 1")
        self.name = f"static:{self.window}"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        ctx.configs._check(self.window)
        # All of this planner's frames in one batch: far cheaper than one allocator call per window.
        last = ctx.steps if ctx.last_window_full else ctx.steps - self.window + 1
        ctx.configs.ensure_all(self.window, steps=np.arange(0, last, self.window))

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if t % self.window == 0 or current is None:
            # The last window: over the steps left, or (the thesis's way) over a full window past the end.
            j = self.window if self.ctx.last_window_full else min(self.window, self.ctx.steps - t)
            return Decision(j, self.ctx.configs.levels(t, j))
        return Decision(0, current)

"""`static:K` (thesis Algorithm 2): configure for the next K steps, every K steps."""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from .base import Decision, Planner, PlanningContext


class StaticWindowPlanner(Planner):
    """static:K; K (the window, in steps) is its only parameter."""

    def __init__(self, arg: str | None = None, params: object = None) -> None:
        self.params = params
        try:
            self.window = int(arg) if arg is not None else 1
        except ValueError:
            self.window = 0
        if self.window < 1:
            raise InputError(f"expected static:K with a whole K >= 1, got 'static:{arg}'", field="strategies")
        self.name = f"static:{self.window}"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        ctx.configs._check(self.window)
        # All of this planner's frames in one batch: far cheaper than one allocator call per window.
        ctx.configs.ensure_all(self.window, steps=np.arange(0, ctx.steps - self.window + 1, self.window))

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if t % self.window == 0 or current is None:
            j = min(self.window, self.ctx.steps - t)
            return Decision(j, self.ctx.configs.levels(t, j))
        return Decision(0, current)

"""`reactive` (thesis section 7.1): configure from the last observed workloads only.

A baseline that ignores every forecast: before step t it takes the workloads of step t-1 (observed)
as what every coming step will bring, and plans on that with MPC (Algorithm 4, unchanged): it
reconfigures when the allocator's configuration for those workloads saves more over the horizon than
the checkpoint costs. Before the first step nothing has been observed, so it configures for the
middle of the workload range, as `exppo` does. Assumes: workloads change slowly from one step to the
next (it is always one step late).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .base import ConfigTable, PlanningContext
from .mpc import MpcPlanner
from .observed import observations


def last_observed_durations(ctx: PlanningContext, name: str) -> np.ndarray:
    """(steps, tasks, levels, H): row t the durations of step t-1's observed workloads, repeated over
    the forecast horizon (row 0: the middle of the workload range)."""
    obs = observations(ctx, name)
    c = ctx.configs
    m, n, L, H = c.predicted.shape
    w = np.empty((n, m))
    w[:, 0] = float(np.mean(obs.workload_range))
    w[:, 1:] = obs.actual_workloads[:, : m - 1]
    d = obs.durations(w)  # (tasks, levels, steps)
    return np.broadcast_to(d.transpose(2, 0, 1)[:, :, :, None], (m, n, L, H))


class ReactivePlanner(MpcPlanner):
    name = "reactive"

    def reset(self, ctx: PlanningContext) -> None:
        c = ctx.configs
        predicted = last_observed_durations(ctx, self.name)
        super().reset(
            replace(ctx, configs=ConfigTable(predicted, c.allocator, c.max_level, c.budget_steps, c.discount))
        )

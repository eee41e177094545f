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

from .base import Decision, OnlineConfigTable, PlanningContext
from .mpc import MpcPlanner
from .observed import observations


class ReactivePlanner(MpcPlanner):
    """MPC on the last observed workloads (see the module's notes); row t of its table is made before
    step t, so it plans the same offline, online and live."""

    name = "reactive"

    def reset(self, ctx: PlanningContext) -> None:
        self.obs = observations(ctx, self.name)
        self.table = OnlineConfigTable.like(ctx.configs)
        self.middle = np.full(ctx.n_tasks, float(np.mean(self.obs.workload_range)))
        super().reset(replace(ctx, configs=self.table))

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        last = self.obs.last_observed(t)
        w = self.middle if last is None else last
        d = self.obs.durations(w[:, None])  # (tasks, levels, 1), the same for every step ahead
        self.table.reveal(t, np.broadcast_to(d, d.shape[:2] + (self.table.horizon,)))
        return super().decide(t, current)

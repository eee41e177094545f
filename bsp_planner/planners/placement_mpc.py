"""`mpc-place`: MPC that may also move tasks between nodes when a node is the bottleneck.

On a cluster of nodes (`[[node]]`), plain `mpc` plans on the tasks' placement: every change it makes
fits their nodes and is an in-place resize. A node that holds several tasks whose workloads peak
together then caps them all, however much CPU waits on other nodes. Before every step `mpc-place`
also plans (Algorithm 4, the same windows) on a second placement, the one that balances the nodes'
predicted peaks over the horizon (`cluster.place_balanced` on each step's one-pool min-max
configuration), and moves there when that plan, plus one recreate (`recreate_s`: a checkpoint), is
cheaper than staying. Tasks that cannot restore their state (long-running processes) never move: a
candidate that would move one is not considered.

The move is a planner action: the decision carries the configuration, and the placement it runs on is
handed to the executor (the simulation's `ClusterExecutor`) through the run's shared `cluster_run`
table in the context's extras. Without nodes it plans exactly as `mpc`.

Bounds: `optimum` and `floor` on a cluster keep the placement fixed, so they bound the strategies
that do; a strategy that moves tasks is bounded by `optimum/one-pool` and the one-pool floor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..allocation.floor import floor_levels
from ..allocation.nodes import NodeConstrained
from ..model.cluster import place_balanced
from .base import Decision, PlanningContext
from .mpc import MpcPlanner, first_decision

#: ctx.extras key of the run's shared table: {"cluster": Cluster, "recreate_s": float, "inner": str,
#: "node_of": the placement the planner chose (written here, read by the executor)}
CLUSTER_RUN = "cluster_run"


class PlacementMpcPlanner(MpcPlanner):
    name = "mpc-place"

    run: dict[str, Any] | None = None

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        self.run = ctx.extras.get(CLUSTER_RUN)
        if self.run is not None:
            self.node_of = self.run["cluster"].node_of.copy()
            self.run["node_of"] = self.node_of.copy()

    def _allocator(self, node_of: np.ndarray) -> NodeConstrained:
        assert self.run is not None
        return NodeConstrained(self.run["inner"], self.run["cluster"].limits(self.ctx.cpu, node_of))

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if self.run is None:
            return super().decide(t, current)
        ctx, cluster = self.ctx, self.run["cluster"]
        h = min(self.params.horizon, ctx.steps - t)
        pred = ctx.configs.predicted[t, :, :, :h][None]
        stay, windows = self.plan_on(pred, np.ones(1), current, self._allocator(self.node_of))
        demand = ctx.cpu.to_millicores(floor_levels(pred[0], ctx.max_level, ctx.budget_steps)[0])  # (h, tasks)
        there = place_balanced(demand, cluster.capacity_millicores, ctx.cpu.min_millicores)
        moved = there != self.node_of
        if moved.any() and not np.any(moved & ~cluster.can_restore):
            cost, moved_windows = self.plan_on(pred, np.ones(1), None, self._allocator(there))
            if t > 0:
                cost += self.run["recreate_s"]
            if cost < stay:
                self.node_of = there
                self.run["node_of"] = there.copy()
                return first_decision(moved_windows, None)  # a plan without a current configuration never keeps
        return first_decision(windows, current)

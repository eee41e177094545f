"""Simulating on a cluster of nodes: the scenario's hooks for `[[node]]` experiments (see cluster.py).

* `cluster_of`: the experiment's nodes and the tasks' initial placement (given, or balanced from the
  predictions made before the run: the per-step min-max configuration of the last `steps` steps of
  each task's training history, or of the replayed trace when the tasks have no series).
* Interference (interference.py): with a pair profile, a chosen placement avoids the pairs that hurt
  (unless `interference.placement = "blind"`): `place_balanced` with the slowdowns, then moves and
  swaps while they lower the summed node-constrained floor of the predicted steps with the slowdowns
  applied; the scenario applies the slowdowns at that placement.
* `allocator`: the experiment's allocator constrained to the nodes (allocation/nodes.py).
* `run_on_cluster`: one row of the comparison. A planner plans on the nodes (every change it makes
  fits them, so it is an in-place resize, priced `in_place_s`); `STRATEGY/one-pool` plans as today,
  as if the cluster were one machine, and is replayed through the same fit rules (a change that does
  not fit moves tasks: a recreate at `recreate_s`, never priced by its planner, and a stop where a task
  cannot restore). The bounds take the nodes too; `optimum/one-pool` is today's optimum, whose
  distance to the node-constrained `optimum` is the price of nodes.

Costs: `[reconfigure_cost] in_place_s` and `recreate_s` when given, else `penalty_s` for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..allocation import make_allocator
from ..allocation.base import Allocator, CpuLevels
from ..allocation.floor import floor_levels
from ..allocation.nodes import NodeConstrained, NodeLimits
from ..core.errors import InputError
from ..model.cluster import (
    Cluster,
    ClusterExecutor,
    cluster_from_settings,
    improve_placement,
    node_utilisation,
    place_balanced,
)
from ..model.performance import co_location_slowdown
from ..planners.placement_mpc import CLUSTER_RUN

if TYPE_CHECKING:
    from ..core.steps import StrategyResult
    from ..inputs.experiment import Experiment
    from ..inputs.job import Job
    from ..inputs.series import JobSeries
    from ..model.performance import DurationModel

#: Above this many tasks the interference-aware placement keeps its greedy pass: the refinement tries
#: tasks^2 moves and swaps a round, each a node-constrained floor over the predicted steps.
REFINE_MAX_TASKS = 64

#: The suffix of a row planned as one pool and replayed on the nodes.
ONE_POOL = "/one-pool"


def in_place_s(exp: Experiment) -> float:
    v = exp.reconfigure_cost.in_place_s
    return float(exp.penalty_s if v is None else v)


def recreate_s(exp: Experiment) -> float:
    v = exp.reconfigure_cost.recreate_s
    return float(exp.penalty_s if v is None else v)


def allocator(name: str, limits: NodeLimits) -> Allocator:
    make_allocator(name)  # an unknown name is refused the same way as without nodes
    return NodeConstrained(name, limits)


def cluster_of(
    exp: Experiment,
    job: Job,
    cpu: CpuLevels,
    dm: DurationModel,
    job_series: JobSeries | None,
    actual_w: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
    slowdown: np.ndarray | None = None,
) -> Cluster | None:
    """The experiment's cluster with its initial placement (None without [[node]]). slowdown: the pair
    profile's (tasks, tasks) slowdowns (`interference.pair_slowdown`), None without one."""
    if not exp.node:
        return None
    # a process keeps its state in memory, which a recreate loses, unless it restores from its own checkpoint
    restore = [t.kind != "process" or t.restorable for t in job.tasks]
    try:
        cluster = cluster_from_settings(exp.node, job.task_names, restore, cpu)
    except InputError as exc:
        raise InputError(exc.message, path=exp.path, field=exc.field) from exc
    if cluster.placement == "given":
        return cluster
    if job_series is not None:
        length = min(exp.steps, min(len(s.train) for s in job_series.series))
        history = np.stack(
            [sc.transform(s.train[-length:]) for s, sc in zip(job_series.series, job_series.scalers, strict=True)]
        )
    else:
        history = actual_w
    durations = dm.durations(history)
    levels = _one_pool_floor(durations, max_level, budget_steps)
    if exp.interference.placement != "aware":
        slowdown = None
    node_of = place_balanced(cpu.to_millicores(levels), cluster.capacity_millicores, cpu.min_millicores, slowdown)
    if slowdown is not None and node_of.size <= REFINE_MAX_TASKS:
        node_of = _avoiding_pairs(cluster, cpu, durations, slowdown, node_of, max_level, budget_steps)
    return Cluster(cluster.names, cluster.capacity_millicores, node_of, cluster.can_restore, "balanced")


def _avoiding_pairs(
    cluster: Cluster,
    cpu: CpuLevels,
    durations: np.ndarray,
    slowdown: np.ndarray,
    node_of: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
) -> np.ndarray:
    """The placement refined against the model: moves and swaps while they lower the sum over the
    predicted steps of the best step time the nodes allow (the node-constrained per-step floor), every
    task's durations times its co-location slowdown there. durations (tasks, levels, steps)."""
    slots = np.floor(cluster.capacity_millicores / cpu.min_millicores + 1e-9).astype(np.int64)

    def cost(where: np.ndarray) -> float:
        slowed = durations * co_location_slowdown(slowdown, where)[:, None, None]
        return float(floor_levels(slowed, max_level, budget_steps, cluster.limits(cpu, where))[1].sum())

    return improve_placement(node_of, slots, cost)


def _one_pool_floor(durations: np.ndarray, max_level: np.ndarray, budget_steps: int) -> np.ndarray:
    levels: np.ndarray = floor_levels(durations, max_level, budget_steps)[0]
    return levels


def run_on_cluster(scen: Any, strategy: str, mode: str, step_predictions: Callable) -> StrategyResult:
    """One row of a multi-node comparison (see the module docstring). scen: the `scenario.Scenario`;
    step_predictions(scen, mode) -> (context, predictions) for a run planned step by step (scenario.py's,
    handed in: this module sits below the scenario)."""
    from ..loop import run_loop
    from ..planners import BOUNDS
    from ..planners.base import make_planner
    from .executor import SimulatedExecutor
    from .predictions import refuse_offline

    assert scen.cluster is not None
    exp = scen.experiment
    base, one_pool = (strategy[: -len(ONE_POOL)], True) if strategy.endswith(ONE_POOL) else (strategy, False)
    contexts = scen.one_pool_contexts if one_pool else scen.contexts
    if mode not in contexts:
        raise InputError(
            f"{strategy}: one-pool rows are simulated on fixed predictions only (not online or learning)",
            path=exp.path,
            field="strategies",
        )
    ctx = contexts[mode]
    if base in BOUNDS:
        result = BOUNDS.get(base)(ctx, scen.actual, mode, exp.planner)
        result.strategy = strategy
        if not one_pool:
            result.notes["node_utilisation"] = _utilisation(scen, result.levels)
        return result
    planner = make_planner(base, exp.planner)
    predictions = None
    try:
        if mode in scen.step_sources:
            refuse_offline(planner, "online = true" if exp.online else "learn = true")
            ctx, predictions = step_predictions(scen, mode)
        run: dict | None = None
        if not one_pool:  # a planner that moves tasks tells the executor where (planners/placement_mpc.py)
            run = {"cluster": scen.cluster, "recreate_s": recreate_s(exp), "inner": exp.planner.allocator}
            ctx.extras[CLUSTER_RUN] = run
        inner = SimulatedExecutor(scen.actual, scen.actual_workloads, ctx.penalty_s)
        executor = ClusterExecutor(inner, scen.cluster, scen.cpu, in_place_s(exp), recreate_s(exp), run)
        result = run_loop(planner, ctx, executor, mode=mode, predictions=predictions, task_names=scen.task_names)
    except InputError as exc:
        raise (exc if exc.path else InputError(exc.message, path=exp.path, line=exc.line, field=exc.field)) from exc
    result.strategy = strategy
    result.reconfigure_s = np.asarray(result.notes.pop("reconfigure_s"), dtype=np.float64)
    result.notes.update(executor.notes(result.levels))
    # a change the planner priced as in place but that needed a move (its own moves it priced)
    result.notes["unpriced_recreates"] = executor.recreates
    return result


def _utilisation(scen: Any, levels: np.ndarray) -> dict:
    assert scen.cluster is not None
    placement = np.broadcast_to(scen.cluster.node_of, levels.shape)
    return node_utilisation(scen.cluster, scen.cpu.to_millicores(levels), placement)


def one_pool_strategies(scen: Any, strategies: list[str]) -> list[tuple[str, str]]:
    """The extra (mode, strategy) pairs of a multi-node comparison: every strategy but `floor` (and
    `mpc-place`, which as one pool is `mpc`) planned as one pool, in the modes planned on fixed predictions."""
    if scen.cluster is None:
        return []
    return [
        (m, s + ONE_POOL)
        for m in scen.experiment.modes
        if m in scen.one_pool_contexts
        for s in strategies
        if s not in ("floor", "mpc-place")  # mpc-place planned as one pool is mpc
    ]


__all__ = ["ONE_POOL", "run_on_cluster", "one_pool_strategies", "cluster_of", "allocator"]

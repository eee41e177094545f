"""Stage 3 of a scenario: the cluster of `[[node]]` experiments, the tasks' initial placement and its
co-location interference (see model/cluster.py and model/interference.py).

The placement is given, or balanced from the predictions made before the run: the per-step min-max
configuration of the last `steps` steps of each task's training history, or of the replayed trace when the
tasks have no series. With a pair profile a chosen placement avoids the pairs that hurt (unless
`interference.placement = "blind"`): `place_balanced` with the slowdowns, then moves and swaps while they
lower the summed node-constrained floor of the predicted steps with the slowdowns applied. The slowdowns at
that placement then multiply the durations, the true ones and the planner's alike.

Costs: `[reconfigure_cost] in_place_s` and `recreate_s` when given, else `penalty_s` for both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..allocation.base import CpuLevels
from ..allocation.floor import floor_levels
from ..allocation.node_limits import NodeLimits
from ..core.errors import InputError
from ..inputs.experiment import Experiment
from ..model import interference
from ..model.cluster import Cluster, cluster_from_settings, improve_placement, place_balanced
from ..model.performance import InterferedDurations, co_location_slowdown
from .durations import ScenarioDurations
from .read import ScenarioInputs

#: Above this many tasks the interference-aware placement keeps its greedy pass: the refinement tries
#: tasks^2 moves and swaps a round, each a node-constrained floor over the predicted steps.
REFINE_MAX_TASKS = 64


@dataclass(frozen=True)
class Placement:
    cluster: Cluster
    limits: NodeLimits  # what each node holds at the initial placement, for the node-aware allocators
    interference: str  # the report's line about co-location interference
    in_place_s: float  # what a change that fits the nodes costs (a resize in place)
    recreate_s: float  # what a change that moves a task costs


def place_tasks(inputs: ScenarioInputs, durations: ScenarioDurations) -> tuple[Placement | None, ScenarioDurations]:
    """The experiment's cluster and placement (None without [[node]]), and the durations with the
    co-location slowdowns at that placement applied."""
    exp = inputs.experiment
    if not exp.node:
        return None, durations
    # tasks that share a node slow each other (a pair profile, read once here), or not at all
    slowdown, measured = interference.pair_slowdown(exp, inputs.job.task_names)
    cluster = _cluster(inputs, durations, slowdown)
    factor = None if slowdown is None else co_location_slowdown(slowdown, cluster.node_of)
    note = interference.note(exp, cluster, factor, measured, inputs.job.task_names)
    if factor is not None:
        durations = _slowed(durations, factor)
    placement = Placement(
        cluster, cluster.limits(durations.cpu), note, _cost(exp, "in_place_s"), _cost(exp, "recreate_s")
    )
    return placement, durations


def _cost(exp: Experiment, name: str) -> float:
    v = getattr(exp.reconfigure_cost, name)
    return float(exp.penalty_s if v is None else v)


def _slowed(durations: ScenarioDurations, factor: np.ndarray) -> ScenarioDurations:
    """The truth and the planning model both carry each task's slowdown at the initial placement."""
    actual = durations.actual * factor[:, None, None]
    same = durations.planned_at_actual is durations.actual
    return dataclasses.replace(
        durations,
        model=InterferedDurations(durations.model, factor),
        true_model=None if durations.true_model is None else InterferedDurations(durations.true_model, factor),
        actual=actual,
        planned_at_actual=actual if same else durations.planned_at_actual * factor[:, None, None],
    )


def _cluster(inputs: ScenarioInputs, durations: ScenarioDurations, slowdown: np.ndarray | None) -> Cluster:
    exp, job, cpu = inputs.experiment, inputs.job, durations.cpu
    # a process keeps its state in memory, which a recreate loses, unless it restores from its own checkpoint
    restore = [t.kind != "process" or t.restorable for t in job.tasks]
    try:
        cluster = cluster_from_settings(exp.node, job.task_names, restore, cpu)
    except InputError as exc:
        raise InputError(exc.message, path=exp.path, field=exc.field) from exc
    total = float(cluster.capacity_millicores.sum())
    if cpu.budget_millicores > total + 1e-9:  # a budget no configuration that fits the nodes can spend
        raise InputError(
            f"a budget of {cpu.budget_millicores:g}m is more than the nodes give together ({total:g}m): lower it "
            "or give the nodes more CPU",
            path=exp.path,
            field="cpu.budget_millicores",
        )
    if cluster.placement == "given":
        return cluster
    if inputs.job_series is not None:
        js = inputs.job_series
        length = min(exp.steps, min(len(s.train) for s in js.series))
        history = np.stack([sc.transform(s.train[-length:]) for s, sc in zip(js.series, js.scalers, strict=True)])
    else:
        history = inputs.actual_workloads
    predicted = durations.model.durations(history)
    levels = floor_levels(predicted, durations.max_level, durations.budget_steps)[0]
    if exp.interference.placement != "aware":
        slowdown = None
    node_of = place_balanced(cpu.to_millicores(levels), cluster.capacity_millicores, cpu.min_millicores, slowdown)
    if slowdown is not None and node_of.size <= REFINE_MAX_TASKS:
        node_of = _avoiding_pairs(cluster, cpu, predicted, slowdown, node_of, durations)
    return Cluster(cluster.names, cluster.capacity_millicores, node_of, cluster.can_restore, "balanced")


def _avoiding_pairs(
    cluster: Cluster,
    cpu: CpuLevels,
    predicted: np.ndarray,
    slowdown: np.ndarray,
    node_of: np.ndarray,
    durations: ScenarioDurations,
) -> np.ndarray:
    """The placement refined against the model: moves and swaps while they lower the sum over the
    predicted steps of the best step time the nodes allow (the node-constrained per-step floor), every
    task's durations times its co-location slowdown there. predicted (tasks, levels, steps)."""
    slots = np.floor(cluster.capacity_millicores / cpu.min_millicores + 1e-9).astype(np.int64)

    def cost(where: np.ndarray) -> float:
        slowed = predicted * co_location_slowdown(slowdown, where)[:, None, None]
        limits = cluster.limits(cpu, where)
        return float(floor_levels(slowed, durations.max_level, durations.budget_steps, limits)[1].sum())

    return improve_placement(node_of, slots, cost)

"""Stage 5 of a scenario: the planning contexts, one per mode, that every planner plans in.

A context holds the budget, the CPU levels, the reconfiguration cost and a table of the best configuration
for every frame of predicted steps, made by the experiment's allocator (constrained to the nodes on a
cluster). On a cluster each fixed-prediction mode also gets a one-pool context: the same predictions
planned as if the cluster were one machine, which the comparison replays through the nodes' fit rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..allocation import make_allocator
from ..allocation.base import Allocator
from ..allocation.nodes import NodeConstrained
from ..allocation.structured import JobConstrained
from ..core.errors import InputError
from ..inputs.experiment import Experiment
from ..planners.base import ConfigTable, PlanningContext
from ..planners.observed import attach as attach_observations
from .durations import ScenarioDurations
from .forecasts import ModePredictions
from .placement import Placement
from .predictions import OnlineConfigTable


@dataclass(frozen=True)
class ContextFactory:
    """Makes a planning context from predicted durations (steps, tasks, levels, H), or from (steps, H) for an
    empty table whose rows a run makes step by step."""

    experiment: Experiment
    durations: ScenarioDurations
    placement: Placement | None

    def __call__(self, predicted: np.ndarray | tuple[int, int], one_pool: bool = False) -> PlanningContext:
        exp, d = self.experiment, self.durations
        p = exp.planner
        n = d.max_level.size
        limits = None if self.placement is None or one_pool else self.placement.limits
        allocator: Allocator = make_allocator(p.allocator) if limits is None else NodeConstrained(p.allocator, limits)
        structure = None if d.structure.is_independent else d.structure
        if d.constrained:
            if limits is not None:  # node capacities count absolute levels; the floors' shift would hide them
                raise InputError(
                    "a job whose tasks declare after or min_millicores cannot be planned on [[node]]s yet",
                    path=exp.path,
                    field="node",
                )
            allocator = JobConstrained(allocator, d.min_level, d.structure)
        configs: ConfigTable
        if isinstance(predicted, tuple):
            shape = (predicted[0], n, d.cpu.n_levels, predicted[1])
            configs = OnlineConfigTable(shape, allocator, d.max_level, d.budget_steps, p.discount, structure)
        else:
            configs = ConfigTable(predicted, allocator, d.max_level, d.budget_steps, p.discount, structure)
        mid = np.full((n,), sum(exp.workload_range) / 2)
        return PlanningContext(
            steps=exp.steps,
            cpu=d.cpu,
            max_level=d.max_level,
            penalty_s=exp.penalty_s if self.placement is None else self.placement.in_place_s,
            configs=configs,
            discount=p.discount,
            mid_durations=d.model.durations(mid[:, None])[:, :, 0],
            exppo_max_level=d.exppo_max_level,
            nodes=limits,
            structure=structure,
            min_level=d.min_level if d.min_level.any() else None,
            last_window_full=exp.compat == "thesis",
        )


def planning_contexts(
    factory: ContextFactory, actual_workloads: np.ndarray, predictions: dict[str, ModePredictions]
) -> tuple[dict[str, PlanningContext], dict[str, PlanningContext]]:
    """Per mode: the context planners plan in, and on a cluster the one-pool context (fixed predictions only)."""
    exp, model = factory.experiment, factory.durations.model
    contexts: dict[str, PlanningContext] = {}
    one_pool: dict[str, PlanningContext] = {}
    for mode, pred in predictions.items():
        if pred.predicted is None:
            contexts[mode] = factory((exp.steps, pred.horizon))
            continue
        wanted = [(contexts, False)] + ([(one_pool, True)] if factory.placement is not None else [])
        for into, pooled in wanted:
            into[mode] = factory(pred.predicted, one_pool=pooled)
            attach_observations(into[mode], actual_workloads, pred.forecasts, model.durations, exp.workload_range)
    return contexts, one_pool

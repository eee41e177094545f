"""Stage 2 of a scenario: the duration model at the experiment's CPU levels, and what the tasks really take.

The planner predicts from the profile's interpolated model; the tasks follow the true profile when one is
given, else the same model. Both are tabulated at the actual workloads: (tasks, levels, steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..allocation.base import CpuLevels
from ..core.errors import InputError
from ..core.structure import StepStructure
from ..inputs.profiles import Profile
from ..model.performance import DurationModel, PerformanceModel
from .read import ScenarioInputs


@dataclass(frozen=True)
class ScenarioDurations:
    cpu: CpuLevels
    model: DurationModel  # what the planner predicts with
    true_model: DurationModel | None  # what the tasks really follow, when not `model`
    actual: np.ndarray  # (tasks, levels, steps) true durations at the actual workloads
    planned_at_actual: np.ndarray  # (tasks, levels, steps) the planner's model at the actual workloads
    max_level: np.ndarray  # (tasks,) the highest level a planner may give a task
    exppo_max_level: np.ndarray  # (tasks,) the same for exppo
    budget_steps: int  # CPU steps above every task's minimum that the budget allows
    min_level: np.ndarray  # (tasks,) the lowest level a planner may give a task (its min_millicores)
    structure: StepStructure  # which tasks wait for which inside a step (the job's `after`)

    @property
    def constrained(self) -> bool:
        """The job asks for more than the experiment's CPU range with independent tasks."""
        return bool(self.min_level.any()) or not self.structure.is_independent


def model_durations(inputs: ScenarioInputs) -> ScenarioDurations:
    exp, job = inputs.experiment, inputs.job
    c = exp.cpu
    top = max(c.max_millicores, c.exppo_max_millicores or c.max_millicores)
    cpu = CpuLevels(c.min_millicores, c.step_millicores, top, c.budget_millicores)
    n = len(job.tasks)

    def at_levels(profile: Profile) -> DurationModel:
        model = PerformanceModel(profile, job.task_names, exp.interpolation, exp.out_of_grid)
        return model.at_levels(cpu.millicores, monotone=exp.compat != "thesis")  # the thesis used the raw spline

    dm = at_levels(inputs.profile)
    true_dm = None if inputs.true_profile is None else at_levels(inputs.true_profile)
    max_level = np.array(
        [cpu.level_of(c.max_millicores if t.max_millicores is None else t.max_millicores) for t in job.tasks]
    )
    min_level = np.array([0 if t.min_millicores is None else cpu.level_of(t.min_millicores) for t in job.tasks])
    exppo_max = np.full(n, cpu.level_of(c.exppo_max_millicores)) if c.exppo_max_millicores else max_level
    budget_steps = cpu.budget_steps(n)
    if min_level.sum() > budget_steps:
        raise InputError(
            f"the tasks' min_millicores add up to {c.min_millicores * n + c.step_millicores * min_level.sum():g}m, "
            f"more than the budget's {c.budget_millicores:g}m",
            path=job.path,
            field="task.min_millicores",
        )
    actual = (true_dm or dm).durations(inputs.actual_workloads)
    planned_at_actual = actual if true_dm is None else dm.durations(inputs.actual_workloads)
    return ScenarioDurations(
        cpu,
        dm,
        true_dm,
        actual,
        planned_at_actual,
        max_level,
        exppo_max,
        budget_steps,
        min_level,
        job.structure,
    )

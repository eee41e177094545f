"""From an experiment file to arrays: the I/O edge in front of the planners and the simulator.

`build_scenario` is a pipeline of five stages, called in this order, each taking what the ones before it
produced and returning a typed value; none calls back into an earlier one:

    read_inputs (read.py)         the experiment's files, read and checked once      -> ScenarioInputs
    model_durations (durations.py) the duration model and the true durations          -> ScenarioDurations
    place_tasks (placement.py)    the nodes, the placement and its interference      -> Placement, durations
    predict (forecasts.py)        per mode, what the planner is told                 -> ModePredictions
    planning_contexts (contexts.py) per mode, the context planners plan in           -> PlanningContext

A Scenario holds the result: the actual workloads and durations and, per mode, the planning context whose
predicted durations come from perfect knowledge or from forecasts. `runs.py` runs strategies over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..allocation.base import CpuLevels
from ..core.errors import InputError
from ..inputs.experiment import Experiment
from ..inputs.job import Job
from ..inputs.series import JobSeries
from ..model.cluster import Cluster
from ..model.performance import DurationModel
from ..planners.base import PlanningContext
from .contexts import ContextFactory, planning_contexts
from .durations import model_durations
from .forecasts import predict
from .placement import Placement, place_tasks
from .read import read_inputs


@dataclass
class Scenario:
    experiment: Experiment
    job: Job
    job_series: JobSeries | None  # None: the tasks have no series (workloads observed as the job runs)
    model: DurationModel
    cpu: CpuLevels
    actual_workloads: np.ndarray  # (tasks, steps)
    actual: np.ndarray  # (tasks, levels, steps) true durations
    # (tasks,) True where a task has a series (its workloads are assigned from it);
    # False where only the task knows them (it reports them as it runs)
    known_workloads: np.ndarray
    contexts: dict[str, PlanningContext]
    forecast_label: dict[str, str]
    # Online or learning runs (see predictions.py): per mode, where each run's expected workloads come
    # from; each run gets a fresh context whose rows are made step by step.
    step_sources: dict[str, tuple]
    true_model: DurationModel | None  # what the tasks really follow, when not the planning profile
    make_context: ContextFactory  # predicted durations, or (steps, H) for an online table -> a context
    # [[node]]: the cluster the contexts plan on (None: one pool), its costs and interference; and per mode the
    # same predictions planned as one pool, which the comparison replays through the nodes' fit rules (runs.py).
    placement: Placement | None = None
    cluster: Cluster | None = None
    one_pool_contexts: dict[str, PlanningContext] = field(default_factory=dict)
    interference: str | None = None  # on nodes: the report's line about co-location interference

    @property
    def task_names(self) -> list[str]:
        return self.job.task_names

    @property
    def decide_ahead(self) -> bool:
        """Each step decided while the one before runs (`loop.StepLoop`): the experiment's
        planner.decide_ahead (off unless the experiment asks; observe-mode jobs only)."""
        return self.experiment.planner.decides_ahead(self.job.sync)


def with_path(exc: InputError, exp: Experiment) -> InputError:
    """The error, naming the experiment file when it names no file of its own."""
    return exc if exc.path else InputError(exc.message, path=exp.path, line=exc.line, field=exc.field)


def planning_inputs(exp: Experiment):
    """What every planning context of `exp` is made from: its inputs, its durations, its placement on nodes
    (None without nodes) and the factory of its contexts (InputError as read; callers name the file)."""
    inputs = read_inputs(exp)
    durations = model_durations(inputs)
    placement, durations = place_tasks(inputs, durations)
    return inputs, durations, placement, ContextFactory(exp, durations, placement)


def build_scenario(exp: Experiment) -> Scenario:
    try:
        inputs, durations, placement, make_context = planning_inputs(exp)
        predictions = predict(inputs, durations)
        contexts, one_pool = planning_contexts(make_context, inputs.actual_workloads, predictions)
    except InputError as exc:
        raise with_path(exc, exp) from exc
    return Scenario(
        experiment=exp,
        job=inputs.job,
        job_series=inputs.job_series,
        model=durations.model,
        cpu=durations.cpu,
        actual_workloads=inputs.actual_workloads,
        actual=durations.actual,
        known_workloads=inputs.known_workloads,
        contexts=contexts,
        forecast_label={m: p.label for m, p in predictions.items()},
        step_sources={m: p.step_source for m, p in predictions.items() if p.step_source is not None},
        true_model=durations.true_model,
        make_context=make_context,
        placement=placement,
        cluster=None if placement is None else placement.cluster,
        one_pool_contexts=one_pool,
        interference=None if placement is None else placement.interference,
    )

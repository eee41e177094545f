"""Predictions made step by step (the `loop.Predictions` of an online or learning run).

Before step t, row t of the planning context's predicted durations (tasks, levels, H) is made from
the workloads expected for steps t..t+H-1 (perfect knowledge, the offline forecast matrix, or an
online forecast from the history observed so far) and the performance model as it stands (the
profile's, or the profile's corrected by what was measured). After the step, the online forecaster
observes the workloads and the model learns from the durations. Once written, row t never changes:
it is what was known before step t.

With a decision lead (`loop.StepLoop(decide_ahead=True)`) row t+1 is made before step t is observed:
the online forecast, made from the history through step t-1, is for steps t..t+H; row t+1 takes it from
its second column on and repeats its last (the forecast of t+H). Perfect knowledge and an offline forecast
matrix are known before the run, so their rows do not change with the lead.

Only planners that decide one step at a time can run this way; one that plans the whole job before
the first step (dp) needs every row at once and is refused.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..core.errors import InputError, InputWarning
from ..core.steps import StepObservation
from ..model.learning import LearnedDurations
from ..model.performance import DurationModel
from ..planners.base import OnlineConfigTable
from ..planners.observed import Observations

#: A forecast this far outside the workload range (negative, or above twice its high end) is not a forecast
#: of this job's workloads: most likely files of another job, or values not scaled onto the range.
FAR_OUTSIDE_SHARE = 0.01


def warn_if_far_outside(
    forecasts: np.ndarray, workload_range: tuple[float, float], label: str, tasks: list[str]
) -> None:
    """Warn when more than 1% of a task's forecasts (tasks, steps, H) are negative or above twice the
    range's high end: they are clipped to the range's edges, which hides that they are wrong."""
    low, high = workload_range
    far = (forecasts < min(0.0, low)) | (forecasts > 2 * high)
    share = far.reshape(far.shape[0], -1).mean(axis=1)
    bad = [(t, s) for t, s in zip(tasks, share, strict=True) if s > FAR_OUTSIDE_SHARE]
    if bad:
        worst = ", ".join(f"{t} {100 * s:.0f}%" for t, s in bad[:4]) + (", ..." if len(bad) > 4 else "")
        warnings.warn(
            f"forecasts {label}: values far outside the workload range [{low:g}, {high:g}] (negative or above "
            f"{2 * high:g}) for task(s) {worst}; they are clipped to the range. Are these forecasts of this "
            "job, scaled onto its workload range?",
            InputWarning,
            stacklevel=2,
        )


class StepPredictions:
    """Fills a context's rows before each step and learns after it (implements `loop.Predictions`).

    workloads: where the expected workloads come from, one of
      ("actual", (tasks, steps) array): perfect knowledge of the workloads,
      ("matrix", (tasks, steps, H) array): an offline forecast matrix,
      ("online", OnlineForecasts): forecasts from the history observed so far.
    model: a DurationModel (fixed) or LearnedDurations (learns from every measurement).
    workload_range: (low, high) forecasts are clipped to, as offline.
    observations: what the planners that learn from the run read (`Observations.stepwise`): each
    forecast is recorded before its step and each step's workloads after it.
    """

    def __init__(
        self,
        table: OnlineConfigTable,
        workloads: tuple[str, Any],
        model: DurationModel | LearnedDurations,
        workload_range: tuple[float, float],
        observations: Observations | None = None,
    ) -> None:
        self.table = table
        self.observations = observations
        self.kind, self.source = workloads
        if self.kind not in ("actual", "matrix", "online"):
            raise ValueError(f"unknown source of workloads {self.kind!r}")
        self.model = model
        self.workload_range = workload_range
        self.horizon = table.horizon
        self.observed_steps = 0  # steps learned from (after_step): the online history ends at step observed_steps - 1

    def expected_workloads(self, t: int) -> np.ndarray:
        """(tasks, H) workloads expected for steps t..t+H-1 (from the history observed so far)."""
        h = self.horizon
        if self.kind == "actual":
            w = self.source
            idx = np.minimum(np.arange(t, t + h), w.shape[1] - 1)  # edge padding, never read past the last step
            return w[:, idx]
        if self.kind == "matrix":
            return np.clip(self.source[:, t, :], *self.workload_range)
        fc = self.source.forecast()  # for steps observed_steps.. on
        lead = t - self.observed_steps  # 1 where step t is decided before step t-1 is observed
        if lead > 0:
            fc = np.concatenate([fc[:, lead:], np.repeat(fc[:, -1:], min(lead, fc.shape[1]), axis=1)], axis=1)
        return np.clip(fc, *self.workload_range)

    def before_step(self, step: int) -> None:
        expected = self.expected_workloads(step)
        self.table.reveal(step, self.model.durations(expected))
        if self.observations is not None:
            self.observations.record_forecast(step, expected)

    def after_step(self, step: int, levels: np.ndarray, observation: StepObservation) -> dict | None:
        self.observed_steps = step + 1
        if self.kind == "online":
            self.source.observe(observation.workloads)
        if self.observations is not None:
            self.observations.observe(step, observation.workloads)
        if isinstance(self.model, LearnedDurations):
            w = np.clip(observation.workloads, *self.workload_range)
            return self.model.learn(step, w, levels, observation.duration_s)
        return None


def refuse_offline(planner, why: str) -> None:
    if getattr(planner, "offline", False):
        raise InputError(
            f"strategy '{planner.name}' plans the whole job before the first step, so it cannot run with {why}; "
            "leave it out (--strategies) or run without it",
            field="strategies",
        )

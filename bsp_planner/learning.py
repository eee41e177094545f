"""A performance model that learns from what it measures (the idea of Cilantro, OSDI'23, kept simple).

The profile's interpolated model is the prior. Each task carries one multiplicative correction c_i:
its predicted duration at any (workload, CPU) is c_i times the profile's. After every step, each
task's measured duration d and the profile's prediction p at the workload and CPU it really ran with
give a residual r = log(d / p); the correction is the mean of the `window` most recent residuals,
shrunk towards the profile by how few measurements there are so far (k of them, all steps counted):

    log c_i = mean(recent r) * k / (k + prior_weight),

so with no measurement c_i = 1 (the profile), after k consistent measurements the profile keeps
weight prior_weight / (k + prior_weight) (k = 1, prior_weight = 1: halfway), its weight fades as
measurements accumulate, and a machine that drifts is followed within `window` steps. One number per task, readable in the report: "task x runs 1.38x slower than its profile".

A measurement nothing should learn from is refused with the task and step named: a duration that is
not a finite positive number, or one more than `max_ratio` times away from the model's prediction.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .performance import DurationModel
from .settings import setting


@dataclass
class LearningSettings:
    """The experiment's [learning] table."""

    window: int = setting(20, ge=1)  # steps of residuals the correction is fitted to
    prior_weight: float = setting(1.0, ge=0)  # how many measurements the profile counts as (fades as they accumulate)
    max_ratio: float = setting(10.0, gt=1)  # a measurement this many times off the model is refused


class DurationCorrection:
    """Per-task multiplicative corrections learned from (predicted by the profile, measured) pairs."""

    def __init__(self, task_names: list[str], settings: LearningSettings | None = None) -> None:
        self.task_names = list(task_names)
        self.settings = settings or LearningSettings()
        self._residuals = [deque(maxlen=self.settings.window) for _ in task_names]
        self.measurements = 0  # steps learned from so far
        self.factors = np.ones(len(task_names))  # (tasks,) current c_i

    def check(self, step: int, prior_s: np.ndarray, measured_s: np.ndarray) -> None:
        """Refuse measurements that are not durations, or absurdly far from what the model predicts."""
        predicted = self.factors * prior_s
        for i, name in enumerate(self.task_names):
            d = float(measured_s[i])
            if not (np.isfinite(d) and d > 0):
                raise InputError(f"task '{name}', step {step}: measured duration {d!r} s is not a finite positive number of seconds", field="duration_s")
            ratio = d / predicted[i]
            if not 1.0 / self.settings.max_ratio <= ratio <= self.settings.max_ratio:
                raise InputError(
                    f"task '{name}', step {step}: measured {d:.6g} s where the model predicts {predicted[i]:.6g} s "
                    f"({ratio:.3g}x); a measurement more than {self.settings.max_ratio:g}x off is refused as absurd",
                    field="learning.max_ratio",
                )

    def update(self, step: int, prior_s: np.ndarray, measured_s: np.ndarray) -> None:
        """Learn from one step: prior_s, measured_s (tasks,) seconds, at the points the tasks ran."""
        prior_s = np.asarray(prior_s, dtype=np.float64)
        measured_s = np.asarray(measured_s, dtype=np.float64)
        self.check(step, prior_s, measured_s)
        self.measurements += 1
        k = self.measurements
        shrink = k / (k + self.settings.prior_weight)
        for i, q in enumerate(self._residuals):
            q.append(float(np.log(measured_s[i] / prior_s[i])))
            self.factors[i] = float(np.exp(shrink * sum(q) / len(q)))


class LearnedDurations:
    """Durations from the profile model times each task's learned correction.

    durations(w): workloads (tasks, *shape) -> seconds (tasks, levels, *shape), like DurationModel.
    """

    def __init__(self, model: DurationModel, task_names: list[str], settings: LearningSettings | None = None) -> None:
        self.model = model
        self.correction = DurationCorrection(task_names, settings)

    def durations(self, workloads: np.ndarray) -> np.ndarray:
        d = self.model.durations(workloads)
        return d * self.correction.factors.reshape((-1,) + (1,) * (d.ndim - 1))

    def at_points(self, workloads: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """The profile's (uncorrected) durations (tasks,) at each task's workload and CPU level."""
        d = self.model.durations(np.asarray(workloads, dtype=np.float64)[:, None])[:, :, 0]  # (tasks, levels)
        return d[np.arange(d.shape[0]), levels]

    def learn(self, step: int, workloads: np.ndarray, levels: np.ndarray, measured_s: np.ndarray) -> dict:
        """Update from one step; returns predicted vs measured before and after learning, per task."""
        prior = self.at_points(workloads, levels)
        before = prior * self.correction.factors
        self.correction.update(step, prior, measured_s)
        after = prior * self.correction.factors
        return {
            "step": step,
            "workload": np.asarray(workloads, dtype=np.float64).copy(),
            "level": np.asarray(levels).copy(),
            "measured_s": np.asarray(measured_s, dtype=np.float64).copy(),
            "predicted_before_s": before,
            "predicted_after_s": after,
            "factor": self.correction.factors.copy(),
        }

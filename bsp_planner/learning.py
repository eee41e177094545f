"""A performance model that learns from what it measures (the idea of Cilantro, OSDI'23, kept simple).

The profile's interpolated model is the prior. Each task carries a multiplicative correction that
may depend on the CPU and the workload it runs at:

    duration(w, c) = profile(w, c) * exp(a + b * log(c / c_ref) + g * log(w / w_ref))

with c_ref, w_ref the middle (geometric) of the CPU levels and of the workload range. After every step,
each task's measured duration d and the profile's prediction p at the workload and CPU it really ran
with give a residual r = log(d / p). Over the `window` most recent residuals of a task:

* the level, the log correction at the centre of those measurements, is their mean shrunk towards
  the profile while measurements are few: mean(recent r) * k / (k + prior_weight) after k
  measurements in all (k = 1, prior_weight = 1: halfway), so the profile's weight fades as they
  accumulate;
* the slopes b and g (how the gap changes per e-fold of CPU or workload) are a ridge fit
  (`slope_weight`) of the residuals' deviations from their mean on the features' deviations from
  theirs, over the longer `slope_window` (a machine's shape changes slowly, and a planner moves a task
  over few CPU levels within 20 steps), so they move only when the measurements spread over CPU
  levels or workloads and disagree with the profile's shape (a profile measured on another machine
  class); measurements at one point leave the profile's shape as it is.

A few numbers per task, readable in the report ("task x runs 1.38x its profile at 1000m, 9% more per
doubling of CPU"), and a machine that drifts is followed within `window` steps. Durations stay
non-increasing in CPU after the correction, as the allocator relies on.

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
    slope_weight: float = setting(0.3, ge=0)  # ridge on the CPU and workload slopes of the correction
    slope_window: int = setting(200, ge=1)  # steps the slopes are fitted to (a machine's shape changes slowly)
    max_ratio: float = setting(10.0, gt=1)  # a measurement this many times off the model is refused


class DurationCorrection:
    """Per-task corrections learned from (profile's prediction, measurement) pairs.

    cpu_ref, workload_ref: where the correction's intercept applies (millicores, workload units).
    coef: (tasks, 3) the current (a, b, g) of every task.
    """

    def __init__(
        self,
        task_names: list[str],
        settings: LearningSettings | None = None,
        *,
        cpu_ref: float = 1000.0,
        workload_ref: float = 30.0,
    ) -> None:
        self.task_names = list(task_names)
        self.settings = settings or LearningSettings()
        self.cpu_ref = float(cpu_ref)
        self.workload_ref = float(workload_ref)
        self._rows: list[deque] = [deque(maxlen=self.settings.window) for _ in task_names]  # (r, x_cpu, x_w)
        self._long: list[deque] = [deque(maxlen=self.settings.slope_window) for _ in task_names]
        self.measurements = 0  # steps learned from so far
        n = len(task_names)
        self.level = np.zeros(n)  # (tasks,) log correction at the centre of the recent measurements
        self.slopes = np.zeros((n, 2))  # (tasks, 2) its change per e-fold of CPU and of workload
        self.centre = np.zeros((n, 2))  # (tasks, 2) mean (log cpu/cpu_ref, log w/w_ref) of the recent measurements

    @property
    def coef(self) -> np.ndarray:
        """(tasks, 3) (a, b, g): log correction at (cpu_ref, workload_ref) and its CPU and workload slopes."""
        a = self.level - np.sum(self.slopes * self.centre, axis=1)
        return np.column_stack([a, self.slopes])

    @property
    def factors(self) -> np.ndarray:
        """(tasks,) each task's correction at the centre of its recent measurements."""
        return np.exp(self.level)

    def _features(self, workloads, cpu_millicores) -> tuple[np.ndarray, np.ndarray]:
        xc = np.log(np.asarray(cpu_millicores, dtype=np.float64) / self.cpu_ref)
        xw = np.log(np.maximum(np.asarray(workloads, dtype=np.float64), 1e-9) / self.workload_ref)
        return xc, xw

    def factor_at(self, workloads: np.ndarray, cpu_millicores: np.ndarray) -> np.ndarray:
        """(tasks,) each task's correction at its own (workload, cpu) point."""
        xc, xw = self._features(workloads, cpu_millicores)
        a, b, g = self.coef.T
        return np.exp(a + b * xc + g * xw)

    def check(
        self, step: int, prior_s: np.ndarray, measured_s: np.ndarray, workloads: np.ndarray, cpu_millicores: np.ndarray
    ) -> None:
        """Refuse measurements that are not durations, or absurdly far from what the model predicts."""
        predicted = self.factor_at(workloads, cpu_millicores) * prior_s
        for i, name in enumerate(self.task_names):
            d = float(measured_s[i])
            if not (np.isfinite(d) and d > 0):
                raise InputError(
                    f"task '{name}', step {step}: measured duration {d!r} s is not a finite positive number of seconds",
                    field="duration_s",
                )
            ratio = d / predicted[i]
            if not 1.0 / self.settings.max_ratio <= ratio <= self.settings.max_ratio:
                raise InputError(
                    f"task '{name}', step {step}: measured {d:.6g} s where the model predicts {predicted[i]:.6g} s "
                    f"({ratio:.3g}x); a measurement more than {self.settings.max_ratio:g}x off is refused as absurd",
                    field="learning.max_ratio",
                )

    def update(
        self, step: int, prior_s: np.ndarray, measured_s: np.ndarray, workloads: np.ndarray, cpu_millicores: np.ndarray
    ) -> None:
        """Learn from one step: prior_s, measured_s (tasks,) seconds at the (workloads, cpu_millicores)
        (tasks,) each task ran with. Nothing is learned from a step with a refused measurement."""
        prior_s = np.asarray(prior_s, dtype=np.float64)
        measured_s = np.asarray(measured_s, dtype=np.float64)
        self.check(step, prior_s, measured_s, workloads, cpu_millicores)
        self.measurements += 1
        shrink = self.measurements / (self.measurements + self.settings.prior_weight)
        xc, xw = self._features(workloads, cpu_millicores)
        ridge = self.settings.slope_weight * np.eye(2)
        for i, rows in enumerate(self._rows):
            rows.append((float(np.log(measured_s[i] / prior_s[i])), float(xc[i]), float(xw[i])))
            self._long[i].append(rows[-1])
            data = np.asarray(rows)  # (k, 3)
            r, x = data[:, 0], data[:, 1:]
            centre = x.mean(axis=0)
            long = np.asarray(self._long[i])
            xd, rd = long[:, 1:] - long[:, 1:].mean(axis=0), long[:, 0] - long[:, 0].mean()
            # The level is the recent mean residual, shrunk towards the profile while measurements are
            # few; the slopes explain only how residuals vary around it (ridge: the profile's shape
            # stands until measurements spread over CPU or workloads say otherwise).
            self.level[i] = shrink * r.mean()
            self.slopes[i] = np.linalg.lstsq(xd.T @ xd + ridge, xd.T @ rd, rcond=None)[0]
            self.centre[i] = centre


class LearnedDurations:
    """Durations from the profile model times each task's learned correction.

    durations(w): workloads (tasks, *shape) -> seconds (tasks, levels, *shape), like DurationModel.
    """

    def __init__(
        self,
        model: DurationModel,
        task_names: list[str],
        settings: LearningSettings | None = None,
        workload_range: tuple[float, float] = (10.0, 50.0),
    ) -> None:
        self.model = model
        levels = np.asarray(model.cpu_levels, dtype=np.float64)
        self.correction = DurationCorrection(
            task_names,
            settings,
            cpu_ref=float(np.sqrt(levels[0] * levels[-1])),
            workload_ref=float(np.sqrt(max(workload_range[0], 1e-9) * workload_range[1])),
        )

    def durations(self, workloads: np.ndarray) -> np.ndarray:
        w = np.asarray(workloads, dtype=np.float64)
        d = self.model.durations(w)  # (tasks, levels, *shape)
        c = self.correction
        xc, xw = c._features(w, self.model.cpu_levels)[0], c._features(w, 1.0)[1]  # (levels,), (tasks, *shape)
        extra = (1,) * (w.ndim - 1)
        coef = c.coef
        log_f = (
            coef[:, 0].reshape((-1, 1) + extra)
            + coef[:, 1].reshape((-1, 1) + extra) * xc.reshape((1, -1) + extra)
            + coef[:, 2].reshape((-1, 1) + extra) * xw[:, None]
        )
        out = d * np.exp(log_f)
        np.minimum.accumulate(out, axis=1, out=out)  # more CPU never slows a task down
        return out

    def at_points(self, workloads: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """The profile's (uncorrected) durations (tasks,) at each task's workload and CPU level."""
        d = self.model.durations(np.asarray(workloads, dtype=np.float64)[:, None])[:, :, 0]  # (tasks, levels)
        return d[np.arange(d.shape[0]), levels]

    def learn(self, step: int, workloads: np.ndarray, levels: np.ndarray, measured_s: np.ndarray) -> dict:
        """Update from one step; returns predicted vs measured before and after learning, per task."""
        w = np.asarray(workloads, dtype=np.float64)
        cpu = np.asarray(self.model.cpu_levels)[levels]
        prior = self.at_points(w, levels)
        before = prior * self.correction.factor_at(w, cpu)
        self.correction.update(step, prior, measured_s, w, cpu)
        factor = self.correction.factor_at(w, cpu)
        return {
            "step": step,
            "workload": w.copy(),
            "level": np.asarray(levels).copy(),
            "measured_s": np.asarray(measured_s, dtype=np.float64).copy(),
            "predicted_before_s": before,
            "predicted_after_s": prior * factor,
            "factor": factor,
        }

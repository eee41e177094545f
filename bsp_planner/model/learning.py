"""A performance model that learns from what it measures (the idea of Cilantro, OSDI'23, kept simple).

The profile's interpolated model is the prior. Each task carries a multiplicative correction that
may depend on the CPU and the workload it runs at:

    duration(w, c) = profile(w, c) * exp(a + b * log(c / c_ref) + g * log(w / w_ref) + q * log(c / c_ref)**2)

with c_ref, w_ref the middle (geometric) of the CPU levels and of the workload range. After every step,
each task's measured duration d and the profile's prediction p at the workload and CPU it really ran
with give a residual r = log(d / p). Over the `window` most recent residuals of a task:

* the level, the log correction at the centre of those measurements, is their mean shrunk towards
  the profile while measurements are few: mean(recent r) * k / (k + prior_weight) after k
  measurements in all (k = 1, prior_weight = 1: halfway), so the profile's weight fades as they
  accumulate;
* the slopes b, g and q (how the gap changes per e-fold of CPU or workload, and how the CPU line
  bends: a gap linear in 1/cpu is curved in log cpu) are fitted over the longer `slope_window` (a
  machine's shape changes slowly) in two stages. First one set shared by all tasks:
  a ridge fit (`slope_weight`, towards the profile's shape) of every task's residuals on its CPU and
  workload, each task's own mean taken out (so tasks that run 1.4x and 0.6x their profile do not
  fake a slope). A profile measured on another machine class is off by a CPU-dependent ratio common
  to the job's tasks, and the tasks spread over many CPU levels at once, so the shared slope is
  learned within a few steps, before any one task has visited the level it will jump to. Then each
  task's own slopes: a ridge fit of its residuals shrunk towards the shared set
  (`task_slope_weight`: how many points of spread the shared set counts as), so a task that
  really differs from the others gets its own shape once its measurements spread enough to show it;
  measurements at one point leave the shared shape as it is.

A few numbers per task, readable in the report ("task x runs 1.38x its profile at 1000m, 9% more per
doubling of CPU"), and a machine that drifts is followed within `window` steps. Durations stay
non-increasing in CPU after the correction, as the allocator relies on.

A measurement nothing should learn from is refused with the task and step named: a duration that is
not a finite positive number, or one more than `max_ratio` times away from the model's prediction.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..inputs.experiment import LearningSettings
from .performance import DurationModel


class DurationCorrection:
    """Per-task corrections learned from (profile's prediction, measurement) pairs. cpu_ref, workload_ref:
    where the correction's intercept applies (millicores, workload units)."""

    n_features = 3  # x_cpu, x_w, x_cpu**2 (see `features`)

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
        n, k = len(task_names), self.n_features
        # (capacity, tasks, 1 + 3): every task's residual and features of its last steps, a ring buffer
        # (every step adds one row per task; the fits need which rows, not their order)
        self._history = np.zeros((max(self.settings.window, self.settings.slope_window), n, 1 + k))
        self.measurements = 0  # steps learned from so far
        self.level = np.zeros(n)  # (tasks,) log correction at the centre of the recent measurements
        self.slopes = np.zeros((n, k))  # (tasks, 3) its change per unit of each feature
        self.centre = np.zeros((n, k))  # (tasks, 3) mean features of the recent measurements
        self.shared_slopes = np.zeros(k)  # (3,) the slopes common to the job's tasks (the machine's shape)

    @property
    def coef(self) -> np.ndarray:
        """(tasks, 4) (a, b, g, q): log correction at (cpu_ref, workload_ref), its slopes per e-fold of
        CPU and of workload, and its curvature in log CPU."""
        a = self.level - np.sum(self.slopes * self.centre, axis=1)
        return np.column_stack([a, self.slopes])

    @property
    def factors(self) -> np.ndarray:
        """(tasks,) each task's correction at the centre of its recent measurements."""
        return np.exp(self.level)

    def features(self, workloads, cpu_millicores) -> np.ndarray:
        """(*broadcast shape, 3): log(cpu / cpu_ref), log(w / w_ref), log(cpu / cpu_ref)**2 (the bend: see the module)."""
        xc = np.log(np.asarray(cpu_millicores, dtype=np.float64) / self.cpu_ref)
        xw = np.log(np.maximum(np.asarray(workloads, dtype=np.float64), 1e-9) / self.workload_ref)
        xc, xw = np.broadcast_arrays(xc, xw)
        return np.stack([xc, xw, xc * xc], axis=-1)

    def log_factor(self, features: np.ndarray) -> np.ndarray:
        """Log correction at `features` (tasks, ..., 3) -> (tasks, ...)."""
        coef = self.coef
        extra = (1,) * (features.ndim - 2)
        a = coef[:, 0].reshape((-1,) + extra)
        return a + np.einsum("t...k,tk->t...", features, coef[:, 1:])

    def factor_at(self, workloads: np.ndarray, cpu_millicores: np.ndarray) -> np.ndarray:
        """(tasks,) each task's correction at its own (workload, cpu) point."""
        return np.exp(self.log_factor(self.features(workloads, cpu_millicores)))

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
        x = self.features(workloads, cpu_millicores)  # (tasks, 3)
        cap = self._history.shape[0]
        self._history[(self.measurements - 1) % cap] = np.column_stack([np.log(measured_s / prior_s), x])
        recent = self._last(self.settings.window)  # (k, tasks, 1 + 3)
        self.level = shrink * recent[:, :, 0].mean(axis=0)
        self.centre = recent[:, :, 1:].mean(axis=0)
        self._fit_slopes(self._last(self.settings.slope_window))

    def _last(self, k: int) -> np.ndarray:
        """(min(k, measurements), tasks, 1 + 3) the rows of the last k steps, in no particular order."""
        cap = self._history.shape[0]
        k = min(k, self.measurements)
        return self._history[(self.measurements - k + np.arange(k)) % cap]

    def _fit_slopes(self, rows: np.ndarray) -> None:
        """The module's two-stage slope fit on rows (k, tasks, 1 + 3): the last `slope_window` steps."""
        dev = rows - rows.mean(axis=0)  # deviations from each task's own means
        rd, xd = dev[:, :, 0], dev[:, :, 1:]
        xtx = np.einsum("kti,ktj->tij", xd, xd)  # (tasks, 3, 3)
        xtr = np.einsum("kti,kt->ti", xd, rd)  # (tasks, 3)
        eye = np.eye(self.n_features)
        shared = np.linalg.solve(xtx.sum(axis=0) + (self.settings.slope_weight + 1e-12) * eye, xtr.sum(axis=0))
        lam = self.settings.task_slope_weight
        self.slopes = np.linalg.solve(xtx + (lam + 1e-12) * eye, (xtr + lam * shared)[:, :, None])[:, :, 0]
        self.shared_slopes = shared


class LearnedDurations:
    """Durations from the profile model times each task's learned correction (`durations` as DurationModel's)."""

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
        levels = np.asarray(self.model.cpu_levels, dtype=np.float64).reshape((1, -1) + (1,) * (w.ndim - 1))
        x = c.features(w[:, None], levels)  # (tasks, levels, *shape, 3)
        out = d * np.exp(c.log_factor(x))
        np.minimum.accumulate(out, axis=1, out=out)  # more CPU never slows a task down
        return out

    def learn(self, step: int, workloads: np.ndarray, levels: np.ndarray, measured_s: np.ndarray) -> dict:
        """Update from one step; returns predicted vs measured before and after learning, per task."""
        w = np.asarray(workloads, dtype=np.float64)
        cpu = np.asarray(self.model.cpu_levels)[levels]
        d = self.model.durations(w[:, None])[:, :, 0]  # (tasks, levels)
        prior = d[np.arange(d.shape[0]), levels]  # the profile's (uncorrected) durations (tasks,)
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

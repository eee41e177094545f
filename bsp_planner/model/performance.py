"""Performance models: a task's duration from (workload, CPU), interpolated from its profile grid.

`spline` fits scipy's RectBivariateSpline through the grid (what the thesis used); `linear` is
scipy's RegularGridInterpolator. A query outside the measured grid is an error unless the experiment
says `clamp` (hold the edge value) or `extrapolate` (the interpolant's own extension: the spline's
edge polynomial pieces continued, or the linear interpolant's edge slope).

For the hot paths, `DurationModel` fixes the allowed CPU levels once and turns every later query into
one sparse-matrix product per task: duration(w, level l) = B(w) @ M[:, l], with B the B-spline basis in
the workload direction and M the coefficients already contracted with the basis at each CPU level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import BSpline, RectBivariateSpline, RegularGridInterpolator

from ..core.errors import InputError
from ..inputs.profiles import Profile, TaskProfile

MIN_DURATION_S = 1e-3  # an extrapolated spline can dip below zero; no real step takes under 1 ms


def _linear_knots(x: np.ndarray) -> np.ndarray:
    """Knots of the degree-1 B-spline basis whose coefficients are the values at the points x."""
    return np.concatenate([[x[0]], x, [x[-1]]])


@dataclass
class _TaskInterpolant:
    profile: TaskProfile
    method: str
    # Tensor-product B-spline: knots and degree in each direction, coefficients (n_w, n_c)
    tw: np.ndarray
    kw: int
    tc: np.ndarray
    kc: int
    coef: np.ndarray
    rgi: RegularGridInterpolator | None = None

    @classmethod
    def build(cls, p: TaskProfile, method: str) -> _TaskInterpolant:
        if method == "spline":
            kw, kc = min(3, len(p.workloads) - 1), min(3, len(p.cpu_millicores) - 1)
            s = RectBivariateSpline(p.workloads, p.cpu_millicores, p.duration_s, kx=kw, ky=kc, s=0)
            tw, tc = s.get_knots()
            coef = s.get_coeffs().reshape(len(tw) - kw - 1, len(tc) - kc - 1)
            return cls(p, method, tw, kw, tc, kc, coef)
        if method == "linear":
            rgi = RegularGridInterpolator(
                (p.workloads, p.cpu_millicores), p.duration_s, method="linear", bounds_error=False, fill_value=None
            )
            # Bilinear interpolation is the degree-(1,1) tensor B-spline with the grid values as coefficients.
            return cls(
                p, method, _linear_knots(p.workloads), 1, _linear_knots(p.cpu_millicores), 1, p.duration_s.copy(), rgi
            )
        raise InputError(f"expected interpolation 'spline' or 'linear', got {method!r}", field="interpolation")

    def basis_w(self, w: np.ndarray):
        return BSpline.design_matrix(w, self.tw, self.kw, extrapolate=True)

    def basis_c(self, c: np.ndarray):
        return BSpline.design_matrix(c, self.tc, self.kc, extrapolate=True)


class PerformanceModel:
    """Per-task duration models fitted on a profile; the model's task axis follows `task_names` (job order)."""

    def __init__(
        self, profile: Profile, task_names: list[str], method: str = "spline", out_of_grid: str = "error"
    ) -> None:
        profile.check_job(task_names)
        if out_of_grid not in ("error", "clamp", "extrapolate"):
            raise InputError(f"expected out_of_grid error|clamp|extrapolate, got {out_of_grid!r}", field="out_of_grid")
        self.profile = profile
        self.task_names = list(task_names)
        self.method = method
        self.out_of_grid = out_of_grid
        self._tasks = [_TaskInterpolant.build(profile.tasks[t], method) for t in self.task_names]

    def _prepare(self, i: int, values: np.ndarray, grid: np.ndarray, what: str) -> np.ndarray:
        lo, hi = float(grid[0]), float(grid[-1])
        tol = 1e-9 * max(1.0, abs(hi))
        if self.out_of_grid == "clamp":
            return np.clip(values, lo, hi)
        if self.out_of_grid == "error":
            bad = (values < lo - tol) | (values > hi + tol)
            if np.any(bad):
                v = values[bad].flat[0]
                raise InputError(
                    f"task '{self.task_names[i]}': {what} {v:g} is outside the profiled range [{lo:g}, {hi:g}]; "
                    'set out_of_grid = "clamp" or "extrapolate" in the experiment to allow it',
                    path=self.profile.path,
                    field=what,
                )
            return np.clip(values, lo, hi)  # only rounding noise remains
        return values

    def predict(self, task: int | str, workload, cpu_millicores) -> np.ndarray:
        """Duration in seconds at arbitrary (workload, cpu) points (broadcast together)."""
        i = self.task_names.index(task) if isinstance(task, str) else int(task)
        ti = self._tasks[i]
        w, c = np.broadcast_arrays(np.asarray(workload, dtype=np.float64), np.asarray(cpu_millicores, dtype=np.float64))
        shape = w.shape
        w = self._prepare(i, w.ravel(), ti.profile.workloads, "workload")
        c = self._prepare(i, c.ravel(), ti.profile.cpu_millicores, "cpu_millicores")
        if ti.rgi is not None:
            out = ti.rgi(np.column_stack([w, c]))
        else:
            bw, bc = ti.basis_w(w), ti.basis_c(c)
            out = np.sum(np.asarray(bw @ ti.coef) * bc.toarray(), axis=1)
        return np.maximum(out, MIN_DURATION_S).reshape(shape)

    def at_levels(self, cpu_levels_millicores: np.ndarray, monotone: bool = True) -> DurationModel:
        return DurationModel(self, np.asarray(cpu_levels_millicores, dtype=np.float64), monotone)


class DurationModel:
    """A PerformanceModel restricted to fixed CPU levels: fast (tasks x levels x ...) duration tables.

    Durations are made non-increasing in CPU: more CPU never slows a task down, so a wiggle of the spline
    between noisy grid points is flattened (the allocator relies on it: a step of CPU never hurts).
    `monotone=False` keeps the raw interpolant, wiggles and all, as the thesis's code used it
    (compat = "thesis"; only the greedy allocator plans with it).
    """

    def __init__(self, model: PerformanceModel, cpu_levels: np.ndarray, monotone: bool = True) -> None:
        self.model = model
        self.cpu_levels = cpu_levels
        self.monotone = monotone
        self._level_coef = []
        for i, ti in enumerate(model._tasks):
            c = model._prepare(i, cpu_levels, ti.profile.cpu_millicores, "cpu_millicores")
            # (n_w_coef, L): coefficients in the workload direction at each CPU level
            self._level_coef.append(np.asarray(ti.coef @ ti.basis_c(c).toarray().T))

    @property
    def n_tasks(self) -> int:
        return len(self._level_coef)

    @property
    def n_levels(self) -> int:
        return len(self.cpu_levels)

    def durations(self, workloads: np.ndarray) -> np.ndarray:
        """workloads: (tasks, *shape) -> durations in seconds (tasks, levels, *shape)."""
        workloads = np.asarray(workloads, dtype=np.float64)
        if workloads.shape[0] != self.n_tasks:
            raise ValueError(f"expected {self.n_tasks} tasks on axis 0, got shape {workloads.shape}")
        shape = workloads.shape[1:]
        out = np.empty((self.n_tasks, self.n_levels, int(np.prod(shape, dtype=np.int64))))
        for i, ti in enumerate(self.model._tasks):
            w = self.model._prepare(i, workloads[i].ravel(), ti.profile.workloads, "workload")
            out[i] = (ti.basis_w(w) @ self._level_coef[i]).T
        np.maximum(out, MIN_DURATION_S, out=out)
        if self.monotone:
            np.minimum.accumulate(out, axis=1, out=out)
        return out.reshape((self.n_tasks, self.n_levels) + shape)


def co_location_slowdown(pair_slowdown: np.ndarray, node_of: np.ndarray) -> np.ndarray:
    """How many times slower each task runs because of the tasks placed on its node.

    pair_slowdown (tasks, tasks): [i, j] the measured slowdown of task i while task j co-runs (a pair
    profile, `pair_profiles.PairProfile.matrix`; 1 on the diagonal and for unmeasured pairs); node_of
    (tasks,) node indices. Returns (tasks,) factors >= 1 that multiply the task's duration.

    Combination rule for more than two tasks on a node: the PRODUCT of the pairwise factors of the
    task's co-located tasks (each co-runner takes its own share of the memory bandwidth and caches);
    a factor under 1 counts as 1 (co-running never speeds a task up: such a ratio is measurement noise).
    One factor per pair, whatever the CPU and workload: the pair profile's stated cpu/workload stand for all.
    """
    s = np.maximum(np.asarray(pair_slowdown, dtype=np.float64), 1.0)
    where = np.asarray(node_of)
    together = (where[:, None] == where[None, :]) & ~np.eye(where.size, dtype=bool)
    out: np.ndarray = np.where(together, s, 1.0).prod(axis=1)
    return out


class InterferedDurations(DurationModel):
    """A DurationModel whose durations carry each task's co-location slowdown at a fixed placement
    (factor (tasks,): `co_location_slowdown` there)."""

    def __init__(self, base: DurationModel, factor: np.ndarray) -> None:  # shares base's tables
        self.base = base
        self.model = base.model
        self.cpu_levels = base.cpu_levels
        self.monotone = base.monotone
        self._level_coef = base._level_coef
        self.factor = np.asarray(factor, dtype=np.float64)

    def durations(self, workloads: np.ndarray) -> np.ndarray:
        out = self.base.durations(workloads)
        return out * self.factor.reshape((-1,) + (1,) * (out.ndim - 1))

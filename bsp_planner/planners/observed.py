"""What a planner may learn from the run itself: the workloads observed step by step, and so the
errors of the forecasts it was given.

`simulate` and live runs attach one `Observations` to every planning context (`attach`), so the
planners that know their error (`mpc-risk`, `mpc-adaptive`) and the purely reactive one (`reactive`)
work the same in both. The contract that keeps them honest: before step t a planner reads observed
workloads of steps < t only, and the error of a forecast only once its target step has run. The
helpers here enforce it; planners never index `actual_workloads` themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..forecasting.base import rolling_error_quantiles
from .base import PlanningContext

EXTRAS_KEY = "observations"
#: Forecast errors per lead needed before they are trusted (until then: no correction).
MIN_ERRORS = 20
#: Recent forecasts whose errors set a quantile, per lead time.
ERROR_WINDOW = 240


@dataclass(frozen=True)
class Observations:
    """actual_workloads: (tasks, steps), step t's workloads, known once step t has run.
    forecast_workloads: (tasks, steps, H), row t the forecast made before step t; None in perfect
    mode (the forecasts are the truth: every error is 0).
    durations: workloads (tasks, *shape) -> seconds (tasks, levels, *shape), the duration model.
    workload_range: (low, high) the workloads are clipped to, as the forecasts are."""

    actual_workloads: np.ndarray
    forecast_workloads: np.ndarray | None
    durations: Callable[[np.ndarray], np.ndarray]
    workload_range: tuple[float, float]

    @property
    def horizon(self) -> int | None:
        return None if self.forecast_workloads is None else int(self.forecast_workloads.shape[2])

    def last_observed(self, t: int) -> np.ndarray | None:
        """(tasks,) the workloads of step t-1: the newest a planner may know before step t."""
        return None if t < 1 else self.actual_workloads[:, t - 1]

    def error_quantile_offsets(self, level: float, horizon: int, *, gamma: float = 0.01) -> np.ndarray:
        """(tasks, steps, horizon): for the forecast made before step t, the `level` quantile of that
        task's recent errors (actual - forecast) at each lead, from forecasts whose targets ran before
        t (`base.rolling_error_quantiles`, adaptively calibrated); 0 until MIN_ERRORS are known.
        The offsets of a median level are 0; with level > 0.5 they are >= 0."""
        n, m = self.actual_workloads.shape
        if self.forecast_workloads is None:
            return np.zeros((n, m, horizon))
        if not 0.5 <= level < 1.0:
            raise InputError(f"expected a quantile level in [0.5, 1), got {level}", field="strategies")
        fc = self.forecast_workloads[:, :, :horizon]
        if level == 0.5:
            return np.zeros((n, m, fc.shape[2]))
        out = np.empty((n, m, fc.shape[2]))
        origins = np.arange(m)
        for i in range(n):
            offsets = rolling_error_quantiles(
                lambda _series, pos, f=fc[i]: f[pos],
                self.actual_workloads[i],
                origins,
                fc.shape[2],
                (0.5, level),
                ERROR_WINDOW,
                0,
                np.zeros((2, fc.shape[2])),
                gamma=gamma,
                min_count=MIN_ERRORS,
            )
            out[i] = offsets[1]
        return out

    def rmse_by_lead(self, horizon: int) -> np.ndarray:
        """(steps, horizon): before step t, the RMSE at each lead over every task's forecasts whose
        targets ran before t (the newest ERROR_WINDOW per lead); NaN until MIN_ERRORS are known."""
        n, m = self.actual_workloads.shape
        if self.forecast_workloads is None:
            return np.zeros((m, horizon))
        fc = self.forecast_workloads[:, :, :horizon]
        H = fc.shape[2]
        out = np.full((m, H), np.nan)
        sq = np.full((m, H), np.nan)  # pooled squared error of the forecast made at origin o, lead h
        for h in range(H):
            o = np.arange(m - h)
            sq[o, h] = np.mean((self.actual_workloads[:, o + h] - fc[:, o, h]) ** 2, axis=0)
        csum = np.nancumsum(np.nan_to_num(sq), axis=0)
        for h in range(H):
            # before step t, origins o with o + h <= t - 1 are known
            for t in range(m):
                newest = t - 1 - h
                if newest + 1 < MIN_ERRORS:
                    continue
                oldest = max(0, newest - ERROR_WINDOW + 1)
                total = csum[newest, h] - (csum[oldest - 1, h] if oldest > 0 else 0.0)
                out[t, h] = np.sqrt(total / (newest - oldest + 1))
        return out


def attach(
    ctx: PlanningContext,
    actual_workloads: np.ndarray,
    forecast_workloads: np.ndarray | None,
    durations: Callable[[np.ndarray], np.ndarray],
    workload_range: tuple[float, float],
) -> None:
    """Give a planning context the run's observations (see the module's notes)."""
    ctx.extras[EXTRAS_KEY] = Observations(
        np.asarray(actual_workloads, dtype=np.float64),
        None if forecast_workloads is None else np.asarray(forecast_workloads, dtype=np.float64),
        durations,
        (float(workload_range[0]), float(workload_range[1])),
    )


def observations(ctx: PlanningContext, planner: str) -> Observations:
    obs: Observations | None = ctx.extras.get(EXTRAS_KEY)
    if obs is None:
        raise InputError(
            f"strategy '{planner}' learns from the observed workloads, but this planning context carries none "
            "(build it with scenario.build_scenario)",
            field="strategies",
        )
    return obs

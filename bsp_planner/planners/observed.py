"""What a planner may learn from the run itself: the workloads observed step by step, and so the
errors of the forecasts it was given.

`simulate` and live runs attach one `Observations` to every planning context (`attach`), so the
planners that know their error (`mpc-risk`, `mpc-adaptive`, `mpc-scenario`) and the purely reactive
one (`reactive`) work the same in both. An offline run's observations hold every step's workloads and
forecasts from the start; those of a run whose predictions are made step by step (online forecasts,
learning, a live `--online` run) start empty and are filled as the run goes (`Observations.stepwise`:
`record_forecast` before a step, `observe` after it). The contract that keeps the planners honest, and
the same in both: before step t a planner reads observed workloads of steps < t only, and the error of
a forecast only once its target step has run. The methods here enforce it (asking for what is not
known yet is an error); planners never index the arrays themselves. A run that decides each step one
step ahead (`loop.StepLoop(decide_ahead=True)`: step t is decided while step t-1 still runs) sets
`lead_steps = 1`: a planner deciding step t then reads what was known before step t-1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..core.errors import InputError
from ..forecasting.base import AdaptiveErrorQuantiles
from .base import PlanningContext

EXTRAS_KEY = "observations"
#: Forecast errors per lead needed before they are trusted (until then: no correction).
MIN_ERRORS = 20
#: Recent forecasts whose errors set a quantile, per lead time.
ERROR_WINDOW = 240


class Observations:
    """actual_workloads: (tasks, steps), step t's workloads, known once step t has run (NaN until then
    in a stepwise run).
    forecast_workloads: (tasks, steps, H), row t the forecast made before step t (NaN until made);
    None in perfect mode (the forecasts are the truth: every error is 0).
    durations: workloads (tasks, *shape) -> seconds (tasks, levels, *shape), the duration model.
    workload_range: (low, high) the workloads are clipped to, as the forecasts are."""

    def __init__(
        self,
        actual_workloads: np.ndarray,
        forecast_workloads: np.ndarray | None,
        durations: Callable[[np.ndarray], np.ndarray],
        workload_range: tuple[float, float],
        *,
        observed_steps: int | None = None,
    ) -> None:
        self.actual_workloads = np.asarray(actual_workloads, dtype=np.float64)
        fc = None if forecast_workloads is None else np.asarray(forecast_workloads, dtype=np.float64)
        self.forecast_workloads = fc
        self.durations = durations
        self.workload_range = (float(workload_range[0]), float(workload_range[1]))
        n, m = self.actual_workloads.shape
        self.observed_steps = m if observed_steps is None else observed_steps  # steps 0..observed_steps-1 ran
        self.forecast_rows = m if observed_steps is None else 0  # rows 0..forecast_rows-1 are made
        # errors[i, o, h]: workload of step o + h minus the forecast made at o for it; NaN while unknown
        self.errors = np.full((n, m, 0 if fc is None else fc.shape[2]), np.nan)
        if fc is not None and observed_steps is None:
            for h in range(min(fc.shape[2], m)):  # a horizon may reach past a short run's end
                self.errors[:, : m - h, h] = self.actual_workloads[:, h:] - fc[:, : m - h, h]
        self._trackers: dict[tuple[float, float], list[AdaptiveErrorQuantiles]] = {}
        self.lead_steps = 0  # steps between deciding a step and running it (set by the step loop)

    def known_before(self, t: int) -> int:
        """The first step whose outcome is not known when step t is decided: t, less the decision lead
        (step 0 is decided before anything ran, with or without a lead)."""
        return max(0, t - self.lead_steps)

    @classmethod
    def stepwise(
        cls,
        n_tasks: int,
        steps: int,
        horizon: int | None,
        durations: Callable[[np.ndarray], np.ndarray],
        workload_range: tuple[float, float],
    ) -> Observations:
        """Empty observations of a run whose forecasts and outcomes arrive step by step; horizon None:
        perfect knowledge (no forecast, no error)."""
        fc = None if horizon is None else np.full((n_tasks, steps, horizon), np.nan)
        return cls(np.full((n_tasks, steps), np.nan), fc, durations, workload_range, observed_steps=0)

    @property
    def horizon(self) -> int | None:
        return None if self.forecast_workloads is None else int(self.forecast_workloads.shape[2])

    # -- filled by a stepwise run ------------------------------------------------------------------
    def record_forecast(self, t: int, workloads: np.ndarray) -> None:
        """Row t: the (tasks, H) workloads forecast before step t for steps t..t+H-1."""
        if self.forecast_workloads is None:
            return
        if t != self.forecast_rows:
            raise RuntimeError(f"the forecast made before step {t} recorded after {self.forecast_rows} rows")
        self.forecast_workloads[:, t] = workloads[:, : self.forecast_workloads.shape[2]]
        self.forecast_rows = t + 1

    def observe(self, t: int, workloads: np.ndarray) -> None:
        """Step t ran with these (tasks,) workloads: the errors of every forecast that targeted it are known."""
        if t != self.observed_steps:
            raise RuntimeError(f"step {t} observed after {self.observed_steps} steps")
        w = np.clip(np.asarray(workloads, dtype=np.float64), *self.workload_range)
        self.actual_workloads[:, t] = w
        self.observed_steps = t + 1
        if self.forecast_workloads is not None:
            h = np.arange(min(t + 1, self.forecast_workloads.shape[2]))
            self.errors[:, t - h, h] = w[:, None] - self.forecast_workloads[:, t - h, h]

    # -- read by planners ----------------------------------------------------------------------------
    def _known_before(self, t: int) -> int:
        """known_before(t), checked against what ran."""
        known = self.known_before(t)
        if known > self.observed_steps:
            raise RuntimeError(
                f"a planner asked what was known before step {known}, but only {self.observed_steps} ran"
            )
        return known

    def last_observed(self, t: int) -> np.ndarray | None:
        """(tasks,) the workloads of step t-1 (t-2 with a decision lead): the newest a planner deciding step
        t may know."""
        known = self._known_before(t)
        return None if known < 1 else self.actual_workloads[:, known - 1]

    def forecast(self, t: int, horizon: int) -> np.ndarray:
        """(tasks, horizon) the forecast made before step t."""
        assert self.forecast_workloads is not None
        if t >= self.forecast_rows:
            raise RuntimeError(f"a planner asked for the forecast of step {t} before it was made")
        return self.forecast_workloads[:, t, :horizon]

    def error_quantile_offsets(self, t: int, level: float, horizon: int, *, gamma: float = 0.01) -> np.ndarray:
        """(tasks, horizon): for the forecast made before step t, the `level` quantile of each task's
        recent errors (actual - forecast) at each lead, from forecasts whose targets ran before t
        (`base.AdaptiveErrorQuantiles`, adaptively calibrated); 0 until MIN_ERRORS are known. The
        offsets of a median level are 0; with level > 0.5 they are >= 0."""
        n = self.actual_workloads.shape[0]
        if self.forecast_workloads is None or level == 0.5:
            return np.zeros((n, horizon))
        if not 0.5 <= level < 1.0:
            raise InputError(f"expected a quantile level in [0.5, 1), got {level}", field="strategies")
        known = self._known_before(t)
        trackers = self._trackers.get((level, gamma))
        if trackers is None:
            H = self.errors.shape[2]
            trackers = [
                AdaptiveErrorQuantiles(
                    self.errors[i], (0.5, level), ERROR_WINDOW, np.zeros((2, H)), gamma=gamma, min_count=MIN_ERRORS
                )
                for i in range(n)
            ]
            self._trackers[(level, gamma)] = trackers
        return np.stack([tr.offsets(known)[1, :horizon] for tr in trackers])

    def rmse_by_lead(self, t: int, horizon: int) -> np.ndarray:
        """(horizon,): before step t, the RMSE at each lead over every task's forecasts whose targets
        ran before t (the newest ERROR_WINDOW per lead); NaN where fewer than MIN_ERRORS are known."""
        if self.forecast_workloads is None:
            return np.zeros(horizon)
        known = self._known_before(t)
        out = np.full(horizon, np.nan)
        for h in range(min(horizon, self.errors.shape[2])):
            newest = known - 1 - h  # origin o's target o + h ran before t
            oldest = max(0, newest - ERROR_WINDOW + 1)
            if newest + 1 < MIN_ERRORS:
                continue
            out[h] = np.sqrt(np.mean(self.errors[:, oldest : newest + 1, h] ** 2))
        return out

    def error_trajectories(self, t: int, origins: np.ndarray, h: int) -> np.ndarray:
        """(tasks, len(origins), h): the errors at leads 0..h-1 of the forecasts made at `origins`, all of
        whose targets must have run before step t."""
        known = self._known_before(t)
        if origins.size and int(origins.max()) + h - 1 > known - 1:
            raise RuntimeError(f"errors of forecasts whose targets run at or after step {known} are not known yet")
        return self.errors[:, origins, :h]


def attach(
    ctx: PlanningContext,
    actual_workloads: np.ndarray,
    forecast_workloads: np.ndarray | None,
    durations: Callable[[np.ndarray], np.ndarray],
    workload_range: tuple[float, float],
) -> None:
    """Give a planning context the whole run's observations (an offline run; see the module's notes)."""
    ctx.extras[EXTRAS_KEY] = Observations(actual_workloads, forecast_workloads, durations, workload_range)


def observations(ctx: PlanningContext, planner: str) -> Observations:
    obs: Observations | None = ctx.extras.get(EXTRAS_KEY)
    if obs is None:
        raise InputError(
            f"strategy '{planner}' learns from the observed workloads, but this planning context carries none "
            "(build it with scenario.build_scenario)",
            field="strategies",
        )
    return obs

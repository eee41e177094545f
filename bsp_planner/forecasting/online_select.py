"""`online-select`: a forecaster for workloads only observed during the run (no series in the job), fitted
on the run's own reported history and chosen per task by its recent one-step error.

Candidates (online_fits.py), each refitted every `refit_every_steps` on at most `fit_window_steps` values
before the refit point r, and applied to everything observed up to the origin without refitting:

* ``persistence``: the last value;
* ``trend``: the last value continued by its last change, damped (an ARIMA(1,1,0) fitted by least
  squares on the window's changes, online_fits.DampedTrend); cheap enough to refit at every origin, it
  is a candidate from `trend_min_history_steps` observed values on, long before the models below;
* ``ar``: a linear autoregression on the last `ar_lags` values (least squares, numpy);
* ``ets``: statsforecast's AutoETS, with the detected season when it is at most 24 steps (AutoETS fits no
  longer one);
* ``mstl``: statsforecast's MSTL with up to two detected seasons (daily and weekly cycles are longer than
  AutoETS can fit), AutoETS on the seasonally adjusted rest.

Seasons are the strongest periodogram peaks of the fit window. The refit at r starts once r values are
observed and is used from origin r + `refit_lag_steps` on: a live run fits in a worker process meanwhile
(online_fits.BackgroundRefits) so no decision pays for a fit, and `simulate`, fitting in place, uses the
same fit at the same steps, so both choose alike. The forecast at origin o is that of the candidate with
the smallest mean squared one-step error over the last `select_window_steps` origins (ties: the earlier
candidate above) if that is below 0.8 of persistence's, else persistence. A candidate takes part once it
has a forecast at every origin of the window; the window is `select_window_steps` origins, or fewer
(at least MIN_CHOICE_ERRORS) while the run is younger than that since `trend`'s first forecast. Until
then the forecast is persistence; the fitted candidates join `min_history_steps` observed values plus
the lag plus a full window after the start.

A forecast at origin o reads only values before o and is a function of them alone (fits and forecasts are
cached by the values they read), so runs that replay the same observations get the same forecasts in any
order. statsforecast's AutoARIMA (1.6-1.9 s a fit on 150 values on the VM, BENCHMARKS.md) and the gbm
(which needs a trained pool) are not candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from ..inputs.settings import setting
from .base import ForecasterSettings, PointForecaster, SettingsTable, series_key
from .online_fits import ETS_MAX_SEASON, DampedTrend, InlineRefits, detect_seasons

__all__ = ["CANDIDATES", "ETS_MAX_SEASON", "OnlineSelectForecaster", "OnlineSelectSettings", "detect_seasons"]

CANDIDATES = ("persistence", "trend", "ar", "ets", "mstl", "harmonic")
PERSISTENCE_MARGIN = 0.8  # a model's windowed squared one-step error must be below this share of persistence's
MIN_CHOICE_ERRORS = 3  # one-step errors a choice reads at the least (while the window is not full yet)


@dataclass(frozen=True)
class OnlineSelectSettings(SettingsTable):
    """min_history_steps: observed values before any candidate but persistence is fitted;
    refit_every_steps: steps between refits; refit_lag_steps: steps after its start a refit is used
    (a live run's refit has that many steps' time to finish before a decision waits for it);
    select_window_steps: past one-step errors the choice reads; fit_window_steps: most recent values
    one fit reads; ar_lags: the autoregression's order; trend_min_history_steps: observed values before
    `trend` forecasts."""

    prefix: ClassVar[str] = "online-select."
    min_history_steps: int = setting(24, ge=4)
    refit_every_steps: int = setting(5, ge=1)
    refit_lag_steps: int = setting(5, ge=1)
    select_window_steps: int = setting(8, ge=1)
    fit_window_steps: int = setting(240, ge=8)
    ar_lags: int = setting(8, ge=1)
    trend_min_history_steps: int = setting(4, ge=3)

    @property
    def first_fitted_choice_steps(self) -> int:
        """Observed steps before a fitted candidate can be chosen: its first refit, read `refit_lag_steps`
        later, then a full window of its one-step errors (a task whose refits have no phase)."""
        return self.min_history_steps + self.refit_lag_steps + self.select_window_steps


class OnlineSelectForecaster(PointForecaster):
    """See the module's notes. `first_observed`: rows of the series before it that are not observations
    (an unseeded run's placeholder rows), never fitted on; `refit_phase`: see __init__."""

    name = "online-select"
    settings_type: ClassVar[type[ForecasterSettings]] = OnlineSelectSettings

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.first_observed = 0
        # Steps by which its refits lag the first one's rhythm: tasks given different phases refit on
        # different steps, so the refits of a step are one task's instead of every task's.
        self.refit_phase = 0
        self.refits: InlineRefits = InlineRefits()  # a live run gives its tasks one BackgroundRefits
        self._forecasts: dict = {}
        self.chosen: list[str] = []  # the candidate of every forecast made, for reports and tests

    def fit(self, history: np.ndarray) -> Self:
        # Nothing is fitted ahead of the run: every candidate is fitted on the history it observes.
        self.error_quantiles_ = np.zeros((len(self.quantiles), self.horizon))
        self.fit_length_ = len(history)
        return self

    # -- candidates -----------------------------------------------------------------------------------
    def _refit_point(self, o: int) -> int | None:
        """The latest refit point at or before origin o; None before the first (`min_history_steps`
        observed values and the task's phase: the tasks' first refits fall on different steps too)."""
        s = self.settings
        first = self.first_observed + s.min_history_steps + self.refit_phase
        if o < first:
            return None
        return first + ((o - first) // s.refit_every_steps) * s.refit_every_steps

    def _window_start(self, o: int) -> int:
        return max(self.first_observed, o - self.settings.fit_window_steps)

    def _refit_key(self, series: np.ndarray, r: int) -> tuple:
        return (r, self.settings.ar_lags, series_key(series[self._window_start(r) : r]))

    def _start_refit(self, series: np.ndarray, r: int) -> None:
        self.refits.start(self._refit_key(series, r), series[self._window_start(r) : r], self.settings.ar_lags)

    def _candidate_forecasts(self, series: np.ndarray, o: int) -> dict[str, np.ndarray]:
        """Every available candidate's (H,) forecast at origin o, from the refit started
        `refit_lag_steps` before o or earlier."""
        a = self._window_start(o)
        key = (o, series_key(series[a:o]))
        hit = self._forecasts.get(key)
        if hit is not None:
            return hit
        out = {"persistence": np.full(self.horizon, series[o - 1])}
        if o - self.first_observed >= self.settings.trend_min_history_steps:
            out["trend"] = DampedTrend(series[a:o]).forecast(series[a:o], 0, self.horizon)
        r = self._refit_point(o - self.settings.refit_lag_steps)
        if r is not None:
            self._start_refit(series, r)  # nothing to do unless these values were never seen before
            for name, model in self.refits.result(self._refit_key(series, r)).items():
                try:
                    mean = model.forecast(series[a:o], a - self._window_start(r), self.horizon)
                except Exception:
                    continue
                if mean.shape == (self.horizon,) and np.all(np.isfinite(mean)):
                    out[name] = mean
        self._forecasts[key] = out
        return out

    def choose(self, series: np.ndarray, o: int) -> str:
        """The candidate with the smallest mean squared one-step error over the window before o."""
        s = self.settings
        first = self.first_observed + s.trend_min_history_steps  # trend's first forecast
        past = range(max(first, o - s.select_window_steps), o)
        if len(past) < min(MIN_CHOICE_ERRORS, s.select_window_steps):  # a choice on a few errors follows noise
            return "persistence"
        sq: dict[str, list[float]] = {}
        for p in past:
            for name, f in self._candidate_forecasts(series, p).items():
                sq.setdefault(name, []).append((float(f[0]) - float(series[p])) ** 2)
        full = {n: sum(v) / len(v) for n, v in sq.items() if len(v) == len(past)}
        best = min(CANDIDATES, key=lambda n: (full.get(n, np.inf), CANDIDATES.index(n)))
        # A model replaces persistence only when clearly better: on flat stretches every candidate's
        # error is ~0 and the one a hair ahead may overshoot badly when the load starts to move.
        return best if full[best] < PERSISTENCE_MARGIN * full["persistence"] else "persistence"

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        out = np.empty((len(origins), self.horizon))
        for i, o in enumerate(origins):
            o = int(o)
            due = self._refit_point(o)
            if due is not None:
                self._start_refit(series, due)
            name = self.choose(series, o)
            # The candidates' forecasts at o are made when a choice reads them, which in place (simulate)
            # leaves a run too short for a full window of errors without a single fit; in the background
            # (live) they are made at every step, spreading their cost over the steps.
            if name == "persistence" and not self.refits.eager:
                out[i] = series[o - 1]
                self.chosen.append(name)
                continue
            forecasts = self._candidate_forecasts(series, o)
            out[i] = forecasts.get(name, forecasts["persistence"])
            self.chosen.append(name if name in forecasts else "persistence")
        return out

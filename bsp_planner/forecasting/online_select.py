"""`online-select`: a forecaster for workloads only observed during the run (no series in the job), fitted
on the run's own reported history and chosen per task by its recent one-step error.

Candidates, each refitted every `refit_every_steps` on at most `fit_window_steps` values before the refit
point r, and applied between refits to everything observed up to the origin (statsforecast's `forward`
keeps the fitted parameters):

* ``persistence``: the last value;
* ``ar``: a linear autoregression on the last `ar_lags` values (least squares, numpy): a sum of periodic
  components is an exact linear recurrence, so it follows them from a few periods of history;
* ``ets``: statsforecast's AutoETS, with the detected season when it is at most 24 steps (AutoETS fits no
  longer one);
* ``mstl``: statsforecast's MSTL with up to two detected seasons (daily and weekly cycles are longer than
  AutoETS can fit), AutoETS on the seasonally adjusted rest.

Seasons are the strongest periodogram peaks of the fit window. The forecast at origin o is that of the
candidate with the smallest mean squared one-step error over the last `select_window_steps` origins
(ties: the earlier candidate above) if that is below 0.8 of persistence's, else persistence; before
`min_history_steps` observed values, and until the candidates have a full window of one-step errors,
it is persistence.

A forecast at origin o reads only values before o and is a function of them alone (fits and forecasts are
cached by the values they read), so runs that replay the same observations get the same forecasts in any
order. statsforecast's AutoARIMA and the gbm were measured too slow to refit per task during a live step
(1.6-1.9 s per AutoARIMA fit on 150 values; see BENCHMARKS.md) and are not candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from ..inputs.settings import setting
from .base import ForecasterSettings, PointForecaster, SettingsTable, series_key

CANDIDATES = ("persistence", "ar", "ets", "mstl")
ETS_MAX_SEASON = 24  # statsforecast's AutoETS refuses longer seasons
PERSISTENCE_MARGIN = 0.8  # a model's windowed squared one-step error must be below this share of persistence's


@dataclass(frozen=True)
class OnlineSelectSettings(SettingsTable):
    """min_history_steps: observed values before any candidate but persistence is fitted;
    refit_every_steps: steps between refits; select_window_steps: past one-step errors the choice reads;
    fit_window_steps: most recent values one fit reads; ar_lags: the autoregression's order."""

    prefix: ClassVar[str] = "online-select."
    min_history_steps: int = setting(24, ge=4)
    refit_every_steps: int = setting(5, ge=1)
    select_window_steps: int = setting(8, ge=1)
    fit_window_steps: int = setting(240, ge=8)
    ar_lags: int = setting(8, ge=1)


def detect_seasons(values: np.ndarray, most: int = 2) -> tuple[int, ...]:
    """Up to `most` periods in steps (2 <= p <= len/2), the strongest periodogram peaks of the
    detrended values, strongest first; () for a flat series."""
    n = len(values)
    x = values - np.polyval(np.polyfit(np.arange(n), values, 1), np.arange(n))
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(n)
    out: list[int] = []
    for k in np.argsort(power[1:])[::-1] + 1:
        if power[k] <= 1e-9 * power.sum() or len(out) == most:
            break
        p = int(round(1.0 / freqs[k]))
        if 2 <= p <= n // 2 and all(abs(p - q) > 1 for q in out):
            out.append(p)
    return tuple(out)


class _AR:
    """Least-squares AR(p) with an intercept."""

    def __init__(self, y: np.ndarray, p: int) -> None:
        X = np.column_stack([y[p - 1 - j : len(y) - 1 - j] for j in range(p)] + [np.ones(len(y) - p)])
        self.coef, *_ = np.linalg.lstsq(X, y[p:], rcond=None)
        self.p = p

    def forward(self, y: np.ndarray, h: int) -> dict:
        hist = list(y[-self.p :][::-1])  # newest first
        out = np.empty(h)
        for i in range(h):
            out[i] = float(np.dot(self.coef[:-1], hist[: self.p]) + self.coef[-1])
            hist.insert(0, out[i])
        return {"mean": out}


class OnlineSelectForecaster(PointForecaster):
    """See the module's notes. `first_observed`: rows of the series before it that are not observations
    (an unseeded run's placeholder rows), never fitted on; `refit_phase`: see __init__."""

    name = "online-select"
    settings_type: ClassVar[type[ForecasterSettings]] = OnlineSelectSettings

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.first_observed = 0
        # Steps by which its refits lag the first one's rhythm: tasks given different phases refit on
        # different steps, so one step pays for one task's refit instead of every task's.
        self.refit_phase = 0
        self._fits: dict = {}
        self._forecasts: dict = {}
        self.chosen: list[str] = []  # the candidate of every forecast made, for reports and tests

    def fit(self, history: np.ndarray) -> Self:
        # Nothing is fitted ahead of the run: every candidate is fitted on the history it observes.
        self.error_quantiles_ = np.zeros((len(self.quantiles), self.horizon))
        self.fit_length_ = len(history)
        return self

    # -- candidates -----------------------------------------------------------------------------------
    def _refit_point(self, o: int) -> int:
        s = self.settings
        first = self.first_observed + s.min_history_steps
        shifted = first + self.refit_phase
        return max(first, shifted + ((o - shifted) // s.refit_every_steps) * s.refit_every_steps)

    def _fitted(self, series: np.ndarray, r: int) -> dict[str, Any]:
        """The candidates fitted on the fit window before r (persistence needs no fit)."""
        a = max(self.first_observed, r - self.settings.fit_window_steps)
        key = (r, series_key(series[a:r]))
        hit = self._fits.get(key)
        if hit is not None:
            return hit
        from statsforecast.models import MSTL, AutoETS

        y = series[a:r]
        fitted: dict[str, Any] = {}
        if np.ptp(y) > 0:
            seasons = detect_seasons(y)
            short = [p for p in seasons if p <= ETS_MAX_SEASON and 2 * p <= len(y)]
            lags = min(self.settings.ar_lags, len(y) // 3)
            makers = {
                "ar": lambda: _AR(y, lags) if lags >= 1 else None,
                "ets": lambda: AutoETS(model="ZZZ" if short else "ZZN", season_length=short[0] if short else 1).fit(y),
                "mstl": lambda: (
                    MSTL(
                        season_length=sorted(p for p in seasons if 2 * p <= len(y)),
                        trend_forecaster=AutoETS(model="ZZN"),
                    ).fit(y)
                    if any(2 * p <= len(y) for p in seasons)
                    else None
                ),
            }
            for name, make in makers.items():
                try:
                    model = make()
                except Exception:
                    model = None
                if model is not None:
                    fitted[name] = model
        self._fits[key] = fitted
        return fitted

    def _candidate_forecasts(self, series: np.ndarray, o: int) -> dict[str, np.ndarray]:
        """Every available candidate's (H,) forecast at origin o."""
        a = max(self.first_observed, o - self.settings.fit_window_steps)
        key = (o, series_key(series[a:o]))
        hit = self._forecasts.get(key)
        if hit is not None:
            return hit
        out = {"persistence": np.full(self.horizon, series[o - 1])}
        if o - self.first_observed >= self.settings.min_history_steps:
            for name, model in self._fitted(series, self._refit_point(o)).items():
                try:
                    mean = np.asarray(model.forward(y=series[a:o], h=self.horizon)["mean"], dtype=np.float64)
                except Exception:
                    continue
                if mean.shape == (self.horizon,) and np.all(np.isfinite(mean)):
                    out[name] = mean
        self._forecasts[key] = out
        return out

    def choose(self, series: np.ndarray, o: int) -> str:
        """The candidate with the smallest mean squared one-step error over the window before o."""
        s = self.settings
        first = self.first_observed + s.min_history_steps
        past = range(max(first, o - s.select_window_steps), o)
        if len(past) < s.select_window_steps:  # a choice on a few errors follows noise
            return "persistence"
        sq: dict[str, list[float]] = {}
        for p in past:
            for name, f in self._candidate_forecasts(series, p).items():
                sq.setdefault(name, []).append((f[0] - series[p]) ** 2)
        full = {n: float(np.mean(v)) for n, v in sq.items() if len(v) == len(past)}
        best = min(CANDIDATES, key=lambda n: (full.get(n, np.inf), CANDIDATES.index(n)))
        # A model replaces persistence only when clearly better: on flat stretches every candidate's
        # error is ~0 and the one a hair ahead may overshoot badly when the load starts to move.
        return best if full[best] < PERSISTENCE_MARGIN * full["persistence"] else "persistence"

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        out = np.empty((len(origins), self.horizon))
        for i, o in enumerate(origins):
            o = int(o)
            name = self.choose(series, o)
            forecasts = self._candidate_forecasts(series, o)
            out[i] = forecasts.get(name, forecasts["persistence"])
            self.chosen.append(name if name in forecasts else "persistence")
        return out

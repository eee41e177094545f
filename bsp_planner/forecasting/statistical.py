"""`mstl`: a statistical baseline from statsforecast: MSTL (multiple seasonal-trend decomposition by
Loess) with a daily and, where the series has room for one, a weekly season, and an automatically
chosen exponential-smoothing model (AutoETS, no season) for the seasonally adjusted rest.

statsforecast's AutoETS alone fits no season longer than 24 steps, so it cannot see the 48-step day
or the 336-step week of a half-hourly series; MSTL removes those seasons first.

How a forecast at origin o is made, using only values before o:

* the decomposition is refitted every ``refit_every`` steps (a day by default) on at most ``window``
  steps before the refit point r <= o (statsforecast's `mstl`), with the seasons of which it holds
  two (early origins see only the day); between refits each seasonal component continues as its
  last observed season;
* the seasonally adjusted series up to o goes through the ETS model fitted once on the training half
  (its parameters kept; statsforecast's `forward`), which forecasts the next H values;
* the forecast is that plus the seasonal components at the target steps.

Refitting the decomposition at every origin would cost 0.1-0.3 s a forecast (minutes for one
evaluation); once a day, with R's loess jumps (`stl_jumps`), keeps it to a fraction of a second a
day and never reads a value at or after the origin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ..core.errors import InputError
from ..inputs.settings import setting
from .base import ForecasterSettings, PointForecaster, SettingsTable, ahead, series_key
from .baselines import WEEK_DAYS

MSTL_FIRST_SEASONAL_WINDOW = 11  # statsforecast's mstl: seasonal windows 11, 15, ... (R's forecast::mstl)


def stl_jumps(shortest_season: int) -> dict:
    """STL's loess jumps as R's stl() sets them by default (ceiling(window / 10)) for the trend and
    low-pass windows of the shortest season's decomposition, used for every season's.

    statsmodels' STL evaluates every loess at every point (jump 1); with a weekly season of 336
    steps that is 0.2-0.6 s per decomposition. Evaluating every k-th point and interpolating (the
    jumps) is ~6x faster and moves the seasonal total by <= 0.02 workload units on the shipped
    series (`benchmarks/bench_forecast.py --predict-only`). Windows follow statsmodels' defaults: the trend
    window is the odd number >= 1.5 P / (1 - 1.5 / seasonal window), the low-pass window the odd
    number > P."""
    P = int(shortest_season)
    trend = int(np.ceil(1.5 * P / (1.0 - 1.5 / MSTL_FIRST_SEASONAL_WINDOW)))
    trend += 1 - trend % 2
    low_pass = P + 1 if P % 2 == 0 else P + 2
    return {"trend_jump": int(np.ceil(trend / 10)), "low_pass_jump": int(np.ceil(low_pass / 10))}


@dataclass(frozen=True)
class MSTLSettings(SettingsTable):
    """seasons: "day", "week" (kept where the training half holds two weeks) or whole steps;
    refit_every: steps between re-decompositions (0: one day); window: most past steps one
    decomposition reads (0: six of the longest season)."""

    prefix: ClassVar[str] = "mstl."
    seasons: tuple[Literal["day", "week"] | int, ...] = setting(("day", "week"), ge=2)
    refit_every: int = setting(0, ge=0)
    window: int = setting(0, ge=0)


class MSTLForecaster(PointForecaster):
    """MSTL + AutoETS from statsforecast (see the module's notes)."""

    name = "mstl"
    settings_type: ClassVar[type[ForecasterSettings]] = MSTLSettings

    def resolve_seasons(self, n_train: int) -> tuple[int, ...]:
        """The seasons in steps; each must fit twice in the training half, before H origins."""
        out = []
        for s in self.settings.seasons:
            steps = self.period if s == "day" else WEEK_DAYS * self.period if s == "week" else int(s)
            if steps >= 2 and 2 * steps + 2 * self.horizon <= n_train and steps not in out:
                out.append(steps)
        return tuple(sorted(out))

    @property
    def refit_every(self) -> int:
        return self.settings.refit_every or max(1, self.period)

    @property
    def window(self) -> int:
        longest = max(self.seasons_, default=self.period)
        return self.settings.window or 6 * longest

    def _min_origin(self) -> int:
        # two of the shortest season (a decomposition keeps the seasons it has two of), and room for
        # the ETS model
        seasons = getattr(self, "seasons_", (self.period,))  # before fit: the daily season's need
        return max(2 * min(seasons, default=1), 2 * self.horizon)

    def fit(self, history: np.ndarray, *, errors: bool = True) -> MSTLForecaster:
        """Fit on a training history; errors=False skips measuring its own errors there (no
        quantiles: for use as another model's input, where only the point forecasts are read)."""
        from statsforecast.models import MSTL, AutoETS

        w = np.asarray(history, dtype=np.float64)
        self.seasons_ = self.resolve_seasons(len(w))
        first = self._min_origin()
        if len(w) < first + 2 * self.horizon:
            raise InputError(
                f"mstl: the training history has {len(w)} steps but needs at least {first + 2 * self.horizon}",
                field="history",
            )
        if not np.ptp(w) > 0:
            raise InputError("mstl: the training history is constant")
        if self.seasons_:
            model = MSTL(
                season_length=list(self.seasons_),
                trend_forecaster=AutoETS(model="ZZN"),
                stl_kwargs=stl_jumps(min(self.seasons_)),
            ).fit(w[-self.window :])
            self.trend_ = model.trend_forecaster
        else:
            self.trend_ = AutoETS(model="ZZN").fit(w)
        self._decompositions: dict = {}  # caches of what the forecasts read, by the values they read
        self._forecasts: dict = {}
        self.fit_length_ = len(w)
        self.info = {"seasons_steps": list(self.seasons_), "trend_model": str(self.trend_.model_.get("method", ""))}
        if not errors:
            return self
        origins = np.arange(first, len(w) - self.horizon + 1)
        errs = self._fit_interval(ahead(w, origins, self.horizon) - self._point(w, origins))
        self.info["train_rmse"] = float(np.sqrt(np.mean(errs**2)))
        return self

    # -- forecasting ---------------------------------------------------------------------------------
    def _seasonal(self, series: np.ndarray, r: int) -> tuple[int, np.ndarray]:
        """(a, seasonal total for steps a..r+refit_every+H-1): the decomposition of series[a:r],
        each component continued as its last season after r."""
        from statsforecast.mstl import mstl

        a = max(0, r - self.window)
        key = (r, series_key(series[a:r]))
        hit = self._decompositions.get(key)
        if hit is not None:
            return a, hit
        length = r - a
        ahead = self.refit_every + self.horizon
        total = np.zeros(length + ahead)
        seasons = [s for s in self.seasons_ if 2 * s <= length]  # early origins: the seasons with room
        if seasons:
            parts = mstl(series[a:r], period=seasons, stl_kwargs=stl_jumps(min(seasons)))
            for s in seasons:
                comp = parts[f"seasonal{s}"].to_numpy() if f"seasonal{s}" in parts else parts["seasonal"].to_numpy()
                tail = comp[length - s + (np.arange(ahead) % s)]
                total += np.concatenate([comp, tail])
        self._decompositions[key] = total
        return a, total

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        out = np.empty((len(origins), self.horizon))
        first = self._min_origin()
        K = self.refit_every
        for i, o in enumerate(origins):
            o = int(o)
            r = max(first, (o // K) * K)
            a, seas = self._seasonal(series, r)
            key = (o, r, series_key(series[a:o]))
            hit = self._forecasts.get(key)
            if hit is None:
                adjusted = series[a:o] - seas[: o - a]
                mean = np.asarray(self.trend_.forward(y=adjusted, h=self.horizon)["mean"], dtype=np.float64)
                hit = mean + seas[o - a : o - a + self.horizon]
                self._forecasts[key] = hit
            out[i] = hit
        return out

"""Honest baselines: persistence and seasonal-naive.

Their quantiles come from their own errors: on the training half until enough forecasts have been
checked, then from their recent errors with adaptively calibrated levels (see
`base.rolling_error_quantiles`), as for every forecaster here.
"""

from __future__ import annotations

import numpy as np

from .base import PointForecaster


class _ResidualQuantiles(PointForecaster):
    """Point forecast + empirical error quantiles per lead time, measured on the training history."""

    def fit(self, history: np.ndarray) -> _ResidualQuantiles:
        history = np.asarray(history, dtype=np.float64)
        first = self._min_origin()
        origins = np.arange(first, len(history) - self.horizon + 1)
        if origins.size == 0:
            raise ValueError(
                f"{self.name}: history of {len(history)} values is too short for horizon {self.horizon}"
            )
        point = self._point(history, origins)
        truth = history[origins[:, None] + np.arange(self.horizon)[None, :]]
        errors = truth - point
        self.error_quantiles_ = np.quantile(errors, self.quantiles, axis=0)  # (Q, H)
        self.error_quantiles_[self.median_index] = 0.0  # the point forecast is the median
        self.fit_length_ = len(history)
        return self


class PersistenceForecaster(_ResidualQuantiles):
    """The last known value, repeated for every lead time."""

    name = "persistence"

    def _point(self, series, origins):
        return np.repeat(series[origins - 1][:, None], self.horizon, axis=1)


class SeasonalNaiveForecaster(_ResidualQuantiles):
    """The value one seasonal period (a day, from the timestamps) before each target step.

    For lead times beyond one period the forecast repeats the last observed season, so no value at or
    after the origin is ever used.
    """

    name = "seasonal-naive"

    def _min_origin(self) -> int:
        return self.period

    def _point(self, series, origins):
        h = np.arange(self.horizon)
        back = self.period * (h // self.period + 1)  # whole periods back, always behind the origin
        return series[origins[:, None] + h[None, :] - back[None, :]]



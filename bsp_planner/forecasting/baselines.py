"""Honest baselines: persistence and seasonal-naive (daily, or weekly where the series has a week).

Their quantiles come from their own errors: on the training half until enough forecasts have been
checked, then from their recent errors with adaptively calibrated levels (see
`base.rolling_error_quantiles`), as for every forecaster here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar, Self

import numpy as np

from ..core.errors import InputError
from .base import DEFAULT_QUANTILES, ForecasterSettings, PointForecaster

WEEK_DAYS = 7


@dataclass(frozen=True)
class NoSettings:
    """A forecaster without settings."""

    @classmethod
    def from_dict(cls, d: dict) -> NoSettings:
        if d:
            raise InputError(f"this forecaster takes no settings, got {', '.join(sorted(d))}", field="settings")
        return cls()

    def to_dict(self) -> dict:
        return {}


@dataclass(frozen=True)
class SeasonalNaiveSettings:
    """season: "day" (the period from the timestamps), "week" (seven days where the training half holds
    two weeks, else the day), or a whole number of steps."""

    season: str | int = "day"

    @classmethod
    def from_dict(cls, d: dict) -> SeasonalNaiveSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(
                f"unknown seasonal-naive setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}",
                field="settings",
            )
        season = d.get("season", cls.season)
        if isinstance(season, str) and season.isdigit():
            season = int(season)
        if isinstance(season, bool) or not (season in ("day", "week") or (isinstance(season, int) and season >= 1)):
            raise InputError(
                f"expected season = day, week or a whole number of steps >= 1, got {season!r}", field="season"
            )
        return cls(season=season)

    def to_dict(self) -> dict:
        return asdict(self)


class _ResidualQuantiles(PointForecaster):
    """Point forecast + empirical error quantiles per lead time, measured on the training history."""

    settings_type: ClassVar[type[ForecasterSettings]] = NoSettings

    def __init__(
        self, horizon: int = 20, quantiles: tuple[float, ...] = DEFAULT_QUANTILES, period: int = 1, *, settings=None
    ) -> None:
        super().__init__(horizon=horizon, quantiles=quantiles, period=period, settings=settings)

    def fit(self, history: np.ndarray) -> Self:
        history = np.asarray(history, dtype=np.float64)
        first = self._min_origin()
        origins = np.arange(first, len(history) - self.horizon + 1)
        if origins.size == 0:
            raise ValueError(f"{self.name}: history of {len(history)} values is too short for horizon {self.horizon}")
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
    """The value one season before each target step: a day (the period from the timestamps) by
    default, a week with ``season = "week"``, or any number of steps.

    For lead times beyond one season the forecast repeats the last observed season, so no value at or
    after the origin is ever used.
    """

    name = "seasonal-naive"
    settings_type = SeasonalNaiveSettings

    def resolve_season(self, n_train: int) -> int:
        """The season in steps for a training history of n_train steps."""
        season = self.settings.season
        if season == "day":
            return self.period
        if season == "week":
            week = WEEK_DAYS * self.period
            # a week needs two of them in the training half, so its errors can be measured there
            return week if self.period > 1 and 2 * week + self.horizon <= n_train else self.period
        return int(season)

    def fit(self, history: np.ndarray) -> Self:
        history = np.asarray(history, dtype=np.float64)
        self.season_ = self.resolve_season(len(history))
        if self.season_ + self.horizon > len(history):
            raise InputError(
                f"seasonal-naive: a season of {self.season_} steps needs a training history of at least "
                f"{self.season_ + self.horizon} steps, got {len(history)}",
                field="season",
            )
        self.info = {"season_steps": self.season_}
        return super().fit(history)

    def _min_origin(self) -> int:
        return getattr(self, "season_", self.period)

    def _point(self, series, origins):
        s = self._min_origin()
        h = np.arange(self.horizon)
        back = s * (h // s + 1)  # whole seasons back, always behind the origin
        return series[origins[:, None] + h[None, :] - back[None, :]]


@dataclass(frozen=True)
class WeeklySeasonalNaiveSettings(SeasonalNaiveSettings):
    season: str | int = "week"


class WeeklySeasonalNaiveForecaster(SeasonalNaiveForecaster):
    """`seasonal-naive` with ``season = "week"`` by default: last week's value at the same time."""

    name = "seasonal-naive-weekly"
    settings_type = WeeklySeasonalNaiveSettings

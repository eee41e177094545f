"""Honest baselines: persistence and seasonal-naive (daily, or weekly where the series has a week)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Self

import numpy as np

from ..core.errors import InputError
from ..inputs.settings import setting
from .base import ForecasterSettings, PointForecaster, SettingsTable, ahead
from .transforms import seasonal_back

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
class SeasonalNaiveSettings(SettingsTable):
    """season: "day" (the period from the timestamps), "week" (seven days where the training half holds
    two weeks, else the day), or a whole number of steps."""

    prefix: ClassVar[str] = "seasonal-naive."
    season: Literal["day", "week"] | int = setting("day", ge=1)


class _ResidualQuantiles(PointForecaster):
    """Point forecast + empirical error quantiles per lead time, measured on the training history."""

    settings_type: ClassVar[type[ForecasterSettings]] = NoSettings

    def fit(self, history: np.ndarray) -> Self:
        history = np.asarray(history, dtype=np.float64)
        origins = np.arange(self._min_origin(), len(history) - self.horizon + 1)
        if origins.size == 0:
            raise ValueError(f"{self.name}: history of {len(history)} values is too short for horizon {self.horizon}")
        self._fit_interval(ahead(history, origins, self.horizon) - self._point(history, origins))
        self.fit_length_ = len(history)
        return self


class PersistenceForecaster(_ResidualQuantiles):
    """The last known value, repeated for every lead time."""

    name = "persistence"

    def _point(self, series, origins):
        return np.repeat(series[origins - 1][:, None], self.horizon, axis=1)


class SeasonalNaiveForecaster(_ResidualQuantiles):
    """The value one season (`SeasonalNaiveSettings`) before each target step; beyond one season ahead
    it repeats the last observed season, so no value at or after the origin is ever used."""

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
        h = np.arange(self.horizon)
        return series[origins[:, None] + h[None, :] - seasonal_back(h, self._min_origin())[None, :]]


@dataclass(frozen=True)
class WeeklySeasonalNaiveSettings(SeasonalNaiveSettings):
    prefix: ClassVar[str] = "seasonal-naive-weekly."
    season: Literal["day", "week"] | int = setting("week", ge=1)


class WeeklySeasonalNaiveForecaster(SeasonalNaiveForecaster):
    """`seasonal-naive` with ``season = "week"`` by default: last week's value at the same time."""

    name = "seasonal-naive-weekly"
    settings_type = WeeklySeasonalNaiveSettings

"""The `lstm` forecaster's data: its settings, the scaling of a series, and its input windows (the
past as changes from the last value, the seasonal lags, the statistical forecast and the calendar at
every position; see lstm.py's notes) with their targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..core.errors import InputError
from ..inputs.series import SECONDS_PER_DAY
from ..inputs.settings import setting
from .base import LearnedForecaster, SettingsTable
from .statistical import MSTLForecaster
from .transforms import seasonal_back

SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY


@dataclass(frozen=True)
class LSTMSettings(SettingsTable):
    """The `lstm` forecaster's settings; all of them go into a saved model's metadata."""

    prefix: ClassVar[str] = "lstm."
    window: int = setting(0, ge=0)  # past steps read; 0: one daily period, capped at max_window
    max_window: int = setting(48, ge=1)
    # seasonal lags in periods; (): (1, 7) if a week fits, else (1, 2) or (1,)
    lags: tuple[int, ...] = setting((), ge=1)
    units: int = setting(32, ge=1)
    epochs: int = setting(250, ge=1)
    batch_size: int = setting(64, ge=1)
    patience: int = setting(20, ge=0)
    learning_rate: float = setting(1e-3, gt=0)
    val_fraction: float = setting(0.2, gt=0, lt=1)
    calendar: bool = True
    level: bool = False  # the last value's level as an input too (not only changes)
    # output layer starts as a blend of the MSTL forecast and last week's value ("statistical", with
    # statistical = true), a ridge fit on the seasonal inputs ("linear") or at zero ("zero")
    init: str = setting("statistical", choices=("statistical", "linear", "zero"))
    l2: float = setting(0.0, ge=0)
    ensemble: int = setting(1, ge=1)  # independent LSTM branches trained side by side, forecasts averaged
    freeze_linear: bool = True  # keep the starting seasonal/statistical part fixed while the LSTM trains
    statistical: bool = True  # the `mstl` forecast (fitted on the training half) as an input ahead
    interval_window: int = setting(240, ge=0)  # recent forecasts whose errors set the quantiles (0: validation only)
    interval_gamma: float = setting(0.01, ge=0, lt=1)  # adaptive-conformal step of the quantile levels (0: fixed)
    seed: int = 0


@dataclass(frozen=True)
class ThesisSettings(SettingsTable):
    """The thesis recipe's settings: one LSTM layer over one input (the last difference)."""

    prefix: ClassVar[str] = "lstm-thesis."
    units: int = setting(32, ge=1)
    epochs: int = setting(30, ge=1)
    batch_size: int = setting(32, ge=1)
    learning_rate: float = setting(1e-3, gt=0)
    interval_window: int = setting(240, ge=0)
    interval_gamma: float = setting(0.01, ge=0, lt=1)
    seed: int = 0


class LSTMWindows(LearnedForecaster):
    """The windows, scaling and targets of the `lstm` forecaster (a base of `lstm.LSTMForecaster`)."""

    mstl_: MSTLForecaster | None = None  # the statistical input's model, fitted on first use
    lags_: tuple[int, ...]  # the seasonal lags in periods, resolved on the training half
    center_: float  # the scaling: u = (w - center_) / scale_ maps the training half onto [-1, 1]
    scale_: float
    weekly_: bool  # the calendar has a day of week (the training half spans two weeks)

    # -- shape of the problem -----------------------------------------------------------------------
    @property
    def window(self) -> int:
        s = self.settings
        return s.window if s.window > 0 else max(self.horizon, min(self.period, s.max_window))

    def resolved_lags(self, n_train: int) -> tuple[int, ...]:
        if self.settings.lags:
            return tuple(self.settings.lags)
        # Keep at least half the training half as origins after the longest lag.
        for lags in ((1, 7), (1, 2), (1,)):
            if self.window + self.period * max(lags) + self.horizon <= n_train // 2:
                return lags
        return (1,)

    def history_needed(self, n_train: int) -> int:
        return self.min_history(self.resolved_lags(n_train))

    def validation_settings(self, n_train: int) -> dict:
        """Settings for a refit on part of a training half of n_train steps (`validation`): the lags
        the whole half resolves to, which the shorter part would otherwise shrink (a week to two
        days), scoring another model than the one used."""
        return {"lags": list(self.resolved_lags(n_train))}

    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        """Training steps needed: the window, the longest lag, H, and room for a validation tail."""
        first = self._first_origin(lags or (1,))
        return first + self.horizon + max(4 * self.horizon, 2 * self.horizon + 10)

    def _min_origin(self) -> int:
        return self._first_origin(self.lags_)

    def _first_origin(self, lags: tuple[int, ...]) -> int:
        first = self.window + self.period * max(lags)
        if self.settings.statistical:  # the MSTL input needs two days before its first forecast
            first = max(first, 2 * self.period, 2 * self.horizon)
        return first

    # -- features ------------------------------------------------------------------------------------
    def _calendar(self, idx: np.ndarray) -> list[np.ndarray]:
        if not self.settings.calendar:
            return []
        if self.interval_s and self.t0 is not None:
            secs = self.t0.astype("datetime64[s]").astype(np.int64) + idx.astype(np.int64) * int(self.interval_s)
            day = (secs % SECONDS_PER_DAY) / SECONDS_PER_DAY
            out = [np.sin(2 * np.pi * day), np.cos(2 * np.pi * day)]
            if self.weekly_:
                week = ((secs + 3 * SECONDS_PER_DAY) % SECONDS_PER_WEEK) / SECONDS_PER_WEEK  # epoch was a Thursday
                out += [np.sin(2 * np.pi * week), np.cos(2 * np.pi * week)]
            return out
        phase = (idx % self.period) / self.period
        return [np.sin(2 * np.pi * phase), np.cos(2 * np.pi * phase)]

    def features(self, u: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """(len(origins), window + H, F) network inputs; origin o reads only u[:o]."""
        W, H, P = self.window, self.horizon, self.period
        o = np.asarray(origins, dtype=np.int64)[:, None]
        pos = np.arange(W + H)[None, :]
        tau = o - W + pos  # the step each position stands for
        h = tau - o  # < 0: past, >= 0: the lead time of a future position
        future = h >= 0
        anchor = u[o - 1]  # the last observed value
        past = np.where(future, 0.0, u[np.minimum(tau, o - 1)] - anchor)
        feats = [past, future.astype(np.float64)]
        if self.settings.level:
            feats.append(np.broadcast_to(anchor, tau.shape))
        for k in self.lags_:
            back = np.where(future, seasonal_back(np.maximum(h, 0), P, k), P * k)
            src = tau - back
            feats.append(u[src] - anchor)
        if self.settings.statistical:
            feats.append(self._statistical(u, o[:, 0], tau.shape) - anchor)
        feats += self._calendar(tau)
        return np.stack(feats, axis=-1)

    def _statistical(self, u: np.ndarray, origins: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """(len(origins), window + H): the MSTL forecasts made at each origin (statistical.py) at the
        future positions, on the u scale; 0 at the past positions. The MSTL model is fitted on the
        training half (the first fit_length_ values of any series given here), again after a load."""
        w = self._from_u(u)
        mstl = self.mstl_
        if mstl is None:
            mstl = self.mstl_ = MSTLForecaster(horizon=self.horizon, period=self.period).fit(
                w[: self.fit_length_], errors=False
            )
        out = np.zeros(shape)
        out[:, self.window :] = self._to_u(mstl._point(w, origins))
        return out

    def targets(self, u: np.ndarray, origins: np.ndarray) -> np.ndarray:
        o = np.asarray(origins, dtype=np.int64)
        return u[o[:, None] + np.arange(self.horizon)[None, :]] - u[o - 1][:, None]

    def _to_u(self, w: np.ndarray) -> np.ndarray:
        return (np.asarray(w, dtype=np.float64) - self.center_) / self.scale_

    def _from_u(self, u: np.ndarray) -> np.ndarray:
        return u * self.scale_ + self.center_

    def _state(self) -> dict:
        return {"center": self.center_, "scale": self.scale_, "lags": list(self.lags_), "weekly": bool(self.weekly_)}

    def _set_state(self, state: dict) -> None:
        self.center_ = float(state["center"])
        self.scale_ = float(state["scale"])
        self.lags_ = tuple(state["lags"])
        self.weekly_ = bool(state["weekly"])

    def _scaled_history(self, w: np.ndarray) -> np.ndarray:
        """Checks a training history, resolves the lags and fits the scaling on it; returns it scaled."""
        self.lags_ = self.resolved_lags(len(w))
        need = self.min_history(self.lags_)
        if len(w) < need:
            raise InputError(
                f"lstm: the training history has {len(w)} steps but needs at least {need} "
                f"(input window {self.window} + seasonal lag {self.period * max(self.lags_)} + H {self.horizon} "
                "+ a validation tail)"
            )
        lo, hi = float(np.min(w)), float(np.max(w))
        if not hi > lo:
            raise InputError("lstm: the training history is constant")
        self.center_, self.scale_ = (hi + lo) / 2.0, (hi - lo) / 2.0
        span_s = len(w) * (self.interval_s or 0)
        self.weekly_ = bool(self.interval_s) and span_s >= 2 * SECONDS_PER_WEEK and self.period > 1
        self.fit_length_ = len(w)
        self.mstl_ = None
        return self._to_u(w)

    def _split_origins(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(training origins, validation origins) of a training history of n steps: the validation tail
        is the last val_fraction of the origins, H origins apart from the rest so no target is shared."""
        origins = np.arange(self._min_origin(), n - self.horizon + 1)
        n_val = max(2 * self.horizon, int(round(len(origins) * self.settings.val_fraction)))
        return origins[: len(origins) - n_val - self.horizon + 1], origins[-n_val:]

"""The forecaster interface: fit on a history, predict the next H values with quantiles.

Shapes: a history is a 1-D float array on the workload scale; a prediction is (Q, H) for the
quantile levels in `quantiles` (ascending, the median among them). `predict_origins` makes the
forecast matrix a simulation reads: row t holds what was predicted for steps t..t+H-1 using only
values before step t.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

import numpy as np

from ..core.errors import InputError
from ..inputs.settings import load_settings, setting_fields

DEFAULT_QUANTILES = (0.1, 0.5, 0.9)
Progress = Callable[[str], None]


class ForecasterSettings(Protocol):
    """A forecaster's settings: a frozen dataclass read from and written to plain dicts (the
    `--set` overrides, a saved model's json)."""

    @classmethod
    def from_dict(cls, d: dict) -> Self: ...

    def to_dict(self) -> dict: ...


class SettingsTable:
    """A base for a forecaster's settings dataclass: read by the one settings loader (its errors name
    the field as `<prefix>key`), written with tuples as lists."""

    prefix: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        """Settings from a table (`--set`, saved metadata), every value checked."""
        known = setting_fields(cls)
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise InputError(
                f"unknown {cls.prefix.rstrip('.')} setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                field=cls.prefix + unknown[0],
            )
        return load_settings(cls, d, prefix=cls.prefix)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}  # type: ignore[call-overload]


def digest(array: np.ndarray) -> str:
    """A short fingerprint of an array's values (what a saved model or a forecast file was made from)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.float64)).tobytes()).hexdigest()[:16]


def series_key(values: np.ndarray) -> bytes:
    """A cache key for a stretch of a series (refits and decompositions are cached by what they read)."""
    return hashlib.blake2b(np.ascontiguousarray(values, dtype=np.float64).tobytes(), digest_size=16).digest()


def ahead(series: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    """(len(origins), H): series[o + h], the values a forecast made at origin o is for."""
    return series[np.asarray(origins)[:, None] + np.arange(horizon)[None, :]]


class Forecaster(ABC):
    name: str = "forecaster"
    #: Trained (a saved model, settings that identify it) rather than fitted on the spot.
    learned: bool = False
    #: The class of its settings (every forecaster has one; `NoSettings` for none).
    settings_type: ClassVar[type[ForecasterSettings]]

    def __init__(
        self,
        horizon: int = 20,
        quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
        period: int = 1,
        *,
        settings: Any = None,
        interval_s: int | None = None,
        t0: Any = None,
        progress: Progress | None = None,
    ) -> None:
        """settings: an instance of `settings_type` (None: its defaults); interval_s and t0: the
        series' sampling interval and the time of its step 0 (for forecasters that read the calendar);
        progress: where training reports how it goes."""
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if 0.5 not in quantiles or list(quantiles) != sorted(quantiles):
            raise ValueError(f"quantiles must be ascending and include 0.5, got {quantiles}")
        self.horizon = horizon
        self.quantiles = tuple(quantiles)
        self.period = period
        self.settings: Any = settings if settings is not None else self.settings_type()
        self.interval_s = interval_s
        self.t0 = None if t0 is None else np.datetime64(t0, "s")
        self.progress = progress
        self.info: dict[str, Any] = {}  # facts of its fitting or training, for reports

    def _say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    @property
    def median_index(self) -> int:
        return self.quantiles.index(0.5)

    @abstractmethod
    def fit(self, history: np.ndarray) -> Forecaster:
        """Learn from a training history (n,)."""

    @abstractmethod
    def predict_origins(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """Forecasts made at each origin: (Q, len(origins), H). Origin o sees only series[:o]."""

    def predict_median(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """Only the median forecasts, (len(origins), H): what the planners read."""
        return self.predict_origins(series, origins)[self.median_index]

    def _min_origin(self) -> int:
        """The first origin it can forecast from (values it needs before its first forecast)."""
        return 1


class PointForecaster(Forecaster):
    """A point forecast (the median) plus quantiles from the forecaster's own recent errors.

    Subclasses give `_point` and `_min_origin`, and set `error_quantiles_` (Q, H) in `fit` (used until
    enough recent errors exist; `_fit_interval`) and `fit_length_` (the training history's length,
    where the adaptive interval's state starts; see `rolling_error_quantiles`).
    """

    error_quantiles_: np.ndarray  # (Q, H), set by fit
    fit_length_: int  # set by fit

    @property
    def interval_window(self) -> int:
        return getattr(self.settings, "interval_window", 240)

    @property
    def interval_gamma(self) -> float:
        return getattr(self.settings, "interval_gamma", 0.01)

    def _fit_interval(self, errors: np.ndarray) -> np.ndarray:
        """The interval's starting point from its errors (m, H) on training data; returns them."""
        self.error_quantiles_ = np.quantile(errors, self.quantiles, axis=0)  # (Q, H)
        self.error_quantiles_[self.median_index] = 0.0  # the point forecast is the median
        return errors

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:  # (len(origins), H)
        raise NotImplementedError

    def _check_origins(self, series: np.ndarray, origins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        series = np.asarray(series, dtype=np.float64)
        origins = np.asarray(origins, dtype=np.int64)
        if not hasattr(self, "error_quantiles_"):
            raise ValueError(f"{self.name}: fit the forecaster first")
        if np.any(origins < self._min_origin()):
            raise ValueError(f"{self.name}: needs at least {self._min_origin()} past values before a forecast")
        if np.any(origins > len(series)):
            raise ValueError(f"{self.name}: an origin lies past the end of the series")
        return series, origins

    def predict_median(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        series, origins = self._check_origins(series, origins)
        return self._point(series, origins)

    def predict_origins(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        series, origins = self._check_origins(series, origins)
        point = self._point(series, origins)
        if self.interval_window > 0:
            start = max(self._min_origin(), getattr(self, "fit_length_", 0) - 2 * self.interval_window - self.horizon)
            offsets = rolling_error_quantiles(
                self._point,
                series,
                origins,
                self.horizon,
                self.quantiles,
                self.interval_window,
                start,
                self.error_quantiles_,
                gamma=self.interval_gamma,
            )
        else:
            offsets = np.broadcast_to(
                self.error_quantiles_[:, None, :], (len(self.quantiles), len(origins), self.horizon)
            )
        return np.sort(point[None, :, :] + offsets, axis=0)


class AdaptiveErrorQuantiles:
    """Quantile offsets of a forecaster's recent errors, one forecast origin at a time, for errors that
    become known as a run goes (`rolling_error_quantiles` runs it over a whole series at once).

    errors: (origins, H) array the caller owns and fills as outcomes arrive: errors[o, h] is the
    outcome at o + h minus the forecast made at origin o for it, NaN while unknown. Before asking
    `offsets(i)`, every error with o + h <= i - 1 must be written: those are all it reads (the window
    of the `window` newest known errors per lead, and the outcomes the adaptive levels learn from).
    Origins are processed in order from 0; asking for origin i computes every origin up to i once.

    For origin o and lead h the offsets are empirical quantiles of the errors of the `window` most
    recent forecasts at lead h whose targets were known before o (origins o' <= o - 1 - h). With
    `gamma` > 0 each quantile level also adapts (adaptive conformal inference, Gibbs & Candes 2021):
    after every outcome, level tau moves by gamma * (tau - [outcome <= its quantile]), so each quantile
    is exceeded at its nominal rate over time even when errors drift. Where fewer than `min_count`
    errors exist, `fallback` (Q, H) is used. The median's offset is 0 and the other offsets keep their
    side of it: the point forecast is the median.
    """

    def __init__(
        self,
        errors: np.ndarray,
        quantiles: tuple[float, ...],
        window: int,
        fallback: np.ndarray,
        *,
        gamma: float = 0.0,
        min_count: int = 30,
    ) -> None:
        self.errors = errors
        self.levels = np.asarray(quantiles, dtype=np.float64)
        self.med = int(np.nonzero(self.levels == 0.5)[0][0])
        self.window = window
        self.fallback = np.asarray(fallback, dtype=np.float64)
        self.gamma = gamma
        self.min_count = min_count
        n_q, (n, horizon) = len(self.levels), errors.shape
        self.leads = np.arange(horizon)
        self.history = np.full((n_q, n, horizon), np.nan)  # offsets of every origin computed so far
        self.acc = np.zeros((n_q, horizon))  # accumulated level corrections
        self.computed = 0  # origins 0..computed-1 are in history

    def offsets(self, i: int) -> np.ndarray:
        """(Q, H) offsets for the forecast made at origin i."""
        while self.computed <= i:
            self._advance()
        return self.history[:, i]

    def _advance(self) -> None:
        i, err, leads, levels = self.computed, self.errors, self.leads, self.levels
        newest = i - 1 - leads  # the newest usable forecast, per lead
        if self.gamma > 0:
            ok = newest >= 0
            if ok.any():
                e = err[newest[ok], leads[ok]]
                hit = e[None, :] <= self.history[:, newest[ok], leads[ok]]
                upd = levels[:, None] - hit
                upd[:, np.isnan(e)] = 0.0
                self.acc[:, ok] += self.gamma * upd
        tau = np.clip(levels[:, None] + self.acc, 0.0, 1.0)  # (Q, H)
        # the window of errors for each lead: err[newest - window + 1 .. newest, h]
        idx = newest[None, :] - np.arange(self.window)[:, None]  # (window, H)
        rows = np.where(idx >= 0, err[idx.clip(0), leads[None, :]], np.nan)
        rows = np.sort(rows, axis=0)  # NaNs last
        count = np.sum(~np.isnan(rows), axis=0)  # (H,)
        enough = count >= self.min_count
        at = tau * (np.maximum(count, 1) - 1)  # (Q, H) fractional index into the sorted errors
        lo = np.floor(at).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(count, 1) - 1)
        frac = at - lo
        v_lo = np.take_along_axis(rows, lo, axis=0)
        v_hi = np.take_along_axis(rows, hi, axis=0)
        off = np.where(enough[None, :], v_lo + frac * (v_hi - v_lo), self.fallback)
        med = self.med  # the point forecast stays the median and inside every central interval
        off[med] = 0.0
        off[:med] = np.minimum(off[:med], 0.0)
        off[med + 1 :] = np.maximum(off[med + 1 :], 0.0)
        self.history[:, i] = off
        self.computed = i + 1


def rolling_error_quantiles(
    point_at,
    series: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: tuple[float, ...],
    window: int,
    min_origin: int,
    fallback: np.ndarray,
    *,
    gamma: float = 0.0,
) -> np.ndarray:
    """Quantile offsets (Q, len(origins), H) from the forecaster's own recent errors, per lead time
    (`AdaptiveErrorQuantiles` over a whole series: nothing at or after origin o is used for o).

    point_at(series, positions) -> (len(positions), H) the point forecasts. The adaptive state (with
    `gamma` > 0) starts at `min_origin`, so the offsets for an origin never depend on which other
    origins were asked for; origins before it get `fallback`.
    """
    series = np.asarray(series, dtype=np.float64)
    origins = np.asarray(origins, dtype=np.int64)
    fallback = np.asarray(fallback, dtype=np.float64)
    first = min_origin if gamma > 0 else max(min_origin, int(origins.min()) - window - horizon)
    last = int(origins.max())
    out = np.broadcast_to(fallback[:, None, :], (len(quantiles), len(origins), horizon)).copy()
    if last >= first:
        pos = np.arange(first, last + 1)
        point = point_at(series, pos)  # (n, H)
        tgt = pos[:, None] + np.arange(horizon)[None, :]
        known = tgt < len(series)
        err = np.full(point.shape, np.nan)
        err[known] = series[tgt[known]] - point[known]
        tracker = AdaptiveErrorQuantiles(err, quantiles, window, fallback, gamma=gamma)
        tracker.offsets(len(pos) - 1)
        inside = origins >= first
        out[:, inside] = tracker.history[:, origins[inside] - first]
    out[tuple(quantiles).index(0.5)] = 0.0  # the point forecast is the median
    return out


class LearnedForecaster(PointForecaster):
    """A forecaster that trains a model once and saves it (`learned`): what the pipeline needs of one
    besides fit/predict."""

    learned = True

    @abstractmethod
    def spec(self) -> dict:
        """Everything a trained model depends on except the data."""

    @abstractmethod
    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        """Steps of training history it needs at least (with these seasonal lags, where it has them)."""

    def history_needed(self, n_train: int) -> int:
        """Steps of training history it needs for a training half of n_train steps (its lags may
        depend on how much history there is)."""
        return self.min_history()

    @abstractmethod
    def save(self, folder: str | Path, task: str, extra: dict | None = None) -> Path:
        """Write the trained model as <folder>/<task>.*; returns the main file."""

    @classmethod
    @abstractmethod
    def load(cls, folder: str | Path, task: str, expect: dict | None = None) -> Self:
        """A saved model; with `expect` (a spec()), refuse one trained with other settings."""


def spec_differences(expect: dict, meta: dict) -> list[str]:
    """How a saved model's metadata differs from a spec() (its settings key by key), in words."""
    diffs = []
    for key, want in expect.items():
        have = meta.get(key)
        if key == "settings" and isinstance(want, dict) and isinstance(have, dict):
            diffs += [
                f"{sk}: saved {have.get(sk)!r}, requested {sv!r}" for sk, sv in want.items() if have.get(sk) != sv
            ]
        elif have != want:
            diffs.append(f"{key}: saved {have!r}, requested {want!r}")
    return diffs

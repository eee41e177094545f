"""The fitted candidates of `online-select` and where their refits run.

A refit (AutoETS with a season, MSTL: 0.1-1.5 s on a loaded 2-CPU VM) is the slow part; a fitted
candidate's forecast at a later origin is cheap (well under a millisecond each): AutoETS's `forward`
keeps the fitted parameters and filters the new values, the AR model is a dot product, and MSTL keeps
the seasonal components it fitted (continued with their periods, as MSTL's own forecast does) and runs
only its trend model's `forward` on the values with those removed. MSTL's own `forward` decomposes the
series again (about 50 ms), too slow for every step.

`fit_candidates` is a plain function of its arguments, so it gives the same models in this process or
in another: `InlineRefits` fits when a fit is first asked for (what `simulate` uses), `BackgroundRefits`
fits in a worker process while the run goes on (what a live run uses). Which fit a forecast reads is
decided by the step alone (see online_select.py), so both give the same forecasts.
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Protocol

import numpy as np

ETS_MAX_SEASON = 24  # statsforecast's AutoETS refuses longer seasons


class Candidate(Protocol):
    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        """(h,) forecast after y (the values from `offset` steps after the fit window's first value
        up to the origin)."""
        ...


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


class AR:
    """Least-squares AR(p) with an intercept: a sum of periodic components is an exact linear
    recurrence, so it follows them from a few periods of history."""

    def __init__(self, y: np.ndarray, p: int) -> None:
        X = np.column_stack([y[p - 1 - j : len(y) - 1 - j] for j in range(p)] + [np.ones(len(y) - p)])
        self.coef, *_ = np.linalg.lstsq(X, y[p:], rcond=None)
        self.p = p

    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        # Python floats: numpy's per-call overhead on p-long vectors is most of the cost at this size
        weights, intercept = self.coef[:-1].tolist(), float(self.coef[-1])
        hist = y[-self.p :][::-1].tolist()  # newest first
        out = []
        for _ in range(h):
            nxt = sum(w * v for w, v in zip(weights, hist, strict=False)) + intercept
            out.append(nxt)
            hist = [nxt, *hist[:-1]]
        return np.array(out)


class DampedTrend:
    """The last value continued by its last change, damped: an ARIMA(1,1,0) without a constant whose
    coefficient phi is the least-squares AR(1) coefficient of y's changes, clipped to [0, 1] (a smooth
    load keeps moving as it moved, phi near 1; a noisy one's change does not persist, phi near 0). It
    needs no season or period, so it can be fitted from a few values, at every origin (a dot product)."""

    def __init__(self, y: np.ndarray) -> None:
        changes = np.diff(y)
        before, after = changes[:-1], changes[1:]
        denominator = float(before @ before)
        self.phi = min(max(float(after @ before) / denominator, 0.0), 1.0) if denominator > 0 else 0.0

    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        change = float(y[-1] - y[-2]) if len(y) >= 2 else 0.0
        return float(y[-1]) + change * np.cumsum(self.phi ** np.arange(1, h + 1))


def harmonic_design(steps: np.ndarray, periods: tuple[float, ...], harmonics: int) -> np.ndarray:
    """Regressors at `steps` (shape (n,), indices from the fit window's first value): an intercept, then
    per period p and k = 1..harmonics below the Nyquist frequency sin and cos of 2 pi k t / p; (n, columns)."""
    columns = [np.ones(len(steps))]
    for p in periods:
        for k in range(1, harmonics + 1):
            if k / p < 0.5:
                columns += [np.sin(2 * np.pi * k * steps / p), np.cos(2 * np.pi * k * steps / p)]
    return np.column_stack(columns)


def fit_periods(values: np.ndarray, most: int = 2, grid_steps: float = 0.5) -> tuple[float, ...]:
    """Up to `most` periods (steps, from 2.5 to len/2 on a `grid_steps` grid, each more than 1 step from
    the others), chosen one after the other as the sinusoid that most lowers the least-squares error of a
    fit with the ones before it. Unlike the periodogram's peaks (:func:`detect_seasons`), whose periods
    are 1 / (k / n) only, this finds a 12- and a 7-step component in 25 values; () if too short."""
    n = len(values)
    t = np.arange(n, dtype=np.float64)
    grid = np.arange(2.5, n / 2 + 1e-9, grid_steps)
    found: list[float] = []
    for _ in range(most):
        best, best_sse = None, np.inf
        for p in grid:
            if any(abs(p - q) <= 1 for q in found):
                continue
            X = harmonic_design(t, (*found, float(p)), 1)
            coef, *_ = np.linalg.lstsq(X, values, rcond=None)
            sse = float(np.sum((values - X @ coef) ** 2))
            if sse < best_sse:
                best, best_sse = float(p), sse
        if best is None:
            break
        found.append(best)
    return tuple(found)


class Harmonic:
    """Dynamic harmonic regression: least-squares sinusoids at the fitted periods (fit_periods), with
    harmonics (up to 3, as many as the Bayesian information criterion and a third of the values allow: a
    peaked periodic load is a sum of them), and an AR(1) on what they leave (a burst
    that decays by a constant factor a step is exactly that). A forecast continues the sinusoids at their
    steps and decays the last value's residual by the AR coefficient."""

    def __init__(self, y: np.ndarray) -> None:
        n = len(y)
        t = np.arange(n, dtype=np.float64)
        self.periods = fit_periods(y)
        # harmonics by the Bayesian information criterion: a peaked load needs them, bursts would be
        # fitted by them in a short window
        best = (np.inf, 1, np.zeros(1))
        for harmonics in range(1, 4):
            X = harmonic_design(t, self.periods, harmonics)
            if X.shape[1] * 3 > n:
                break
            coef, *_ = np.linalg.lstsq(X, y, rcond=None)
            sse = max(float(np.sum((y - X @ coef) ** 2)), 1e-12)
            bic = n * np.log(sse / n) + X.shape[1] * np.log(n)
            if bic < best[0]:
                best = (bic, harmonics, coef)
        _, self.harmonics, self.coef = best
        rest = y - harmonic_design(t, self.periods, self.harmonics) @ self.coef
        denominator = float(rest[:-1] @ rest[:-1])
        self.phi = min(max(float(rest[1:] @ rest[:-1]) / denominator, 0.0), 0.99) if denominator > 0 else 0.0

    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        steps = np.arange(offset + len(y) - 1, offset + len(y) + h, dtype=np.float64)
        periodic = harmonic_design(steps, self.periods, self.harmonics) @ self.coef
        rest = float(y[-1] - periodic[0])
        return periodic[1:] + rest * self.phi ** np.arange(1, h + 1)


class ETS:
    """A fitted statsforecast AutoETS, applied to new values with its parameters kept."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        return np.asarray(self.model.forward(y=y, h=h)["mean"], dtype=np.float64)


class FrozenSeasonMSTL:
    """A fitted statsforecast MSTL whose seasonal components stay as fitted: `seasonal` (n,) their sum
    over the fit window's n values, continued past it by repeating each component's last period."""

    def __init__(self, model: Any, periods: list[int]) -> None:
        columns = model.model_.filter(regex="seasonal*")
        self.seasonal = columns.sum(axis=1).to_numpy(dtype=np.float64)
        self.last_periods = [
            (p, columns[c].to_numpy(dtype=np.float64)[-p:]) for p, c in zip(periods, columns, strict=True)
        ]
        self.trend = model.trend_forecaster

    def _seasonal_at(self, steps: np.ndarray) -> np.ndarray:
        """The seasonal sum at `steps` (indices from the fit window's first value)."""
        n = len(self.seasonal)
        out = np.where(steps < n, self.seasonal[np.minimum(steps, n - 1)], 0.0)
        for p, last in self.last_periods:
            out = out + np.where(steps >= n, last[(steps - n) % p], 0.0)
        return out

    def forecast(self, y: np.ndarray, offset: int, h: int) -> np.ndarray:
        steps = offset + np.arange(len(y) + h)
        seasonal = self._seasonal_at(steps)
        trend = self.trend.forward(y=y - seasonal[: len(y)], h=h)["mean"]
        return np.asarray(trend, dtype=np.float64) + seasonal[len(y) :]


def fit_candidates(y: np.ndarray, ar_lags: int) -> dict[str, Candidate]:
    """The candidates but persistence fitted on y (1-D, consecutive steps); those whose fit fails or
    that y cannot support (no season for MSTL, too few values) are left out; {} for a flat y."""
    from statsforecast.models import MSTL, AutoETS

    if np.ptp(y) <= 0:
        return {}
    seasons = detect_seasons(y)
    short = [p for p in seasons if p <= ETS_MAX_SEASON and 2 * p <= len(y)]
    long = sorted(p for p in seasons if 2 * p <= len(y))
    lags = min(ar_lags, len(y) // 3)
    makers = {
        "ar": lambda: AR(y, lags) if lags >= 1 else None,
        "ets": lambda: ETS(AutoETS(model="ZZZ" if short else "ZZN", season_length=short[0] if short else 1).fit(y)),
        "harmonic": lambda: Harmonic(y) if len(y) >= 15 else None,
        "mstl": lambda: (
            FrozenSeasonMSTL(MSTL(season_length=long, trend_forecaster=AutoETS(model="ZZN")).fit(y), long)
            if long
            else None
        ),
    }
    fitted: dict[str, Candidate] = {}
    with warnings.catch_warnings():
        # AutoETS warns (division by zero in its variance) on short windows it then fits anyway
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, make in makers.items():
            try:
                model = make()
            except Exception:
                model = None
            if model is not None:
                fitted[name] = model
    return fitted


class InlineRefits:
    """Fits in this process when a fit is first asked for. `wait_s`: time spent waiting on fits;
    `eager`: whether forecasts should read fits as soon as they may (they cost nothing to wait for)."""

    eager = False

    def __init__(self) -> None:
        self._asked: dict[Any, tuple[np.ndarray, int]] = {}
        self._done: dict[Any, dict[str, Candidate]] = {}
        self.wait_s = 0.0

    def start(self, key: Any, y: np.ndarray, ar_lags: int) -> None:
        if key not in self._done:
            self._asked.setdefault(key, (y.copy(), ar_lags))

    def result(self, key: Any) -> dict[str, Candidate]:
        if key not in self._done:
            t0 = time.perf_counter()
            self._done[key] = fit_candidates(*self._asked.pop(key))
            self.wait_s += time.perf_counter() - t0
        return self._done[key]


def _warm_up() -> None:
    """Compiles statsforecast's numba code in the worker before the first real refit."""
    t = np.arange(48, dtype=np.float64)
    fit_candidates(10 + np.sin(2 * np.pi * t / 6) + 0.01 * t, 4)


class BackgroundRefits(InlineRefits):
    """Fits in one worker process (statsforecast's fits hold the GIL, so a thread would stall the
    decisions) started on `start` and collected on `result`, which waits only if the fit is not done
    yet; `wait_s` sums those waits. The worker is spawned, not forked: the coordinator runs threads."""

    eager = True

    def __init__(self) -> None:
        super().__init__()
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self._futures: dict[Any, Future] = {}
        self.waits: list[tuple[int, float]] = []  # (refit point, seconds a forecast waited for it)
        self._warm_up = self._pool.submit(_warm_up)
        weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)

    def start(self, key: Any, y: np.ndarray, ar_lags: int) -> None:
        if key not in self._done and key not in self._futures:
            self._futures[key] = self._pool.submit(fit_candidates, y.copy(), ar_lags)

    def result(self, key: Any) -> dict[str, Candidate]:
        if key not in self._done:
            t0 = time.perf_counter()
            self._done[key] = self._futures.pop(key).result()
            waited = time.perf_counter() - t0
            self.wait_s += waited
            self.waits.append((key[0], waited))
        return self._done[key]

    def wait_ready(self) -> float:
        """Waits for the worker to have started and fitted once; returns the seconds waited."""
        t0 = time.perf_counter()
        self._warm_up.result()
        return time.perf_counter() - t0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

"""Invertible series transforms and supervised windows, shared by the forecasters.

Every transform here inverts exactly (up to float rounding); the tests hold them to that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def difference(series: np.ndarray, lag: int = 1) -> np.ndarray:
    """d[i] = x[i + lag] - x[i]: (n - lag,)."""
    x = np.asarray(series, dtype=np.float64)
    if lag < 1 or len(x) <= lag:
        raise ValueError(f"cannot difference {len(x)} values at lag {lag}")
    return x[lag:] - x[:-lag]


def undifference(last_values: np.ndarray, diffs: np.ndarray, lag: int = 1) -> np.ndarray:
    """Invert `difference` forward from known values.

    last_values: (..., lag) the `lag` values just before the first difference's target;
    diffs: (..., m) differences d[k] = x[k] - x[k - lag] for the m steps that follow.
    Returns (..., m) the values x of those steps.
    """
    last = np.asarray(last_values, dtype=np.float64)
    d = np.asarray(diffs, dtype=np.float64)
    if last.shape[-1] != lag:
        raise ValueError(f"expected {lag} known values, got {last.shape[-1]}")
    if lag == 1:
        return last + np.cumsum(d, axis=-1)
    out = np.empty(d.shape)
    buf = np.concatenate([last, out], axis=-1)
    for k in range(d.shape[-1]):
        buf[..., lag + k] = buf[..., k] + d[..., k]
    return buf[..., lag:]


@dataclass(frozen=True)
class MinMaxScaler:
    """Linear map of [lo, hi] (fitted on training data) onto [-1, 1]."""

    lo: float
    hi: float

    @classmethod
    def fit(cls, values: np.ndarray) -> MinMaxScaler:
        v = np.asarray(values, dtype=np.float64)
        lo, hi = float(np.min(v)), float(np.max(v))
        if not hi > lo:
            raise ValueError("cannot scale constant values")
        return cls(lo, hi)

    def transform(self, values: np.ndarray) -> np.ndarray:
        return 2.0 * (np.asarray(values, dtype=np.float64) - self.lo) / (self.hi - self.lo) - 1.0

    def inverse(self, scaled: np.ndarray) -> np.ndarray:
        return (np.asarray(scaled, dtype=np.float64) + 1.0) * (self.hi - self.lo) / 2.0 + self.lo


def supervised_pairs(series: np.ndarray, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (input, output) pair of a series: X[k] = x[o-n_in:o], Y[k] = x[o:o+n_out] for origins o.

    Returns (X (m, n_in), Y (m, n_out), origins (m,)). Row k's inputs end strictly before its origin,
    so nothing from the origin's step or later reaches the input.
    """
    x = np.asarray(series, dtype=np.float64)
    origins = np.arange(n_in, len(x) - n_out + 1)
    if origins.size == 0:
        raise ValueError(f"{len(x)} values are too few for windows of {n_in} in and {n_out} out")
    X = x[origins[:, None] + np.arange(-n_in, 0)[None, :]]
    Y = x[origins[:, None] + np.arange(n_out)[None, :]]
    return X, Y, origins


def seasonal_back(h: np.ndarray, period: int, k: int = 1) -> np.ndarray:
    """Steps back from target lead h (0-based) to its analogue k periods back, pushed further back by
    whole periods while it would fall on or after the origin (so H > period never peeks)."""
    h = np.asarray(h)
    return period * (h // period + k)

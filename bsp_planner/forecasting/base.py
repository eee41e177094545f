"""The forecaster interface: fit on a history, predict the next H values with quantiles.

Shapes: a history is a 1-D float array on the workload scale; a prediction is (Q, H) for the
quantile levels in `quantiles` (ascending, the median among them). `predict_origins` makes the
forecast matrix a simulation reads: row t holds what was predicted for steps t..t+H-1 using only
values before step t.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

DEFAULT_QUANTILES = (0.1, 0.5, 0.9)


class Forecaster(ABC):
    name: str = "forecaster"

    def __init__(self, horizon: int = 20, quantiles: tuple[float, ...] = DEFAULT_QUANTILES, period: int = 1) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if 0.5 not in quantiles or list(quantiles) != sorted(quantiles):
            raise ValueError(f"quantiles must be ascending and include 0.5, got {quantiles}")
        self.horizon = horizon
        self.quantiles = tuple(quantiles)
        self.period = period

    @property
    def median_index(self) -> int:
        return self.quantiles.index(0.5)

    @abstractmethod
    def fit(self, history: np.ndarray) -> "Forecaster":
        """Learn from a training history (n,)."""

    @abstractmethod
    def predict_origins(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """Forecasts made at each origin: (Q, len(origins), H). Origin o sees only series[:o]."""

    def predict(self, history: np.ndarray) -> np.ndarray:
        """The next H values after `history`: (Q, H)."""
        history = np.asarray(history, dtype=np.float64)
        return self.predict_origins(history, np.array([len(history)]))[:, 0, :]

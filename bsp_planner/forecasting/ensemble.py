"""`ensemble`: a weighted mean of named forecasters' median forecasts (`ensemble:lstm,gbm`; plain
`ensemble` is `ensemble:lstm,gbm`), and `ensemble-fit`, the same members with weights fitted per task
on validation data.

Weights are equal unless given (``--set ensemble.weights=0.6,0.4``, one per member, normalised to sum
to 1) or fitted (``fit_weights``, on by default for `ensemble-fit`): then each task's weights are the
ones, on a grid of ``weight_step``, whose combination has the least squared error over the validation
period of that task (the last ``validation_fraction`` of its training half, every member trained
afresh on the part before; `validation`). A weight is never fitted on the test half: chosen on the
figures a forecaster is judged by, it would flatter it.

Each member is obtained as it would be alone (a saved model loaded, a statistical model fitted, the
global `gbm` trained on its pool), so a forecast at origin o reads what its members read: values
before o.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.errors import InputError
from ..inputs.settings import setting
from .base import Forecaster, ForecasterSettings, PointForecaster, SettingsTable, ahead

DEFAULT_MEMBERS = ("lstm", "gbm")


@dataclass(frozen=True)
class EnsembleSettings(SettingsTable):
    """`ensemble`'s settings (see the module's notes)."""

    prefix: ClassVar[str] = "ensemble."
    weights: tuple[float, ...] = setting((), ge=0)
    fit_weights: bool = False  # per task, on the validation period (weights must then be empty)
    validation_fraction: float = setting(0.25, gt=0, lt=1)  # the training half's last part
    weight_step: float = setting(0.1, gt=0, le=1)  # the grid the fitted weights lie on
    interval_window: int = setting(240, ge=0)
    interval_gamma: float = setting(0.01, ge=0, lt=1)

    def validate(self, path: Any = None) -> None:
        if self.fit_weights and self.weights:
            raise InputError("expected either weights or fit_weights, not both", path=path, field="ensemble.weights")


class EnsembleForecaster(PointForecaster):
    """The weighted mean of `members`' median forecasts; build it with `combine`, then `fit`."""

    name = "ensemble"
    learned = True  # its members come from the job (saved models, pools): built through the pipeline
    settings_type: ClassVar[type[ForecasterSettings]] = EnsembleSettings
    members: ClassVar[tuple[str, ...]] = DEFAULT_MEMBERS
    parts: tuple[Forecaster, ...] = ()  # set by combine
    weights_: np.ndarray  # (members,), set by combine

    @classmethod
    def resolve_weights(cls, weights: tuple[float, ...]) -> np.ndarray:
        """(members,) weights summing to 1; equal when none are given."""
        n = len(cls.members)
        if not weights:
            return np.full(n, 1.0 / n)
        if len(weights) != n:
            raise InputError(
                f"expected {n} weights, one per member ({', '.join(cls.members)}), got {len(weights)}",
                field="ensemble.weights",
            )
        w = np.asarray(weights, dtype=np.float64)
        if not w.sum() > 0:
            raise InputError("expected weights that sum to more than 0", field="ensemble.weights")
        return w / w.sum()

    def combine(self, parts: list[Forecaster], weights: np.ndarray | None = None) -> EnsembleForecaster:
        """Use these fitted forecasters (one per member, in order), with `weights` (members,) when
        fitted (`validation.fit_weights`), else the settings' weights."""
        if len(parts) != len(self.members):
            raise ValueError(f"{self.name}: expected {len(self.members)} fitted members, got {len(parts)}")
        if any(f.horizon != self.horizon for f in parts):
            raise ValueError(f"{self.name}: every member must forecast {self.horizon} steps ahead")
        self.parts = tuple(parts)
        self.weights_ = self.resolve_weights(tuple(self.settings.weights) if weights is None else tuple(weights))
        return self

    def _min_origin(self) -> int:
        return max((f._min_origin() for f in self.parts), default=1)

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        out = np.zeros((len(origins), self.horizon))
        for w, f in zip(self.weights_, self.parts, strict=True):
            out += w * f.predict_median(series, origins)
        return out

    def fit(self, history: np.ndarray) -> EnsembleForecaster:
        """The starting interval from its errors over the last `interval_window` training origins
        (the members are fitted already: `combine`)."""
        if not self.parts:
            raise ValueError(f"{self.name}: combine fitted members first")
        w = np.asarray(history, dtype=np.float64)
        last = len(w) - self.horizon
        first = max(self._min_origin(), last - max(self.interval_window, 2 * self.horizon))
        if last < first:
            raise InputError(f"{self.name}: the training history of {len(w)} steps is too short")
        origins = np.arange(first, last + 1)
        self._fit_interval(ahead(w, origins, self.horizon) - self._point(w, origins))
        self.fit_length_ = len(w)
        self.info = {**self.info, "members": list(self.members), "weights": self.weights_.round(4).tolist()}
        return self


@dataclass(frozen=True)
class FittedEnsembleSettings(EnsembleSettings):
    """`ensemble-fit`'s settings: the ensemble's, with weights fitted on validation by default."""

    prefix: ClassVar[str] = "ensemble-fit."
    fit_weights: bool = True


class FittedEnsembleForecaster(EnsembleForecaster):
    """lstm and gbm with per-task weights fitted on each task's validation period."""

    name = "ensemble-fit"
    settings_type: ClassVar[type[ForecasterSettings]] = FittedEnsembleSettings


@functools.cache
def ensemble_class(members: tuple[str, ...]) -> type[EnsembleForecaster]:
    """The ensemble of these members (one class per combination, named `ensemble:a,b`)."""
    if members == DEFAULT_MEMBERS:
        return EnsembleForecaster
    name = "ensemble:" + ",".join(members)
    return type("EnsembleForecaster", (EnsembleForecaster,), {"name": name, "members": members})

"""Every forecaster by name, and how to build one for a prepared task series."""

from __future__ import annotations

from typing import Callable

from ..errors import InputError
from .base import DEFAULT_QUANTILES, Forecaster
from .baselines import BASELINES
from .lstm import LSTMS
from .prepare import PreparedSeries
from .statistical import STATISTICAL

DEFAULT_FORECASTER = "lstm"
FORECASTERS = ("lstm", "lstm-thesis", "persistence", "seasonal-naive", "seasonal-naive-weekly", "mstl")
# Forecasters fitted on the spot (no saved model): the baselines and the statistical model.
FITTED = {**BASELINES, **STATISTICAL}
# Bump when a change to a forecaster's code changes what it predicts: shipped forecasts and saved
# models made by an older version are then stale.
FORECASTER_VERSION = 1


def check_name(name: str) -> str:
    if name not in FORECASTERS:
        raise InputError(f"unknown forecaster '{name}'; known: {', '.join(FORECASTERS)}", field="forecaster")
    return name


def is_learned(name: str) -> bool:
    return check_name(name) in LSTMS


def default_settings(name: str) -> dict:
    """A forecaster's settings with every default filled in ({} for one without settings)."""
    cls = LSTMS[name] if is_learned(name) else FITTED[name]
    return cls.settings_type().to_dict()


def make_forecaster(
    name: str,
    p: PreparedSeries,
    horizon: int,
    *,
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
    settings: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> Forecaster:
    check_name(name)
    if name in FITTED:
        cls = FITTED[name]
        return cls(horizon=horizon, quantiles=quantiles, period=p.period, settings=cls.settings_type.from_dict(settings or {}))
    cls = LSTMS[name]
    return cls(
        horizon=horizon,
        quantiles=quantiles,
        period=p.period,
        interval_s=p.interval_s,
        t0=p.t0,
        settings=cls.settings_type.from_dict(settings or {}),
        progress=progress,
    )

"""Every forecaster by name, and how to build one for a prepared task series."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InputError
from .base import DEFAULT_QUANTILES, Forecaster
from .baselines import BASELINES
from .lstm import LSTMS
from .prepare import PreparedSeries

DEFAULT_FORECASTER = "lstm"
FORECASTERS = ("lstm", "lstm-thesis", "persistence", "seasonal-naive")
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
    """A forecaster's settings with every default filled in ({} for the baselines)."""
    if not is_learned(name):
        return {}
    return LSTMS[name].settings_type().to_dict()


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
    if name in BASELINES:
        if settings:
            raise InputError(f"the {name} forecaster takes no settings, got {', '.join(settings)}", field="settings")
        return BASELINES[name](horizon=horizon, quantiles=quantiles, period=p.period)
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

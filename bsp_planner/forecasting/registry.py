"""Every forecaster by name, and how to build one for a prepared task series."""

from __future__ import annotations

from collections.abc import Callable

from ..core.errors import InputError
from ..core.registry import Registry
from .base import Forecaster
from .prepare import PreparedSeries

# chosen on validation data only (benchmarks/bench_forecast_select.py), never on the test halves
DEFAULT_FORECASTER = "ensemble-fit"
TRAINED_FORECASTER = "lstm"  # what `forecast train` trains unless told: the saved models the default reads
ENSEMBLE_PREFIX = "ensemble:"


class ForecasterRegistry(Registry[type[Forecaster]]):
    """The registry, plus combinations named on the spot: `ensemble:a,b` is the ensemble of the
    registered forecasters a and b (see ensemble.py)."""

    def members(self, name: object) -> tuple[str, ...] | None:
        """The members an `ensemble:a,b` name lists (None for any other name)."""
        if not isinstance(name, str) or not name.startswith(ENSEMBLE_PREFIX):
            return None
        return tuple(m.strip() for m in name[len(ENSEMBLE_PREFIX) :].split(","))

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or self.members(name) is not None

    def get(self, name: str, *, hint: str = "") -> type[Forecaster]:
        members = self.members(name)
        if members is None:
            return super().get(name, hint=hint)
        if len(members) < 2 or len(set(members)) != len(members) or "" in members:
            raise InputError(
                f"expected {ENSEMBLE_PREFIX}A,B[,...] with two or more different forecasters, got {name!r}",
                field=self.field,
            )
        for m in members:
            if self.members(m) is not None or getattr(super().get(m), "members", None):
                raise InputError(f"an ensemble's member cannot be an ensemble, got {name!r}", field=self.field)
        from .ensemble import ensemble_class

        return ensemble_class(members)


#: Every forecaster, one line each, imported when first asked for (the LSTMs need TensorFlow only
#: when they train or predict).
FORECASTERS = ForecasterRegistry("forecaster", field="forecaster")
FORECASTERS.register("lstm", "bsp_planner.forecasting.lstm:LSTMForecaster")
FORECASTERS.register("lstm-thesis", "bsp_planner.forecasting.lstm:ThesisLSTMForecaster")
FORECASTERS.register("persistence", "bsp_planner.forecasting.baselines:PersistenceForecaster")
FORECASTERS.register("seasonal-naive", "bsp_planner.forecasting.baselines:SeasonalNaiveForecaster")
FORECASTERS.register("seasonal-naive-weekly", "bsp_planner.forecasting.baselines:WeeklySeasonalNaiveForecaster")
FORECASTERS.register("mstl", "bsp_planner.forecasting.statistical:MSTLForecaster")
FORECASTERS.register("online-select", "bsp_planner.forecasting.online_select:OnlineSelectForecaster")
FORECASTERS.register("gbm", "bsp_planner.forecasting.gbm:GBMForecaster")
FORECASTERS.register("ensemble", "bsp_planner.forecasting.ensemble:EnsembleForecaster")
FORECASTERS.register("ensemble-fit", "bsp_planner.forecasting.ensemble:FittedEnsembleForecaster")
# Bump when a change to a forecaster's code changes what it predicts: shipped forecasts and saved
# models made by an older version are then stale.
FORECASTER_VERSION = 1


def is_learned(name: str) -> bool:
    return FORECASTERS.get(name).learned


def default_settings(name: str) -> dict:
    """A forecaster's settings with every default filled in ({} for one without settings)."""
    return FORECASTERS.get(name).settings_type().to_dict()


def make_forecaster(
    name: str,
    p: PreparedSeries,
    horizon: int,
    *,
    settings: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> Forecaster:
    cls = FORECASTERS.get(name)
    chosen = cls.settings_type.from_dict(settings or {})
    return cls(horizon, period=p.period, interval_s=p.interval_s, t0=p.t0, settings=chosen, progress=progress)

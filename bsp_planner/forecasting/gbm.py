"""`gbm`: one global gradient-boosted model per lead time (LightGBM), trained across a job's tasks.

What a forecast made at origin o for lead h (target step t = o + h) reads, all of it before o:

* the level a = x[o-1], and the last ``lags`` steps as changes from it (x[o-1-k] - a);
* the same time one day, two days and a week back in the series' own sampling (``seasonal_days``):
  x[t - s] - a and the change the series made then over the same span, x[t - s] - x[o-1 - s], where
  s is that many days, pushed back by whole days while t - s would lie at or after o;
* rolling statistics of the last day (mean and spread) and of the last ``short_window`` steps;
* the hour of the day and the day of the week of the target, from the timestamps;
* the task (a categorical feature);
* optionally the `mstl` forecast for t (fitted on the task's training half; `statistical`).

The target is the change x[t] - a, so the trees learn how a series moves from where it is, which
holds across tasks and across a level the training half never reached.

Direct multi-horizon: one LightGBM regressor per lead, each trained on every origin of every series
in its pool. The pool of a task (`pool_for`) is the training halves of the job's other tasks,
except the pieces of the same source series that come later than it (`prepare.later_pieces`): the
tasks of a job are often consecutive slices of one file, and a later slice holds the very period an
earlier task's test half covers. Its own training half is in, and, as a run goes on, the model is
refitted every ``refit_every`` steps (a week by default) on what its own series shows before the
refit point: a forecast at o uses the refit made at the latest r <= o, trained on targets before r.

mlforecast was considered: its global model, lags and date features fit, but the seasonal changes
relative to the origin, the per-task pools and the refits on a growing own series need the feature
matrix built here anyway, so LightGBM is used directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..core.errors import InputError
from ..inputs.series import SECONDS_PER_DAY
from ..inputs.settings import setting
from .base import ForecasterSettings, PointForecaster, Progress, SettingsTable, series_key
from .prepare import later_pieces
from .statistical import MSTLForecaster
from .transforms import seasonal_back


@dataclass(frozen=True)
class GBMSettings(SettingsTable):
    """The `gbm` forecaster's settings (LightGBM's in the second group)."""

    prefix: ClassVar[str] = "gbm."
    lags: int = setting(8, ge=0)  # recent steps read, as changes from the last value
    seasonal_days: tuple[int, ...] = setting((1, 2, 7), ge=1)  # the same time this many days back
    short_window: int = setting(6, ge=2)  # steps of the short rolling mean
    calendar: bool = True  # hour of day and day of week of the target
    task_feature: bool = True  # which task a row comes from
    statistical: bool = True  # the mstl forecast as a feature
    refit_every: int = setting(0, ge=0)  # steps between refits as the run goes (0: a week)
    refit: bool = True  # false: never refit after the training half
    # 300 trees at 0.05 over 120 at 0.1: lower validation error alone and in ensemble-fit
    # (benchmarks/bench_forecast_select.py; BENCHMARKS.md, Forecasting)
    n_estimators: int = setting(300, ge=1)
    learning_rate: float = setting(0.05, gt=0)
    num_leaves: int = setting(15, ge=2)
    min_child_samples: int = setting(20, ge=1)
    subsample: float = setting(0.7, gt=0, le=1)
    colsample: float = setting(0.8, gt=0, le=1)
    max_bin: int = setting(63, ge=2)
    threads: int = setting(1, ge=1)
    interval_window: int = setting(240, ge=0)
    interval_gamma: float = setting(0.01, ge=0, lt=1)
    seed: int = 0


@dataclass
class SeriesFacts:
    """What the features of one task's series need besides its values."""

    index: int  # the task's position in the job (its categorical id)
    period: int  # steps per day
    interval_s: int | None
    t0: np.datetime64 | None
    mstl: MSTLForecaster | None = None  # fitted on the training half, when `statistical`


@dataclass
class Member:
    """One task's training half in a pool, with its feature rows computed once and shared by every
    pool it is in."""

    task: str
    train: np.ndarray  # (n,) the training half on its grid
    facts: SeriesFacts
    _rows: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)


class GBMForecaster(PointForecaster):
    """LightGBM per lead, global across the tasks of a pool (see the module's notes), fitted with
    `fit_pool` (the pipeline builds the pool from the job)."""

    name = "gbm"
    learned = True  # built from the job's series (its pool and timestamps), not from one history
    settings_type: ClassVar[type[ForecasterSettings]] = GBMSettings

    def __init__(self, *args: Any, index: int = 0, **kw: Any) -> None:
        """index: the task's position in the job (its categorical feature); the rest as for every
        forecaster."""
        super().__init__(*args, **kw)
        self.facts = SeriesFacts(index, max(1, self.period), self.interval_s, self.t0)
        self.pool: list[Member] = []
        self.base_: list[Any] = []  # the lead models fitted on the training half
        self._models: dict[tuple[int, bytes], list[Any]] = {}  # refits, by step and the series before it

    @property
    def refit_every(self) -> int:
        return self.settings.refit_every or 7 * self.period

    def _min_origin(self) -> int:
        return max(2, self.settings.lags + 1)

    # -- features ------------------------------------------------------------------------------------
    @property
    def feature_names(self) -> list[str]:
        s = self.settings
        names = ["level"] + [f"lag{k}" for k in range(1, s.lags + 1)]
        for d in s.seasonal_days:
            names += [f"day{d}", f"day{d}_change"]
        names += ["day_mean", "day_std", "short_mean"]
        if s.calendar:
            names += ["hour", "weekday"]
        if s.task_feature:
            names.append("task")
        if s.statistical:
            names.append("mstl")
        return names

    def features(self, x: np.ndarray, origins: np.ndarray, facts: SeriesFacts | None = None) -> np.ndarray:
        """(len(origins), H, F) features of the forecasts made at `origins` of series x (grid steps);
        origin o reads x[:o] only. NaN where a feature reaches before the series' start."""
        facts = facts or self.facts
        s = self.settings
        x = np.asarray(x, dtype=np.float64)
        o = np.asarray(origins, dtype=np.int64)[:, None]  # (m, 1)
        H, P = self.horizon, facts.period
        h = np.arange(H)[None, :]  # (1, H)
        shape = (len(o), H)

        def at(idx: np.ndarray) -> np.ndarray:
            idx = np.broadcast_to(idx, shape)
            return np.where(idx >= 0, x[np.clip(idx, 0, None)], np.nan)

        a = x[o - 1]  # (m, 1) the last observed value
        cols = [np.broadcast_to(a, shape)]
        cols += [np.broadcast_to(at(o - 1 - k) - a, shape) for k in range(1, s.lags + 1)]
        for d in s.seasonal_days:
            back = seasonal_back(h, P, d)  # whole days back, never at or after the origin
            then = at(o + h - back)
            cols += [then - a, then - at(o - 1 - back)]
        csum = np.concatenate([[0.0], np.cumsum(x)])
        csq = np.concatenate([[0.0], np.cumsum(x * x)])
        n_day = np.minimum(o, P)
        mean = (csum[o] - csum[o - n_day]) / n_day
        var = np.maximum((csq[o] - csq[o - n_day]) / n_day - mean**2, 0.0)
        n_short = np.minimum(o, s.short_window)
        short = (csum[o] - csum[o - n_short]) / n_short
        cols += [np.broadcast_to(v, shape) for v in (mean - a, np.sqrt(var), short - a)]
        if s.calendar:
            cols += list(self._calendar(o + h, facts, shape))
        if s.task_feature:
            cols.append(np.full(shape, float(facts.index)))
        if s.statistical:
            if facts.mstl is None:
                raise ValueError("gbm: the statistical feature needs the series' mstl model")
            cols.append(facts.mstl._point(x, o[:, 0]) - a)
        return np.stack(cols, axis=-1)

    @staticmethod
    def _calendar(steps: np.ndarray, facts: SeriesFacts, shape) -> tuple[np.ndarray, np.ndarray]:
        if facts.interval_s and facts.t0 is not None:
            secs = facts.t0.astype(np.int64) + steps.astype(np.int64) * int(facts.interval_s)
            hour = (secs % SECONDS_PER_DAY) / 3600.0
            weekday = ((secs // SECONDS_PER_DAY) + 3) % 7  # 1970-01-01 was a Thursday (3 with Monday 0)
            return np.broadcast_to(hour, shape), np.broadcast_to(weekday.astype(np.float64), shape)
        phase = (steps % facts.period) / facts.period * 24.0
        return np.broadcast_to(phase, shape), np.full(shape, np.nan)

    def rows(self, x: np.ndarray, end: int, facts: SeriesFacts | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Training rows of series x[:end]: (features (m, H, F), targets (m, H)), NaN targets where
        o + h >= end (those rows are dropped per lead)."""
        first = self._min_origin()
        origins = np.arange(first, end)
        if origins.size == 0:
            return np.empty((0, self.horizon, len(self.feature_names))), np.empty((0, self.horizon))
        X = self.features(x[:end], origins, facts)
        tgt = origins[:, None] + np.arange(self.horizon)[None, :]
        Y = np.where(tgt < end, x[np.minimum(tgt, end - 1)], np.nan) - x[origins - 1][:, None]
        return X, Y

    def _member_rows(self, m: Member) -> tuple[np.ndarray, np.ndarray]:
        if m._rows is None:
            m._rows = self.rows(m.train, len(m.train), m.facts)
        return m._rows

    # -- training ------------------------------------------------------------------------------------
    def _train(self, parts: Sequence[tuple[np.ndarray, np.ndarray]], what: str) -> list[Any]:
        """One LightGBM booster per lead on the stacked rows."""
        import lightgbm as lgb

        s = self.settings
        X = np.concatenate([p[0] for p in parts], axis=0)
        Y = np.concatenate([p[1] for p in parts], axis=0)
        names = self.feature_names
        params = {
            "objective": "l2",
            "learning_rate": s.learning_rate,
            "num_leaves": s.num_leaves,
            "min_data_in_leaf": s.min_child_samples,
            "bagging_fraction": s.subsample,
            "bagging_freq": 1 if s.subsample < 1 else 0,
            "feature_fraction": s.colsample,
            "seed": s.seed,
            "num_threads": s.threads,
            "deterministic": True,
            "force_row_wise": True,
            "max_bin": s.max_bin,
            "verbosity": -1,
        }
        models = []
        for lead in range(self.horizon):
            keep = ~np.isnan(Y[:, lead])
            data = lgb.Dataset(
                X[keep, lead, :],
                Y[keep, lead],
                feature_name=names,
                categorical_feature=["task"] if s.task_feature else [],
                free_raw_data=True,
            )
            models.append(lgb.train(params, data, num_boost_round=s.n_estimators))
        self._say(f"{what}: {self.horizon} lead models on {int(len(X))} origins")
        return models

    def fit(self, history: np.ndarray) -> GBMForecaster:
        """Train on this history alone (no pool)."""
        return self.fit_pool(history, [])

    def fit_pool(self, history: np.ndarray, pool: Sequence[Member]) -> GBMForecaster:
        """Train on the task's training history and the training halves of `pool`."""
        w = np.asarray(history, dtype=np.float64)
        s = self.settings
        need = self._min_origin() + 2 * self.horizon + 10
        if len(w) < need:
            raise InputError(f"gbm: the training history has {len(w)} steps but needs at least {need}")
        if not np.ptp(w) > 0:
            raise InputError("gbm: the training history is constant")
        self.pool = list(pool)
        if s.statistical and self.facts.mstl is None:
            self.facts.mstl = MSTLForecaster(horizon=self.horizon, period=self.period).fit(w, errors=False)
        self.fit_length_ = len(w)
        self._models.clear()
        others = [self._member_rows(m) for m in self.pool]
        own = self.rows(w, len(w))
        self.base_ = self._train([*others, own], "model")
        # the interval's starting point: its errors on its own training origins (the recent-error
        # window and the adaptive levels take over as real errors arrive)
        full = ~np.isnan(own[1]).any(axis=1)
        err = self._fit_interval(
            own[1][full] - (self._predict_with(self.base_, own[0][full]) - own[0][full][:, :, 0][:, :1])
        )
        self.info = {
            "pool": [m.task for m in self.pool],
            "train_rmse": float(np.sqrt(np.mean(err**2))),
            "origins": int(sum(len(o[0]) for o in others) + len(own[0])),
        }
        return self

    # -- forecasting ---------------------------------------------------------------------------------
    def _predict_with(self, models: list[Any], X: np.ndarray) -> np.ndarray:
        out = np.empty(X.shape[:2])
        for lead, model in enumerate(models):
            out[:, lead] = model.predict(X[:, lead, :], num_threads=self.settings.threads)
        return out + X[:, :, 0][:, :1]  # back from the change to the level (column 0: the last value)

    @classmethod
    def from_workspace(cls, ws: Any, p: Any, *, settings: GBMSettings, say: Progress | None = None) -> GBMForecaster:
        """Fitted for task p of a pipeline Workspace: its pool is every task of the job except p and
        the later pieces of p's source series (`prepare.later_pieces`)."""
        everyone = ws.all_prepared()
        key = ("gbm-pool", repr(sorted(settings.to_dict().items())))
        if key not in ws.shared:
            ws.shared[key] = pool_members(everyone, ws.horizon, settings, say)
        members: list[Member] = ws.shared[key]
        names = [q.task for q in everyone]
        excluded = {p.task, *later_pieces(p, everyone)}
        f = cls(
            ws.horizon,
            period=p.period,
            interval_s=p.interval_s,
            t0=p.t0,
            settings=settings,
            progress=say,
            index=names.index(p.task),
        )
        own = members[names.index(p.task)]
        f.facts.mstl = own.facts.mstl
        if say is not None and excluded - {p.task}:
            say(f"pool leaves out {', '.join(sorted(excluded - {p.task}))} (later pieces of its source series)")
        return f.fit_pool(p.train_grid, [m for m in members if m.task not in excluded])

    # -- refits -----------------------------------------------------------------------------------------
    def _model_at(self, series: np.ndarray, r: int) -> list[Any]:
        """The models refitted at step r (trained on series[:r] and the pool)."""
        key = (r, series_key(series[:r]))
        hit = self._models.get(key)
        if hit is None:
            parts = [self._member_rows(m) for m in self.pool] + [self.rows(series, r)]
            hit = self._models[key] = self._train(parts, f"refit at step {r}")
        return hit

    def _refit_point(self, o: int) -> int:
        """The step of the refit a forecast at o uses: the training half's end, then every
        refit_every steps after it."""
        n = self.fit_length_
        if not self.settings.refit or o < n + self.refit_every:
            return n
        return n + ((o - n) // self.refit_every) * self.refit_every

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        out = np.empty((len(origins), self.horizon))
        refit = np.array([self._refit_point(int(o)) for o in origins], dtype=np.int64)
        for r in np.unique(refit):
            pick = refit == r
            models = self.base_ if r == self.fit_length_ else self._model_at(series, int(r))
            out[pick] = self._predict_with(models, self.features(series, origins[pick]))
        return out


def pool_members(
    prepared: Sequence[Any], horizon: int, settings: GBMSettings, say: Progress | None = None
) -> list[Member]:
    """Every task's training half as a pool member (PreparedSeries in the job's order), with its mstl
    model fitted on that half when the settings use it."""
    out = []
    for i, p in enumerate(prepared):
        facts = SeriesFacts(i, max(1, p.period), p.interval_s, None if p.t0 is None else np.datetime64(p.t0, "s"))
        if settings.statistical:
            if say is not None:
                say(f"{p.task}: mstl feature model")
            facts.mstl = MSTLForecaster(horizon=horizon, period=facts.period).fit(p.train_grid, errors=False)
        out.append(Member(p.task, np.asarray(p.train_grid, dtype=np.float64), facts))
    return out

"""Online forecasting: before every step, each task's forecaster predicts the next H workloads from the
history observed so far; no forecast file is read.

The history starts as everything the task's series holds before the first step of the run (its
training half, plus the test rows before `start`) and grows by the workload each task reports after
every step. A forecast made online before step t therefore sees exactly what the offline forecast
matrix's row t was made from whenever the observed workloads are the series' own (a simulation of the
series): both paths call the same fitted forecaster on the same values, so they agree exactly. With
replayed or live workloads the online forecasts follow what was really observed.

Learned forecasters (lstm, lstm-thesis) see their series on a regular time grid (see
forecasting/prepare.py): while the observed rows are the series' rows their timestamps are known and a
gap is filled from the rows either side, as offline; rows past the series' end follow one sampling
interval apart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..forecasting.base import Forecaster
from ..forecasting.online_select import OnlineSelectForecaster
from ..forecasting.provider import ALIASES, _say, fitted_baselines, related_metadata
from ..forecasting.registry import FORECASTERS
from ..inputs.job import Job
from ..inputs.series import JobSeries


@dataclass
class _TaskHistory:
    """One task's fitted forecaster and its observed rows; grid_index maps rows to grid steps (None:
    the rows are the grid)."""

    task: str
    forecaster: Forecaster
    rows: list[float]
    grid_index: np.ndarray | None = None
    lead_map: object = None  # PreparedSeries.lead_map for series with filled gaps, else None
    n_series_rows: int = 0

    def grid(self) -> np.ndarray:
        rows = np.asarray(self.rows, dtype=np.float64)
        if self.grid_index is None:
            return rows
        o = len(rows)
        known = self.grid_index[: min(o, len(self.grid_index))]
        if o > len(self.grid_index):  # past the series: one interval apart
            known = np.concatenate([known, known[-1] + np.arange(1, o - len(self.grid_index) + 1)])
        return np.interp(np.arange(known[-1] + 1), known, rows)

    def forecast(self, horizon: int) -> np.ndarray:
        """(H,) the median forecast for the next H rows."""
        grid = self.grid()
        med = self.forecaster.predict_median(grid, np.array([len(grid)]))  # (1, H) over grid leads
        o = len(self.rows)
        if self.lead_map is not None and o <= self.n_series_rows:
            med = np.take_along_axis(med, self.lead_map(np.array([o]), horizon), axis=1)  # type: ignore[operator]
        return med[0]


class OnlineForecasts:
    """Every task's online forecaster. `forecast()` -> (tasks, H) before a step; `observe(w)` after it
    with the workloads (tasks,) the tasks ran."""

    def __init__(self, histories: list[_TaskHistory], horizon: int, label: str) -> None:
        self._histories = histories
        self.horizon = horizon
        self.label = label
        self._observed = 0  # rows appended by observe()

    @classmethod
    def seeded(
        cls, forecasters: list[Forecaster], histories: list[np.ndarray], horizon: int, label: str
    ) -> OnlineForecasts:
        """From fitted forecasters and each task's history so far (1-D, workload scale, consecutive
        steps): what a live run builds from the job's history file, or from nothing but a few steps."""
        if len(forecasters) != len(histories):
            raise ValueError(f"{len(forecasters)} forecasters for {len(histories)} histories")
        pairs = enumerate(zip(forecasters, histories, strict=True))
        return cls(
            [_TaskHistory(f"#{i}", f, list(np.asarray(h, dtype=np.float64))) for i, (f, h) in pairs], horizon, label
        )

    def forecast(self) -> np.ndarray:
        """(tasks, H) the median forecasts for the next H steps."""
        return np.stack([h.forecast(self.horizon) for h in self._histories])

    def observe(self, workloads: np.ndarray) -> None:
        w = np.asarray(workloads, dtype=np.float64)
        if w.shape != (len(self._histories),):
            raise ValueError(f"expected one workload per task ({len(self._histories)}), got shape {w.shape}")
        for h, v in zip(self._histories, w, strict=True):
            h.rows.append(float(v))
        self._observed += 1

    def refit_in_background(self) -> None:
        """Fit the `online-select` forecasters' refits in one worker process while the run goes on (a
        live run: no decision waits for a fit unless it is late); forecasts stay as `simulate` makes them."""
        from ..forecasting.online_fits import BackgroundRefits

        online = [h.forecaster for h in self._histories if isinstance(h.forecaster, OnlineSelectForecaster)]
        if online:
            shared = BackgroundRefits()
            for f in online:
                f.refits = shared

    @property
    def refit_wait_s(self) -> float:
        """Time the forecasts waited for refits (in place: all of their fitting)."""
        refits = {
            id(f.refits): f.refits for h in self._histories if isinstance(f := h.forecaster, OnlineSelectForecaster)
        }
        return sum(r.wait_s for r in refits.values())

    def fresh(self) -> OnlineForecasts:
        """A copy with the seed history only (the fitted forecasters are shared: predicting keeps no state)."""
        seeds = [dataclasses.replace(h, rows=h.rows[: len(h.rows) - self._observed]) for h in self._histories]
        return OnlineForecasts(seeds, self.horizon, self.label)


def online_forecasts(
    source: str,
    job_series: JobSeries,
    start: int,
    horizon: int,
    *,
    base_dir: Path | None = None,
    job=None,
    say=None,
    settings: dict | None = None,
) -> OnlineForecasts:
    """Fitted forecasters for every task with the history before step `start` of the test halves.

    source: a forecaster's name (or "default"); a folder of forecast files is refused: its forecasts
    were made before the run, not from what it observes. settings: the `online-select` forecaster's
    (the experiment's forecast.online_* fields), ignored by the others.
    """
    name = ALIASES.get(source, source)
    if name not in FORECASTERS:
        raise InputError(
            f"online forecasting needs a forecaster ({', '.join(sorted([*FORECASTERS, *ALIASES]))}), got {source!r}; "
            "a folder of forecast files was made before the run, not from the workloads it observes",
            field="forecast.source",
        )
    cls = FORECASTERS.get(name)
    say = say or _say
    histories: list[_TaskHistory] = []
    if cls.learned:
        histories = _learned_histories(name, job_series, start, horizon, base_dir=base_dir, job=job, say=say)
    else:
        # as the offline baselines: fitted on the training half, the rows consecutive steps (gaps ignored)
        make = lambda h, period: _make(cls, h, period, settings)  # noqa: E731  (online-select's settings)
        for s, f, history in fitted_baselines(name, job_series, horizon, make=make):
            histories.append(_TaskHistory(s.task, f, list(history[: s.n_train + start])))
    return OnlineForecasts(histories, horizon, f"{name} (online)")


def _learned_histories(name, job_series, start, horizon, *, base_dir, job, say) -> list[_TaskHistory]:
    """The saved models the offline path would use (same gap policy, same data identity), or trained."""
    from ..forecasting.pipeline import DEFAULT_MODEL_ROOT, Workspace, obtain

    related = related_metadata(base_dir, job_series.task_names)
    gaps = next((m["inputs"].get("gaps", "error") for m in related), "error")
    job_name = job.name if job is not None else (related[0]["inputs"].get("job", "job") if related else "job")
    ws = Workspace.from_series(Job(name=job_name, tasks=()), job_series, gaps=gaps, horizon=horizon)
    out = []
    for p in ws.prepared:

        def say_task(msg: str, prefix: str = f"{p.task} · {name}: ") -> None:
            say(prefix + msg)

        f, _how = obtain(ws, name, p, model_root=DEFAULT_MODEL_ROOT, on_mismatch="retrain", save=False, say=say_task)
        gaps_filled = (p.grid_index, p.lead_map, len(p.rows)) if p.filled else ()
        out.append(_TaskHistory(p.task, f, list(p.rows[: p.n_train + start]), *gaps_filled))
    return out


def _make(cls, horizon: int, period: int, settings: dict | None) -> Forecaster:
    """A forecaster of class cls; the `online-select` one with the experiment's settings for it."""
    if cls.name != "online-select":
        return cls(horizon=horizon, period=period)
    return cls(horizon=horizon, period=period, settings=cls.settings_type.from_dict(settings or {}))


def unseeded_online_forecasts(
    source: str, n_tasks: int, horizon: int, workload_range: tuple[float, float], *, settings: dict | None = None
) -> OnlineForecasts:
    """Online forecasters for tasks with no history (a job whose workloads only its tasks know): each
    is seeded with the middle of `workload_range` for as many steps as it needs, so the first forecasts
    are that middle and every later one follows the workloads the tasks report (`online-select` fits
    nothing on those seed rows). Forecasters that must be trained on a history (lstm) are refused."""
    name = ALIASES.get(source, source)
    cls = FORECASTERS.get(name) if name in FORECASTERS else None
    if cls is None or cls.learned:
        simple = sorted(k for k in FORECASTERS if not FORECASTERS.get(k).learned)
        raise InputError(
            f"the job's tasks have no workload history, so the forecaster must need none: one of {', '.join(simple)}, "
            f"got {source!r} (give each task a series to use a trained one)",
            field="forecast.source",
        )
    mid = sum(workload_range) / 2
    forecasters, histories = [], []
    for i in range(n_tasks):
        f = _make(cls, horizon, 1, settings)
        seed = np.full(f._min_origin() + horizon, mid)
        f.fit(seed)
        if isinstance(f, OnlineSelectForecaster):
            f.first_observed = len(seed)
            f.refit_phase = (i * f.settings.refit_every_steps) // n_tasks  # spread evenly over the refit period
        forecasters.append(f)
        histories.append(seed)
    return OnlineForecasts.seeded(forecasters, histories, horizon, f"{name} (online, from the reports)")

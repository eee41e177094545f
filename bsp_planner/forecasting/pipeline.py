"""Train, evaluate and predict over a job: one model per task, trained on the first half of the task's
series and judged on the second (thesis section 4.2).

Models are saved under ``<models>/<job>/<forecaster>/<task>.keras`` (the shipped ones: package data,
``bsp_planner/data/models/``; what the CLI trains goes to ``./models`` unless told otherwise, since the
package folder may be an installed, read-only copy) with ``<task>.json`` beside them
(settings, scaling, error quantiles, what data they were trained on). A saved model is reused only
when all of that matches the request; otherwise `obtain` refuses (``on_mismatch="error"``, the
CLI's way) or retrains (``"retrain"``, what `simulate` does, with a message).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import InputError
from ..inputs.job import Job, load_job
from ..inputs.series import JobSeries, load_job_series
from ..inputs.shipped import data_path
from .base import DEFAULT_QUANTILES, Forecaster, LearnedForecaster, Progress, ahead, digest, spec_differences
from .prepare import PreparedSeries, prepare_job, test_origins
from .registry import FORECASTER_VERSION, FORECASTERS, default_settings, make_forecaster
from .validation import validated_weights

DEFAULT_MODEL_ROOT = data_path("models")  # the shipped models (package data)
LOCAL_MODEL_ROOT = Path("models")  # where the CLI saves what it trains: ./models of the current directory


def _quiet(_msg: str) -> None:
    pass


def prefixed(say: Callable[[str, str], None] | None, prefix: str) -> Progress:
    """A one-argument progress callback that passes `prefix` (which task, which forecaster) along."""
    if say is None:
        return _quiet
    return lambda msg: say(prefix, msg)


@dataclass
class Workspace:
    """A job's series, checked and on their grids, with what every forecaster run needs."""

    job: Job
    job_series: JobSeries
    prepared: list[PreparedSeries]
    horizon: int = 20
    gaps: str = "error"
    settings: dict[str, dict] = field(default_factory=dict)  # per forecaster name: overrides
    # what forecasters fitted here share (a global model's pool, fitted forecasters by task and
    # settings), so an ensemble and its member alone are fitted once
    shared: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, job_path: str | Path, *, workload_range: tuple[float, float] = (10.0, 50.0), **kw: Any) -> Workspace:
        """The job's series read from its files; `kw` as for `from_series`."""
        job = load_job(job_path)
        return cls.from_series(job, load_job_series(job, workload_range), **kw)

    @classmethod
    def from_series(
        cls,
        job: Job,
        job_series: JobSeries,
        *,
        gaps: str = "error",
        tasks: list[str] | None = None,
        horizon: int = 20,
        settings: dict[str, dict] | None = None,
    ) -> Workspace:
        if horizon < 1:
            raise InputError(f"expected a horizon >= 1, got {horizon}", field="horizon")
        prepared = prepare_job(job_series, gaps=gaps, tasks=tasks)
        return cls(job, job_series, prepared, horizon=horizon, gaps=gaps, settings=dict(settings or {}))

    def settings_for(self, name: str) -> dict:
        """Full settings (defaults + overrides) of a forecaster: what identifies its models (an
        ensemble's include its members')."""
        full = default_settings(name)
        over = self.settings.get(name, {})
        cls = FORECASTERS.get(name)
        out = cls.settings_type.from_dict({**full, **over}).to_dict()
        members = getattr(cls, "members", None)
        if members:
            out["members"] = {m: self.settings_for(m) for m in members}
        return out

    def all_prepared(self) -> list[PreparedSeries]:
        """Every task of the job prepared (`prepared` may hold only the tasks asked for)."""
        if len(self.prepared) == len(self.job_series.series):
            return self.prepared
        key = ("all_prepared", self.gaps)
        if key not in self.shared:
            self.shared[key] = prepare_job(self.job_series, gaps=self.gaps)
        return self.shared[key]

    def data_identity(self, p: PreparedSeries) -> dict:
        """What a model's training depends on besides its settings."""
        return {
            "job": self.job.name,
            "task": p.task,
            "gaps": self.gaps,
            "train_digest": digest(p.train_grid),
            "version": FORECASTER_VERSION,
        }


def task_prefix(ws: Workspace, i: int, name: str) -> str:
    """What progress messages about the i-th task and forecaster `name` start with."""
    return f"[{i + 1}/{len(ws.prepared)}] {ws.prepared[i].task} · {name}"


def model_folder(root: Path, job: str, forecaster: str) -> Path:
    return Path(root) / job / forecaster


def train_one(ws: Workspace, name: str, p: PreparedSeries, say: Progress = _quiet) -> Forecaster:
    cls = FORECASTERS.get(name)
    build = getattr(cls, "from_workspace", None)
    if build is not None:  # a global model: trained on the job's other tasks too
        settings = cls.settings_type.from_dict(ws.settings.get(name) or {})
        try:
            return build(ws, p, settings=settings, say=say)
        except InputError as exc:
            raise InputError(f"task '{p.task}': {exc.message}", path=p.source) from exc
    f = make_forecaster(name, p, ws.horizon, settings=ws.settings.get(name), progress=say)
    if isinstance(f, LearnedForecaster):
        need = f.history_needed(p.n_train_grid)
        window = getattr(f, "window", 1)
        why = f": it needs at least {need} (input window {window} + seasonal lag + H {ws.horizon} + a validation tail)"
    else:
        need = max(f._min_origin(), 1) + ws.horizon
        why = f" (it needs {need}: one period + H)"
    if p.n_train_grid < need:
        raise InputError(
            f"task '{p.task}': the training half has {p.n_train_grid} steps, too short for {name}{why}", path=p.source
        )
    try:
        f.fit(p.train_grid)
    except InputError as exc:
        raise InputError(f"task '{p.task}': {exc.message}", path=p.source) from exc
    return f


def obtain(
    ws: Workspace,
    name: str,
    p: PreparedSeries,
    *,
    model_root: Path | None = DEFAULT_MODEL_ROOT,
    retrain: bool = False,
    on_mismatch: str = "error",
    save: bool = True,
    save_root: Path | None = None,
    say: Progress = _quiet,
) -> tuple[Forecaster, str]:
    """A fitted forecaster for one task and how it was had: "fitted" (baselines), "loaded", "trained".

    Learned forecasters load from `model_root` when a saved model matches the settings and the
    training data; with none saved they train (and save). A saved model that does not match is an
    error with on_mismatch="error", or retrained with on_mismatch="retrain". What it trains is saved
    (save=True) under `save_root`, by default `model_root`. Within one workspace a forecaster fitted
    on the spot (or trained with no model folder) is had once per task and settings, so an ensemble
    and its members alone share it; saved models are loaded each time.
    """
    how: dict[str, Any] = {"model_root": model_root, "retrain": retrain, "on_mismatch": on_mismatch}
    how |= {"save": save, "save_root": save_root, "say": say}
    if issubclass(FORECASTERS.get(name), LearnedForecaster) and model_root is not None:
        return _obtain(ws, name, p, how)
    key = ("obtained", name, p.task, json.dumps(ws.settings_for(name), sort_keys=True))
    if key not in ws.shared:
        ws.shared[key] = _obtain(ws, name, p, how)
    return ws.shared[key]


def _obtain(ws: Workspace, name: str, p: PreparedSeries, how: dict) -> tuple[Forecaster, str]:
    """`obtain` without the sharing; `how` holds its keyword arguments."""
    model_root, say = how["model_root"], how["say"]
    cls = FORECASTERS.get(name)
    if not issubclass(cls, LearnedForecaster):
        members = getattr(cls, "members", None)
        if members:  # an ensemble: each member obtained as it would be alone
            got = [obtain(ws, m, p, **how) for m in members]
            f = make_forecaster(name, p, ws.horizon, settings=ws.settings.get(name))
            weights = None
            if f.settings.fit_weights:  # per task, on its validation period (never the test half)
                weights, f.info = validated_weights(ws, members, p, f.settings, obtain, say)
            f.combine([g[0] for g in got], weights).fit(p.train_grid)  # type: ignore[attr-defined]
            return f, "+".join(g[1] for g in got)
        return train_one(ws, name, p, say), "fitted"
    folder = model_folder(model_root, ws.job.name, name) if model_root is not None else None
    template = make_forecaster(name, p, ws.horizon, settings=ws.settings.get(name))
    assert isinstance(template, LearnedForecaster)  # make_forecaster builds the registered class
    expect = template.spec()
    identity = ws.data_identity(p)
    if folder is not None and not how["retrain"] and (folder / f"{p.task}.json").is_file():
        meta = json.loads((folder / f"{p.task}.json").read_text())
        diffs = spec_differences(expect, meta) + [
            f"{k}: saved {meta.get('data', {}).get(k)!r}, requested {v!r}"
            for k, v in identity.items()
            if meta.get("data", {}).get(k) != v
        ]
        if not diffs:
            f = cls.load(folder, p.task, expect=expect)
            f.progress = say
            return f, "loaded"
        if how["on_mismatch"] == "error":
            raise InputError(
                f"the saved {name} model for task '{p.task}' does not match the request ({'; '.join(diffs)}); "
                "retrain it with `bsp-planner forecast train` (or pass --retrain)",
                path=folder / f"{p.task}.json",
            )
        say(f"saved model does not match ({'; '.join(diffs[:3])}{'; ...' if len(diffs) > 3 else ''}); retraining")
    trained = train_one(ws, name, p, say)
    root = how["save_root"] if how["save_root"] is not None else model_root
    if root is not None and how["save"] and isinstance(trained, LearnedForecaster):
        trained.save(model_folder(root, ws.job.name, name), p.task, extra={"data": identity})
    return trained, "trained"


# -- evaluation ------------------------------------------------------------------------------------


@dataclass
class TaskScore:
    task: str
    rmse: np.ndarray  # (H,) per lead time
    sq_err_sum: np.ndarray  # (H,) sums of squared errors, for pooling
    count: int  # origins
    covered: np.ndarray  # (H,) outcomes inside the central interval, counts

    @property
    def mean_rmse(self) -> float:
        return float(self.rmse.mean())

    @property
    def coverage(self) -> float:
        return float(self.covered.sum() / (self.count * len(self.rmse)))


def score_task(f: Forecaster, p: PreparedSeries, horizon: int, interval: tuple[float, float] = (0.1, 0.9)) -> TaskScore:
    """Forecasts at every test origin, scored on the rows (what a simulation replays)."""
    o = test_origins(p, horizon)
    if o.size == 0:
        raise InputError(f"task '{p.task}': the test half is shorter than H = {horizon}", path=p.source)
    pred = p.predict_rows(f, o)  # (Q, m, H)
    truth = ahead(p.rows, o, horizon)
    med = pred[f.median_index]
    se = (med - truth) ** 2
    lo_i, hi_i = f.quantiles.index(interval[0]), f.quantiles.index(interval[1])
    covered = ((truth >= pred[lo_i]) & (truth <= pred[hi_i])).sum(axis=0)
    return TaskScore(p.task, np.sqrt(se.mean(axis=0)), se.sum(axis=0), len(o), covered)


@dataclass
class Evaluation:
    horizon: int
    forecasters: list[str]
    tasks: list[str]
    scores: dict[str, dict[str, TaskScore]]  # forecaster -> task -> score
    how: dict[str, dict[str, str]]  # forecaster -> task -> fitted/loaded/trained
    seconds: dict[str, float]

    def overall_rmse(self, name: str) -> np.ndarray:
        """(H,) RMSE per lead time over every task's test origins together."""
        s = self.scores[name]
        sse = sum(t.sq_err_sum for t in s.values())
        n = sum(t.count for t in s.values())
        return np.sqrt(sse / n)

    def overall_coverage(self, name: str) -> float:
        s = self.scores[name]
        return float(sum(t.covered.sum() for t in s.values()) / sum(t.count * self.horizon for t in s.values()))

    def to_dict(self) -> dict:
        return {
            "horizon": self.horizon,
            "forecasters": self.forecasters,
            "tasks": self.tasks,
            "interval": [0.1, 0.9],
            "overall": {
                n: {
                    "rmse_by_lead": self.overall_rmse(n).round(4).tolist(),
                    "mean_rmse": round(float(self.overall_rmse(n).mean()), 4),
                    "mean_task_rmse": round(float(np.mean([t.mean_rmse for t in self.scores[n].values()])), 4),
                    "coverage_80": round(self.overall_coverage(n), 4),
                    "seconds": round(self.seconds.get(n, 0.0), 2),
                }
                for n in self.forecasters
            },
            "per_task": {
                n: {
                    t: {
                        "rmse_by_lead": s.rmse.round(4).tolist(),
                        "mean_rmse": round(s.mean_rmse, 4),
                        "coverage_80": round(s.coverage, 4),
                        "origins": s.count,
                        "model": self.how[n][t],
                    }
                    for t, s in self.scores[n].items()
                }
                for n in self.forecasters
            },
        }


def evaluate(
    ws: Workspace, names: list[str], *, say: Callable[[str, str], None] | None = None, **options: Any
) -> Evaluation:
    """Every forecaster on every task's test half, each model had as `obtain` has it with `options`."""
    for n in names:
        FORECASTERS.get(n)  # an unknown name is an error before any work
    scores: dict[str, dict[str, TaskScore]] = {n: {} for n in names}
    how: dict[str, dict[str, str]] = {n: {} for n in names}
    seconds: dict[str, float] = {n: 0.0 for n in names}
    for i, p in enumerate(ws.prepared):
        for n in names:
            t0 = time.perf_counter()
            prefix = task_prefix(ws, i, n)
            f, got = obtain(ws, n, p, **options, say=prefixed(say, prefix))
            score = score_task(f, p, ws.horizon)
            scores[n][p.task] = score
            how[n][p.task] = got
            seconds[n] += time.perf_counter() - t0
            if say:
                say(prefix, f"{got}; mean RMSE {score.mean_rmse:.3f}, 80% interval covers {score.coverage:.1%}")
    return Evaluation(ws.horizon, list(names), [p.task for p in ws.prepared], scores, how, seconds)


def plot_evaluation(ev: Evaluation, path: Path, title: str = "") -> Path:
    """Error against lead time, one line per forecaster (thesis Fig. 4.5): all tasks, then each task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    leads = np.arange(1, ev.horizon + 1)
    n_panels = 1 + len(ev.tasks)
    cols = 3
    rows = int(np.ceil(n_panels / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.1 * rows), squeeze=False)
    styles = {
        "lstm": ("C0", "-", "o"),
        "lstm-thesis": ("C3", "--", "s"),
        "persistence": ("C7", ":", "^"),
        "seasonal-naive": ("C2", "-.", "v"),
        "seasonal-naive-weekly": ("C4", "-.", "D"),
        "mstl": ("C1", "--", "x"),
        "gbm": ("C5", "-", "P"),
        "ensemble": ("k", "-", "*"),
        "ensemble-fit": ("C6", "-", "h"),
    }
    for k, ax in enumerate(axes.flat):
        if k >= n_panels:
            ax.axis("off")
            continue
        for n in ev.forecasters:
            color, ls, marker = styles.get(n, (None, "-", None))
            if k == 0:
                y = ev.overall_rmse(n)
                label = f"{n} (mean {y.mean():.2f})"
            else:
                y = ev.scores[n][ev.tasks[k - 1]].rmse
                label = n
            ax.plot(leads, y, color=color, ls=ls, marker=marker, ms=3, label=label)
        ax.set_title("all tasks" if k == 0 else ev.tasks[k - 1], fontsize=10)
        ax.set(xlabel="lead time (steps)", ylabel="RMSE (workload units)")
        ax.set_xticks([1, 5, 10, 15, 20] if ev.horizon == 20 else leads[:: max(1, ev.horizon // 5)])
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(title or "Forecast error against lead time (test halves, workload scale [10, 50])", fontsize=11)
    fig.legend(
        handles, labels, loc="upper center", ncol=len(labels), fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.962)
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- forecasts for an experiment --------------------------------------------------------------------


def request_inputs(ws: Workspace, name: str, start: int, steps: int) -> dict:
    """Everything the forecast matrices of an experiment depend on: hashed into their digest."""
    return {
        "forecaster": name,
        "version": FORECASTER_VERSION,
        "settings": ws.settings_for(name),
        "quantiles": list(DEFAULT_QUANTILES),
        "horizon": ws.horizon,
        "start": start,
        "steps": steps,
        "gaps": ws.gaps,
        "job": ws.job.name,
        "tasks": [
            {
                "task": p.task,
                "series_digest": digest(p.rows),
                "timestamps_digest": digest(p.grid_index.astype(np.float64)),
                "n_train": p.n_train,
                "period": p.period,
                "interval_s": p.interval_s,
            }
            for p in ws.prepared
        ],
    }


def inputs_digest(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def describe_differences(old: dict, new: dict) -> list[str]:
    """What changed between two request_inputs(), in words."""
    out = []
    for key in sorted(set(old) | set(new)):
        if key == "tasks":
            o = {t["task"]: t for t in old.get("tasks", [])}
            n = {t["task"]: t for t in new.get("tasks", [])}
            if list(o) != list(n):
                out.append(f"tasks {list(o)} -> {list(n)}")
                continue
            for t in n:
                changed = [k for k in n[t] if o[t].get(k) != n[t][k]]
                if changed:
                    out.append(f"task '{t}': {', '.join(changed)} changed")
        elif old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return out


def forecast_experiment(
    ws: Workspace, name: str, start: int, steps: int, *, say: Callable[[str, str], None] | None = None, **options: Any
) -> tuple[np.ndarray, dict]:
    """Median forecasts for steps start..start+steps-1 of every task: (tasks, steps, H), and metadata;
    each task's model had as `obtain` has it with `options`."""
    ws.job_series.check_length(start, steps)
    out = np.empty((len(ws.prepared), steps, ws.horizon))
    how = {}
    t_start = time.perf_counter()
    for i, p in enumerate(ws.prepared):
        prefix = task_prefix(ws, i, name)
        f, got = obtain(ws, name, p, **options, say=prefixed(say, prefix))
        origins = p.n_train + start + np.arange(steps)
        out[i] = p.predict_rows_median(f, origins)
        how[p.task] = got
        if say:
            say(prefix, f"{got}; forecasts for {steps} steps")
    inputs = request_inputs(ws, name, start, steps)
    meta = {
        "forecaster": name,
        "digest": inputs_digest(inputs),
        "inputs": inputs,
        "models": how,
        "seconds": round(time.perf_counter() - t_start, 2),
        "format": "row t of <task>.csv: the median forecasts for steps t..t+H-1, made before step t",
    }
    return out, meta

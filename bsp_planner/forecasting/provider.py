"""Where `simulate` gets its forecast matrices: a forecaster by name, or a folder of forecast files.

Sources:

- ``persistence``, ``seasonal-naive``, ``seasonal-naive-weekly``, ``mstl``: fitted on the training half
  and computed on the spot (no saved model);
- ``lstm``, ``lstm-thesis``, ``gbm`` and ensembles (``ensemble-fit``, also ``default``: the default
  forecaster, is one): the
  shipped forecasts when a folder under ``<experiment dir>/forecasts/`` was made from this request
  (its ``forecasts.json`` digest covers the series, the split, start/steps/H, the gap policy and the
  forecaster's settings), or from one that differs only in covering more steps (its rows for these
  steps); otherwise they are regenerated, from the saved models under ``models/`` when those match,
  else by training or fitting (saying so), and cached under ``$XDG_CACHE_HOME/bsp-planner``;
- a folder of forecast CSVs (see files.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..inputs.job import Job
from ..inputs.series import JobSeries, TaskSeries
from .base import Forecaster
from .files import FORECAST_META, read_forecast_metadata, read_forecasts, write_forecasts
from .registry import DEFAULT_FORECASTER, FORECASTERS

ALIASES = {"default": DEFAULT_FORECASTER}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bsp-planner"


def _say(msg: str) -> None:
    print(f"forecasts: {msg}", file=sys.stderr, flush=True)


def forecast_matrix(
    source: str,
    job_series: JobSeries,
    start: int,
    steps: int,
    horizon: int,
    *,
    base_dir: Path | None = None,
    job=None,
    say=_say,
) -> tuple[np.ndarray, str]:
    """The median forecasts for steps start..start+steps-1: (tasks, steps, horizon), and a label
    saying which forecaster made them.

    Gaps in the timestamps (see prepare.py): learned forecasters treat them as the shipped forecasts
    for that forecaster were made (or as "error" if none are shipped); baselines ignore them.
    """
    job_series.check_length(start, steps)
    name = ALIASES.get(source, source)
    if name in FORECASTERS and not FORECASTERS.get(name).learned:
        origins = start + np.arange(steps)
        rows = [f.predict_median(h, s.n_train + origins) for s, f, h in fitted_baselines(name, job_series, horizon)]
        return np.stack(rows), name
    if name in FORECASTERS:
        return _learned(name, job_series, start, steps, horizon, base_dir=base_dir, job=job, say=say)
    folder = Path(source)
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    if not folder.is_dir():
        raise InputError(
            f"expected a forecaster name ({', '.join(sorted([*FORECASTERS, *ALIASES]))}) or a folder of forecast files",
            path=folder,
            field="forecast.source",
        )
    meta = read_forecast_metadata(folder)
    label = meta.get("forecaster", f"files:{folder.name}")
    if meta.get("digest"):
        label = f"{label} (files {folder.name}, digest {meta['digest'][:8]})"
    return read_forecasts(folder, job_series.task_names, steps, horizon, start=start), label


def fitted_baselines(
    name: str, job_series: JobSeries, horizon: int, *, make: Callable[[int, int], Forecaster] | None = None
) -> list[tuple[TaskSeries, Forecaster, np.ndarray]]:
    """Baseline `name` fitted on every task's training half, the rows as consecutive steps (gaps ignored):
    (the task's series, the fitted forecaster, its whole scaled series) per task. make(horizon, period):
    how to build one, where it takes settings (default: the registered class with no settings)."""
    out = []
    for i, s in enumerate(job_series.series):
        history = job_series.history_workloads(i)
        f = (make or (lambda h, p: FORECASTERS.get(name)(horizon=h, period=p)))(horizon, s.period_steps)
        need = f._min_origin() + horizon
        if s.n_train < need:
            raise InputError(
                f"task '{s.task}': the training half of its series has {s.n_train} values but the {name} "
                f"forecaster needs at least {need} (its first forecast origin {f._min_origin()} + horizon {horizon})",
                path=s.source,
                field="forecast.horizon",
            )
        out.append((s, f.fit(history[: s.n_train]), history))
    return out


def shipped_folders(base_dir: Path | None, name: str | None) -> list[tuple[Path, dict]]:
    """Folders of forecasts under <base_dir>/forecasts/ made by the named forecaster (None: any)."""
    if base_dir is None:
        return []
    root = Path(base_dir) / "forecasts"
    found = []
    for meta_path in sorted(root.glob(f"*/{FORECAST_META}")):
        meta = read_forecast_metadata(meta_path.parent)
        if (name is None or meta.get("forecaster") == name) and isinstance(meta.get("inputs"), dict):
            found.append((meta_path.parent, meta))
    # the folder named "default" first: it is the one the project ships
    found.sort(key=lambda fm: (fm[0].name != "default", fm[0].name))
    return found


def related_metadata(base_dir: Path | None, task_names: list[str]) -> list[dict]:
    """The metadata of the shipped forecasts (by any forecaster) made for these tasks: they say which job
    it is and how its gaps were treated when nobody says otherwise."""
    folders = shipped_folders(base_dir, None)
    return [m for _, m in folders if [t.get("task") for t in m["inputs"].get("tasks", [])] == task_names]


def _learned(name, job_series, start, steps, horizon, *, base_dir, job, say):
    from .pipeline import (
        DEFAULT_MODEL_ROOT,
        Workspace,
        describe_differences,
        forecast_experiment,
        inputs_digest,
        request_inputs,
    )

    shipped = shipped_folders(base_dir, name)
    related = related_metadata(base_dir, job_series.task_names)
    policies = list(dict.fromkeys(m["inputs"].get("gaps", "error") for m in related)) or ["error"]
    job_name = job.name if job is not None else None
    if job_name is None:
        names = {m["inputs"].get("job") for m in related}
        job_name = names.pop() if len(names) == 1 else "job"
    ws = None
    for policy in policies:
        ws = Workspace.from_series(Job(name=job_name, tasks=()), job_series, gaps=policy, horizon=horizon)
        inputs = request_inputs(ws, name, start, steps)
        digest = inputs_digest(inputs)
        for folder, meta in shipped:
            if meta.get("digest") == digest:
                fc = read_forecasts(folder, job_series.task_names, steps, horizon)
                return fc, f"{name} (shipped forecasts {folder.name}/, digest {digest[:8]})"
        for folder, meta in shipped:
            offset = _rows_within(meta["inputs"], inputs)
            if offset is not None:
                fc = read_forecasts(folder, job_series.task_names, steps, horizon, start=offset)
                return fc, f"{name} (shipped forecasts {folder.name}/ from row {offset}, digest {meta['digest'][:8]})"
        cached = cache_root() / "forecasts" / f"{name}-{digest}"
        if (cached / FORECAST_META).is_file() and read_forecast_metadata(cached).get("digest") == digest:
            fc = read_forecasts(cached, job_series.task_names, steps, horizon)
            return fc, f"{name} (regenerated earlier, cached, digest {digest[:8]})"
    # Nothing made from this request: regenerate, with the last policy tried.
    if shipped:
        diffs = describe_differences(shipped[0][1]["inputs"], inputs)
        say(
            f"the shipped {name} forecasts in {shipped[0][0]} were made from other inputs "
            f"({'; '.join(diffs[:4])}{'; ...' if len(diffs) > 4 else ''}); regenerating them"
        )
    else:
        say(f"no shipped {name} forecasts for this request; generating them")
    matrix, meta = forecast_experiment(
        ws,
        name,
        start,
        steps,
        model_root=DEFAULT_MODEL_ROOT,
        on_mismatch="retrain",
        save=False,
        say=lambda prefix, msg: say(f"{prefix}: {msg}"),
    )
    cached = cache_root() / "forecasts" / f"{name}-{meta['digest']}"
    try:
        write_forecasts(cached, job_series.task_names, matrix, meta)
    except OSError as exc:
        say(f"could not cache them in {cached}: {exc}")
    trained = sum(1 for v in meta["models"].values() if v == "trained")
    how = f"trained {trained} models" if trained else "from the saved models"
    return matrix, f"{name} (regenerated, {how}, digest {meta['digest'][:8]})"


def _rows_within(made: dict, wanted: dict) -> int | None:
    """The row of forecasts made from `made` (request_inputs) where those `wanted` start, when they
    differ only in covering fewer steps: a forecast made before step t depends on the series before t
    and the fitted models, never on which steps a file covers."""
    span = ("start", "steps")
    if {k: v for k, v in made.items() if k not in span} != {k: v for k, v in wanted.items() if k not in span}:
        return None
    offset = int(wanted["start"]) - int(made["start"])
    if offset < 0 or offset + int(wanted["steps"]) > int(made["steps"]):
        return None
    return offset

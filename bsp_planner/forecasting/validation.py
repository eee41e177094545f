"""Validation inside the training halves: where ensemble weights and the default forecaster come from.

A task's validation period is the last ``fraction`` (0.25 by default) of its training half. Every
candidate is trained afresh on the part before it (gbm's pools are the other tasks' parts, under the
same source-series rule) and forecasts every origin of the validation period whose H targets lie in
the training half, as `forecast evaluate` forecasts a test half. Nothing of the test halves is read:
the validation workspace holds each task's training half only.

A learned forecaster whose settings depend on the length of its training history (the lstm's weekly
lag needs a long enough half) is pinned, through its ``validation_settings(n_train)``, to the
settings it has on the whole training half, so validation scores the same model that is used.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..core.errors import InputError
from .base import ahead
from .prepare import PreparedSeries, test_origins
from .registry import make_forecaster

Say = Callable[[str], None]
Workspace = Any  # a pipeline.Workspace (pipeline imports this module)
#: pipeline.obtain's call: (workspace, name, task, model_root=None, save=False, say=...) -> (fitted, how)
Obtain = Callable[..., tuple[Any, str]]
DEFAULT_FRACTION = 0.25  # the validation period: the last quarter of each training half


def validation_part(p: PreparedSeries, fraction: float = DEFAULT_FRACTION) -> PreparedSeries:
    """The task's training half alone, the first 1 - `fraction` of it as its training part (rows,
    grid and the grid's index cut at the training half's end)."""
    n = p.n_train
    grid_end = int(p.grid_index[n - 1]) + 1
    return replace(
        p,
        rows=p.rows[:n],
        grid=p.grid[:grid_end],
        grid_index=p.grid_index[:n],
        n_train=int(round((1.0 - fraction) * n)),
        filled=int(grid_end - n),
    )


def validation_workspace(ws: Workspace, fraction: float = DEFAULT_FRACTION) -> Workspace:
    """The job's every task cut to its training half (cached in `ws.shared`)."""
    if not 0.0 < fraction < 1.0:
        raise InputError(f"expected a validation fraction in (0, 1), got {fraction}", field="validation_fraction")
    key = ("validation", fraction)
    if key not in ws.shared:
        parts = [validation_part(p, fraction) for p in ws.all_prepared()]
        ws.shared[key] = replace(ws, prepared=parts, shared={})
    return ws.shared[key]


def validation_forecasts(
    ws: Workspace,
    name: str,
    p: PreparedSeries,
    obtain: Obtain,
    fraction: float = DEFAULT_FRACTION,
    say: Say | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forecasts, outcomes), each (origins, H): forecaster `name` on task p's validation period.
    `ws` is the full workspace; p one of its tasks; `obtain` is pipeline.obtain."""
    vws = validation_workspace(ws, fraction)
    vp = next(q for q in vws.prepared if q.task == p.task)
    template = make_forecaster(name, p, ws.horizon, settings=ws.settings.get(name))
    pin = getattr(template, "validation_settings", None)
    if pin is not None:  # the settings the whole half gives it, kept on the shorter part
        vws = replace(vws, settings={**vws.settings, name: {**vws.settings.get(name, {}), **pin(p.n_train_grid)}})
    o = test_origins(vp, ws.horizon)  # the validation period's, H targets inside the training half
    if o.size == 0:
        raise InputError(f"task '{p.task}': the validation period is shorter than H = {ws.horizon}", path=p.source)
    f, _ = obtain(vws, name, vp, model_root=None, save=False, say=say or (lambda _m: None))
    return vp.predict_rows_median(f, o), ahead(vp.rows, o, ws.horizon)


def weight_grid(members: int, step: float) -> np.ndarray:
    """(k, members) every weight vector on the simplex with entries in multiples of `step`."""
    n = int(round(1.0 / step))
    if n < 1 or abs(n * step - 1.0) > 1e-9:
        raise InputError(f"expected a weight step that divides 1, got {step}", field="weight_step")
    rows = [c for c in itertools.product(range(n + 1), repeat=members) if sum(c) == n]
    return np.asarray(rows, dtype=np.float64) / n


def fit_weights(preds: list[np.ndarray], truth: np.ndarray, step: float = 0.1) -> np.ndarray:
    """(members,) the weights on the `step` grid whose combination of `preds` (each (origins, H))
    has the least mean squared error against `truth` (origins, H); ties go to the more even weights."""
    grid = weight_grid(len(preds), step)
    stack = np.stack(preds)  # (members, origins, H)
    mse = np.array([np.mean((np.tensordot(w, stack, axes=1) - truth) ** 2) for w in grid])
    evenness = np.abs(grid - 1.0 / len(preds)).sum(axis=1)
    best = np.lexsort((evenness, np.round(mse, 12)))[0]
    return grid[best]


def validated_weights(
    ws: Workspace, members: tuple[str, ...], p: PreparedSeries, settings: Any, obtain: Obtain, say: Say | None = None
) -> tuple[np.ndarray, dict]:
    """(members,) weights for task p fitted on its validation period (`fit_weights` on the settings'
    `weight_step` grid, period `validation_fraction`), and facts for the ensemble's `info`."""
    fraction = settings.validation_fraction
    got = [validation_forecasts(ws, m, p, obtain, fraction, say) for m in members]
    truth = got[0][1]
    preds = [g[0] for g in got]
    w = fit_weights(preds, truth, settings.weight_step)
    rmse = {m: float(np.sqrt(np.mean((g - truth) ** 2, axis=0)).mean()) for m, g in zip(members, preds, strict=True)}
    mixed = float(np.sqrt(np.mean((np.tensordot(w, np.stack(preds), axes=1) - truth) ** 2, axis=0)).mean())
    if say is not None:
        say(
            f"validation ({len(truth)} origins): "
            + ", ".join(f"{m} {r:.3f}" for m, r in rmse.items())
            + f"; weights {', '.join(f'{m} {x:.2f}' for m, x in zip(members, w, strict=True))} -> {mixed:.3f}"
        )
    return w, {"validation_rmse": rmse, "validation_rmse_fitted": mixed, "validation_origins": int(len(truth))}

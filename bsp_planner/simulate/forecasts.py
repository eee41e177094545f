"""Stage 4 of a scenario: per mode, what the planner is told about the steps ahead.

`perfect`: the truth (the planner's model at the actual workloads). `forecast`: a forecast file or a
forecaster run before the job (`forecasting/provider.py`), or, with `online = true`, a forecaster that
predicts before every step from the history observed so far (`online.py`; unless the experiment names one,
`online-select` for tasks whose workloads are only observed). Predictions are either one
fixed array (steps, tasks, levels, H) or, for online and learning runs, a source from which each run makes
its rows step by step (`predictions.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..core.errors import InputError
from ..forecasting.provider import forecast_matrix
from .durations import ScenarioDurations
from .online import online_forecasts, unseeded_online_forecasts
from .predictions import warn_if_far_outside
from .read import ScenarioInputs


@dataclass(frozen=True)
class ModePredictions:
    label: str  # where they come from, for the report
    horizon: int  # H: steps each prediction looks ahead
    predicted: np.ndarray | None = None  # (steps, tasks, levels, H) predicted durations, fixed before the run
    forecasts: np.ndarray | None = None  # (tasks, steps, H) forecast workloads behind them (None: perfect)
    step_source: tuple | None = None  # (kind, source): rows made step by step from it instead


def predict(inputs: ScenarioInputs, durations: ScenarioDurations) -> dict[str, ModePredictions]:
    exp = inputs.experiment
    return {mode: (_perfect if mode == "perfect" else _forecast)(inputs, durations) for mode in exp.modes}


def _static_windows(strategies: list[str]) -> list[int]:
    out = []
    for s in strategies:
        name, _, arg = s.partition(":")
        if name == "static" and arg.isdigit():
            out.append(int(arg))
    return out


def _perfect(inputs: ScenarioInputs, durations: ScenarioDurations) -> ModePredictions:
    # Perfect knowledge: the forecast made before step t is the truth. Frames never reach past the last step,
    # so the edge padding below is never read.
    exp = inputs.experiment
    p = exp.planner
    frames = [exp.forecast.horizon, p.horizon, p.dp_max_segment, p.optimum_max_segment]
    h = min(exp.steps, max(frames + _static_windows(exp.strategies)))
    if exp.learn:  # online forecasts mean nothing with perfect knowledge; learning does
        return ModePredictions("perfect knowledge", h, step_source=("actual", inputs.actual_workloads))
    planned = durations.planned_at_actual
    padded = np.concatenate([planned, np.repeat(planned[:, :, -1:], h - 1, axis=2)], axis=2)
    predicted = sliding_window_view(padded, h, axis=2).transpose(2, 0, 1, 3)  # (steps, n, L, h), a view
    return ModePredictions("perfect knowledge", h, predicted=predicted)


def _forecast(inputs: ScenarioInputs, durations: ScenarioDurations) -> ModePredictions:
    exp, job_series = inputs.experiment, inputs.job_series
    h = exp.forecast.horizon
    source = exp.forecast.source_for(observed=job_series is None)
    if exp.online:  # no forecast file: a forecaster predicts before every step from the history observed so far
        settings = exp.forecast.online_select_settings()
        if job_series is None:  # no history: forecasters seeded with the middle of the range follow the reports
            online = unseeded_online_forecasts(source, len(inputs.job.tasks), h, exp.workload_range, settings=settings)
        else:
            online = online_forecasts(
                source, job_series, exp.start, h, base_dir=exp.resolve("."), job=inputs.job, settings=settings
            )
        return ModePredictions(online.label, h, step_source=("online", online))
    if job_series is None:
        raise InputError(
            f"task(s) {', '.join(inputs.observed)} have no series, so there is nothing to forecast before the run: "
            'use modes = ["perfect"] with forecast.actual (a recorded trace), or online = true',
            path=exp.path,
            field="modes",
        )
    fc, label = forecast_matrix(source, job_series, exp.start, exp.steps, h, base_dir=exp.resolve("."))
    warn_if_far_outside(fc, exp.workload_range, label, job_series.task_names)
    fc = np.clip(fc, *exp.workload_range)
    if exp.learn:  # learning on fixed forecasts: rows still made step by step, by the learning model
        return ModePredictions(label, h, forecasts=fc, step_source=("matrix", fc))
    predicted = durations.model.durations(fc).transpose(2, 0, 1, 3)  # (steps, n, L, H)
    return ModePredictions(label, h, predicted=predicted, forecasts=fc)

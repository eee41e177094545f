"""Where `simulate` gets its forecast matrices: a forecaster by name, or a folder of forecast files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ..series import JobSeries
from .baselines import BASELINES
from .files import read_forecast_metadata, read_forecasts


def forecast_matrix(
    source: str,
    job_series: JobSeries,
    start: int,
    steps: int,
    horizon: int,
    *,
    base_dir: Path | None = None,
) -> tuple[np.ndarray, str]:
    """The median forecasts for steps start..start+steps-1: (tasks, steps, horizon), and a label
    saying which forecaster made them."""
    job_series.check_length(start, steps)
    if source in BASELINES:
        out = np.empty((len(job_series.series), steps, horizon))
        for i, s in enumerate(job_series.series):
            history = job_series.history_workloads(i)
            f = BASELINES[source](horizon=horizon, period=s.period_steps).fit(history[: s.n_train])
            origins = s.n_train + start + np.arange(steps)
            out[i] = f.predict_origins(history, origins)[f.median_index]
        return out, source
    folder = Path(source)
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    if not folder.is_dir():
        raise InputError(
            f"expected a forecaster name ({', '.join(sorted(BASELINES))}) or a folder of forecast files",
            path=folder,
            field="forecast.source",
        )
    meta = read_forecast_metadata(folder)
    label = meta.get("forecaster", f"files:{folder.name}")
    return read_forecasts(folder, job_series.task_names, steps, horizon, start=start), label

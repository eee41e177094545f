"""Checking a task's series before a forecaster sees it, and putting it on a regular time grid.

Simulations replay a series row by row, one row per step. Forecasters need more: every value present
and numeric, rows one sampling interval apart (a seasonal lag of one day is only a day back if no
rows are missing), a series that varies, and enough of it to fill the model's input window.
`prepare_task` checks all of that and raises an InputError that names the file and line.

Gaps in the timestamps follow a policy:

- ``error`` (the default): refuse, saying where the gaps are and how to fill them;
- ``fill``: forecasters see the series on its regular grid, the missing steps filled by linear
  interpolation between the rows either side (both rows lie before any origin that uses them, so
  filling never leaks the future); forecasts are read back at the rows' own times, so row t of a
  forecast matrix still holds the predictions for the rows t..t+H-1 that the simulation replays;
- ``ignore``: treat the rows as consecutive steps, as the simulation does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..inputs.series import JobSeries, TaskSeries

GAP_POLICIES = ("error", "fill", "ignore")


def _duration(seconds: int) -> str:
    """In the largest unit that divides it: "1 d", "30 min", "90 s"."""
    unit, size = next((u, n) for u, n in (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1)) if seconds % n == 0)
    return f"{seconds // size} {unit}"


@dataclass(frozen=True)
class PreparedSeries:
    """One task's workloads by row (what a simulation replays) and on the regular grid (what a
    forecaster sees); `grid_index[r]` is row r's step on the grid."""

    task: str
    rows: np.ndarray  # (n,) workloads, one per row
    grid: np.ndarray  # (m,) workloads on the regular grid, m >= n
    grid_index: np.ndarray  # (n,) int
    n_train: int  # rows in the training half
    period: int  # grid steps in one day
    interval_s: int
    t0: np.datetime64  # time of grid step 0
    filled: int  # grid steps filled by interpolation
    source: Path | None = None
    first_row: int = 0  # the series file's data row of row 0

    @property
    def n_train_grid(self) -> int:
        """Grid steps up to and including the last training row: the forecaster's training history."""
        return int(self.grid_index[self.n_train - 1]) + 1

    @property
    def train_grid(self) -> np.ndarray:
        return self.grid[: self.n_train_grid]

    def grid_origins(self, row_origins: np.ndarray) -> np.ndarray:
        """The grid origin of a forecast made before row o: the step after row o-1."""
        o = np.asarray(row_origins, dtype=np.int64)
        if np.any(o < 1) or np.any(o > len(self.rows)):
            raise ValueError(f"row origins must lie in 1..{len(self.rows)}")
        return self.grid_index[o - 1] + 1

    def lead_map(self, row_origins: np.ndarray, horizon: int) -> np.ndarray:
        """(len(origins), H) grid lead (0-based) of the target row o + h, capped at H - 1.

        Without gaps this is just h. Rows past the end of the series are taken to follow the last
        row at the sampling interval.
        """
        o = np.asarray(row_origins, dtype=np.int64)
        n = len(self.rows)
        targets = o[:, None] + np.arange(horizon)[None, :]
        ext = np.where(
            targets < n,
            self.grid_index[np.minimum(targets, n - 1)],
            self.grid_index[n - 1] + (targets - (n - 1)),
        )
        lead = ext - (self.grid_index[o - 1] + 1)[:, None]
        return np.minimum(lead, horizon - 1)

    def predict_rows(self, forecaster, row_origins: np.ndarray) -> np.ndarray:
        """Forecasts made before each row origin for rows o..o+H-1: (Q, len(origins), H)."""
        o = np.asarray(row_origins, dtype=np.int64)
        g = self.grid_origins(o)
        pred = forecaster.predict_origins(self.grid, g)  # (Q, m, H) over grid leads
        if self.filled == 0:
            return pred
        lead = self.lead_map(o, forecaster.horizon)
        return np.take_along_axis(pred, np.broadcast_to(lead[None], pred.shape), axis=2)

    def predict_rows_median(self, forecaster, row_origins: np.ndarray) -> np.ndarray:
        """Only the median forecasts for rows o..o+H-1: (len(origins), H)."""
        o = np.asarray(row_origins, dtype=np.int64)
        med = forecaster.predict_median(self.grid, self.grid_origins(o))
        if self.filled == 0:
            return med
        return np.take_along_axis(med, self.lead_map(o, forecaster.horizon), axis=1)


def prepare_task(
    ts: TaskSeries,
    workloads: np.ndarray,
    *,
    gaps: str = "error",
) -> PreparedSeries:
    """Check one task's series and put it on its regular grid (see the module's notes on gaps)."""
    if gaps not in GAP_POLICIES:
        raise InputError(f"expected a gap policy among {', '.join(GAP_POLICIES)}, got {gaps!r}", field="gaps")
    w = np.asarray(workloads, dtype=np.float64)
    bad = np.nonzero(~np.isfinite(w))[0]
    if bad.size:
        row = ts.first_row + int(bad[0])
        raise InputError(
            f"task '{ts.task}': missing or non-numeric value at data row {row} ({bad.size} in all)",
            path=ts.source,
            line=row + 2 if ts.source is not None else None,
            field="value",
        )
    if len(w) < 4:
        raise InputError(f"task '{ts.task}': the series has only {len(w)} rows", path=ts.source)
    train = w[: ts.n_train]
    if not np.ptp(train) > 0:
        raise InputError(
            f"task '{ts.task}': the training half of the series is constant ({train[0]:g}); "
            "there is nothing to forecast",
            path=ts.source,
        )
    interval = ts.interval_s
    if gaps == "ignore":
        return _on_grid(ts, w, np.arange(len(w)))
    steps = np.diff(ts.timestamps).astype(np.int64)
    back = np.nonzero(steps <= 0)[0]
    if back.size:
        row = ts.first_row + int(back[0]) + 1
        raise InputError(
            f"task '{ts.task}': timestamps must increase; data row {row} is not later than the row before",
            path=ts.source,
            line=row + 2,
            field="timestamp",
        )
    off = np.nonzero(steps % interval != 0)[0]
    if off.size:
        row = ts.first_row + int(off[0]) + 1
        raise InputError(
            f"task '{ts.task}': data row {row} is {_duration(int(steps[off[0]]))} after the row before, "
            f"not a whole number of sampling intervals ({_duration(interval)}); the series is not on a "
            "regular grid",
            path=ts.source,
            line=row + 2,
            field="timestamp",
        )
    found = ts.gaps()
    if found and gaps == "error":
        row, gap = found[0]
        where = ", ".join(f"{r} ({_duration(g - interval)} missing)" for r, g in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise InputError(
            f"task '{ts.task}': {len(found)} gap(s) in the timestamps larger than the sampling interval "
            f"({_duration(interval)}), before data row{'s' if len(found) > 1 else ''} {where}{more}. Fill them by "
            "linear interpolation with `--gaps fill` (or treat the rows as consecutive steps, as simulate does, "
            "with `--gaps ignore`)",
            path=ts.source,
            line=row + 2,
            field="timestamp",
        )
    return _on_grid(ts, w, np.concatenate([[0], np.cumsum(steps // interval)]).astype(np.int64))


def _on_grid(ts: TaskSeries, w: np.ndarray, idx: np.ndarray) -> PreparedSeries:
    """The rows w at grid steps idx, the steps between them filled by linear interpolation."""
    grid = np.interp(np.arange(idx[-1] + 1), idx, w)
    args = (ts.n_train, ts.period_steps, ts.interval_s, ts.timestamps[0], len(grid) - len(w), ts.source, ts.first_row)
    return PreparedSeries(ts.task, w, grid, idx, *args)


def prepare_job(job_series: JobSeries, *, gaps: str = "error", tasks: list[str] | None = None) -> list[PreparedSeries]:
    """Prepared series for the named tasks (all by default), in the job's order."""
    names = job_series.task_names
    wanted = names if tasks is None else tasks
    for t in wanted:
        if t not in names:
            raise InputError(f"unknown task '{t}'; the job has {', '.join(names)}", field="task")
    series = enumerate(job_series.series)
    return [prepare_task(ts, job_series.history_workloads(i), gaps=gaps) for i, ts in series if ts.task in wanted]


def later_pieces(p: PreparedSeries, prepared: list[PreparedSeries]) -> list[str]:
    """The tasks whose series are later pieces of the same source series as p's: the same file, from
    a later row. Their values follow p's in time (a later piece can hold the very period p's test half
    covers), so a model forecasting p must not learn from them."""
    if p.source is None:
        return []
    here = Path(p.source).resolve()
    return [
        q.task
        for q in prepared
        if q.task != p.task and q.source is not None and Path(q.source).resolve() == here and q.first_row > p.first_row
    ]


def test_origins(p: PreparedSeries, horizon: int) -> np.ndarray:
    """Every origin after the training half whose H targets all lie in the series (of a
    `validation.validation_part`: the validation period's)."""
    return np.arange(p.n_train, len(p.rows) - horizon + 1)

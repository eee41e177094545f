"""Workload series: NAB-style `timestamp,value` CSVs, the train/test split and workload scaling.

Each task's series is split in half: the first half trains forecasters and fits the workload scale,
the second half is what simulations and live runs replay. Step 0 of a simulation is the first value
of the second half.
"""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from ..core.errors import InputError, InputWarning, open_text
from .job import Job, SeriesRef
from .profiles import finite_number

SECONDS_PER_DAY = 86_400
MIN_ROWS = 4  # two to scale on (a range needs two values), two to replay


def read_series_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a `timestamp,value` CSV. Returns (timestamps as datetime64[s], values as float64).

    Line numbers in errors count the header as line 1, as an editor does.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("series file not found", path=path)
    stamps: list[np.datetime64] = []
    values: list[float] = []
    with open_text(path, "series") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != ["timestamp", "value"]:
            got = f", got {','.join(header)!r}" if header else ""
            raise InputError(f"expected the header 'timestamp,value' (two columns){got}", path=path, line=1)
        for lineno, row in enumerate(reader, start=2):
            if len(row) > 2:
                raise InputError(f"expected 2 columns, got {len(row)}", path=path, line=lineno)
            if len(row) < 2 or not row[1].strip():
                raise InputError("missing value", path=path, line=lineno, field="value")
            try:
                stamp = np.datetime64(datetime.fromisoformat(row[0].strip()), "s")
            except ValueError as exc:
                raise InputError(
                    f"expected an ISO timestamp, got {row[0]!r}", path=path, line=lineno, field="timestamp"
                ) from exc
            if stamps and stamp <= stamps[-1]:  # steps follow the file's order: a step repeated or out of place
                raise InputError(
                    f"expected a time after the previous line's {stamps[-1]}, got {row[0].strip()!r} "
                    "(timestamps in increasing order, each once)",
                    path=path,
                    line=lineno,
                    field="timestamp",
                )
            stamps.append(stamp)
            values.append(finite_number(row[1], path, lineno, "value"))
    if not values:
        raise InputError("the series has no rows", path=path)
    return np.array(stamps, dtype="datetime64[s]"), np.array(values, dtype=np.float64)


@dataclass(frozen=True)
class TaskSeries:
    """One task's raw series (its row range of the file) and what follows from its timestamps."""

    task: str
    timestamps: np.ndarray  # (n,) datetime64[s]
    values: np.ndarray  # (n,) float64, raw units
    source: Path
    first_row: int

    @property
    def n_train(self) -> int:
        return len(self.values) // 2

    @property
    def train(self) -> np.ndarray:
        return self.values[: self.n_train]

    @property
    def test(self) -> np.ndarray:
        return self.values[self.n_train :]

    @property
    def interval_s(self) -> int:
        """The sampling interval: the most common gap between consecutive timestamps."""
        gaps = np.diff(self.timestamps).astype(np.int64)
        if gaps.size == 0:
            raise InputError("a series needs at least two rows to know its sampling interval", path=self.source)
        vals, counts = np.unique(gaps, return_counts=True)
        return int(vals[np.argmax(counts)])

    @property
    def period_steps(self) -> int:
        """Steps in one day: the seasonal period the forecasters use."""
        return max(1, SECONDS_PER_DAY // self.interval_s)

    def gaps(self) -> list[tuple[int, int]]:
        """(row, gap_s) for every gap larger than the sampling interval; row is the file's data row."""
        gaps = np.diff(self.timestamps).astype(np.int64)
        bad = np.nonzero(gaps > self.interval_s)[0]
        return [(self.first_row + int(i) + 1, int(gaps[i])) for i in bad]


def load_task_series(task: str, ref: SeriesRef) -> TaskSeries:
    stamps, values = read_series_csv(ref.file)
    last = len(values) - 1 if ref.last_row is None else ref.last_row
    if ref.first_row >= len(values):
        raise InputError(
            f"task '{task}' starts at row {ref.first_row} but the file has rows 0..{len(values) - 1}",
            path=ref.file,
            field="first_row",
        )
    if last >= len(values):
        raise InputError(
            f"task '{task}' asks for rows {ref.first_row}..{last} but the file has rows 0..{len(values) - 1}",
            path=ref.file,
            field="last_row",
        )
    if last - ref.first_row + 1 < MIN_ROWS:
        raise InputError(
            f"task '{task}' takes rows {ref.first_row}..{last}, {last - ref.first_row + 1} row(s); a series needs at "
            f"least {MIN_ROWS} (half to fit the workload scale on, half to replay)",
            path=ref.file,
            field="first_row",
        )
    sl = slice(ref.first_row, last + 1)
    return TaskSeries(task=task, timestamps=stamps[sl], values=values[sl], source=ref.file, first_row=ref.first_row)


@dataclass(frozen=True)
class WorkloadScaler:
    """Linear map of raw values onto the workload range, fitted on the training half only.

    Values of the test half outside the training range would map outside [low, high]; they are clipped
    to the range's edges (the profile measured nothing beyond it), and `clipped_fraction` says how often.
    """

    raw_min: float
    raw_max: float
    low: float = 10.0
    high: float = 50.0

    @classmethod
    def fit(
        cls, train: np.ndarray, low: float = 10.0, high: float = 50.0, *, source: Path | None = None
    ) -> WorkloadScaler:
        lo, hi = float(np.min(train)), float(np.max(train))
        if not hi > lo:
            raise InputError("the training half of the series is constant; it cannot be scaled", path=source)
        if not high > low:
            raise InputError(f"expected workload range low < high, got [{low}, {high}]", field="workload_range")
        _warn_if_squeezed(np.asarray(train, dtype=np.float64), lo, hi, source)
        return cls(lo, hi, float(low), float(high))

    def transform(self, raw: np.ndarray, clip: bool = True) -> np.ndarray:
        w = self.low + (np.asarray(raw, dtype=np.float64) - self.raw_min) * (self.high - self.low) / (
            self.raw_max - self.raw_min
        )
        return np.clip(w, self.low, self.high) if clip else w


#: An extreme value that leaves the middle 98% of a training half within this share of its range
#: squeezes nearly every workload onto one end of the workload range: most likely a typo or a sensor fault.
SQUEEZED_SHARE = 0.02


def _warn_if_squeezed(train: np.ndarray, lo: float, hi: float, source: Path | None) -> None:
    """Warn when a few extreme values set the scale: the middle 98% of the values then span under 2% of
    [min, max], and every ordinary workload ends up at the edge of the workload range."""
    p1, p99 = np.percentile(train, [1, 99])
    if (p99 - p1) >= SQUEEZED_SHARE * (hi - lo):
        return
    worst = hi if abs(hi - np.median(train)) >= abs(lo - np.median(train)) else lo
    row = int(np.argmax(train == worst))
    warnings.warn(
        f"{source or 'a series'}: the training half's value {worst:.4g} (data row {row} of the half) is far "
        f"outside the others (98% lie within [{p1:.4g}, {p99:.4g}]); scaled onto the workload range it puts "
        "nearly every workload at one end of it. Check that value",
        InputWarning,
        stacklevel=2,
    )


@dataclass(frozen=True)
class JobSeries:
    """Every task's series and scaler, with the test halves as workloads (tasks x steps)."""

    series: tuple[TaskSeries, ...]
    scalers: tuple[WorkloadScaler, ...]

    @property
    def task_names(self) -> list[str]:
        return [s.task for s in self.series]

    def workloads(self, start: int, steps: int, *, path: Path | None = None) -> np.ndarray:
        """Actual workloads of steps start..start+steps-1 of the test halves: (tasks, steps)."""
        self.check_length(start, steps, path=path)
        return np.stack(
            [sc.transform(s.test[start : start + steps]) for s, sc in zip(self.series, self.scalers, strict=True)]
        )

    def history_workloads(self, task_index: int) -> np.ndarray:
        """The whole scaled series of one task (train and test halves), for forecasters."""
        s, sc = self.series[task_index], self.scalers[task_index]
        return sc.transform(s.values)

    def check_length(self, start: int, steps: int, *, path: Path | None = None) -> None:
        if start < 0 or steps < 1:
            raise InputError(
                f"expected start >= 0 and steps >= 1, got start={start}, steps={steps}", path=path, field="steps"
            )
        for s in self.series:
            if start + steps > len(s.test):
                raise InputError(
                    f"task '{s.task}': its series ({s.source.name}) has {len(s.test)} test steps but the "
                    f"experiment needs start + steps = {start + steps}",
                    path=path,
                    field="start" if start >= len(s.test) else "steps",  # the one to lower
                )


def load_job_series(job: Job, workload_range: tuple[float, float] = (10.0, 50.0)) -> JobSeries:
    for t in job.tasks:
        if t.series is None:
            raise InputError(
                f"task '{t.name}' has no series (its workloads are the ones it reports as it runs): this needs "
                "one `series = { file = ... }` per task (a history of its workloads, e.g. from an earlier run)",
                path=job.path,
                field=f"{t.name}.series",
            )
    series = tuple(load_task_series(t.name, t.series) for t in job.tasks if t.series is not None)
    scalers = tuple(WorkloadScaler.fit(s.train, *workload_range, source=s.source) for s in series)
    return JobSeries(series=series, scalers=scalers)

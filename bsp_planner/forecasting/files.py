"""Forecast and trace files, the documented formats `simulate` reads.

Forecasts: a folder with one CSV per task, ``<task>.csv``, header ``h0,h1,...,h{H-1}``; row t (the
t-th data row) holds the workloads predicted for steps t..t+H-1 of the experiment, made before step t
ran, on the workload scale. An optional ``forecasts.json`` says which forecaster made them and from
what inputs (its ``digest`` lets a reader notice a stale folder).

Actual-workload traces (to replay a recorded run): a folder with one CSV per task, ``<task>.csv``,
header ``workload``, one value per step.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from ..core.errors import InputError, open_text

FORECAST_META = "forecasts.json"


def write_forecasts(
    folder: str | Path, task_names: list[str], matrix: np.ndarray, metadata: dict | None = None
) -> None:
    """matrix: (tasks, steps, H) workloads."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 3 or matrix.shape[0] != len(task_names):
        raise ValueError(f"expected (tasks={len(task_names)}, steps, H), got {matrix.shape}")
    header = ",".join(f"h{h}" for h in range(matrix.shape[2]))
    for name, rows in zip(task_names, matrix, strict=True):
        _write_csv(folder / f"{name}.csv", header, rows)
    if metadata is not None:
        (folder / FORECAST_META).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


def _write_csv(path: Path, header: str, values: np.ndarray) -> None:
    """One row per step (a 1-D array: one column), "%.6f", CRLF lines as the csv module writes them;
    written whole, then renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as fh:
        np.savetxt(fh, values, fmt="%.6f", delimiter=",", header=header, comments="", newline="\r\n")
    tmp.replace(path)


def read_forecast_metadata(folder: str | Path) -> dict:
    p = Path(folder) / FORECAST_META
    if not p.is_file():
        return {}
    try:
        meta = json.loads(open_text(p, "forecast metadata").read())
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc}); restore it or delete it", path=p) from None
    if not isinstance(meta, dict):
        raise InputError("expected a JSON object", path=p)
    return meta


def _read_numeric_csv(path: Path, expected_header: list[str] | None, what: str) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"{what} file not found", path=path)
    with open_text(path, what) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError(f"empty {what} file", path=path, line=1)
        header = [h.strip() for h in header]
        if expected_header is not None and header[: len(expected_header)] != expected_header:
            raise InputError(
                f"expected the header {','.join(expected_header[:3])}{',...' if len(expected_header) > 3 else ''}, "
                f"got {','.join(header[:3])}{',...' if len(header) > 3 else ''} ({len(header)} columns)",
                path=path,
                line=1,
            )
        rows = []
        for lineno, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise InputError(f"expected {len(header)} columns, got {len(row)}", path=path, line=lineno)
            values = []
            for col, text in zip(header, row, strict=True):
                try:
                    v = float(text)
                except ValueError as exc:
                    raise InputError(f"expected a number, got {text!r}", path=path, line=lineno, field=col) from exc
                if not math.isfinite(v):
                    raise InputError(f"expected a finite number, got {text!r}", path=path, line=lineno, field=col)
                values.append(v)
            rows.append(values)
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(header))


def read_forecasts(folder: str | Path, task_names: list[str], steps: int, horizon: int, start: int = 0) -> np.ndarray:
    """Rows start..start+steps-1 of each task's forecast file, first `horizon` columns: (tasks, steps, H)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("forecast folder not found", path=folder, field="forecast.source")
    out = np.empty((len(task_names), steps, horizon))
    for i, name in enumerate(task_names):
        path = folder / f"{name}.csv"
        if not path.is_file():
            raise InputError(f"no forecast file for task '{name}' (expected {name}.csv)", path=path)
        with open_text(path, "forecast") as fh:
            header = next(csv.reader(fh), [])
        if len(header) < horizon:
            raise InputError(
                f"forecasts cover {len(header)} steps ahead but the experiment's horizon is {horizon}",
                path=path,
                line=1,
            )
        data = _read_numeric_csv(path, [f"h{h}" for h in range(len(header))], "forecast")
        if data.shape[0] < start + steps:
            raise InputError(
                f"has {data.shape[0]} forecast rows but the experiment needs rows up to {start + steps - 1}",
                path=path,
            )
        out[i] = data[start : start + steps, :horizon]
    return out


def write_trace(folder: str | Path, task_names: list[str], workloads: np.ndarray) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, series in zip(task_names, np.asarray(workloads), strict=True):
        _write_csv(folder / f"{name}.csv", "workload", series)


def read_trace(
    folder: str | Path,
    task_names: list[str],
    steps: int,
    start: int = 0,
    valid_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """Replayed actual workloads: (tasks, steps). Every workload read must be >= 0 and, with
    valid_range (the profile's grid when extrapolation is off), inside it: else an InputError naming
    the file and line."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "not a folder: expected a folder of <task>.csv traces" if folder.exists() else "trace folder not found"
        raise InputError(f"{what} (--actual)", path=folder, field="forecast.actual")
    if (folder / "steps.jsonl").is_file() and not any((folder / f"{name}.csv").is_file() for name in task_names):
        return _run_trace(folder / "steps.jsonl", task_names, steps, start, valid_range)
    out = np.empty((len(task_names), steps))
    for i, name in enumerate(task_names):
        path = folder / f"{name}.csv"
        data = _read_numeric_csv(path, ["workload"], "trace")
        if data.shape[1] != 1:
            raise InputError(f"expected one column 'workload', got {data.shape[1]}", path=path, line=1)
        if data.shape[0] < start + steps:
            raise InputError(f"has {data.shape[0]} steps but the experiment needs {start + steps}", path=path)
        values = data[start : start + steps, 0]
        lo, hi = valid_range if valid_range is not None else (0.0, math.inf)
        bad = np.nonzero((values < 0) | (values < lo - 1e-9) | (values > hi + 1e-9))[0]
        if bad.size:
            k = int(bad[0])
            want = (
                "a workload >= 0"
                if values[k] < 0
                else f"a workload inside the profile's grid [{lo:g}, {hi:g}] (out_of_grid is 'error')"
            )
            raise InputError(f"expected {want}, got {values[k]:g}", path=path, line=start + k + 2, field="workload")
        out[i] = values
    return out


def _run_trace(
    path: Path, task_names: list[str], steps: int, start: int, valid_range: tuple[float, float] | None
) -> np.ndarray:
    """A live run's log (runs/<run-id>/steps.jsonl) as a trace: (tasks, steps) the workload each task ran
    in each logged step (what it reported, else what it was assigned). Line k must be step k: a step
    missing or logged twice would shift every later step, so it is refused, as is a workload that is not
    a finite number. Only a torn last line (a crash mid-write, dropped on resume) is skipped."""
    lines = open_text(path, "run log").read().splitlines()
    rows: list[list[float]] = []
    for k, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            if k == len(lines) - 1:
                break  # a torn last line, as a resumed run drops it
            raise InputError("expected a JSON record (one step per line)", path=path, line=k + 1) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("tasks"), list):
            raise InputError("expected a step record with a 'tasks' list", path=path, line=k + 1)
        step = rec.get("step")
        if step != k or isinstance(step, bool):
            what = "logged twice" if isinstance(step, int) and 0 <= step < k else "out of order or missing"
            raise InputError(
                f"expected step {k}, got {step!r} (a step {what}): the run log is not a whole run",
                path=path,
                line=k + 1,
                field="step",
            )
        by_task = {x.get("task"): x for x in rec["tasks"] if isinstance(x, dict)}
        missing = [t for t in task_names if t not in by_task]
        if missing:
            raise InputError(f"the run has no task '{missing[0]}'", path=path, line=k + 1, field="forecast.actual")
        rows.append([_logged_workload(by_task[t], t, path, k + 1) for t in task_names])
    if len(rows) < start + steps:
        raise InputError(
            f"the run logged {len(rows)} steps but the experiment needs {start + steps} (--steps, --start)",
            path=path,
            field="forecast.actual",
        )
    out = np.array(rows[start : start + steps], dtype=np.float64).T
    lo, hi = valid_range if valid_range is not None else (0.0, math.inf)
    bad = np.argwhere((out < 0) | (out < lo - 1e-9) | (out > hi + 1e-9))
    if bad.size:
        i, k = (int(x) for x in bad[0])
        raise InputError(
            f"task '{task_names[i]}' ran workload {out[i, k]:g}, outside the profile's grid [{lo:g}, {hi:g}]",
            path=path,
            line=start + k + 1,
            field="workload",
        )
    return out


def _logged_workload(entry: dict, task: str, path: Path, line: int) -> float:
    """The workload a task ran in a logged step: what it reported, else what it was assigned; a finite number."""
    key = "observed_workload" if "observed_workload" in entry else "workload"
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"task '{task}': expected a finite number, got {value!r}", path=path, line=line, field=key)
    return float(value)

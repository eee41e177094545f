"""Pair profiles: how much a task slows down while another task co-runs on its host.

`bsp-planner profile pairs` measures them (profiling/pairs.py) and writes, atomically:

* ``pairs.csv``: one row per ordered pair, ``task,co_task,slowdown,solo_s,co_s,runs,cpu_millicores,workload``;
  ``slowdown`` = the median duration of `task` while `co_task` runs beside it / its median duration
  alone, each task under its own ``cpu_millicores`` quota, at ``workload`` (``solo_s`` and ``co_s`` are
  those medians in seconds, ``runs`` the co-runs behind them);
* ``pairs.runs.csv`` beside it: every timed run (appended as measured, so an interrupted profile resumes);
* ``pairs.meta.json``: where, when and how (host, load, grid, stress-ng).

The performance model multiplies a task's duration by the slowdowns of the tasks placed with it
(`performance.co_location_slowdown`); placement avoids the pairs that hurt (`cluster.place_balanced`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import atomic
from ..core.errors import InputError
from .names import check_name
from .settings import MAX_MAGNITUDE

COLUMNS = ("task", "co_task", "slowdown", "solo_s", "co_s", "runs", "cpu_millicores", "workload")
# A co-runner under its own quota may make a task a little faster (noise) or many times slower (a shared
# cache or memory bus), never 100 times: beyond these a number is a broken or hand-edited file.
SLOWDOWN_RANGE = (0.1, 100.0)


@dataclass(frozen=True)
class PairRow:
    """One ordered pair: `task` is `slowdown` times slower while `co_task` runs beside it."""

    task: str
    co_task: str
    slowdown: float
    solo_s: float
    co_s: float
    runs: int
    cpu_millicores: float
    workload: float


@dataclass(frozen=True)
class PairProfile:
    path: Path | None
    rows: tuple[PairRow, ...]

    def matrix(self, task_names: Sequence[str]) -> np.ndarray:
        """(tasks, tasks): [i, j] = the slowdown of task i while task j co-runs; 1.0 on the diagonal and
        for a pair the profile did not measure (no interference assumed there)."""
        index = {t: i for i, t in enumerate(task_names)}
        out = np.ones((len(task_names), len(task_names)))
        for r in self.rows:
            if r.task in index and r.co_task in index:
                out[index[r.task], index[r.co_task]] = r.slowdown
        return out

    def measured(self, task_names: Sequence[str]) -> int:
        """How many ordered pairs of these tasks the profile holds."""
        names = set(task_names)
        return sum(r.task in names and r.co_task in names for r in self.rows)


def _number(text: str, path: Path, line: int, column: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{column}: expected a number, got {text!r}", path=path, line=line) from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{column}: expected a positive number, got {text!r}", path=path, line=line)
    lo, hi = SLOWDOWN_RANGE
    if column == "slowdown" and not lo <= v <= hi:
        raise InputError(f"slowdown: expected a factor in [{lo:g}, {hi:g}], got {text!r}", path=path, line=line)
    if v > MAX_MAGNITUDE:  # as every number read: a typo (runs = 1e300 would never fit an integer)
        raise InputError(f"{column}: expected at most {MAX_MAGNITUDE:g}, got {text!r}", path=path, line=line)
    return v


def load_pair_profile(path: str | Path) -> PairProfile:
    """Read a pairs.csv; every bad row, header or number is an InputError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(
            "no such pair profile; measure one with `bsp-planner profile pairs --out FILE`", path=path
        ) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"expected a pair-profile CSV: {exc.__class__.__name__}", path=path) from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise InputError(f"expected the header {','.join(COLUMNS)}; is this a pair profile?", path=path, line=1)
    rows: list[PairRow] = []
    seen: dict[tuple[str, str], int] = {}
    for line, rec in enumerate(reader, start=2):
        if not rec or not "".join(rec).strip():
            continue
        if len(rec) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} columns, got {len(rec)}", path=path, line=line)
        task, co_task = rec[0].strip(), rec[1].strip()
        for column, name in (("task", task), ("co_task", co_task)):
            check_name(name, "task", path=path, line=line, field=column)
        if not task or not co_task or task == co_task:
            raise InputError(f"expected two different task names, got {task!r} and {co_task!r}", path=path, line=line)
        if (task, co_task) in seen:
            raise InputError(
                f"pair {task},{co_task} is also on line {seen[(task, co_task)]}; list each pair once",
                path=path,
                line=line,
            )
        seen[(task, co_task)] = line
        vals = {c: _number(v.strip(), path, line, c) for c, v in zip(COLUMNS[2:], rec[2:], strict=True)}
        runs = vals.pop("runs")
        if runs != int(runs):
            raise InputError(f"runs: expected a whole number, got {rec[5]!r}", path=path, line=line)
        rows.append(PairRow(task, co_task, runs=int(runs), **vals))
    if not rows:
        raise InputError("the pair profile has no rows; measure it with `bsp-planner profile pairs`", path=path)
    return PairProfile(path, tuple(rows))


def write_pair_profile(path: str | Path, rows: Sequence[PairRow]) -> None:
    """Write pairs.csv whole (atomically: a reader sees the old file or the new one, never a part)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        measured = [f"{v:.4f}" for v in (r.slowdown, r.solo_s, r.co_s)]
        w.writerow([r.task, r.co_task, *measured, r.runs, f"{r.cpu_millicores:g}", f"{r.workload:g}"])
    atomic.write_text(path, buf.getvalue())

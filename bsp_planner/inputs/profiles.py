"""Profile tables: measured durations of each task over a grid of workload sizes x CPU limits.

A profile is a CSV with the header ``task,workload,cpu_millicores,duration_s,repeat`` (one row per
run) and a metadata file beside it (``<name>.meta.json``: host, CPU, grid, ops per unit...). Loading
validates everything once, at the boundary: a bad file raises InputError naming file, line and field.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import InputError, InputWarning, open_text
from .program_files import changed_programs
from .settings import MAX_MAGNITUDE

PROFILE_COLUMNS = ("task", "workload", "cpu_millicores", "duration_s", "repeat")


@dataclass(frozen=True)
class TaskProfile:
    """One task's grid: mean duration over repeats at every (workload, cpu) cell."""

    task: str
    workloads: np.ndarray  # (W,) sorted ascending
    cpu_millicores: np.ndarray  # (C,) sorted ascending
    duration_s: np.ndarray  # (W, C) mean over repeats
    repeats: int


@dataclass(frozen=True)
class Profile:
    path: Path | None
    tasks: dict[str, TaskProfile]
    metadata: dict

    def _common(self, axis: str) -> tuple[float, float]:
        """The range of `axis` every task measured (the intersection)."""
        grids = [getattr(p, axis) for p in self.tasks.values()]
        return max(float(g[0]) for g in grids), min(float(g[-1]) for g in grids)

    @property
    def cpu_range(self) -> tuple[float, float]:
        return self._common("cpu_millicores")

    @property
    def workload_range(self) -> tuple[float, float]:
        return self._common("workloads")

    def check_job(self, task_names: list[str]) -> None:
        """Every job task must be profiled. A profile may hold more tasks than the job (a smaller job
        drawn from a bigger one reuses its profile); those rows are simply not used."""
        missing = [t for t in task_names if t not in self.tasks]
        if missing:
            raise InputError(
                f"the job's task(s) {', '.join(missing)} are absent from the profile "
                f"(it has {', '.join(sorted(self.tasks))})",
                path=self.path,
                field="task",
            )


def metadata_path(profile_path: str | Path) -> Path:
    p = Path(profile_path)
    return p.with_name(p.stem + ".meta.json")


def finite_number(text: str, path: Path, lineno: int, field: str) -> float:
    """A CSV cell as a finite number; an InputError naming the file, line and column otherwise."""
    try:
        value = float(text)
    except ValueError as exc:
        raise InputError(f"expected a number, got {text!r}", path=path, line=lineno, field=field) from exc
    if not math.isfinite(value):
        raise InputError(f"expected a finite number, got {text!r}", path=path, line=lineno, field=field)
    if abs(value) > MAX_MAGNITUDE:  # as for settings: a typo, and totals of 300 digits
        raise InputError(
            f"expected a number of at most {MAX_MAGNITUDE:g} in size, got {text!r}", path=path, line=lineno, field=field
        )
    return value


def read_profile_rows(path: str | Path) -> list[dict]:
    """The raw rows of a profile CSV, each checked for shape and numbers (not yet for the grid)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("profile file not found", path=path)
    rows: list[dict] = []
    with open_text(path, "profile") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != PROFILE_COLUMNS:
            raise InputError(f"expected the header {','.join(PROFILE_COLUMNS)}", path=path, line=1)
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(PROFILE_COLUMNS):
                raise InputError(f"expected {len(PROFILE_COLUMNS)} columns, got {len(row)}", path=path, line=lineno)
            task = row[0].strip()
            if not task:
                raise InputError("empty task name", path=path, line=lineno, field="task")
            workload, cpu, duration, repeat = (
                finite_number(row[i], path, lineno, PROFILE_COLUMNS[i]) for i in range(1, 5)
            )
            for ok, i, expected in (
                (duration > 0, 3, "a positive duration"),
                (cpu > 0, 2, "a positive CPU limit"),
                (repeat == int(repeat) and repeat >= 0, 4, "a whole repeat number"),
            ):
                if not ok:
                    raise InputError(
                        f"expected {expected}, got {row[i]!r}", path=path, line=lineno, field=PROFILE_COLUMNS[i]
                    )
            values = (task, workload, cpu, duration, int(repeat))
            rows.append(dict(zip(PROFILE_COLUMNS, values, strict=True)) | {"line": lineno})
    if not rows:
        raise InputError("the profile has no rows", path=path)
    return rows


def load_profile(path: str | Path) -> Profile:
    """Load and validate a profile: full grid per task, no duplicates, positive finite durations."""
    path = Path(path)
    rows = read_profile_rows(path)
    cells: dict[str, dict[tuple[float, float], list[float]]] = defaultdict(lambda: defaultdict(list))
    seen: dict[tuple, int] = {}
    for r in rows:
        key = (r["task"], r["workload"], r["cpu_millicores"], r["repeat"])
        if key in seen:
            raise InputError(
                f"duplicate row for task '{r['task']}', workload {r['workload']:g}, {r['cpu_millicores']:g}m, "
                f"repeat {r['repeat']} (first on line {seen[key]})",
                path=path,
                line=r["line"],
            )
        seen[key] = r["line"]
        cells[r["task"]][(r["workload"], r["cpu_millicores"])].append(r["duration_s"])
    tasks: dict[str, TaskProfile] = {}
    for task, grid in cells.items():
        workloads = np.array(sorted({w for w, _ in grid}))
        cpus = np.array(sorted({c for _, c in grid}))
        if len(workloads) < 2 or len(cpus) < 2:
            raise InputError(
                f"task '{task}' needs at least 2 workloads and 2 CPU levels to interpolate, "
                f"has {len(workloads)} x {len(cpus)}",
                path=path,
                field="task",
            )
        missing = [(w, c) for w in workloads for c in cpus if (w, c) not in grid]
        if missing:
            shown = ", ".join(f"(workload {w:g}, {c:g}m)" for w, c in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise InputError(
                f"task '{task}' is missing grid cell(s) {shown}{more}; every workload needs every CPU level",
                path=path,
                field="task",
            )
        counts = {len(v) for v in grid.values()}
        mean = np.array([[np.mean(grid[(w, c)]) for c in cpus] for w in workloads])
        tasks[task] = TaskProfile(task, workloads, cpus, mean, repeats=min(counts))
    warn_non_monotone(tasks, path)
    metadata = read_metadata(path)
    warn_if_grid_contradicts(tasks, metadata, metadata_path(path))
    return Profile(path=path, tasks=tasks, metadata=metadata)


def warn_if_grid_contradicts(tasks: dict[str, TaskProfile], metadata: dict, meta_path: Path) -> None:
    """Warn when the profile has rows at levels its metadata's grid never listed: the metadata (which
    records what was measured, on what, how) then does not describe those rows."""
    grid = metadata.get("grid")
    if not isinstance(grid, dict):
        return
    for axis in ("cpu_millicores", "workloads"):
        listed = grid.get(axis)
        if not isinstance(listed, list):
            continue
        known = {float(v) for v in listed if isinstance(v, (int, float)) and not isinstance(v, bool)}
        rows = {float(v) for p in tasks.values() for v in getattr(p, axis)}
        extra = sorted(rows - known)
        if extra:
            warnings.warn(
                f"{meta_path}: its grid lists {axis} {', '.join(f'{v:g}' for v in sorted(known))} but the profile "
                f"has rows at {', '.join(f'{v:g}' for v in extra)}: the metadata does not describe them (rows "
                "edited or copied from another profile?)",
                InputWarning,
                stacklevel=3,
            )


#: A duration at a higher CPU limit more than this many times (and this many seconds above) the
#: duration at a lower one is no measurement noise: the profile is broken (a run disturbed, rows of
#: another task or job). The absolute margin spares runs so short that process start-up dominates.
INVERSION_FACTOR = 2.0
INVERSION_MIN_S = 0.1


def warn_non_monotone(tasks: dict[str, TaskProfile], path: Path | None) -> None:
    """Warn about grossly non-monotone durations: more CPU should never make a run much slower."""
    for task, p in tasks.items():
        d = p.duration_s  # (W, C), CPU ascending
        best_so_far = np.minimum.accumulate(d, axis=1)  # the fastest at this CPU or less
        ratio = d[:, 1:] / best_so_far[:, :-1]
        ratio[d[:, 1:] - best_so_far[:, :-1] <= INVERSION_MIN_S] = 0.0
        w, c = np.unravel_index(np.argmax(ratio), ratio.shape)
        if ratio[w, c] > INVERSION_FACTOR:
            warnings.warn(
                f"{path}: task '{task}' at workload {p.workloads[w]:g} takes {d[w, c + 1]:.3g} s at "
                f"{p.cpu_millicores[c + 1]:g}m but {best_so_far[w, c]:.3g} s with less CPU "
                f"({ratio[w, c]:.3g}x slower with more CPU); re-measure those cells",
                InputWarning,
                stacklevel=3,
            )


def this_cpu_model() -> str | None:
    """This host's processor model as /proc/cpuinfo names it (what the profiler records as `cpu_model`);
    None where it does not say."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.lower().startswith("model name")), None)


def warn_if_other_processor(profile_path: str | Path) -> None:
    """Warn (one line) when the profile's metadata says it was measured on another processor model than
    this host's: its durations may be off here by tens of percent. Silent where either is unknown."""
    meta_file = metadata_path(profile_path)
    try:
        measured_on = json.loads(meta_file.read_text()).get("cpu_model")
    except (OSError, ValueError, AttributeError):
        return
    here = this_cpu_model()
    if isinstance(measured_on, str) and here is not None and measured_on.strip() != here:
        warnings.warn(
            f"{meta_file}: the profile was measured on a {measured_on!r} processor, this host has {here!r}; its "
            "durations may be off here: let the model learn from the steps (--learn) or re-measure the profile "
            "on this host (`bsp-planner profile run`)",
            InputWarning,
            stacklevel=2,
        )


def read_metadata(profile_path: str | Path) -> dict:
    """The profile's `<stem>.meta.json` ({} if there is none); a damaged one is an InputError."""
    meta_file = metadata_path(profile_path)
    if meta_file.exists() and not meta_file.is_file():
        raise InputError("expected the profile's metadata file, this is a folder; remove it", path=meta_file)
    if not meta_file.is_file():
        return {}
    try:
        meta = json.loads(meta_file.read_text())
    except (ValueError, OSError) as exc:
        raise InputError(
            f"the profile's metadata is not readable JSON ({exc}); restore it or delete it", path=meta_file
        ) from None
    if not isinstance(meta, dict):
        raise InputError("expected a JSON object in the profile's metadata", path=meta_file)
    return meta


def check_job_matches(metadata: dict, job, meta_path: str | Path | None) -> None:
    """Refuse a job whose tasks differ (stressor, ops per unit, workers) from what the profile timed:
    its durations would be predictions for something else. Warn (InputWarning) about a task whose program
    files changed since they were profiled (:mod:`.program_files`)."""
    measured = metadata.get("tasks", {})
    if not isinstance(measured, dict):
        raise InputError("expected 'tasks' to be a table of the profiled tasks", path=meta_path, field="tasks")
    for i, t in enumerate(job.tasks):
        m = measured.get(t.name)
        if not isinstance(m, dict):
            continue
        mine = {"stressor": t.stressor, "ops_per_unit": t.ops_per_unit, "workers": t.workers}
        theirs = {k: m.get(k) for k in mine}
        diff = [k for k in mine if theirs[k] is not None and theirs[k] != mine[k]]
        if diff:
            raise InputError(
                f"task {t.name!r} has " + ", ".join(f"{k}={mine[k]!r}" for k in diff) + " in the job but the profile "
                f"({meta_path}) timed it with " + ", ".join(f"{k}={theirs[k]!r}" for k in diff) + "; re-measure the "
                "profile for this job (`bsp-planner profile run`) or make the task the profiled one",
                path=job.path,
                field=f"task[{i}].{diff[0]}",
            )
    for note in changed_programs(job, measured, meta_path):  # its code changed since it was timed
        warnings.warn(note, InputWarning, stacklevel=2)

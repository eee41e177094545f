"""The profile's metadata (``<stem>.meta.json``): where and how it was measured, per session, and the
checks that keep a resumed profile measuring the same thing on the same kind of machine."""

from __future__ import annotations

import os
import platform
import socket
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import InputError, InputWarning
from ..inputs.job import Job, Task
from ..inputs.program_files import program_digest
from .cgroups import CFS_PERIOD_US
from .grid import Cell, Grid, GridReport, level_number
from .local import cpu_model
from .process import ProcessSteps
from .profile_files import failures_path, measured_cells

META_FORMAT = 1
#: what a task's rows depend on: a resumed profile must not mix rows measured with other values
COMPARABLE_TASK_FIELDS = (
    "stressor",
    "ops_per_unit",
    "workers",
    "command",
    "process",
    "image",
    "warmup_steps",
    "measure_steps",
    "min_measure_s",
)


def load_avg_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def now_text() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


def host_info() -> dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": platform.platform(),
    }


def task_meta(t: Task, steps: ProcessSteps) -> dict:
    meta = t.identity()
    if "ops_per_unit" in meta:
        meta["ops_per_unit"] = level_number(meta["ops_per_unit"])
    if t.kind == "process":
        meta.update(steps.as_dict())
    meta.update(program_digest(t) or {})  # simulate and run warn when the program's files change later
    return meta


def check_compatible(
    meta: dict,
    tasks: list[Task],
    host: dict,
    backend: dict,
    measured: set[Cell],
    meta_file: Path,
    steps: ProcessSteps,
) -> None:
    """A resumed profile must keep measuring the same thing, the same way, on the same kind of machine."""
    if measured:
        _check_same_backend(meta, backend, meta_file)
    _check_same_tasks(meta, tasks, {c[0] for c in measured}, meta_file, steps)
    _check_same_machine(meta, host, meta_file)


def _check_same_backend(meta: dict, backend: dict, meta_file: Path) -> None:
    for key in ("backend", "cpu_shares", "cfs_period_us"):
        # a profile from before the period was a setting was measured with the default period
        had = meta.get(key, CFS_PERIOD_US if key == "cfs_period_us" and "backend" in meta else None)
        if key == "cfs_period_us" and key not in backend:
            continue  # a backend without CFS periods (kubernetes: the kubelet's)
        if had is not None and had != backend.get(key):
            raise InputError(
                f"the profile was measured with {key}={had!r}, this run would use "
                f"{backend.get(key)!r}; measure into a new --out",
                path=meta_file,
                field=key,
            )


def _check_same_tasks(meta: dict, tasks: list[Task], have_rows: set[str], meta_file: Path, steps: ProcessSteps) -> None:
    """A task with rows must still run the same stressor/program the same way (COMPARABLE_TASK_FIELDS)."""
    old_tasks = meta.get("tasks", {})
    for t in tasks:
        old = old_tasks.get(t.name)
        if old is None or t.name not in have_rows:
            continue
        new = task_meta(t, steps)
        diff = [k for k in sorted(set(old) | set(new)) if k in COMPARABLE_TASK_FIELDS and old.get(k) != new.get(k)]
        if diff:
            raise InputError(
                f"task '{t.name}' was measured with "
                + ", ".join(f"{k}={old.get(k)!r}" for k in diff)
                + " but the job now has "
                + ", ".join(f"{k}={new.get(k)!r}" for k in diff)
                + "; its rows would not be comparable: measure into a new --out (or delete the old files)",
                path=meta_file,
                field=f"tasks.{t.name}",
            )


def _check_same_machine(meta: dict, host: dict, meta_file: Path) -> None:
    for key in ("cpu_model", "cores"):
        if key in meta and meta[key] != host[key]:
            raise InputError(
                f"the profile was measured on a machine with {key}={meta[key]!r}, this one has "
                f"{host[key]!r}; measure into a new --out",
                path=meta_file,
                field=key,
            )


def new_session(grid: Grid, selected: Sequence[Task], timeout_s: float, report: GridReport) -> dict[str, Any]:
    """This invocation's entry in the metadata's `sessions`, completed by close_session."""
    return {
        "started": now_text(),
        "finished": None,
        "load_average_1m_start": load_avg_1m(),
        "load_average_1m_end": None,
        "grid": grid.as_dict(),
        "tasks": [t.name for t in selected],
        "timeout_s": timeout_s,
        "planned": report.planned,
        "skipped": report.skipped,
        "measured": 0,
        "failed": 0,
        "interrupted": False,
    }


class MeasuredReport(Protocol):
    """What a `profile run` (GridReport) and a `profile pairs` (pairs.PairReport) both report."""

    measured: int
    failures: list[Any]
    wall_s: float


def close_session(session: dict[str, Any], report: MeasuredReport, loads: list[float]) -> None:
    """The session's end: when, the load, what it measured (a `profile run`'s or a `profile pairs`'s)."""
    session.update(
        finished=now_text(),
        load_average_1m_end=load_avg_1m(),
        measured=report.measured,
        failed=len(report.failures),
        wall_s=round(report.wall_s, 1),
        load_average_1m_mean=round(sum(loads) / len(loads), 2) if loads else None,
        load_average_1m_max=max(loads) if loads else None,
    )


def warn_if_appending_another(meta: dict, job: Job, grid: Grid, meta_file: Path) -> None:
    """Rows of another job or another grid appended to a profile: allowed (a profile may hold several
    jobs' tasks, a grid may be refined) but said out loud, since it is usually a wrong --out."""
    old_job = meta.get("job", {}).get("name") if isinstance(meta.get("job"), dict) else None
    if old_job is not None and old_job != job.name:
        warnings.warn(
            f"{meta_file}: the profile was measured for job '{old_job}'; appending rows of job '{job.name}' "
            "(its metadata keeps the first job and lists both under 'jobs')",
            InputWarning,
            stacklevel=4,
        )
    old = meta.get("grid")
    if isinstance(old, dict):
        new = grid.as_dict()
        diff = [
            f"{k} {new[k]} (the profile has {old.get(k)})"
            for k in ("cpu_millicores", "workloads")
            if sorted(map(float, new[k])) != sorted(map(float, old.get(k) or []))
        ]
        if diff:
            warnings.warn(
                f"{meta_file}: appending rows of another grid: {'; '.join(diff)}; the profile is usable only "
                "once every task has every cell of the union",
                InputWarning,
                stacklevel=4,
            )


def merge_meta(
    meta: dict,
    job: Job,
    tasks: list[Task],
    grid: Grid,
    host: dict,
    backend: dict,
    timeout_s: float,
    steps: ProcessSteps,
) -> dict:
    """The metadata after this session: host and backend now, the jobs, grid and tasks merged with the
    earlier sessions' (a resumed or extended profile keeps what it was measured for first)."""
    meta = {**meta, "format": META_FORMAT, **host, **backend}
    meta["jobs"] = _merged_jobs(meta, job)
    meta["job"] = meta["jobs"][0]  # the job the profile was first measured for: appending never rewrites it
    meta["grid"] = _merged_grid(meta.get("grid", {}), grid, timeout_s)
    meta["tasks"] = per_task = {**meta.get("tasks", {}), **{t.name: task_meta(t, steps) for t in tasks}}
    meta["ops_per_unit"] = {k: v["ops_per_unit"] for k, v in per_task.items() if "ops_per_unit" in v}
    meta["workers"] = {k: v["workers"] for k, v in per_task.items()}
    meta["duration"] = KUBERNETES_DURATION_NOTE if backend.get("backend") == "kubernetes" else DURATION_NOTE
    return meta


_PROCESS_NOTE = (
    "for a long-running process task, the mean wall seconds of its measured step blocks at that workload (at least "
    "measure_steps, lasting at least min_measure_s together) after warmup_steps discarded ones"
)
DURATION_NOTE = (
    "wall-clock seconds of the task's process (stress-ng or its command), in its own cgroup with a CFS quota of "
    "cpu_millicores / 1000 of every cfs_period_us period (cpu_millicores * 100 us per 100000 us by default); "
    f"{_PROCESS_NOTE}, the process started once per CPU level and repeat in such a cgroup"
)
KUBERNETES_DURATION_NOTE = (
    "wall-clock seconds of the task's process (stress-ng or its command) inside a Kubernetes Job's container "
    "whose CPU limit is cpu_millicores (the kubelet turns it into the node's CFS quota), from just before the "
    f"process starts to its exit, as reported by the container (bsp_planner.profiling.pod_measure); {_PROCESS_NOTE}, "
    "one container per CPU level and repeat"
)


def _merged_jobs(meta: dict, job: Job) -> list[dict]:
    """The jobs whose rows the profile holds, this one updated in place or added last."""
    this_job = {"name": job.name, "file": str(job.path) if job.path else None}
    jobs = list(meta.get("jobs") or ([meta["job"]] if isinstance(meta.get("job"), dict) else []))
    names = [j.get("name") if isinstance(j, dict) else None for j in jobs]
    if job.name in names:
        jobs[names.index(job.name)] = this_job
    else:
        jobs.append(this_job)
    return jobs


def _merged_grid(old: dict, grid: Grid, timeout_s: float) -> dict:
    """The union of the grids measured so far (levels sorted, the most repeats), with this timeout."""
    new = grid.as_dict()
    return {
        "cpu_millicores": sorted({*old.get("cpu_millicores", []), *new["cpu_millicores"]}),
        "workloads": sorted({*old.get("workloads", []), *new["workloads"]}),
        "repeats": max(old.get("repeats", 0), grid.repeats),
        "timeout_s": timeout_s,
    }


def finish_meta(meta: dict, out: Path) -> None:
    """Fields summarising all sessions: first start / last end, load averages, rows and failures."""
    sessions = meta.get("sessions", [])
    if sessions:
        meta["started"] = sessions[0]["started"]
        meta["finished"] = sessions[-1]["finished"]
        meta["load_average_1m"] = {
            "start": sessions[0]["load_average_1m_start"],
            "end": sessions[-1]["load_average_1m_end"],
            "per_session": [[s["load_average_1m_start"], s["load_average_1m_end"]] for s in sessions],
        }
        meta["measurement_wall_s"] = round(sum(s.get("wall_s") or 0 for s in sessions), 1)
    try:
        meta["rows"] = len(measured_cells(out))
    except InputError:
        meta["rows"] = None
    fail = failures_path(out)
    meta["failures_file"] = fail.name if fail.exists() else None

"""The profiling session: how `bsp-planner profile run` drives a long-running `process` task.

The profiler starts the process (in a cgroup whose CFS quota is one CPU level of the grid) with
``BSP_PROFILE`` naming a plan file instead of a run::

    {"format": 1, "task": "p0", "workloads": [500, 500, 500, 2500, 2500, 2500], "reports_file": "..."}

:func:`join` then returns a :class:`ProfilingSession` instead of joining a live run over ZooKeeper: the
program's own step loop runs unchanged, ``session.assigned_workload(step)`` says how much work step
`step` must do (the program sizes its work by it, as a series-driven task does), each step block is
timed and its report appended (flushed, fsynced) to the plan's reports file, and the session ends
(:class:`RunEnded` / ``session.ended``) after the last planned step. ``session.sync`` is ``"profile"``:
a program whose tasks exchange data with each other skips that exchange, since it runs alone.

No ZooKeeper, coordinator or credentials are involved.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from . import session as _live
from .errors import TaskJoinError
from .local import LocalSession

PROFILE_ENV = "BSP_PROFILE"
PLAN_FORMAT = 1


class ProfilingSession(LocalSession):
    """A :class:`LocalSession` whose workloads, step count and reports file come from a profiler's plan."""

    sync = "profile"

    def __init__(self, task_name: str, workloads: list[float], reports_file: str | Path, run_dir: str = "") -> None:
        super().__init__(task_name, workloads=workloads, steps=len(workloads), reports_file=reports_file)
        self.run_dir = run_dir


def write_plan(path: str | Path, task_name: str, workloads: list[float], reports_file: str | Path) -> Path:
    """Write a profiling plan (the profiler's side of :func:`read_plan`)."""
    path = Path(path)
    plan = {
        "format": PLAN_FORMAT,
        "task": task_name,
        "workloads": [float(w) for w in workloads],
        "reports_file": str(reports_file),
    }
    path.write_text(json.dumps(plan) + "\n")
    return path


def _plan_error(path: str, what: str) -> TaskJoinError:
    return TaskJoinError(f"${PROFILE_ENV} names a profiling plan {path!r} that {what}", path=path, field=PROFILE_ENV)


def read_plan(path: str) -> tuple[str, list[float], str]:
    """(task, workloads, reports_file) of a plan file; TaskJoinError naming the file and what is wrong."""
    try:
        plan: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise _plan_error(path, "does not exist") from None
    except (OSError, ValueError) as exc:
        raise _plan_error(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise _plan_error(path, f"is not a format-{PLAN_FORMAT} plan object")
    task, workloads, reports = plan.get("task"), plan.get("workloads"), plan.get("reports_file")
    if not isinstance(task, str) or not task:
        raise _plan_error(path, "has no task name ('task')")
    if not isinstance(reports, str) or not reports:
        raise _plan_error(path, "has no 'reports_file'")
    if (
        not isinstance(workloads, list)
        or not workloads
        or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0 for w in workloads
        )
    ):
        raise _plan_error(path, "has no list of non-negative 'workloads' (one per step)")
    return task, [float(w) for w in workloads], reports


def profiling_session(env: dict[str, str]) -> ProfilingSession:
    """The session a process started by the profiler gets (``BSP_PROFILE`` set, no ``BSP_RUN_ID``)."""
    path = env[PROFILE_ENV]
    if env.get(_live.ENV["run_id"]):
        raise TaskJoinError(
            f"both ${PROFILE_ENV} (profiling) and ${_live.ENV['run_id']} (a live run) are set; a process is "
            "either profiled or part of a run: unset one",
            field=PROFILE_ENV,
        )
    task, workloads, reports = read_plan(path)
    named = env.get(_live.ENV["task"], "").strip()
    if named and named != task:
        raise _plan_error(path, f"is for task {task!r}, but ${_live.ENV['task']} is {named!r}")
    return ProfilingSession(task, workloads, reports, env.get(_live.ENV["run_dir"], ""))


def join(env: dict | None = None, **kw: Any) -> Any:
    """:func:`bsp_planner.task.session.join` (a :class:`TaskSession`), or the profiler's
    :class:`ProfilingSession` where ``BSP_PROFILE`` is set: the same step API (typed Any, since a live
    session also has run-only attributes such as ``info`` that a program may read)."""
    env = dict(os.environ if env is None else env)
    if env.get(PROFILE_ENV, "").strip():
        return profiling_session(env)
    return _live.join(env, **kw)

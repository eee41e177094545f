"""The profiling session: how `bsp-planner profile run` drives a long-running `process` task.

The profiler starts the process (in a cgroup whose CFS quota is one CPU level of the grid) with
``BSP_PROFILE`` naming a plan file instead of a run::

    {
        "format": 1,
        "task": "p0",
        "workloads": [500, 2500],
        "warmup_steps": 1,
        "measure_steps": 5,
        "min_measure_s": 1.0,
        "max_measure_steps": 1000,
        "reports_file": "...",
    }

:func:`join` then returns a :class:`ProfilingSession` instead of joining a live run over ZooKeeper: the
program's own step loop runs unchanged, ``session.assigned_workload(step)`` says how much work step
`step` must do (the program sizes its work by it, as a series-driven task does), each step block is
timed and its report appended (flushed, fsynced) to the plan's reports file, and the session ends
(:class:`RunEnded` / ``session.ended``) after the last workload. ``session.sync`` is ``"profile"``: a
program whose tasks exchange data with each other skips that exchange, since it runs alone.

Each workload runs `warmup_steps` steps, then measured steps until there are at least `measure_steps`
of them and they took at least `min_measure_s` seconds together (so that short steps span several CFS
periods: see :mod:`bsp_planner.profiling.process`), but never more than `max_measure_steps`: a workload
whose steps are (almost) empty would otherwise be asked for steps without end; its last report then says
why the cell failed (``"cell_failed"``) and the next workload begins. Each report carries the ``assigned_workload``, the
``phase`` (``"warmup"`` or ``"measure"``) and, on a workload's last step, ``"cell_done": true``.

No ZooKeeper, coordinator or credentials are involved.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import session as _live
from .errors import RunEnded, TaskJoinError
from .local import LocalSession

PROFILE_ENV = "BSP_PROFILE"
PROFILE_SYNC = "profile"  # session.sync of a profiled process; BSP_SYNC of a profiled command task
PLAN_FORMAT = 1


@dataclass(frozen=True)
class ProfilingPlan:
    """What the profiler asks of one process: `workloads` in turn, each `warmup_steps` discarded steps and
    then at least `measure_steps` measured ones lasting at least `min_measure_s` seconds together."""

    task: str
    workloads: tuple[float, ...]
    reports_file: str
    warmup_steps: int = 1
    measure_steps: int = 5
    min_measure_s: float = 0.0
    max_measure_steps: int = 1000  # measured steps per workload at most, min_measure_s reached or not


class ProfilingSession(LocalSession):
    """The task API under the profiler: the workload of each step follows the plan, one after another."""

    sync = PROFILE_SYNC

    def __init__(self, plan: ProfilingPlan, run_dir: str = "") -> None:
        super().__init__(plan.task, reports_file=plan.reports_file)
        self.plan = plan
        self.run_dir = run_dir
        self._cell = 0  # index of the workload being measured
        self._steps_in_cell = 0
        self._measured_s = 0.0
        self._assigned: dict[int, float] = {}  # the workload of every step started so far

    @property
    def ended(self) -> bool:
        return self._cell >= len(self.plan.workloads)

    def assigned_workload(self, step: int) -> float | None:
        """The workload of `step`: known for the steps run so far and the next one, None beyond."""
        if step in self._assigned:
            return self._assigned[step]
        if step == self._next and not self.ended:
            return self.plan.workloads[self._cell]
        return None

    def _begin(self, step: int) -> float:
        if self.ended:
            raise RunEnded(f"the profiling plan's {len(self.plan.workloads)} workloads are done")
        self._assigned[step] = self.plan.workloads[self._cell]
        return self._assigned[step]

    def _fields(self, assigned: float | None, wall_s: float) -> dict[str, Any]:
        """Count the step into its workload's cell; the report's profiling fields."""
        measuring = self._steps_in_cell >= self.plan.warmup_steps
        self._steps_in_cell += 1
        fields: dict[str, Any] = {"assigned_workload": assigned, "phase": "measure" if measuring else "warmup"}
        if measuring:
            self._measured_s += wall_s
        measured = self._steps_in_cell - self.plan.warmup_steps
        enough = measured >= self.plan.measure_steps and self._measured_s >= self.plan.min_measure_s
        if measuring and not enough and measured >= max(self.plan.max_measure_steps, self.plan.measure_steps):
            fields["cell_failed"] = (
                f"{measured} measured steps took {self._measured_s:.3g} s together, short of min_measure_s "
                f"{self.plan.min_measure_s:g} s: its step does (almost) no work when profiled (does it size its "
                "work by session.assigned_workload(step)?); raise --max-measure-steps or lower --min-measure-s"
            )
            enough = True
        if enough:
            fields["cell_done"] = True
            self._cell += 1
            self._steps_in_cell = 0
            self._measured_s = 0.0
        return fields


def write_plan(path: str | Path, plan: ProfilingPlan) -> Path:
    """Write a profiling plan (the profiler's side of :func:`read_plan`)."""
    path = Path(path)
    path.write_text(plan_text(plan) + "\n")
    return path


def plan_text(plan: ProfilingPlan) -> str:
    """A profiling plan as the JSON :func:`read_plan` reads (one line)."""
    fields = dataclasses.asdict(plan) | {"workloads": [float(w) for w in plan.workloads]}
    return json.dumps({"format": PLAN_FORMAT, **fields, "reports_file": str(plan.reports_file)})


def _plan_error(path: str, what: str) -> TaskJoinError:
    return TaskJoinError(f"${PROFILE_ENV} names a profiling plan {path!r} that {what}", path=path, field=PROFILE_ENV)


def _numbers(values: object, least: float) -> bool:
    return (
        isinstance(values, Sequence)
        and not isinstance(values, str)
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= least for v in values
        )
    )


def read_plan(path: str) -> ProfilingPlan:
    """The plan in a file; TaskJoinError naming the file and what is wrong."""
    try:
        data: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise _plan_error(path, "does not exist") from None
    except (OSError, ValueError) as exc:
        raise _plan_error(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise _plan_error(path, f"is not a format-{PLAN_FORMAT} plan object")
    task, workloads, reports = data.get("task"), data.get("workloads"), data.get("reports_file")
    if not isinstance(task, str) or not task:
        raise _plan_error(path, "has no task name ('task')")
    if not isinstance(reports, str) or not reports:
        raise _plan_error(path, "has no 'reports_file'")
    if not workloads or not _numbers(workloads, 0):
        raise _plan_error(path, "has no list of non-negative 'workloads'")
    steps = [data.get(f.name, f.default) for f in dataclasses.fields(ProfilingPlan)[3:]]  # warmup_steps...
    warmup, measure, min_s, most = steps
    if not _numbers(steps, 0) or min(measure, most) < 1 or not all(n % 1 == 0 for n in (warmup, measure, most)):
        raise _plan_error(
            path,
            "has no whole warmup_steps >= 0, measure_steps >= 1, max_measure_steps >= 1 and min_measure_s >= 0",
        )
    return ProfilingPlan(
        task, tuple(map(float, workloads)), reports, int(warmup), int(measure), float(min_s), int(most)
    )


def profiling_session(env: dict[str, str]) -> ProfilingSession:
    """The session a process started by the profiler gets (``BSP_PROFILE`` set, no ``BSP_RUN_ID``)."""
    path = env[PROFILE_ENV]
    if env.get(_live.ENV["run_id"]):
        raise TaskJoinError(
            f"both ${PROFILE_ENV} (profiling) and ${_live.ENV['run_id']} (a live run) are set; a process is "
            "either profiled or part of a run: unset one",
            field=PROFILE_ENV,
        )
    plan = read_plan(path)
    named = env.get(_live.ENV["task"], "").strip()
    if named and named != plan.task:
        raise _plan_error(path, f"is for task {plan.task!r}, but ${_live.ENV['task']} is {named!r}")
    return ProfilingSession(plan, env.get(_live.ENV["run_dir"], ""))


def join(env: dict | None = None, **kw: Any) -> Any:
    """:func:`bsp_planner.task.session.join` (a :class:`TaskSession`), or the profiler's
    :class:`ProfilingSession` where ``BSP_PROFILE`` is set: the same step API (typed Any, since a live
    session also has run-only attributes such as ``info`` that a program may read)."""
    env = dict(os.environ if env is None else env)
    if env.get(PROFILE_ENV, "").strip():
        return profiling_session(env)
    return _live.join(env, **kw)

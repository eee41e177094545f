"""Profiling a long-running `process` task: one start per (CPU level, repeat), one workload after another.

Why not one process per cell, as for stressors and commands: a process task is started once in a run
and keeps its state; a superstep of it never includes the interpreter's start-up, its imports or the
first allocation of its data, which for a short step would dominate a per-cell start. So the profiler
starts the program once per (task, CPU level, repeat) inside the cgroup whose quota is that CPU level,
with a profiling session (:mod:`bsp_planner.task.profiling`: ``BSP_PROFILE`` names a plan) that assigns
the grid's workloads step by step: `warmup` steps, then at least `measure` steps lasting at least
`min_measure_s` seconds together, of each workload in turn. The
program sizes each step's work by ``session.assigned_workload(step)`` and reports it; the session times
each step block (wall and CPU seconds) and appends the report to a file the profiler follows.

A cell's duration is the mean wall time of its measured consecutive steps (their total over their
number): the warm-up steps (the first step after start-up or after the workload changed, when caches and
allocations are cold) are discarded. Mean, not median: the kernel enforces a quota per 100 ms CFS period,
so a step shorter than its share of a period runs unthrottled or waits for the next period depending on
where in the period it starts (at 500m, a 21 ms step took 21 or 70 ms); one step's wall time is that
phase, and only the rate over consecutive steps is the CPU limit's effect, which is what a rank running
step after step gets. For steps longer than a period the two agree; for much shorter ones the mean needs
several periods to settle, hence `min_measure_s` (1 s: ten periods, by default).

A workload whose `max_measure` measured steps still last less than `min_measure_s` together (a step that
does almost nothing when profiled) fails its cell, saying so, instead of running steps without end.
A process that exits non-zero, ends before its last planned step, reports another workload than the one
assigned (it does not size its work by the assignment), or reports no step for `timeout_s` seconds is a
failure of every cell it did not finish; the cells it finished before are kept. `timeout_s` bounds the
wait for each step's report (the first one's includes the program's start-up).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.signals import kill_group
from ..inputs.job import Task, substitute
from ..inputs.placeholders import alone_values
from ..inputs.settings import coerce_field
from ..task.profiling import PROFILE_ENV, ProfilingPlan, write_plan
from .cgroups import CpuQuotaGroup
from .results import RunResult, stderr_tail

POLL_S = 0.05  # how often the profiler looks at the process and its reports (not part of any timing)
MAX_STEPS = 10_000  # warm-up or measured steps per workload: more is a typo (a cell would run for hours)
MAX_MIN_MEASURE_S = 3600.0  # measured seconds per workload: an hour per cell is already far beyond any need


@dataclass(frozen=True)
class ProcessSteps:
    """How a profiled process runs each workload: `warmup` discarded steps, then at least `measure` timed
    ones lasting at least `min_measure_s` seconds together."""

    warmup: int = 1
    measure: int = 5
    min_measure_s: float = 1.0
    max_measure: int = 1000  # measured steps per workload at most: an (almost) empty step fails its cell

    def __post_init__(self) -> None:
        # Checked by the settings loader, as every setting is (NaN, a fraction of a step, a bound exceeded),
        # the error naming the `profile run` option; the upper bounds catch typos that would never end.
        for name, option, tp, checks in (
            ("warmup", "--warmup-steps", int, {"ge": 0, "le": MAX_STEPS}),
            ("measure", "--measure-steps", int, {"ge": 1, "le": MAX_STEPS}),
            ("min_measure_s", "--min-measure-s", float, {"ge": 0, "le": MAX_MIN_MEASURE_S}),
            ("max_measure", "--max-measure-steps", int, {"ge": 1, "le": MAX_STEPS * 100}),
        ):
            value = coerce_field(getattr(self, name), tp, checks, where=option, path=None)
            object.__setattr__(self, name, value)  # frozen: the coerced value (3.0 -> 3) replaces the given one

    def as_dict(self) -> dict[str, float]:
        """The fields, in order, as a profiling plan (and the profile's metadata) names them."""
        names = ("warmup_steps", "measure_steps", "min_measure_s", "max_measure_steps")
        return dict(zip(names, astuple(self), strict=True))

    def plan(self, task: str, workloads: Sequence[float], reports_file: Path) -> ProfilingPlan:
        return ProfilingPlan(task, tuple(float(w) for w in workloads), str(reports_file), *astuple(self))


def process_args(task: Task, run_dir: str | Path, run_values: dict[str, str] | None = None) -> list[str]:
    """The process's argument list, with `{task}`, `{run_dir}` and `{python}` substituted as a run does, and
    `run_values` (`{port}`, `{port:NAME}`, `{job_dir}`: :func:`~bsp_planner.inputs.placeholders.alone_values`)."""
    if task.process is None:
        raise InputError(f"task '{task.name}' runs a {task.kind}, not a process", field="process")
    values = {**(run_values or {}), "task": task.name, "run_dir": str(run_dir), "python": sys.executable}
    return [substitute(a, values) for a in task.process]


class ReportFollower:
    """The complete JSON lines appended to a reports file so far (a torn last line waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.reports: list[dict] = []

    def poll(self) -> int:
        """Read what was appended; returns how many new reports."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return 0
        end = data.rfind(b"\n") + 1
        self.offset += end
        new = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        self.reports.extend(new)
        return len(new)


def cell_results(
    task: Task, reports: list[dict], workloads: Sequence[float], failure: str | None
) -> dict[float, RunResult]:
    """Each workload's cell from the reports: the mean wall time of its measured steps, or why not.

    A cell whose last step was reported (``cell_done``) is measured even if the process failed later; a
    report of another workload than the assigned one fails its cell and every later one."""
    results: dict[float, RunResult] = {}
    wrong = next((r for r in reports if not _same_workload(r.get("workload"), r["assigned_workload"])), None)
    if wrong is not None:
        failure = (
            f"task '{task.name}' reported workload {wrong.get('workload')} in step {wrong['step']} but the "
            f"profiler assigned {wrong['assigned_workload']:g}: its process must size each step's work by "
            "session.assigned_workload(step) when profiled"
        )
    for w in workloads:
        cell = [r for r in reports if r["assigned_workload"] == float(w)]
        measured = [r for r in cell if r.get("phase") == "measure"]
        trusted = wrong is None or (cell and cell[-1]["step"] < wrong["step"])
        short = next((r["cell_failed"] for r in cell if r.get("cell_failed")), None)
        if short is not None:
            results[float(w)] = RunResult(None, f"task '{task.name}' workload {w:g}: {short}")
        elif trusted and measured and any(r.get("cell_done") for r in cell):
            results[float(w)] = RunResult(
                statistics.fmean(float(r["wall_s"]) for r in measured),
                cpu_s=statistics.fmean(float(r.get("cpu_s", 0.0)) for r in measured),
            )
        else:
            results[float(w)] = RunResult(None, failure or "the process ended before this cell's steps")
    return results


def _same_workload(reported: object, assigned: float) -> bool:
    if reported is None:
        return True  # the process did not say; the assignment stands
    return isinstance(reported, (int, float)) and math.isclose(float(reported), assigned, rel_tol=1e-9, abs_tol=0.5)


def drive_process(
    task: Task,
    workloads: Sequence[float],
    group: CpuQuotaGroup,
    timeout_s: float,
    steps: ProcessSteps,
    workdir: Path,
    progress: Callable[[str], None] | None = None,
) -> dict[float, RunResult]:
    """Start `task`'s process once inside `group`, run `workloads` through its profiling session, and
    return each workload's cell. Kills the process (and everything in the group) on timeout and on any
    exception, Ctrl-C included; it gets SIGKILL if the profiler dies (parent-death signal). `progress` is
    told where the process is (workload, steps, measured seconds) as its reports come in."""
    with tempfile.TemporaryDirectory(prefix=f"profile-{task.name}-", dir=workdir) as tmp:
        scratch = Path(tmp)
        run_dir = scratch / "run"
        run_dir.mkdir()
        reports_file = scratch / "reports.jsonl"
        plan = write_plan(scratch / "plan.json", steps.plan(task.name, workloads, reports_file))
        follower = ReportFollower(reports_file)
        values, run_env = alone_values(task.name, task.process or (), task.job_dir)
        # this environment without any bsp-planner run's variables, plus the profiling session's
        env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
        env.update({**run_env, PROFILE_ENV: str(plan), "BSP_TASK": task.name, "BSP_RUN_DIR": str(run_dir)})
        with open(scratch / "stderr", "w+b") as err:
            proc = subprocess.Popen(
                process_args(task, run_dir, values),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=run_dir,
                env=env,
                preexec_fn=group.joiner(signal.SIGKILL),  # a killed `profile run` leaves no process behind
                start_new_session=True,
            )
            try:
                failure = _follow(proc, group, follower, timeout_s, len(workloads), task.name, progress)
            except BaseException:
                stop_run(proc, group)
                raise
            if failure is not None and proc.returncode not in (None, 0):
                err.seek(0)
                detail = stderr_tail(err.read())
                failure += f": {detail}" if detail else ""
        return cell_results(task, follower.reports, workloads, failure)


def progress_text(task: str, reports: list[dict], cells: int) -> str:
    """Where a profiled process is: its workload, its steps of it, and the measured seconds so far."""
    last = reports[-1]
    cell = [r for r in reports if r["assigned_workload"] == last["assigned_workload"]]
    measured = [r for r in cell if r.get("phase") == "measure"]
    done = sum(1 for r in reports if r.get("cell_done"))
    return (
        f"{task} w={last['assigned_workload']:g} ({done}/{cells} done): step {len(cell)}, "
        f"{sum(float(r['wall_s']) for r in measured):.2f} s measured"
    )


def _follow(
    proc: subprocess.Popen,
    group: CpuQuotaGroup,
    follower: ReportFollower,
    timeout_s: float,
    cells: int,
    task: str = "",
    progress: Callable[[str], None] | None = None,
) -> str | None:
    """Wait for the process to end, following its reports; None when it finished every cell and exited
    0, else why not (the process is killed on a timeout)."""
    last_progress = time.monotonic()
    while True:
        try:
            proc.wait(timeout=POLL_S)
            exited = True
        except subprocess.TimeoutExpired:
            exited = False
        if follower.poll():
            last_progress = time.monotonic()
            if progress is not None:
                progress(progress_text(task, follower.reports, cells))
        done = sum(1 for r in follower.reports if r.get("cell_done"))
        where = where_stopped(follower.reports)
        if exited:
            if proc.returncode != 0:
                return f"its process exited with code {proc.returncode} {where}"
            if done < cells:
                return (
                    f"its process exited {where}, before its profiling session ended ({done} of {cells} workloads done)"
                )
            return None
        if time.monotonic() - last_progress > timeout_s:
            stop_run(proc, group)
            return f"timeout: no step reported within {timeout_s:g} s {where}"


def where_stopped(reports: list[dict]) -> str:
    """Where a process stopped: after its last reported step (and that step's workload)."""
    if not reports:
        return "before its first step"
    last = reports[-1]
    return f"after step {last['step']} (workload {last['assigned_workload']:g})"


def kill_run(proc: subprocess.Popen, group: CpuQuotaGroup) -> None:
    """Kill a profiled run: its process group, and whatever else is left in its quota cgroup."""
    kill_group(proc.pid)
    group.kill_all()


def stop_run(proc: subprocess.Popen, group: CpuQuotaGroup) -> None:
    """Kill a profiled run (:func:`kill_run`) and wait a moment for its process to go."""
    kill_run(proc, group)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)

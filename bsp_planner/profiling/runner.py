"""The grid runner: every task's stressor at every (CPU level, workload size), `repeats` times.

Rows go to a profile CSV (``task,workload,cpu_millicores,duration_s,repeat``, the format
:mod:`bsp_planner.inputs.profiles` reads), one ``write`` + ``fsync`` per row, so an interrupted run (Ctrl-C, a
crash, a reboot) leaves a valid file holding every run that finished. Running the same command again
resumes: cells (task, workload, cpu, repeat) already in the file are skipped.

A failed run (non-zero exit, timeout) writes no profile row; it is logged to ``<stem>.failures.csv``
beside the profile (``task,workload,cpu_millicores,repeat,reason,date``, a log of every failed attempt),
reported at the end, and retried by the next run. ``<stem>.meta.json`` records where and how the profile
was measured, per session (:mod:`.profile_meta`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.console import Console

from ..core import atomic
from ..core.errors import InputError
from ..core.outputs import check_output_file
from ..inputs.job import Job, Task
from ..inputs.profiles import (
    PROFILE_COLUMNS,
    metadata_path,
    read_metadata,
    read_profile_rows,  # noqa: F401  (the k8s profiling tests read profiles as R.read_profile_rows)
)
from .grid import (
    DEFAULT_TIMEOUT_S,
    Cell,
    Failure,
    Grid,
    GridReport,
    level_text,
    plan_cells,
    select_tasks,
    validate_grid,
)
from .process import ProcessSteps
from .profile_files import (
    FAILURE_COLUMNS,
    append_line,
    csv_line,
    ensure_csv,
    failures_path,
    measured_cells,
)
from .profile_meta import (
    check_compatible,
    close_session,
    finish_meta,
    host_info,
    load_avg_1m,
    merge_meta,
    new_session,
    now_text,
    warn_if_appending_another,
)
from .progress import GridProgress
from .results import RunResult


class Backend(Protocol):
    name: str

    def check(self, tasks: Sequence[Task], job_path: Path | None = None) -> None: ...

    def info(self) -> dict: ...

    def run(self, task: Task, workload: float, cpu_millicores: float, timeout_s: float) -> RunResult: ...


# -- running -----------------------------------------------------------------------------------------
def run_grid(
    job: Job,
    out: str | Path,
    grid: Grid,
    backend: Backend,
    *,
    tasks: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    process_steps: ProcessSteps | None = None,
    progress: bool = True,
    on_row: Callable[[Cell, RunResult], None] | None = None,
) -> GridReport:
    """Measure every missing cell of `grid` for the job's tasks into the profile `out` (resumable).

    `process_steps`: the warm-up and measured steps per workload of a `process` task (see
    :mod:`bsp_planner.profiling.process`); `timeout_s` bounds one run, or for a process one step."""
    out = Path(out)
    steps = process_steps or ProcessSteps()
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"expected a positive number of seconds, got {timeout_s!r}", field="--timeout")
    grid = validate_grid(grid)
    selected = select_tasks(job, tasks)
    processes = [t.name for t in selected if t.kind == "process"]
    if processes and not callable(getattr(backend, "run_process", None)):  # before any run
        raise InputError(
            f"task(s) {', '.join(processes)} are long-running processes, which the {backend.name} backend cannot "
            "profile; profile them with the local backend (--backend local), or leave them out with --tasks",
            field="--backend",
        )
    check_profile_path(out)
    meta, measured, backend_info = _open_profile(out, job, selected, grid, backend, steps)

    cells = plan_cells(selected, grid)
    todo = [c for c in cells if c not in measured]
    report = GridReport(profile=out, planned=len(cells), skipped=len(cells) - len(todo))
    ensure_csv(out, PROFILE_COLUMNS)
    session = new_session(grid, selected, timeout_s, report)
    meta = merge_meta(meta, job, selected, grid, host_info(), backend_info, timeout_s, steps)
    meta.setdefault("sessions", []).append(session)
    finish_meta(meta, out)
    atomic.write_json(metadata_path(out), meta)

    started = time.monotonic()
    loads: list[float] = []  # the 1-minute load average after each run: how busy the host was
    bar = GridProgress(todo) if progress and todo else None
    warned: set[str] = set()  # tasks already warned about (self_sized)
    if bar is not None and hasattr(backend, "on_progress"):
        backend.on_progress = bar.note  # a process's steps as they come: a long cell is seen moving
    streaks = FailureStreaks()
    try:
        for batch in plan_batches(todo, {t.name: t for t in selected}):
            if batch.task.name in streaks.given_up:
                continue
            if bar:
                bar.start(batch.cells[0])
            results = run_batch(backend, batch, timeout_s, steps)
            say = bar.progress.console.print if bar else Console(stderr=True).print
            if (stop := streaks.add(batch.task.name, [r for _, r in results])) is not None:
                say(f"[red]{stop}[/]", highlight=False)
                if callable(abandon := getattr(backend, "abandon", None)):
                    abandon(batch.task.name)  # a backend that runs cells ahead drops the task's
            for cell, result in results:
                _record(out, cell, result, report)
                if (note := self_sized(cell, result, warned)) is not None:
                    say(f"[yellow]warning[/]: {note}", highlight=False)
                if (load := load_avg_1m()) is not None:
                    loads.append(load)
                if on_row:
                    on_row(cell, result)
                if bar:
                    bar.done(cell, result)
    except KeyboardInterrupt:
        report.interrupted = True
        session["interrupted"] = True
        raise
    finally:
        if bar:
            bar.stop()
        report.wall_s = time.monotonic() - started
        close_session(session, report, loads)
        finish_meta(meta, out)
        atomic.write_json(metadata_path(out), meta)
    return report


GIVE_UP_AFTER = 3  # a task's first runs failing the same way this many times: its other cells are not run


class FailureStreaks:
    """Stops a task early: when its first GIVE_UP_AFTER runs of this session all fail with the same reason
    (a missing script, a bad argument), the rest would too. Its other cells are left out of this session
    (still missing: the next session runs them). Timeouts do not count: they depend on the cell."""

    def __init__(self) -> None:
        self.reasons: dict[str, list[str]] = {}  # task -> why each of its runs failed, while none succeeded
        self.succeeded: set[str] = set()
        self.given_up: set[str] = set()

    def add(self, name: str, results: Sequence[RunResult]) -> str | None:
        """Count one start of task `name` (its cells' results); the message to show when it is given up."""
        if any(r.ok for r in results):
            self.succeeded.add(name)
        if name in self.succeeded or name in self.given_up or not results:
            return None
        if "timeout" in results[0].reason:  # depends on the cell (more work, less CPU): another may finish
            self.reasons.pop(name, None)
            return None
        reasons = self.reasons.setdefault(name, [])
        reasons.append(results[0].reason)
        if len(reasons) < GIVE_UP_AFTER or len(set(reasons)) != 1:
            return None
        self.given_up.add(name)
        return (
            f"task '{name}': its first {len(reasons)} runs failed the same way ({reasons[0]}); its other cells "
            f"are not run{path_hint(reasons[0])}; fix it and run the same command again to measure them"
        )


def path_hint(reason: str) -> str:
    """A hint for a failure that looks like a relative path the program could not find."""
    if "No such file" in reason or "can't open file" in reason or "not found" in reason:
        return (
            " (a relative path? the program runs in a scratch folder; relative paths in `command`/`process` "
            "resolve against the job file's folder only where they name an existing file there, and "
            "{job_dir} names that folder: docs/tasks.md)"
        )
    return ""


def self_sized(cell: Cell, result: RunResult, warned: set[str]) -> str | None:
    """The warning for a command task that reported another workload than the cell's (once per task, in
    `warned`): it sizes its own work, so every cell of it times the same work and the profile comes out flat."""
    name, workload, cpu, _ = cell
    got = result.reported_workload
    if not result.ok or got is None or name in warned or math.isclose(got, workload, rel_tol=1e-9, abs_tol=0.5):
        return None
    warned.add(name)
    return (
        f"task '{name}' reported workload {got:g} where the profiler assigned {workload:g} (at {cpu:g}m): a program "
        "that sizes its own work times the same work in every cell, and its profile comes out flat; size each "
        "step by {workload} (or $BSP_WORKLOAD) when $BSP_SYNC is 'profile'"
    )


def _open_profile(
    out: Path, job: Job, selected: list[Task], grid: Grid, backend: Backend, steps: ProcessSteps
) -> tuple[dict, set[Cell], dict]:
    """(metadata, cells already measured, backend info) of the profile to write or resume, after checking
    that the backend can run (stress-ng, programs, cgroups) and that resuming would measure the same thing."""
    meta_file = metadata_path(out)
    meta = read_metadata(out)
    if out.exists():
        ensure_csv(out, PROFILE_COLUMNS)
    measured = measured_cells(out)
    backend.check(selected, job.path)  # stress-ng present, stressors known, cgroups writable
    backend_info = backend.info()
    check_compatible(meta, selected, host_info(), backend_info, measured, meta_file, steps)
    if measured:
        warn_if_appending_another(meta, job, grid, meta_file)
    return meta, measured, backend_info


@dataclass(frozen=True)
class Batch:
    """Cells measured by one start of a program: one cell, or a process task's missing workloads at one
    CPU level and repeat (one start per CPU level: see :mod:`bsp_planner.profiling.process`)."""

    task: Task
    cells: tuple[Cell, ...]


def plan_batches(todo: Sequence[Cell], tasks: dict[str, Task]) -> list[Batch]:
    """`todo` (in the runner's order) as batches, each process batch where its first cell was."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in todo:
        name, _, cpu, repeat = cell
        groups.setdefault((name, cpu, repeat) if tasks[name].kind == "process" else cell, []).append(cell)
    return [Batch(tasks[cells[0][0]], tuple(cells)) for cells in groups.values()]


def run_batch(backend: Backend, batch: Batch, timeout_s: float, steps: ProcessSteps) -> list[tuple[Cell, RunResult]]:
    """Run one batch: each of its cells with its result."""
    task = batch.task
    if task.kind == "process":
        cpu = batch.cells[0][2]
        results = backend.run_process(task, [c[1] for c in batch.cells], cpu, timeout_s, steps)  # type: ignore[attr-defined]
        return [(c, results[c[1]]) for c in batch.cells]
    (cell,) = batch.cells
    return [(cell, backend.run(task, cell[1], cell[2], timeout_s))]


def check_profile_path(out: Path, what: str = "profile") -> None:
    if out.suffix.lower() != ".csv":
        raise InputError(f"expected a .csv path for the {what}", path=out, field="--out")
    if out.exists() and not out.is_file():
        raise InputError(f"expected a file path for the {what}, this is a directory", path=out, field="--out")
    check_output_file(out, "--out")


def _record(out: Path, cell: Cell, result: RunResult, report: GridReport) -> None:
    """Append a measured run to the profile, or a failed one to its failures file."""
    name, workload, cpu, repeat = cell
    if result.ok:
        append_line(out, csv_line([name, level_text(workload), level_text(cpu), f"{result.duration_s:.4f}", repeat]))
        report.measured += 1
        return
    f = Failure(name, workload, cpu, repeat, result.reason or "failed", now_text())
    fail_file = failures_path(out)
    if not fail_file.exists():
        ensure_csv(fail_file, FAILURE_COLUMNS)
    append_line(fail_file, csv_line([name, level_text(workload), level_text(cpu), repeat, f.reason, f.date]))
    report.failures.append(f)

"""The grid runner: every task's stressor at every (CPU level, workload size), `repeats` times.

Rows go to a profile CSV (``task,workload,cpu_millicores,duration_s,repeat``, the format
:mod:`bsp_planner.profiles` reads), one ``write`` + ``fsync`` per row, so an interrupted run (Ctrl-C, a
crash, a reboot) leaves a valid file holding every run that finished. Running the same command again
resumes: cells (task, workload, cpu, repeat) already in the file are skipped.

A failed run (non-zero exit, timeout) writes no profile row; it is logged to ``<stem>.failures.csv``
beside the profile (``task,workload,cpu_millicores,repeat,reason,date``, a log of every failed attempt),
reported at the end, and retried by the next run. ``<stem>.meta.json`` records where and how the profile
was measured: host, CPU, kernel, stress-ng, grid, ops per unit and workers per task, the backend, and per
session the dates and the 1-minute load average at its start and end (and its mean and maximum over
the session's runs: other work on the host is the main source of noise).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InputError, InputWarning
from ..job import Job, Task
from ..outputs import check_output_file
from ..profiles import PROFILE_COLUMNS, metadata_path, read_metadata, read_profile_rows
from .cgroups import CFS_PERIOD_US, MIN_QUOTA_US
from .local import cpu_model
from .process import ProcessSteps
from .results import RunResult

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_CPU_MILLICORES = (250, 500, 750, 1000, 1500, 2000)
DEFAULT_WORKLOADS = (10, 20, 30, 40, 50)
DEFAULT_REPEATS = 2
DEFAULT_TIMEOUT_S = 60.0
FAILURE_COLUMNS = ("task", "workload", "cpu_millicores", "repeat", "reason", "date")
META_FORMAT = 1

Cell = tuple[str, float, float, int]  # (task, workload, cpu_millicores, repeat)
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
)


class Backend(Protocol):
    name: str

    def check(self, tasks: Sequence[Task], job_path: Path | None = None) -> None: ...

    def info(self) -> dict: ...

    def run(self, task: Task, workload: float, cpu_millicores: float, timeout_s: float) -> RunResult: ...


# -- the grid ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grid:
    cpu_millicores: tuple[float, ...] = DEFAULT_CPU_MILLICORES
    workloads: tuple[float, ...] = DEFAULT_WORKLOADS
    repeats: int = DEFAULT_REPEATS

    @property
    def size(self) -> int:
        return len(self.cpu_millicores) * len(self.workloads) * self.repeats

    def as_dict(self) -> dict:
        return {
            "cpu_millicores": [_num(c) for c in self.cpu_millicores],
            "workloads": [_num(w) for w in self.workloads],
            "repeats": self.repeats,
        }


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _fmt(x: float) -> str:
    return str(_num(x))


def parse_levels(text: str | Sequence[float], option: str) -> tuple[float, ...]:
    """A comma-separated list of positive numbers (``250,500,1000``), as the CLI takes grid levels."""
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise InputError(f"expected a comma-separated list of numbers, got {text!r}", field=option)
        values = []
        for p in parts:
            try:
                values.append(float(p))
            except ValueError:
                raise InputError(f"expected a number, got {p!r} (in {text!r})", field=option) from None
    else:
        values = [float(v) for v in text]
    return tuple(values)


def validate_grid(grid: Grid, cores: int | None = None) -> Grid:
    """Check a grid before any run: at least 2 distinct positive levels on each axis (the profile
    interpolates between them), CPU levels the kernel can enforce, whole repeats. Returns it sorted."""
    for option, values in (("--cpu", grid.cpu_millicores), ("--workloads", grid.workloads)):
        for v in values:
            if not math.isfinite(v) or v <= 0:
                raise InputError(f"expected positive numbers, got {_fmt(v) if math.isfinite(v) else v}", field=option)
        dupes = sorted({v for v in values if list(values).count(v) > 1})
        if dupes:
            raise InputError(f"duplicate level(s) {', '.join(_fmt(d) for d in dupes)}", field=option)
        if len(values) < 2:
            raise InputError(
                f"expected at least 2 levels (the profile interpolates between them), got {len(values)}",
                field=option,
            )
    min_m = MIN_QUOTA_US * 1000 / CFS_PERIOD_US
    for c in grid.cpu_millicores:
        if c < min_m:
            raise InputError(
                f"{_fmt(c)}m is below the smallest CPU quota the kernel accepts ({min_m:g}m = "
                f"{MIN_QUOTA_US} us per {CFS_PERIOD_US} us)",
                field="--cpu",
            )
        if not float(c).is_integer():
            raise InputError(f"expected whole millicores, got {c:g}", field="--cpu")
    if not isinstance(grid.repeats, int) or isinstance(grid.repeats, bool) or grid.repeats < 1:
        raise InputError(f"expected a whole number >= 1, got {grid.repeats!r}", field="--repeats")
    return Grid(tuple(sorted(grid.cpu_millicores)), tuple(sorted(grid.workloads)), grid.repeats)


def select_tasks(job: Job, names: Sequence[str] | None) -> list[Task]:
    if not names:
        return list(job.tasks)
    wanted = []
    for n in names:
        if n in wanted:
            raise InputError(f"task '{n}' is named twice", field="--tasks")
        wanted.append(n)
    for n in wanted:
        job.task(n)  # unknown name: InputError listing the job's tasks
    return [t for t in job.tasks if t.name in wanted]


# -- files -------------------------------------------------------------------------------------------
def failures_path(profile_path: str | Path) -> Path:
    p = Path(profile_path)
    return p.with_name(p.stem + ".failures.csv")


def _csv_line(values: Sequence) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue().encode()


def _append(path: Path, data: bytes) -> None:
    """One write on an O_APPEND descriptor, then fsync: the row is in the file whole, or not at all."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_csv(path: Path, columns: Sequence[str]) -> None:
    """Create the file with its header, or check an existing one (dropping a torn last line)."""
    header = ",".join(columns)
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(header + "\n")
        os.replace(tmp, path)
        return
    data = path.read_bytes()
    first = data.split(b"\n", 1)[0].decode(errors="replace").strip()
    if tuple(h.strip() for h in first.split(",")) != tuple(columns):
        raise InputError(f"expected the header {header}; is this the right file?", path=path, line=1)
    if not data.endswith(b"\n"):
        # a row torn by a crash mid-write: drop it (its cell is measured again)
        keep = data[: data.rfind(b"\n") + 1] if b"\n" in data else (header + "\n").encode()
        with open(path, "r+b") as fh:
            fh.truncate(len(keep))


def _has_rows(path: Path) -> bool:
    with path.open() as fh:
        next(fh, None)
        return any(line.strip() for line in fh)


def measured_cells(profile_path: Path) -> set[Cell]:
    """The cells a (possibly partial) profile already holds."""
    if not profile_path.exists() or not _has_rows(profile_path):
        return set()
    return {
        (r["task"], float(r["workload"]), float(r["cpu_millicores"]), int(r["repeat"]))
        for r in read_profile_rows(profile_path)
    }


def load_avg_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _now() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def host_info() -> dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": platform.platform(),
    }


def _task_meta(t: Task, steps: ProcessSteps) -> dict:
    meta = t.identity()
    if "ops_per_unit" in meta:
        meta["ops_per_unit"] = _num(meta["ops_per_unit"])
    if t.kind == "process":
        meta.update(steps.as_dict())
    return meta


def _check_compatible(
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
        for key in ("backend", "cpu_shares"):
            if key in meta and meta[key] != backend.get(key):
                raise InputError(
                    f"the profile was measured with {key}={meta[key]!r}, this run would use "
                    f"{backend.get(key)!r}; measure into a new --out",
                    path=meta_file,
                    field=key,
                )
    old_tasks = meta.get("tasks", {})
    have_rows = {c[0] for c in measured}
    for t in tasks:
        old = old_tasks.get(t.name)
        if old is None or t.name not in have_rows:
            continue
        new = _task_meta(t, steps)
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
    for key in ("cpu_model", "cores"):
        if key in meta and meta[key] != host[key]:
            raise InputError(
                f"the profile was measured on a machine with {key}={meta[key]!r}, this one has "
                f"{host[key]!r}; measure into a new --out",
                path=meta_file,
                field=key,
            )


# -- running -----------------------------------------------------------------------------------------
@dataclass
class Failure:
    task: str
    workload: float
    cpu_millicores: float
    repeat: int
    reason: str
    date: str


@dataclass
class GridReport:
    profile: Path
    planned: int  # cells of the requested grid
    skipped: int  # already in the file
    measured: int = 0
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    wall_s: float = 0.0

    @property
    def missing(self) -> int:
        return self.planned - self.skipped - self.measured


def plan_cells(tasks: Sequence[Task], grid: Grid) -> list[Cell]:
    """Repeat-major order: a whole first pass over the grid before any second repeat, so a partial
    profile is soon a complete one-repeat grid, and the repeats of a cell are minutes apart (less
    correlated noise)."""
    return [
        (t.name, float(w), float(c), r)
        for r in range(grid.repeats)
        for t in tasks
        for w in grid.workloads
        for c in grid.cpu_millicores
    ]


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
    console: Console | None = None,
    on_row: Callable[[Cell, RunResult], None] | None = None,
) -> GridReport:
    """Measure every missing cell of `grid` for the job's tasks into the profile `out` (resumable).

    `process_steps`: the warm-up and measured steps per workload of a `process` task (see
    :mod:`bsp_planner.profiling.process`); `timeout_s` bounds one run, or for a process one step."""
    out = Path(out)
    steps = process_steps or ProcessSteps()
    _check_timeout(timeout_s)
    grid = validate_grid(grid)
    selected = select_tasks(job, tasks)
    _check_process_support(backend, selected)
    _check_profile_path(out)
    meta, measured, backend_info = _open_profile(out, job, selected, grid, backend, steps)

    cells = plan_cells(selected, grid)
    todo = [c for c in cells if c not in measured]
    report = GridReport(profile=out, planned=len(cells), skipped=len(cells) - len(todo))
    _ensure_csv(out, PROFILE_COLUMNS)
    session = _new_session(grid, selected, timeout_s, report)
    meta = _merge_meta(meta, job, selected, grid, host_info(), backend_info, timeout_s, steps)
    meta.setdefault("sessions", []).append(session)
    _finish_meta(meta, out)
    _write_json(metadata_path(out), meta)

    started = time.monotonic()
    loads: list[float] = []  # the 1-minute load average after each run: how busy the host was
    bar = _Progress(todo, console) if progress and todo else None
    try:
        for batch in plan_batches(todo, {t.name: t for t in selected}):
            if bar:
                bar.start(batch.cells[0])
            for cell, result in run_batch(backend, batch, timeout_s, steps):
                _record(out, cell, result, report)
                load = load_avg_1m()
                if load is not None:
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
        _close_session(session, report, loads)
        _finish_meta(meta, out)
        _write_json(metadata_path(out), meta)
    return report


def _check_timeout(timeout_s: float) -> None:
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"expected a positive number of seconds, got {timeout_s!r}", field="--timeout")


def _check_process_support(backend: Backend, selected: Sequence[Task]) -> None:
    """Refuse, before any run, process tasks on a backend that cannot drive them."""
    processes = [t.name for t in selected if t.kind == "process"]
    if processes and not callable(getattr(backend, "run_process", None)):
        raise InputError(
            f"task(s) {', '.join(processes)} are long-running processes, which the {backend.name} backend cannot "
            "profile; profile them with the local backend (--backend local), or leave them out with --tasks",
            field="--backend",
        )


def _open_profile(
    out: Path, job: Job, selected: list[Task], grid: Grid, backend: Backend, steps: ProcessSteps
) -> tuple[dict, set[Cell], dict]:
    """(metadata, cells already measured, backend info) of the profile to write or resume, after checking
    that the backend can run (stress-ng, programs, cgroups) and that resuming would measure the same thing."""
    meta_file = metadata_path(out)
    meta = read_metadata(out)
    if out.exists():
        _ensure_csv(out, PROFILE_COLUMNS)
    measured = measured_cells(out)
    backend.check(selected, job.path)  # stress-ng present, stressors known, cgroups writable
    backend_info = backend.info()
    _check_compatible(meta, selected, host_info(), backend_info, measured, meta_file, steps)
    if measured:
        _warn_if_appending_another(meta, job, grid, meta_file)
    return meta, measured, backend_info


@dataclass(frozen=True)
class Batch:
    """Cells measured by one start of a program: one cell, or a process task's missing workloads at one
    CPU level and repeat (one start per CPU level: see :mod:`bsp_planner.profiling.process`)."""

    task: Task
    cells: tuple[Cell, ...]


def plan_batches(todo: Sequence[Cell], tasks: dict[str, Task]) -> list[Batch]:
    """`todo` (in the runner's order) as batches, each process batch where its first cell was."""
    batches: list[Batch] = []
    where: dict[tuple[str, float, int], int] = {}
    for cell in todo:
        name, _, cpu, repeat = cell
        task = tasks[name]
        key = (name, cpu, repeat)
        if task.kind == "process" and key in where:
            i = where[key]
            batches[i] = Batch(task, (*batches[i].cells, cell))
            continue
        if task.kind == "process":
            where[key] = len(batches)
        batches.append(Batch(task, (cell,)))
    return batches


def run_batch(backend: Backend, batch: Batch, timeout_s: float, steps: ProcessSteps) -> list[tuple[Cell, RunResult]]:
    """Run one batch: each of its cells with its result."""
    task = batch.task
    if task.kind == "process":
        cpu = batch.cells[0][2]
        results = backend.run_process(task, [c[1] for c in batch.cells], cpu, timeout_s, steps)  # type: ignore[attr-defined]
        return [(c, results[c[1]]) for c in batch.cells]
    (cell,) = batch.cells
    return [(cell, backend.run(task, cell[1], cell[2], timeout_s))]


def _check_profile_path(out: Path) -> None:
    if out.suffix.lower() != ".csv":
        raise InputError("expected a .csv path for the profile", path=out, field="--out")
    if out.exists() and not out.is_file():
        raise InputError("expected a file path for the profile, this is a directory", path=out, field="--out")
    check_output_file(out, "--out")


def _new_session(grid: Grid, selected: Sequence[Task], timeout_s: float, report: GridReport) -> dict[str, Any]:
    """This invocation's entry in the metadata's `sessions`, completed by _close_session."""
    return {
        "started": _now(),
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


def _record(out: Path, cell: Cell, result: RunResult, report: GridReport) -> None:
    """Append a measured run to the profile, or a failed one to its failures file."""
    name, workload, cpu, repeat = cell
    if result.ok:
        _append(out, _csv_line([name, _fmt(workload), _fmt(cpu), f"{result.duration_s:.4f}", repeat]))
        report.measured += 1
        return
    f = Failure(name, workload, cpu, repeat, result.reason or "failed", _now())
    fail_file = failures_path(out)
    if not fail_file.exists():
        _ensure_csv(fail_file, FAILURE_COLUMNS)
    _append(fail_file, _csv_line([name, _fmt(workload), _fmt(cpu), repeat, f.reason, f.date]))
    report.failures.append(f)


def _close_session(session: dict[str, Any], report: GridReport, loads: list[float]) -> None:
    session.update(
        finished=_now(),
        load_average_1m_end=load_avg_1m(),
        measured=report.measured,
        failed=len(report.failures),
        wall_s=round(report.wall_s, 1),
        load_average_1m_mean=round(sum(loads) / len(loads), 2) if loads else None,
        load_average_1m_max=max(loads) if loads else None,
    )


def _warn_if_appending_another(meta: dict, job: Job, grid: Grid, meta_file: Path) -> None:
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


def _merge_meta(
    meta: dict,
    job: Job,
    tasks: list[Task],
    grid: Grid,
    host: dict,
    backend: dict,
    timeout_s: float,
    steps: ProcessSteps,
) -> dict:
    meta = dict(meta)
    meta["format"] = META_FORMAT
    meta.update(host)
    meta.update(backend)
    this_job = {"name": job.name, "file": str(job.path) if job.path else None}
    jobs = list(meta.get("jobs") or ([meta["job"]] if isinstance(meta.get("job"), dict) else []))
    names = [j.get("name") if isinstance(j, dict) else None for j in jobs]
    if job.name in names:
        jobs[names.index(job.name)] = this_job
    else:
        jobs.append(this_job)
    meta["jobs"] = jobs
    meta["job"] = jobs[0]  # the job the profile was first measured for: appending never rewrites it
    old = meta.get("grid", {})
    meta["grid"] = {
        "cpu_millicores": sorted({*old.get("cpu_millicores", []), *grid.as_dict()["cpu_millicores"]}),
        "workloads": sorted({*old.get("workloads", []), *grid.as_dict()["workloads"]}),
        "repeats": max(old.get("repeats", 0), grid.repeats),
        "timeout_s": timeout_s,
    }
    task_meta = dict(meta.get("tasks", {}))
    for t in tasks:
        task_meta[t.name] = _task_meta(t, steps)
    meta["tasks"] = task_meta
    meta["ops_per_unit"] = {k: v["ops_per_unit"] for k, v in task_meta.items() if "ops_per_unit" in v}
    meta["workers"] = {k: v["workers"] for k, v in task_meta.items()}
    meta["duration"] = (
        "wall-clock seconds of the task's process (stress-ng or its command), in its own cgroup with a CFS quota of "
        "cpu_millicores * 100 us per 100000 us; for a long-running process task, the median wall seconds of its "
        "measure_steps step blocks at that workload after warmup_steps discarded ones, the process started once per "
        "CPU level and repeat in such a cgroup"
    )
    return meta


def _finish_meta(meta: dict, out: Path) -> None:
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


def _cell_text(cell: Cell) -> str:
    name, w, c, r = cell
    return f"{name} w={_fmt(w)} {_fmt(c)}m #{r}"


class _Progress:
    """rich progress with an ETA that weighs each run by its expected cost (workload / CPU), since a
    run at 250m and workload 50 takes ~40x one at 2000m and workload 10."""

    LOG_EVERY_S = 60.0

    def __init__(self, todo: list[Cell], console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[cell]:<34}"),
            BarColumn(),
            TextColumn("{task.fields[runs]}/{task.fields[n]} runs"),
            TextColumn("[red]{task.fields[fails]}[/] failed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            speed_estimate_period=600,
        )
        self.total = sum(self.weight(c) for c in todo)
        self.task = self.progress.add_task("profile", total=self.total, cell="", runs=0, n=len(todo), fails=0)
        self.runs = 0
        self.fails = 0
        self.done_weight = 0.0
        # no live bar without a terminal (nohup ... > log): a plain line every LOG_EVERY_S instead
        self.plain = not self.console.is_terminal
        self.t0 = self.last_log = time.monotonic()
        self.progress.start()

    @staticmethod
    def weight(cell: Cell) -> float:
        _, w, c, _ = cell
        return w / c

    def start(self, cell: Cell) -> None:
        self.progress.update(self.task, cell=_cell_text(cell))

    def done(self, cell: Cell, result: RunResult) -> None:
        self.runs += 1
        if not result.ok:
            self.fails += 1
            self.progress.console.print(f"[red]failed[/] {_cell_text(cell)}: {result.reason}", highlight=False)
        self.progress.update(self.task, advance=self.weight(cell), runs=self.runs, fails=self.fails)
        self.done_weight += self.weight(cell)
        now = time.monotonic()
        if self.plain and (now - self.last_log >= self.LOG_EVERY_S or self.runs == self.progress.tasks[0].fields["n"]):
            self.last_log = now
            elapsed = now - self.t0
            eta = elapsed * (self.total - self.done_weight) / self.done_weight if self.done_weight else 0.0
            self.console.print(
                f"{self.runs}/{self.progress.tasks[0].fields['n']} runs, {self.fails} failed, "
                f"{elapsed / 60:.1f} min elapsed, ETA {eta / 60:.1f} min (last: {_cell_text(cell)})",
                highlight=False,
            )

    def stop(self) -> None:
        self.progress.stop()

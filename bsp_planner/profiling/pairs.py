"""`profile pairs`: measure how much each task slows down while another task co-runs on this host.

Every task runs under its own CFS quota of `cpu_millicores` in its own cgroup (as `profile run`'s
runs do), at one `workload`. Per repeat and task: one run alone, then one run beside each other task
(the co-runner started first, on a workload large enough to outlast the run, and killed when the run
ends, so the whole timed run has company). A co-runner that ends first fails the cell.

Files (see pair_profiles.py): every timed run is appended to ``<stem>.runs.csv`` as it is measured,
so an interrupted profile resumes where it stopped; the summary ``<stem>.csv`` (median with / median
alone per ordered pair) and ``<stem>.meta.json`` are rewritten whole, atomically, at the end (also on
Ctrl-C). Runs at another CPU or workload in the runs file are refused (another --out).

Cost: repeats x tasks x tasks runs; the default job's 8 tasks at 1000m and workload 20 with 3 repeats
are 192 runs of about 1 s.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core import atomic
from ..core.errors import InputError
from ..inputs.job import Job, Task
from ..inputs.pair_profiles import PairRow, write_pair_profile
from ..inputs.profiles import metadata_path
from ..inputs.settings import MAX_MAGNITUDE
from .grid import level_text
from .process import kill_run
from .profile_files import append_line, csv_line, ensure_csv
from .profile_meta import close_session, host_info, load_avg_1m, now_text
from .results import RunResult

if TYPE_CHECKING:
    from .local import LocalBackend

RUN_COLUMNS = ("task", "co_task", "workload", "cpu_millicores", "repeat", "duration_s")
#: the co-runner's workload, in multiples of the timed run's: it must outlast the run it keeps company
CO_WORKLOAD_FACTOR = 20.0
#: how long the co-runner runs before the timed run starts (its stress-ng workers forked and busy)
CO_HEAD_START_S = 0.2

PairCell = tuple[str, str, int]  # (task, co_task or "" alone, repeat)


def runs_path(out: Path) -> Path:
    return out.with_name(out.stem + ".runs.csv")


@dataclass
class PairReport:
    out: Path
    planned: int
    skipped: int
    measured: int = 0
    failures: list[tuple[PairCell, str]] = field(default_factory=list)
    wall_s: float = 0.0
    pairs: int = 0  # rows in the summary


def plan_cells(names: Sequence[str], repeats: int) -> list[PairCell]:
    """Per repeat and task: alone first, then beside each other task (alone runs interleaved with the
    co-runs, so a host whose load drifts moves both the same way)."""
    return [(a, b, r) for r in range(repeats) for a in names for b in ("", *[n for n in names if n != a])]


def _read_runs(path: Path, workload: float, cpu: float) -> dict[PairCell, float]:
    if not path.exists():
        return {}
    ensure_csv(path, RUN_COLUMNS)  # checks the header, drops a torn last row
    done: dict[PairCell, float] = {}
    with path.open() as fh:
        for line, rec in enumerate(csv.DictReader(fh), start=2):
            try:
                w, c, d = float(rec["workload"]), float(rec["cpu_millicores"]), float(rec["duration_s"])
                cell = (rec["task"], rec["co_task"], int(rec["repeat"]))
            except (TypeError, ValueError):
                raise InputError(
                    "expected numbers in workload, cpu_millicores, repeat, duration_s", path=path, line=line
                ) from None
            if not (math.isfinite(d) and 0 < d <= MAX_MAGNITUDE):
                raise InputError(
                    f"expected a positive number of seconds, got {rec['duration_s']!r}: delete the line to measure "
                    "the run again",
                    path=path,
                    line=line,
                    field="duration_s",
                )
            if abs(w - workload) > 1e-9 or abs(c - cpu) > 1e-9:
                raise InputError(
                    f"these runs are at {c:g}m and workload {w:g}, not {cpu:g}m and {workload:g}: pass the same "
                    "--cpu and --workload to resume, or another --out",
                    path=path,
                    line=line,
                )
            done[cell] = d
    return done


def _earlier_sessions(path: Path) -> list[dict]:
    """The sessions a resumed pair profile's metadata already lists (none for a new one)."""
    if not path.exists():
        return []
    try:
        sessions = json.loads(path.read_text()).get("sessions", [])
    except (ValueError, AttributeError, UnicodeDecodeError):
        raise InputError("expected a pair profile's metadata (JSON); move it away to start afresh", path=path) from None
    return list(sessions) if isinstance(sessions, list) else []


def summarise(runs: dict[PairCell, float], names: Sequence[str], workload: float, cpu: float) -> list[PairRow]:
    """Ordered pairs with at least one run alone and one beside: slowdown = median beside / median alone."""
    rows = []
    for a in names:
        alone = [d for (t, co, _), d in runs.items() if t == a and co == ""]
        if not alone:
            continue
        solo = float(np.median(alone))
        for b in names:
            beside = [d for (t, co, _), d in runs.items() if t == a and co == b]
            if b == a or not beside:
                continue
            co = float(np.median(beside))
            rows.append(PairRow(a, b, co / solo, solo, co, len(beside), cpu, workload))
    return rows


def co_run(
    backend: LocalBackend, task: Task, co_task: Task, workload: float, cpu: float, timeout_s: float
) -> RunResult:
    """One timed run of `task` while `co_task` runs beside it, each under its own `cpu`-millicore quota."""
    args = co_task.stress_ng_args(workload * CO_WORKLOAD_FACTOR, stress_ng=backend.stress_ng_path())
    with backend._group(co_task, cpu) as group:
        if backend.cpu_shares is not None:
            group.set_weight(backend.cpu_shares)
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=backend._cwd(),
            preexec_fn=group.preexec_fn,
            start_new_session=True,
        )
        try:
            time.sleep(CO_HEAD_START_S)
            result = backend.run(task, workload, cpu, timeout_s)
            finished_first = proc.poll() is not None
        finally:
            kill_run(proc, group)
            proc.wait()
    if result.ok and finished_first:
        return RunResult(None, f"co-runner {co_task.name} ended before the run did (raise its ops_per_unit)")
    return result


def measure_pairs(
    job: Job,
    out: Path,
    tasks: Sequence[Task],
    backend: LocalBackend,
    *,
    cpu_millicores: float,
    workload: float,
    repeats: int,
    timeout_s: float,
    progress: bool = True,
) -> PairReport:
    """Measure the missing runs into `out`'s runs file, then write the summary and metadata (resumable)."""
    from .progress import GridProgress

    names = [t.name for t in tasks]
    by_name = {t.name: t for t in tasks}
    runs_file = runs_path(out)
    runs = _read_runs(runs_file, workload, cpu_millicores)
    cells = plan_cells(names, repeats)
    todo = [c for c in cells if c not in runs]
    report = PairReport(out, planned=len(cells), skipped=len(cells) - len(todo))
    backend.check(tasks, job.path)  # a missing stress-ng is refused before any file is made
    ensure_csv(runs_file, RUN_COLUMNS)
    meta = {
        "format": 1,
        **host_info(),
        **backend.info(),
        "job": {"name": job.name, "file": str(job.path.name) if job.path else None},
        "cpu_millicores": cpu_millicores,
        "workload": workload,
        "repeats": repeats,
        "co_workload_factor": CO_WORKLOAD_FACTOR,
        "note": "slowdown = median duration of task with co_task beside it / median alone; each task under its "
        "own cpu_millicores quota in its own cgroup, on this host",
        "sessions": _earlier_sessions(metadata_path(out)),
    }
    session: dict = {"started": now_text(), "load_average_1m_start": load_avg_1m(), "tasks": names}
    meta["sessions"].append(session)
    # the progress bar's cells are (label, workload, cpu, repeat)
    bar_cell = lambda c: (f"{c[0]}+{c[1]}" if c[1] else f"{c[0]} alone", workload, cpu_millicores, c[2])  # noqa: E731
    bar = GridProgress([bar_cell(c) for c in todo]) if progress and todo else None
    loads: list[float] = []
    started = time.monotonic()
    try:
        for cell in todo:
            a, b, r = cell
            if bar:
                bar.start(bar_cell(cell))
            if b:
                result = co_run(backend, by_name[a], by_name[b], workload, cpu_millicores, timeout_s)
            else:
                result = backend.run(by_name[a], workload, cpu_millicores, timeout_s)
            if result.ok and result.duration_s is not None:
                append_line(
                    runs_file,
                    csv_line([a, b, level_text(workload), level_text(cpu_millicores), r, f"{result.duration_s:.4f}"]),
                )
                runs[cell] = result.duration_s
                report.measured += 1
            else:
                report.failures.append((cell, result.reason))
            if (load := load_avg_1m()) is not None:
                loads.append(load)
            if bar:
                bar.done(bar_cell(cell), result)
    finally:
        if bar:
            bar.stop()
        report.wall_s = time.monotonic() - started
        rows = summarise(runs, names, workload, cpu_millicores)
        report.pairs = len(rows)
        if rows:
            write_pair_profile(out, rows)
        meta["pairs"] = len(rows)
        close_session(session, report, loads)
        session["interrupted"] = len(report.failures) + report.measured < len(todo)
        atomic.write_json(metadata_path(out), meta)
    return report

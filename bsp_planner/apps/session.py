"""How the example apps obtain a bsp-planner task session (docs/tasks.md).

Under a bsp-planner run (the coordinator sets ``BSP_RUN_ID`` in the process's environment) a program
joins it with ``bsp_planner.task.join()``. Started by hand it uses ``bsp_planner.task.local_session``: the
same API with no coordinator, the reports kept in a JSONL file. Until the task library ships
``local_session``, :class:`StandaloneSession` below stands in for it with the same API.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self


class StandaloneSession:
    """``session.step(step, workload=...)`` with no coordinator: times each step (wall and CPU seconds
    of this process) and appends the report ``{"task", "step", "workload", "next_workload", "wall_s",
    "cpu_s"}`` as one JSON line to `reports` (if given), flushed as it goes. Never blocks."""

    first_step = 0
    ended = False

    def __init__(self, task_name: str, reports: str | Path | None = None) -> None:
        self.task_name = task_name
        self.reports_path = Path(reports) if reports is not None else None
        self.reports: list[dict] = []

    def assigned_workload(self, step: int) -> float | None:
        return None

    @contextlib.contextmanager
    def step(self, step: int, workload: float, next_workload: float | None = None) -> Iterator[None]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = usage.ru_utime + usage.ru_stime
        wall0 = time.perf_counter()
        yield
        wall_s = time.perf_counter() - wall0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        report = {
            "task": self.task_name,
            "step": step,
            "workload": float(workload),
            "next_workload": next_workload,
            "wall_s": wall_s,
            "cpu_s": usage.ru_utime + usage.ru_stime - cpu0,
        }
        self.reports.append(report)
        if self.reports_path is not None:
            with open(self.reports_path, "a") as fh:
                fh.write(json.dumps(report) + "\n")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.ended = True


def under_coordinator() -> bool:
    """True when a bsp-planner coordinator started this process (its environment names a run)."""
    return bool(os.environ.get("BSP_RUN_ID"))


def open_session(task_name: str, reports: str | Path | None = None, steps: int | None = None):
    """The session for this process: the run's (``task.join()``) under a coordinator, else a local one
    that appends its reports to `reports` (JSON lines) and ends after `steps` steps."""
    if under_coordinator():
        from bsp_planner import task  # needs only kazoo

        return task.join()
    try:
        from bsp_planner import task
    except ImportError:
        task = None
    if task is not None and hasattr(task, "local_session"):
        return task.local_session(task_name, reports_file=reports, steps=steps)
    return StandaloneSession(task_name, reports)


def run_ended_errors() -> tuple[type[BaseException], ...]:
    """The exception(s) a session raises when the run is over (none for a standalone session)."""
    try:
        from bsp_planner import task
    except ImportError:
        return ()
    ended = getattr(task, "RunEnded", None)
    return (ended,) if ended is not None else ()

"""How the example apps obtain a bsp-planner task session (docs/tasks.md).

Under a bsp-planner run (the coordinator sets ``BSP_RUN_ID`` in the process's environment) or started by
``bsp-planner profile run`` (``BSP_PROFILE``) a program joins with ``bsp_planner.task.join()``. Started by
hand it uses ``bsp_planner.task.local_session``: the same API with no coordinator, each report appended
to a JSON-lines file.
"""

from __future__ import annotations

import os
from pathlib import Path

from bsp_planner import task


def under_coordinator() -> bool:
    """True when bsp-planner started this process: a coordinator (its environment names a run) or the
    profiler (``BSP_PROFILE`` names its plan); ``task.join()`` then returns the matching session."""
    return bool(os.environ.get("BSP_RUN_ID") or os.environ.get(task.PROFILE_ENV))


def open_session(
    task_name: str, reports: str | Path | None = None, steps: int | None = None, workloads: list[float] | None = None
):
    """The session for this process: the run's (``task.join()``) under a coordinator, else a local one
    that appends its reports to `reports` (JSON lines), ends after `steps` steps and assigns `workloads`."""
    if under_coordinator():
        return task.join()
    return task.local_session(task_name, reports_file=reports, steps=steps, workloads=workloads)

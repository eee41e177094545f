"""The trace recorders' files (``python -m bsp_planner.apps.<app>.trace``): one ``<task>.csv`` per task
with the header ``workload``, as ``simulate --actual`` replays them."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_trace(folder: str | Path, prefix: str, workloads: np.ndarray, fmt: str) -> int:
    """`workloads` (steps, tasks) as ``<prefix><i>.csv`` in `folder`, each path printed; returns 0, the exit code."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, column in enumerate(workloads.T):
        np.savetxt(path := folder / f"{prefix}{i}.csv", column, fmt=fmt, header="workload", comments="")
        print(path)
    return 0

"""The trace recorders' files (``python -m bsp_planner.apps.<app>.trace``): one ``<task>.csv`` per task
with the header ``workload``, as ``simulate --actual`` replays them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write_trace(folder: str | Path, names: str | Sequence[str], workloads: np.ndarray, fmt: str) -> int:
    """`workloads` (steps, tasks) as ``<task>.csv`` in `folder`, each path printed; returns 0, the exit code.
    `names`: the tasks' names in column order, or a prefix (tasks ``<prefix>0``, ``<prefix>1``, ...)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(names, str):
        names = [f"{names}{i}" for i in range(workloads.shape[1])]
    for name, column in zip(names, workloads.T, strict=True):
        np.savetxt(path := folder / f"{name}.csv", column, fmt=fmt, header="workload", comments="")
        print(path)
    return 0

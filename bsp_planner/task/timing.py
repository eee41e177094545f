"""Timing one step's compute: wall seconds and CPU seconds (this process and its finished children)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .reports import check_report_workload


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class StepTimer:
    """What the ``with session.step(...) as st:`` block gets: the step, the workload the run assigns it
    (None where workloads are observed), and, once the block ended, its wall and CPU seconds. The program
    may set ``st.workload`` / ``st.next_workload`` inside the block when it knows them only then."""

    step: int
    assigned_workload: float | None = None
    workload: float | None = None
    next_workload: float | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    _t0: float = field(default=0.0, repr=False)
    _c0: float = field(default=0.0, repr=False)

    def start(self) -> None:
        self._c0 = cpu_seconds()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = max(0.0, cpu_seconds() - self._c0)

    def check_workloads(self, what: str) -> None:
        """Refuse (InputError naming `what`: task and step) a reported workload that is not a sane number."""
        for k in ("workload", "next_workload"):
            if getattr(self, k) is not None:
                setattr(self, k, check_report_workload(getattr(self, k), what, k))

    def report(self) -> dict:
        out = {"step": self.step, "wall_s": self.wall_s, "cpu_s": self.cpu_s}
        if self.workload is not None:
            out["workload"] = self.workload
        if self.next_workload is not None:
            out["next_workload"] = self.next_workload
        return out

"""The coordinator's own CPU share while its tasks saturate the machine (local backend, cgroup v1).

The tasks' groups sit in the run's group, whose weight is the largest (``--cpu-weight guaranteed``), so
that unrelated work cannot keep the tasks below their quotas. A coordinator left in the root group then
competes with that whole group with the weight of one process: while the quotas keep every CPU busy, it
gets a fraction of a percent, and a reconfiguration planned at 0.2 ms took up to 250 ms. Placed as a
member of the run's group instead (beside the tasks' groups, each weighing 1024 per worker) at a raised
priority (nice -5, weight 3121), it comes first whenever it has work, which is rare and short.

`RunGroupMembership.join(run_group)` moves every thread of this process there (new threads follow their
creator, and so do the processes started meanwhile); `leave()` puts them, and whatever else sits in the
run's group itself (not in a task's group), back where this process was, with their niceness, before the
run's group is removed (and removes it if the backend removed the tasks' groups while we were inside). Both do
nothing where it cannot apply (cgroup v2, whose inner groups hold no processes; no permission; no run
group).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..task.reporter import cpu_cgroup, move_threads, tasks_file

NICE = -5


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


class RunGroupMembership:
    def __init__(self) -> None:
        self.home: Path | None = None  # where the threads were: `tasks` of this process's group
        self.niceness: dict[int, int] = {}
        self.joined: Path | None = None

    def join(self, run_group: Path | None) -> bool:
        """Move this process's threads into `run_group` (a cgroup v1 cpu group) at a raised priority."""
        if run_group is None or self.joined is not None:
            return False
        tasks = Path(run_group) / "tasks"
        home = tasks_file(cpu_cgroup())
        if home is None or not tasks.is_file() or home == tasks:
            return False
        tids = _threads()
        if not move_threads(tids, tasks):
            move_threads(tids, home)  # part-way: all back
            return False
        self.home, self.joined = home, tasks
        for tid in tids:
            with contextlib.suppress(OSError):  # not allowed to raise it: the group alone still helps
                self.niceness[tid] = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, min(self.niceness[tid], NICE))
        return True

    def leave(self) -> None:
        """Every thread back where the process was, with its niceness, and an emptied run group removed."""
        if self.joined is None or self.home is None:
            return
        # ours, and whatever else is in the run's group itself rather than in a task's group: processes we
        # started meanwhile (born where their parent thread was) and the tasks' reporting threads
        try:
            members = [int(x) for x in self.joined.read_text().split()]
        except OSError:
            members = []
        move_threads(_threads() + members, self.home)
        for tid, nice in self.niceness.items():
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        with contextlib.suppress(OSError):
            self.joined.parent.rmdir()  # fails, as it should, while a task's group is still inside
        self.joined = None

"""Reports that do not pay inside the task's CPU quota.

A task's report is a ZooKeeper write made at the end of its compute, which is exactly when a CPU-bound
task has used up its CFS quota: made from the task's own thread, it waits for the next period (a
median of 2-9 ms and a p95 of 26-66 ms measured in co-simulations). Two things keep it out of the quota:

* :class:`Reporter` (observe mode) commits the reports from a thread of its own, in order; the
  application's thread only queues them. A failed report is raised at the task's next step or close.
* :func:`leave_quota` moves threads (the reporter's and the ZooKeeper client's) from the task's
  CPU-quota group into the run's parent group, which has no quota. Only on cgroup v1, which places
  threads one by one, and only under a live run's group (``<prefix>.live.<run-id>/<task>``); anywhere
  else (cgroup v2, a task started by hand, no permission) it does nothing and says so by returning None.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
RUN_GROUP_INFIX = ".live."  # the local backend's run group: <prefix>.live.<run-id>


def cpu_cgroup() -> str | None:
    """This process's group in the cgroup v1 cpu hierarchy (e.g. '/bsp-planner.live.R/t0'), else None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return None  # cgroup v2 only ("0::/path"): no per-thread placement


def tasks_file(group: str | None) -> Path | None:
    """The `tasks` file of a cgroup v1 cpu group given by its path in the hierarchy (as /proc/self/cgroup
    names it: ``tasks_file(cpu_cgroup())`` is this process's), wherever the cpu controller is mounted; None
    if there is none."""
    mounts = (
        [CGROUP_ROOT / m / group.lstrip("/") / "tasks" for m in ("cpu,cpuacct", "cpu", "cpuacct,cpu")] if group else []
    )
    return next((tasks for tasks in mounts if tasks.is_file()), None)


def move_threads(thread_ids: Iterable[int], tasks: Path) -> bool:
    """Move threads (kernel thread ids) into the group of the `tasks` file, one id per write as the kernel
    wants; a thread that ended meanwhile is skipped. False if the group refused (no permission, gone)."""
    try:
        for tid in thread_ids:
            with contextlib.suppress(ProcessLookupError), open(tasks, "w") as fh:
                fh.write(str(tid))
    except OSError:
        return False
    return True


def leave_quota(thread_ids: Iterable[int]) -> str | None:
    """Move the given threads (kernel thread ids) into the parent of this process's CPU-quota group when
    that parent is a live run's group; the parent's path, or None where nothing was moved."""
    group = cpu_cgroup()
    if not group or group == "/":
        return None
    parent = os.path.dirname(group.rstrip("/"))
    if RUN_GROUP_INFIX not in os.path.basename(parent):
        return None
    tasks = tasks_file(parent)
    # not moved: no permission (a delegated subtree), or the run's group is going away
    return parent if tasks is not None and move_threads(thread_ids, tasks) else None


class Reporter:
    """Commits reports in order from a thread of its own. commit(ops) does the write (raising on a
    failure); submit() queues; check() raises the first failure; flush() waits for the queue to drain."""

    def __init__(self, commit: Callable[[list[tuple]], None], name: str = "bsp-report") -> None:
        self._commit = commit
        self._queue: queue.Queue[list[tuple] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        return self._thread.native_id

    def _run(self) -> None:
        while True:
            ops = self._queue.get()
            try:
                if ops is None:
                    return
                if self._error is None:  # after a failure, later reports would only mislead
                    self._commit(ops)
            except BaseException as exc:  # handed to the application's thread
                self._error = exc
            finally:
                self._queue.task_done()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, ops: list[tuple]) -> None:
        self.check()
        self._queue.put(ops)

    def flush(self) -> None:
        """Until every queued report is committed (or failed); then raises a failure."""
        self._queue.join()
        self.check()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

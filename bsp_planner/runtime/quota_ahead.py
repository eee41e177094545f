"""Quotas written ahead, task by task, as each task reports the step before (observe mode, in place).

With a decision lead (`loop.StepLoop(decide_ahead=True)`) the configuration of step t+1 is known while
step t runs. In observe mode the tasks go on to step t+1 without waiting for the coordinator, so a task's
new quota is worth most the moment its own report of step t is committed: `QuotasAhead` writes it then,
from a ZooKeeper watch on that report (kazoo's event thread), not when the coordinator's main loop next
looks, which may be busy logging the step before, or deciding. The main loop calls `on_report` too for
every report it sees (a watch lost with a reconnection), and `finish` before it writes what is left.

The order: a task's quota changes only after its own report of step t, never during the step it still
runs. Tasks already reported when the configuration arrives are written shrinking first; after that each
is written as it reports, so a growing task does not wait for a shrinking one still in step t. The quotas
in place may then sum above the budget for that moment (by at most the increases of the tasks already in
step t+1), while every step of every task runs under its own configuration, whose sum never exceeds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class QuotasAhead:
    """step: the step whose quotas these are; pending: task -> its new CPU level (only tasks whose level
    changes); current: task -> its level now (to write shrinking tasks first); write(task, level): puts
    the quota in place (the backend's in-place resize; called with the lock held, from either thread)."""

    def __init__(
        self, step: int, pending: dict[str, int], current: dict[str, int], write: Callable[[str, int], None]
    ) -> None:
        self.step = step
        self.pending = dict(pending)
        self.current = current
        self.write = write
        self.lock = threading.Lock()
        self.quota_at: dict[str, float] = {}  # task -> time.time() its quota was in place
        self.seconds = 0.0  # the writes' own time
        self.error: BaseException | None = None  # a write that failed on the watch's thread, raised by finish()
        self.closed = False

    def on_report(self, *tasks: str) -> None:
        """These tasks reported step - 1: their quotas, shrinking first. From any thread; a task already
        written, or not changing, is left alone."""
        with self.lock:
            if self.closed:
                return
            ready = [t for t in tasks if t in self.pending]
            for task in sorted(ready, key=lambda t: self.pending[t] - self.current[t]):
                level = self.pending.pop(task)
                t0 = time.perf_counter()
                try:
                    self.write(task, level)
                except Exception as exc:  # kazoo's thread must not die of it: the main loop raises it
                    self.error = self.error or exc
                    return
                self.quota_at[task] = time.time()
                self.seconds += time.perf_counter() - t0

    def watcher(self, task: str) -> Callable:
        """A ZooKeeper watch for `task`'s report of step - 1: writes its quota once the report is created."""

        def on_event(event) -> None:
            if getattr(event, "type", None) == "CREATED":
                self.on_report(task)

        return on_event

    def finish(self) -> tuple[dict[str, float], float]:
        """Stop writing (the main loop takes over what is left): (quota_at of the tasks written, their
        seconds). Raises what a write on the watch's thread raised."""
        with self.lock:
            self.closed = True
            if self.error is not None:
                raise self.error
            return dict(self.quota_at), self.seconds

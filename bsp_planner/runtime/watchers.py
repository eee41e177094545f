"""Who else learns what a live run does, besides its run folder: metrics, Kubernetes Events, a job
resource's status. The coordinator tells every `RunWatcher` the same four things, in this order:

- ``run_started(run_id, tasks, steps)`` once, after the run is taken and before its first step;
- ``step_logged(rec)`` after each step is appended to the run log; ``rec`` is exactly the record written
  to ``steps.jsonl`` (see `runlog.step_record`: ``step``, ``step_s``, ``millicores``, ``reconfigured``,
  ``reconfig_method``, ``reconfig_s``, ``decision_ms``, ``workloads``, ...);
- ``noticed(kind, message, **counts)`` for what changes the run's course between steps: ``"deferred"``
  (a resize the platform postponed), ``"infeasible"``, ``"replanned"``, ``"task_failed"``, ``"restarted"``;
  a ``"task_failed"`` comes with ``step``, ``failures`` (the task's in that step) and ``exit_code`` or
  ``signal`` (where the backend can tell), its message naming the task and what the run does next;
- ``run_ended(status, message, summary)`` once, whatever the outcome (``finished``, ``interrupted``,
  ``failed``); ``summary`` is the written summary, or empty where none was written.

A watcher must never stop a run: `Watchers` reports a watcher's error once, through the run's ``say``,
and stops calling that watcher.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class RunWatcher(Protocol):
    def run_started(self, run_id: str, tasks: list[str], steps: int) -> None: ...

    def step_logged(self, rec: dict[str, Any]) -> None: ...

    def noticed(self, kind: str, message: str, **counts: float) -> None: ...

    def run_ended(self, status: str, message: str, summary: dict[str, Any]) -> None: ...


class Watchers:
    """Every watcher of one run, called in the order given; one that fails is dropped with one line."""

    def __init__(self, watchers: list[RunWatcher], say: Callable[[str], None]) -> None:
        self._watchers = list(watchers)
        self._say = say

    def _each(self, method: str, *args: Any, **kwargs: Any) -> None:
        for w in list(self._watchers):
            try:
                getattr(w, method)(*args, **kwargs)
            except Exception as exc:  # a watcher's problem is reported, never the run's end
                self._watchers.remove(w)
                self._say(f"{type(w).__name__} stopped: {type(exc).__name__}: {exc}")

    def run_started(self, run_id: str, tasks: list[str], steps: int) -> None:
        self._each("run_started", run_id, tasks, steps)

    def step_logged(self, rec: dict[str, Any]) -> None:
        self._each("step_logged", rec)

    def noticed(self, kind: str, message: str, **counts: float) -> None:
        self._each("noticed", kind, message, **counts)

    def run_ended(self, status: str, message: str, summary: dict[str, Any]) -> None:
        self._each("run_ended", status, message, summary)

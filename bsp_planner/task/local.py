"""`local_session`: the task API with no coordinator, so a program runs and is tested standalone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import RunEnded, StepOrderError
from .timing import SelfTimedReports, StepTimer


class LocalSession(SelfTimedReports):
    """Steps are timed and their reports kept in :attr:`reports` (and appended, flushed, to `reports_file`
    as JSON lines when given). `workloads[t]` is what :meth:`assigned_workload` returns for step t;
    `steps` ends the run after that many steps (RunEnded), as a coordinator would."""

    sync = "local"

    def __init__(
        self,
        task_name: str,
        *,
        workloads: Sequence[float] | None = None,
        steps: int | None = None,
        reports_file: str | Path | None = None,
        first_step: int = 0,
    ) -> None:
        self.task_name = task_name
        self.workloads = list(workloads) if workloads is not None else None
        self.steps = steps
        self.reports: list[dict] = []
        self.reports_file = Path(reports_file) if reports_file is not None else None
        self.first_step = first_step
        self._next = first_step

    @property
    def ended(self) -> bool:
        return self.steps is not None and self._next >= self.steps

    def assigned_workload(self, step: int) -> float | None:
        if self.workloads is None or not 0 <= step < len(self.workloads):
            return None
        return float(self.workloads[step])

    @contextmanager
    def step(self, step: int, workload: float | None = None, next_workload: float | None = None) -> Iterator[StepTimer]:
        if step != self._next:
            raise StepOrderError(
                f"task {self.task_name} reported step {step} but its next step is {self._next} (out of order or repeated)",
                field="step",
            )
        assigned = self._begin(step)
        st = StepTimer(step, assigned, workload, next_workload)
        st.start()
        yield st
        st.stop()
        st.check_workloads(f"task {self.task_name} step {step}")
        self._write({"task": self.task_name, **st.report(), **self._fields(assigned, st.wall_s)})
        self._next = step + 1

    def _begin(self, step: int) -> float | None:
        """Step `step`'s assigned workload, once it is known to be one of the run's (else RunEnded)."""
        if self.steps is not None and step >= self.steps:
            raise RunEnded(f"the run has {self.steps} steps")
        return self.assigned_workload(step)

    def _fields(self, assigned: float | None, wall_s: float) -> dict:
        """What a step's report says beyond the step timer's (the profiler's fields)."""
        return {}

    def _write(self, report: dict) -> None:
        self.reports.append(report)
        if self.reports_file is not None:
            with open(self.reports_file, "a") as fh:
                fh.write(json.dumps(report) + "\n")
                fh.flush()
                os.fsync(fh.fileno())


def local_session(task_name: str, **kw) -> LocalSession:
    """A session with no coordinator (see :class:`LocalSession`)."""
    return LocalSession(task_name, **kw)

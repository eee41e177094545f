"""Timing one step's compute: wall and CPU seconds (this process and its finished children), and the
wall-clock times (``time.time()``) the step started and ended, on the task's own clock; or, for an
application that timed its compute itself, what it says (``st.duration_s`` / ``session.report``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from ..core.errors import InputError
from ..zk.schema import check_workload

#: a step longer than this (seconds) is refused as absurd
MAX_STEP_S = 7 * 24 * 3600.0


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class StepTimer:
    """What the ``with session.step(...) as st:`` block gets: the step, the workload the run assigns it
    (None where workloads are observed), and, once the block ended, its wall and CPU seconds and its
    start and end on the wall clock. The program may set ``st.workload`` / ``st.next_workload`` inside
    the block when it knows them only then, and ``st.duration_s`` (seconds, with ``st.cpu_s_reported``
    optionally) when it timed its compute itself: that replaces the block's wall time, and the step is
    taken to have started ``duration_s`` before the block ended."""

    step: int
    assigned_workload: float | None = None
    workload: float | None = None
    next_workload: float | None = None
    wall_s: float = 0.0
    cpu_s: float | None = 0.0
    duration_s: float | None = None  # set by a program that timed its compute itself
    cpu_s_reported: float | None = None
    ended_at_reported: float | None = None  # time.time() its compute ended, when it says (else: now)
    started_at: float = 0.0  # time.time() when the step's compute started
    ended_at: float = 0.0  # time.time() when it ended
    _t0: float = field(default=0.0, repr=False)
    _c0: float = field(default=0.0, repr=False)

    def start(self) -> None:
        self._c0 = cpu_seconds()
        self.started_at = time.time()
        self._t0 = time.perf_counter()

    def stop(self, then: Callable[[], object] | None = None) -> None:
        """End the step's clocks; `then` runs after the wall clocks and before the CPU clock is read, which
        is a system call that brings CPU accounting up to date: a task past its CPU quota is throttled on
        its return, until its next CFS period (the step signal goes before it, task/step_signal.py)."""
        self.wall_s = time.perf_counter() - self._t0
        self.ended_at = time.time()
        if then is not None:
            then()
        self.cpu_s = max(0.0, cpu_seconds() - self._c0)
        if self.duration_s is not None:  # the application's own timing (checked in check_workloads)
            self.wall_s = self.duration_s
            self.cpu_s = self.cpu_s_reported
            if isinstance(self.ended_at_reported, (int, float)) and math.isfinite(self.ended_at_reported):
                self.ended_at = float(self.ended_at_reported)
            if isinstance(self.duration_s, (int, float)) and math.isfinite(self.duration_s):
                self.started_at = self.ended_at - float(self.duration_s)

    def check_workloads(self, what: str) -> None:
        """Refuse (InputError naming `what`: task and step) a reported workload or duration that is not a
        sane number."""
        for k in ("workload", "next_workload"):
            if getattr(self, k) is not None:
                setattr(self, k, check_workload(getattr(self, k), what, k))
        for k in ("duration_s", "cpu_s_reported"):
            v = getattr(self, k)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) <= MAX_STEP_S
            ):
                raise InputError(
                    f"{what} reported {k.replace('_reported', '')} {v!r}; expected a number of seconds in "
                    f"(0, {MAX_STEP_S:g}]",
                    field=k.replace("_reported", ""),
                )
        v = self.ended_at_reported
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) < math.inf):
            raise InputError(f"{what} reported ended_at {v!r}; expected a time.time() in seconds", field="ended_at")

    def report(self) -> dict:
        cpu = {} if self.cpu_s is None else {"cpu_s": self.cpu_s}
        observed = {k: v for k in ("workload", "next_workload") if (v := getattr(self, k)) is not None}
        return {"step": self.step, "wall_s": self.wall_s, **cpu, "started_at": self.started_at, **observed}


class SelfTimedReports:
    """What the sessions share: `report()` (a step the application ran and timed on its own) and the
    ``with`` block that closes the session."""

    sync: str

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close(raise_report_error=exc[0] is None)  # never hide the application's own exception

    def close(self, raise_report_error: bool = True) -> None:
        """Leave the run (a session with nothing to leave: nothing to do)."""

    def step(self, step: int, workload: float | None = None, next_workload: float | None = None):  # pragma: no cover
        raise NotImplementedError

    def report(
        self,
        step: int,
        *,
        duration_s: float,
        workload: float | None = None,
        next_workload: float | None = None,
        cpu_s: float | None = None,
        ended_at: float | None = None,
    ) -> None:
        """Report step `step` as the application timed it: its compute took `duration_s` seconds (and
        `cpu_s` CPU seconds, if known), ending now or at `ended_at` (``time.time()`` seconds, for a step
        reported after the fact by another process: :mod:`.serve`); `workload` / `next_workload` as for
        `step()`. For a self-synchronising (observe) run, a local session or the profiler; in barrier mode
        the compute must run inside ``with session.step(...)`` (it waits for the step's barrier first)."""
        if self.sync == "barrier":
            raise InputError(
                "session.report() reports a step the application ran on its own, which a barrier-mode run does not "
                "allow (its CPU changes are applied at the step's barrier): time the compute inside "
                '`with session.step(...)`, or set sync = "observe" in the job',
                field="sync",
            )
        with self.step(step, workload=workload, next_workload=next_workload) as st:
            st.duration_s = duration_s
            st.cpu_s_reported = cpu_s
            st.ended_at_reported = ended_at

"""What one profiling run gives back: its duration, or why it failed, and what it cost in CPU."""

from __future__ import annotations

from dataclasses import dataclass

from .cgroups import CpuStat


@dataclass(frozen=True)
class RunResult:
    """One run: its wall-clock duration, or why it failed (non-zero exit, timeout).

    `cpu_s` is the CPU seconds the run used (user + system, its process and the children it waited for),
    `cpu_stat` its cgroup's bandwidth accounting (periods, throttled periods and time), where the
    backend measures them (None otherwise). `reported_workload`: the workload a command task reported on its
    stdout, which the runner compares with the cell's (a program that sizes its own work)."""

    duration_s: float | None
    reason: str = ""
    cpu_s: float | None = None
    cpu_stat: CpuStat | None = None
    reported_workload: float | None = None  # what a command task said it did (`{"workload": ...}`), if it said

    @property
    def ok(self) -> bool:
        return self.duration_s is not None and not self.reason


def stderr_tail(data: bytes | None, limit: int = 300) -> str:
    """The end of a program's stderr on one line, for a failure's reason."""
    text = (data or b"").decode(errors="replace").strip()
    text = " ".join(text.split())
    return text[-limit:]

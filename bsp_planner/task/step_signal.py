"""A task's end of step told to a local coordinator by one datagram, ahead of its report.

In observe mode the coordinator puts a task under its quota for the next step when the task's report of
the step before arrives (runtime/quota_ahead.py). The report travels through ZooKeeper from the task's
reporter thread, which needs the task's interpreter lock: a task throttled by its CPU quota right after
its block holds that lock until its next CFS period, and the report, the watch and the coordinator's
answer add a few milliseconds more. A local run (its tasks on the coordinator's host) also gives each
observe-mode task ``BSP_STEP_SIGNAL`` = ``"<address> <token>"``: a Linux abstract Unix datagram socket the
coordinator listens on, and the run's secret. The task's own thread sends ``"<token> <task> <step>"`` the
moment its block ends (a system call of a few microseconds, no lock held by anyone else), before it
reads its CPU time (reading it brings the kernel's CPU accounting up to date, and a task past its quota
is throttled on that call's return: the signal then waited a CFS period and more, a p95 of 17 ms at a
10 ms period), and the coordinator acts on whichever of the signal and the report comes first. The
report stays the record: a lost or refused datagram only leaves the quota to the report, as without the
signal.
"""

from __future__ import annotations

import socket

from .errors import TaskJoinError

ENV_STEP_SIGNAL = "BSP_STEP_SIGNAL"


def signal_env(address: str, token: str) -> str:
    """The variable's value: an abstract socket address ("@name") and the token, space-separated."""
    return f"{address} {token}"


def parse_signal_env(value: str) -> tuple[str, str]:
    """(address, token) from the variable's value; TaskJoinError naming the variable if malformed."""
    parts = value.split()
    if len(parts) != 2 or not parts[0].startswith("@") or len(parts[0]) < 2 or not parts[1].isalnum():
        raise TaskJoinError(
            f"expected ${ENV_STEP_SIGNAL} '@<abstract socket name> <token>' (set by a local coordinator), got {value!r}",
            field=ENV_STEP_SIGNAL,
        )
    return parts[0], parts[1]


def signal_message(token: str, task: str, step: int) -> bytes:
    return f"{token} {task} {step}".encode()


def parse_signal_message(data: bytes) -> tuple[str, str, int] | None:
    """(token, task, step) from a datagram; None for anything else."""
    try:
        token, task, step = data.decode().split()
        return token, task, int(step)
    except (UnicodeDecodeError, ValueError):
        return None


class StepSignal:
    """The sending end: `send(step)` after each step's block; never raises (the report is the record)."""

    def __init__(self, value: str, task: str) -> None:
        address, self.token = parse_signal_env(value)
        self.address = "\0" + address[1:]
        self.task = task
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)  # a full queue drops the signal rather than hold the task

    def send(self, step: int) -> bool:
        try:
            self.sock.sendto(signal_message(self.token, self.task, step), self.address)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()

"""The coordinator's end of the tasks' step signals (bsp_planner/task/step_signal.py): a local run in
observe mode with in-place quotas listens on an abstract Unix datagram socket, and each signal of a task's
end of step is handed to the QuotaKeeper at once, as its report will be when it arrives."""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import socket
import threading
from collections.abc import Callable

from ..task.step_signal import ENV_STEP_SIGNAL, parse_signal_message, signal_env


class StepSignals:
    """Listens from construction; `env()` is what each task is given; `deliver(on_report)` starts handing
    (task, step, "signal") of every signal with the run's token and one of `tasks` to on_report (signals
    before it are dropped: the reports cover them); `close()` stops. `refused` counts the datagrams refused."""

    def __init__(self, tasks: list[str]) -> None:
        self.tasks = set(tasks)
        self.token = secrets.token_hex(16)
        self.address = f"@bsp-planner-steps-{os.getpid()}-{secrets.token_hex(4)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.address[1:])
        self.sock.settimeout(0.25)  # how soon the listener sees close(); a blocked recv is not woken by it
        self._on_report: Callable[[str, int, str], None] | None = None
        self.refused = 0
        self._closed = False
        self._thread = threading.Thread(target=self._listen, name="bsp-step-signals", daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        return {ENV_STEP_SIGNAL: signal_env(self.address, self.token)}

    def deliver(self, on_report: Callable[[str, int, str], None]) -> None:
        self._on_report = on_report

    def _listen(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(512)
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            message = parse_signal_message(data)
            if (
                message is None
                or not hmac.compare_digest(message[0], self.token)
                or message[1] not in self.tasks
                or message[2] < 0
            ):
                self.refused += 1
                continue
            on_report = self._on_report
            if on_report is not None:
                with contextlib.suppress(Exception):  # the report will bring the same step; never die of it
                    on_report(message[1], message[2], "signal")

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=2)
        self.sock.close()

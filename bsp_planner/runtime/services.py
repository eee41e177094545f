"""A run's services (`[[service]]` in the job): the programs its tasks need running, a broker for one.

:class:`Services` starts every service before any task starts, each waited ready in the job's order (a TCP
port that accepts a connection, or a line of its output matching a regex, within ``ready_timeout_s``),
watches them while the steps run (:meth:`Services.check`, called at the coordinator's safe points), and
stops them after the tasks. A service that exits meanwhile is restarted (``on_failure = "restart"``, up to
``max_restarts`` times) or fails the run (:class:`ServiceFailed`, ``on_failure = "fail"``), naming it with
the end of its log.

Locally a service is a plain process (no CPU quota: it is not a task the plan sizes) in its own session,
its output appended to the run's ``logs/<service>.log``. Nothing outlives the run: a stop signals the
service's whole process group (SIGTERM, then SIGKILL), and a service gets SIGTERM if the coordinator
dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..job import Service
from ..placeholders import run_env, run_values
from .executor import RunFailed

POLL_S = 0.05
STOP_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1


class ServiceFailed(RunFailed):
    """A service did not become ready, or exited and may not (or no longer) be restarted."""


def _parent_death_preexec() -> Callable[[], None]:
    from .backends.local import _prctl

    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec: plain system calls only
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the coordinator died before the line above
            os._exit(1)

    return preexec


class _Running:
    def __init__(self, proc: subprocess.Popen, log_offset: int) -> None:
        self.proc = proc
        self.log_offset = log_offset  # where this incarnation's output starts in the log


class Services:
    """``Services(job.services, ports, job_dir, run_dir, log_dir, say)``: `ports` are the run's (every task's
    and service's, :func:`~bsp_planner.placeholders.choose_ports`)."""

    def __init__(
        self,
        services: tuple[Service, ...],
        ports: Mapping[str, int],
        job_dir: str,
        run_dir: str,
        log_dir: Path,
        say: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.services = {s.name: s for s in services}
        self.ports = dict(ports)
        self.job_dir = job_dir
        self.run_dir = run_dir
        self.log_dir = Path(log_dir)
        self.say = say
        self.running: dict[str, _Running] = {}
        self.restarts: dict[str, int] = {name: 0 for name in self.services}
        self._starting = False  # check() is called from inside a start's wait (the coordinator's safe points)

    def __bool__(self) -> bool:
        return bool(self.services)

    def values(self, name: str) -> dict[str, str]:
        """Every placeholder a service's command, env and readiness check may hold."""
        return {**run_values(name, self.ports, self.job_dir), "run_dir": self.run_dir, "python": sys.executable}

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    # -- lifecycle ---------------------------------------------------------------------------------
    def start_all(self, check_stop: Callable[[], None] = lambda: None) -> None:
        """Start every service in the job's order, each waited ready before the next starts."""
        for name in self.services:
            self._start(name, check_stop)

    def _start(self, name: str, check_stop: Callable[[], None]) -> None:
        self._starting = True
        try:
            self._launch(name)
            self._wait_ready(name, check_stop)
        finally:
            self._starting = False

    def _launch(self, name: str) -> None:
        from ..job import substitute

        sv = self.services[name]
        values = self.values(name)
        args = sv.args(values)
        env = dict(os.environ)
        env.update(run_env(name, self.ports, self.job_dir))
        env["BSP_RUN_DIR"] = self.run_dir
        env["PYTHONUNBUFFERED"] = "1"
        env.update({k: substitute(v, values) for k, v in sv.env.items()})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_path(name)
        with open(path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} service {name}: {' '.join(args)}\n".encode())
            log.flush()
            offset = log.tell()
            try:
                proc = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.run_dir or None,
                    env=env,
                    preexec_fn=_parent_death_preexec(),
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise ServiceFailed(f"service {name} cannot start {args[0]!r}: {exc.strerror or exc}") from None
        self.running[name] = _Running(proc, offset)

    def _wait_ready(self, name: str, check_stop: Callable[[], None]) -> None:
        sv = self.services[name]
        run = self.running[name]
        port = None
        if sv.ready_tcp_port is not None:
            from ..job import substitute

            port = int(substitute(sv.ready_tcp_port, self.values(name)))
        pattern = re.compile(sv.ready_log_line) if sv.ready_log_line is not None else None
        deadline = time.monotonic() + sv.ready_timeout_s
        while True:
            if port is not None and _accepts(port):
                break
            if pattern is not None and self._log_matches(name, pattern, run.log_offset):
                break
            if port is None and pattern is None:
                break  # no readiness check: started is ready
            code = run.proc.poll()
            if code is not None:
                raise ServiceFailed(f"service {name} exited with code {code} before it was ready{self._tail(name)}")
            if time.monotonic() > deadline:
                what = f"accept connections on port {port}" if port is not None else ""
                if pattern is not None:
                    what = f"print a line matching {pattern.pattern!r}"
                self._stop(name)
                raise ServiceFailed(
                    f"service {name} did not {what} within {sv.ready_timeout_s:g} s (ready_timeout_s){self._tail(name)}"
                )
            check_stop()
            time.sleep(POLL_S)
        self.say(f"service {name} ready (pid {run.proc.pid}, port {self.ports.get(name)}, log {self.log_path(name)})")

    def _log_matches(self, name: str, pattern: re.Pattern, offset: int) -> bool:
        try:
            with open(self.log_path(name), "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return any(pattern.search(line) for line in text.splitlines())

    def _tail(self, name: str, limit: int = 1500) -> str:
        try:
            text = self.log_path(name).read_text(errors="replace")[-limit:].strip()
        except OSError:
            return ""
        return f"; the end of {self.log_path(name)}:\n{text}" if text else f" ({self.log_path(name)} is empty)"

    def check(self, check_stop: Callable[[], None] = lambda: None) -> None:
        """Called at the coordinator's safe points: a service that exited is restarted (policy "restart",
        while restarts are left), else the run fails (:class:`ServiceFailed`)."""
        if self._starting:
            return
        for name, run in list(self.running.items()):
            code = run.proc.poll()
            if code is None:
                continue
            sv = self.services[name]
            del self.running[name]
            if sv.on_failure == "restart" and self.restarts[name] < sv.max_restarts:
                self.restarts[name] += 1
                self.say(
                    f"service {name} exited with code {code}; restarting it ({self.restarts[name]} of "
                    f"{sv.max_restarts}, max_restarts)"
                )
                self._start(name, check_stop)
                continue
            why = (
                f"it was restarted {self.restarts[name]} time(s), max_restarts = {sv.max_restarts}"
                if sv.on_failure == "restart"
                else 'on_failure = "fail"'
            )
            raise ServiceFailed(f"service {name} exited with code {code} during the run ({why}){self._tail(name)}")

    def stop_all(self) -> None:
        """Stop every service (SIGTERM to all, then wait; SIGKILL to what is left), in reverse order."""
        names = list(self.running)[::-1]
        for name in names:
            _signal_group(self.running[name].proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name in names:
            self._stop(name, max(0.0, deadline - time.monotonic()))

    def _stop(self, name: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
        run = self.running.pop(name, None)
        if run is None:
            return
        _signal_group(run.proc, signal.SIGTERM)
        try:
            run.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(run.proc, signal.SIGKILL)  # the service's own children too (its whole session)
        try:
            run.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def pids(self) -> dict[str, int]:
        return {name: run.proc.pid for name, run in self.running.items()}


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # its own session (start_new_session): the group id is its pid
    except (ProcessLookupError, PermissionError):
        pass


def _accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False

"""A run's services (`[[service]]` in the job): the programs its tasks need running, a broker for one.

:class:`Services` starts every service before any task starts, each waited ready in the job's order (a TCP
port that accepts a connection, or a line of its output matching a regex, within ``ready_timeout_s``),
watches them while the steps run (:meth:`Services.check`, called at the coordinator's safe points), and
stops them after the tasks. A service that exits meanwhile with a non-zero status is restarted
(``on_failure = "restart"``, up to ``max_restarts`` times) or fails the run (:class:`~.executor.RunFailed`,
``on_failure = "fail"``), naming it with the end of its log. An exit with status 0 is an ending, not a
failure: a broker ends when its federation has finished. It is held against the run only if a step then
starts without it (:meth:`Services.step_started`: the application went on, so the policy applies); a
service declared ``ends_run = true`` (the application's driver) ends the run with it
(:attr:`Services.driver_ended`, which the executor reads while it waits for a step).

Where a service runs is its backend's :class:`ServiceRunner`. Locally
(:class:`~.backends.local_services.LocalServiceRunner`) it is a process tree in a cgroup of its own (no CPU
quota: it is not a task the plan sizes), its output capped in the run's ``logs/<service>.log``; a stop ends
everything in its group, a daemon it started included, and it gets SIGTERM if the coordinator dies
(PR_SET_PDEATHSIG). On Kubernetes it is a pod (:mod:`.backends.kubernetes`). Its address is ``{host:NAME}``:
127.0.0.1 locally, the pod's IP there. A ``log_line`` is matched with a time limit (:class:`ReadyLine`), so
that no pattern can hold the coordinator past ``ready_timeout_s``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, cast

from ..inputs.job import Service, substitute
from ..inputs.placeholders import ENV_HOSTS, run_env, run_values
from .executor import RunFailed

POLL_S = 0.05
LINE_LIMIT = 16384  # a longer line is matched by its first as many characters


class ReadyLine:
    """A ``ready = { log_line = ... }`` pattern, matched against one line at a time until `deadline`
    (time.monotonic()): a match that would run past it gives up (:attr:`timed_out`). A match that takes
    longer than a moment goes on in a thread of its own (the ``regex`` module lets go of the interpreter
    while it matches), while this one calls `check_stop` every tick: a stop asked for meanwhile is
    answered at once, whatever the pattern."""

    def __init__(self, pattern: str, deadline: float, check_stop: Callable[[], None] = lambda: None) -> None:
        import regex  # the live extra's: only a run with such a service needs it

        self.pattern = pattern
        self.compiled = regex.compile(pattern)
        self.deadline = deadline
        self.check_stop = check_stop
        self.timed_out = False

    def search(self, line: str) -> bool:
        line = line[:LINE_LIMIT]
        try:  # most patterns: done at once, here
            return self.compiled.search(line, timeout=min(POLL_S, self._left_s())) is not None
        except TimeoutError:
            pass
        found: list[bool] = []

        def match() -> None:
            try:
                found.append(self.compiled.search(line, timeout=self._left_s(), concurrent=True) is not None)
            except TimeoutError:
                self.timed_out = True

        worker = threading.Thread(target=match, name="ready-line", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(POLL_S)
            self.check_stop()  # raises on a stop: the match, bounded by the deadline, ends on its own
        return bool(found and found[0])

    def _left_s(self) -> float:
        return max(1e-3, self.deadline - time.monotonic())


class ServiceRunner(Protocol):
    """Starts, watches and stops services on one platform (a backend's)."""

    def launch(self, name: str, args: list[str], env: dict[str, str], ready_port: int | None) -> None:
        """Start service `name` (a restart if one of that name ran before); returns once started."""

    def exit_code(self, name: str) -> int | None:
        """Its exit code once it ended, None while it runs (or is still starting)."""

    def ready(self, name: str, port: int | None, pattern: ReadyLine | None) -> bool:
        """Whether it is ready: it listens on its port (itself, where the platform can tell), or a line of its
        output since this start matches (``pattern.search(line)``)."""

    def host(self, name: str) -> str:
        """Its address as the tasks reach it (once ready)."""

    def tail(self, name: str) -> str:
        """The end of its output, for a failure's message."""

    def stop(self, names: list[str]) -> None:
        """Stop these services (all at once) and wait until they are gone."""


class Services:
    """``Services(job.services, ports, job_dir, run_dir, runner, say)``: `ports` are the run's (every task's
    and service's, :func:`~bsp_planner.inputs.placeholders.choose_ports`)."""

    def __init__(
        self,
        services: tuple[Service, ...],
        ports: Mapping[str, int],
        job_dir: str,
        run_dir: str,
        runner: ServiceRunner | None,
        say: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.services = {s.name: s for s in services}
        self.ports = dict(ports)
        self.job_dir = job_dir
        self.run_dir = run_dir
        self.runner = cast(ServiceRunner, runner)  # None only without services: then it is never asked
        self.say = say
        self.running: list[str] = []
        self.hosts: dict[str, str] = {}  # {host:NAME} of every service started
        self.restarts: dict[str, int] = {name: 0 for name in self.services}
        # services that exited with status 0: name -> when it was noticed (time.time(), the tasks' clock)
        self.ended: dict[str, float] = {}
        self.driver_ended: float | None = None  # when a service with ends_run = true exited with status 0
        self._starting = False  # check() is called from inside a start's wait (the coordinator's safe points)

    def __bool__(self) -> bool:
        return bool(self.services)

    def values(self, name: str | None) -> dict[str, str]:
        """The run-wide placeholders seen by task or service `name`: ports, the job's folder and the
        services' hosts (those started so far)."""
        hosts = {f"host:{n}": h for n, h in self.hosts.items()}
        return {**run_values(name, self.ports, self.job_dir), **hosts}

    def env(self, name: str) -> dict[str, str]:
        """What a task or service finds in its environment (BSP_PORT, BSP_PORTS, BSP_JOB_DIR, BSP_HOSTS)."""
        env = run_env(name, self.ports, self.job_dir)
        if self.hosts:
            env[ENV_HOSTS] = ",".join(f"{n}={h}" for n, h in self.hosts.items())
        return env

    # -- lifecycle ---------------------------------------------------------------------------------
    def start_all(self, check_stop: Callable[[], None] = lambda: None) -> None:
        """Start every service in the job's order, each waited ready before the next starts."""
        for name in self.services:
            self._start(name, check_stop)

    def _start(self, name: str, check_stop: Callable[[], None]) -> None:
        sv = self.services[name]
        values = {**self.values(name), "run_dir": self.run_dir, "python": sys.executable}
        args = sv.args(values)
        env = {**self.env(name), "BSP_RUN_DIR": self.run_dir, "PYTHONUNBUFFERED": "1"}
        env.update({k: substitute(v, values) for k, v in sv.env.items()})
        port = int(substitute(sv.ready_tcp_port, values)) if sv.ready_tcp_port is not None else None
        self._starting = True
        try:
            try:
                self.runner.launch(name, args, env, port)
            except OSError as exc:
                raise RunFailed(f"service {name} cannot start {args[0]!r}: {exc.strerror or exc}") from None
            if name not in self.running:
                self.running.append(name)
            self._wait_ready(name, port, check_stop)
        finally:
            self._starting = False
        self.hosts[name] = self.runner.host(name)
        self.say(f"service {name} ready at {self.hosts[name]}, port {self.ports.get(name)}")

    def _wait_ready(self, name: str, port: int | None, check_stop: Callable[[], None]) -> None:
        sv = self.services[name]
        deadline = time.monotonic() + sv.ready_timeout_s
        pattern = ReadyLine(sv.ready_log_line, deadline, check_stop) if sv.ready_log_line is not None else None
        while not self.runner.ready(name, port, pattern):
            code = self.runner.exit_code(name)
            if code is not None:
                raise RunFailed(f"service {name} exited with code {code} before it was ready{self._tail(name)}")
            if time.monotonic() > deadline:
                what = f"listen on port {port} itself" if port is not None else ""
                if pattern is not None:
                    what = f"print a line matching {pattern.pattern!r}"
                why = ""
                if port is not None and hasattr(self.runner, "port_note"):  # whose port it is, where it can tell
                    why = self.runner.port_note(name, port)
                if pattern is not None and pattern.timed_out:  # the pattern, not the service, took the time
                    why = "; matching its output against the pattern took that long: a pattern that backtracks"
                tail = self._tail(name)
                self._stop([name])
                raise RunFailed(
                    f"service {name} did not {what} within {sv.ready_timeout_s:g} s (ready_timeout_s){why}{tail}"
                )
            check_stop()
            time.sleep(POLL_S)

    def _tail(self, name: str) -> str:
        text = self.runner.tail(name).strip()
        return f"; the end of its log:\n{text}" if text else " (it printed nothing)"

    def check(self, check_stop: Callable[[], None] = lambda: None) -> None:
        """Called at the coordinator's safe points: a service that exited with a non-zero status is restarted
        (policy "restart", while restarts are left), else the run fails (:class:`~.executor.RunFailed`); one that
        exited with status 0 is noted as ended (`ended`, `driver_ended`), judged later by step_started."""
        if self._starting:
            return
        for name in list(self.running):
            code = self.runner.exit_code(name)
            if code is None:
                continue
            sv = self.services[name]
            if code == 0:  # an ending: judged by whether the application goes on without it (step_started)
                self.running.remove(name)
                self.ended[name] = time.time()
                if sv.ends_run and self.driver_ended is None:
                    self.driver_ended = self.ended[name]
                self.say(
                    f"service {name} ended (exit code 0)"
                    + ("; it drives the application (ends_run = true): the run ends with it" if sv.ends_run else "")
                )
                continue
            self._apply_policy(name, code, "during the run", check_stop)

    def step_started(self, step: int, started_at: float, check_stop: Callable[[], None] = lambda: None) -> None:
        """Step `step` ran, its first task starting at `started_at` (time.time()): a service that ended
        (exit 0) before then was not the application's end but a service gone while it still ran, so its
        policy applies now (restarted, or the run fails)."""
        for name, ended_at in list(self.ended.items()):
            if ended_at < started_at and not self.services[name].ends_run:
                del self.ended[name]
                self._apply_policy(name, 0, f"before step {step} started", check_stop)

    def _apply_policy(self, name: str, code: int, when: str, check_stop: Callable[[], None]) -> None:
        sv = self.services[name]
        if sv.on_failure == "restart" and self.restarts[name] < sv.max_restarts:
            self.restarts[name] += 1
            self.say(
                f"service {name} exited with code {code}; restarting it ({self.restarts[name]} of "
                f"{sv.max_restarts}, max_restarts)"
            )
            self._start(name, check_stop)
            return
        why = (
            f"it was restarted {self.restarts[name]} time(s), max_restarts = {sv.max_restarts}"
            if sv.on_failure == "restart"
            else 'on_failure = "fail"'
        )
        tail = self._tail(name)
        self._stop([name])
        raise RunFailed(f"service {name} exited with code {code} {when} ({why}){tail}")

    def stop_all(self) -> None:
        """Stop every service, after the tasks (all at once: SIGTERM or a pod deletion each, then the wait);
        those that ended too, for what they left running in their process group (or their pod)."""
        self._stop(self.running[::-1] + [n for n in self.ended if n not in self.running])

    def _stop(self, names: list[str]) -> None:
        if names:
            self.runner.stop(names)
        self.running = [n for n in self.running if n not in names]


def spawn_logged(
    args: list[str], log_path: Path, header: str, cwd: str | None, env: dict[str, str], preexec_fn: Callable[[], None]
) -> tuple[subprocess.Popen, int]:
    """`args` started in a session of its own (`preexec_fn` run in the child before it execs), its output
    appended to `log_path` after a dated `header` line; (the process, where its output begins in the log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n".encode())
        log.flush()
        offset = log.tell()  # before the process writes: its own output starts here
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            preexec_fn=preexec_fn,
            start_new_session=True,
            close_fds=True,
        )
    return proc, offset


def log_tail(path: Path, limit: int) -> str:
    """The last `limit` characters of a log, "" where there is none."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""

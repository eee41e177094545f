"""The worker: one task of a live BSP run (`bsp-planner worker`, also the Kubernetes container's command).

    join      read the run and this task's stressor from ZooKeeper, restore the checkpoint (the last
              superstep completed), announce itself with an ephemeral membership node
    loop      wait for step t's workload -> enter step t's barrier -> run stress-ng with
              ops = ops_per_unit x workload -> report the duration and move the checkpoint to t (one
              transaction) -> leave the barrier -> t + 1
    stop      on a {"stop": true} step, on SIGTERM, or when its parent (the local coordinator) dies

A restarted worker picks up where the checkpoint says: if it died in the middle of step t, it runs step
t again (the other tasks wait in the leave barrier); if it died after reporting t, it only leaves t's
barrier. The result node is created in the same transaction that moves the checkpoint, so a step is
never counted twice, even if an old incarnation is somehow still alive.

Exit codes: 0 stopped cleanly, 2 bad input (a malformed value, unknown task), 3 ZooKeeper lost for good,
4 stress-ng failed (it exited with an error), 5 stress-ng was killed by a signal (the OOM killer, a `kill`):
the coordinator restarts the task as it would a dead worker, since running the step again may well work.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InputError
from ..core.signals import kill_group
from ..inputs.job import SeriesRef, Task
from ..inputs.placeholders import values_from_env
from ..task.reports import parse_workload_report
from ..zk.credentials import Credentials
from ..zk.schema import check_task_name
from ..zk.session import LOCAL_HINT, POD_HINT, ZkUnavailable

OUTPUT_KEEP_BYTES = 16384  # of a successful step's stdout and of its stderr, kept in the task's log

if TYPE_CHECKING:
    from ..task import TaskSession

EXIT_OK = 0
EXIT_INPUT = 2
EXIT_ZK = 3
EXIT_STRESS = 4
EXIT_STRESS_KILLED = 5


class Stop(Exception):
    """SIGTERM, or the parent went away: leave now (the checkpoint is already in ZooKeeper)."""


class StressFailed(Exception):
    pass


class StressKilled(Exception):
    """stress-ng died of a signal: not its own error, so the step is worth running again."""


@dataclass
class WorkerConfig:
    hosts: str
    root: str
    task: str
    incarnation: int
    creds: Credentials
    stress_ng: str = "stress-ng"
    session_timeout_s: float = 10.0
    connect_timeout_s: float = 30.0
    zk_wait_s: float = 120.0  # how long ZooKeeper may be unreachable before the worker gives up
    step_timeout_s: float = 3600.0


class Worker:
    """The stress-ng (or command) worker: one user of the task library (:mod:`bsp_planner.task`), which
    joins, waits for each step, passes the barrier, times the step and reports it; the worker only runs
    the step's program and maps failures to its exit codes."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.task_name = check_task_name(cfg.task)
        self.session: TaskSession | None = None  # once joining starts
        self._child: subprocess.Popen | None = None
        self._stopping = False
        self._parent = os.getppid()

    # -- signals and liveness ----------------------------------------------------------------------
    def _on_term(self, signum, frame) -> None:
        self._stopping = True
        self._kill_child()
        raise Stop()

    def _interrupt(self) -> bool:
        if self._stopping or (self._parent > 1 and os.getppid() != self._parent):  # SIGTERM, or orphaned
            raise Stop()
        return False

    def _kill_child(self) -> None:
        p = self._child
        if p is not None and p.poll() is None:
            kill_group(p.pid)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        try:
            return self._run()
        except Stop:
            self._say("stopped")
            return EXIT_OK
        except (InputError, StressFailed, StressKilled) as exc:  # InputError: TaskJoinError and ZkUnavailable too
            self._say(f"error: {_as_worker_options(exc)}")
            # ZooKeeper lost is no bad input; anything else InputError is
            codes = {ZkUnavailable: EXIT_ZK, StressFailed: EXIT_STRESS, StressKilled: EXIT_STRESS_KILLED}
            return next((code for kind, code in codes.items() if isinstance(exc, kind)), EXIT_INPUT)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._kill_child()
            if self.session is not None:
                self.session.close()  # removes the membership node at once

    def _say(self, text: str) -> None:
        print(f"[worker {self.task_name}#{self.cfg.incarnation}] {text}", file=sys.stderr, flush=True)

    def _run(self) -> int:
        from ..task import RunEnded, TaskSession

        cfg = self.cfg
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))  # set by the kubelet in every container
        session = self.session = TaskSession(
            cfg.hosts,
            cfg.creds,
            cfg.root,
            None,
            self.task_name,
            "barrier",
            os.environ.get("BSP_RUN_DIR", os.getcwd()),
            cfg.incarnation,
            cfg.step_timeout_s,
            session_timeout_s=cfg.session_timeout_s,
            connect_timeout_s=cfg.connect_timeout_s,
            zk_wait_s=cfg.zk_wait_s,
            interrupt=self._interrupt,
            unreachable_hint=POD_HINT if in_pod else LOCAL_HINT,
        )
        try:
            session._join()
        except RunEnded:
            raise Stop() from None
        assert session.info is not None  # read when it joined
        spec = session.info.tasks[self.task_name]
        command = spec.get("command")
        if spec.get("process"):
            raise InputError(
                f"task {self.task_name} is a process task: its own program joins the run, not a worker", field="--task"
            )
        task = Task(
            self.task_name,
            spec["stressor"],
            spec["ops_per_unit"] if not command else 1.0,
            SeriesRef(Path("-")),
            spec["workers"],
            command=tuple(command) if command else None,
        )
        stress_ng = shutil.which(cfg.stress_ng) if not command else cfg.stress_ng
        if not stress_ng:
            raise InputError(
                f"stress-ng not found (looked for {cfg.stress_ng!r}); install it: `apt-get install stress-ng`",
                field="--stress-ng",
            )
        self._say(f"joined at step {session.first_step} (checkpoint: last completed {session.first_step - 1})")
        t = session.first_step
        while True:
            try:
                with session.step(t) as st:
                    workload = st.assigned_workload
                    assert workload is not None  # a worker's job is series-driven: every step has one
                    observed = self._stress(task, workload, stress_ng, t)
                    st.workload = observed.get("workload")
                    st.next_workload = observed.get("next_workload")
            except RunEnded:
                if not self._stopping and session.session.exists(cfg.root):
                    self._say(f"stop order at step {t}")
                    return EXIT_OK
                raise Stop() from None
            t += 1

    def _stress(self, task: Task, workload: float, stress_ng: str, t: int) -> dict:
        """Run step t (stress-ng, or the task's command) (the session times it); what it reported on stdout."""
        is_command = task.kind == "command"
        what = f"task {self.task_name} step {t}: " + ("its command" if is_command else "stress-ng")
        args = task.step_args(
            workload,
            t,
            stress_ng=stress_ng,
            run_dir=os.environ.get("BSP_RUN_DIR", os.getcwd()),
            run_values=values_from_env(os.environ),  # {port}, {port:NAME}, {job_dir}
        )
        env = {**os.environ, **task.step_env(workload, t)} if is_command else None
        try:
            self._child = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if is_command else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        except OSError as exc:  # missing, not executable: the program's fault, not worth a restart
            raise InputError(f"{what} cannot start {args[0]!r}: {exc.strerror or exc}", field="command") from None
        try:
            out, err = self._child.communicate(timeout=self.cfg.step_timeout_s)
        except subprocess.TimeoutExpired:
            self._kill_child()
            raise StressFailed(
                f"{what} ran past the step timeout ({self.cfg.step_timeout_s:g} s, --step-timeout)"
            ) from None
        code = self._child.returncode
        self._child = None
        if code < 0 and not self._stopping:
            raise StressKilled(f"{what} was killed by signal {-code} ({_signal_name(-code)}) in the middle of a step")
        if code != 0:
            tail = " ".join((err or b"").decode(errors="replace").split())[-300:]
            raise StressFailed(f"{what} exited with code {code}: {' '.join(args)}: {tail}")
        if is_command:
            self._keep_output(t, out or b"", err or b"")
        return parse_workload_report(out or b"", what) if is_command else {}

    def _keep_output(self, t: int, out: bytes, err: bytes) -> None:
        """A successful step's stdout and stderr, into the worker's log (the run's logs/<task>.log), the last
        OUTPUT_KEEP_BYTES of each: what the program said is kept, not only when it fails."""
        for name, data in (("stdout", out), ("stderr", err)):
            if not data.strip():
                continue
            cut = len(data) > OUTPUT_KEEP_BYTES
            head = f"--- step {t} {name}" + (f" (its last {OUTPUT_KEEP_BYTES} bytes)" if cut else "") + "\n"
            sys.stderr.buffer.write(
                head.encode() + data[-OUTPUT_KEEP_BYTES:] + (b"" if data.endswith(b"\n") else b"\n")
            )
        sys.stderr.flush()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown"


#: A worker is given its run and task by options, not by the environment a user's task process reads
_WORKER_OPTIONS = {"BSP_RUN_ID": "--root", "BSP_TASK": "--task"}


def _as_worker_options(exc: Exception) -> str:
    """A join error as the worker's user reads it: naming --root and --task, not $BSP_RUN_ID and $BSP_TASK."""
    field = getattr(exc, "field", None)
    if field not in _WORKER_OPTIONS:
        return str(exc)
    message = getattr(exc, "message", str(exc))
    for env, option in _WORKER_OPTIONS.items():
        message = message.replace(f" (${env}=None)", "").replace(f"${env}", option)
    return f"field '{_WORKER_OPTIONS[field]}': {message}"

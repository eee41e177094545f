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

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..job import SeriesRef, Task
from . import zk as Z

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
    creds: Z.Credentials
    stress_ng: str = "stress-ng"
    session_timeout_s: float = 10.0
    connect_timeout_s: float = 30.0
    zk_wait_s: float = 120.0  # how long ZooKeeper may be unreachable before the worker gives up
    step_timeout_s: float = 3600.0


class Worker:
    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.paths = Z.RunPaths(cfg.root)
        self.task_name = Z.check_task_name(cfg.task)
        self.session: Z.ZkSession | None = None
        self._child: subprocess.Popen | None = None
        self._stopping = False
        self._need_member = False
        self._parent = os.getppid()
        self.next_step = 0

    # -- signals and liveness ----------------------------------------------------------------------
    def _on_term(self, signum, frame) -> None:
        self._stopping = True
        self._kill_child()
        raise Stop()

    def _orphaned(self) -> bool:
        return self._parent > 1 and os.getppid() != self._parent

    def _interrupt(self) -> bool:
        if self._stopping or self._orphaned():
            raise Stop()
        if self._need_member and self.session is not None and self.session.connected:
            self._register()
        s = self.session
        if s is not None and s.down_for() > self.cfg.zk_wait_s:
            raise Z.ZkUnavailable(f"ZooKeeper at {self.cfg.hosts} unreachable for {s.down_for():.0f} s", field="--zookeeper")
        return False

    def _on_state(self, state: str) -> None:
        if state == "LOST":  # the session expired: its ephemeral membership node is gone
            self._need_member = True

    def _kill_child(self) -> None:
        p = self._child
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    # -- membership --------------------------------------------------------------------------------
    def _register(self) -> None:
        from kazoo.exceptions import NoNodeError

        s = self.session
        path = self.paths.member(self.task_name)
        value = Z.member_value(self.cfg.incarnation, os.getpid(), socket.gethostname(), self.next_step)
        for _ in range(20):
            if s.create(path, value, ephemeral=True):
                break
            try:
                raw, stat = s.retry(s.client.get, path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == s.session_id():
                break  # ours (a retried create)
            # a dead incarnation's node, waiting for its session to expire: replace it
            try:
                s.retry(s.client.delete, path, version=stat.version)
            except Exception:
                time.sleep(0.05)
        self._need_member = False

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        try:
            return self._run()
        except Stop:
            self._say("stopped")
            return EXIT_OK
        except Z.ZkUnavailable as exc:
            self._say(f"error: {exc}")
            return EXIT_ZK
        except InputError as exc:
            self._say(f"error: {exc}")
            return EXIT_INPUT
        except StressFailed as exc:
            self._say(f"error: {exc}")
            return EXIT_STRESS
        except StressKilled as exc:
            self._say(f"error: {exc}")
            return EXIT_STRESS_KILLED
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._kill_child()
            if self.session is not None:
                self.session.close()  # removes the membership node at once

    def _say(self, text: str) -> None:
        print(f"[worker {self.task_name}#{self.cfg.incarnation}] {text}", file=sys.stderr, flush=True)

    def _run(self) -> int:
        cfg = self.cfg
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))  # set by the kubelet in every container
        s = self.session = Z.ZkSession(
            cfg.hosts, cfg.creds, session_timeout_s=cfg.session_timeout_s, connect_timeout_s=cfg.connect_timeout_s,
            op_deadline_s=cfg.zk_wait_s, unreachable_hint=Z.POD_HINT if in_pod else Z.LOCAL_HINT,
        )
        s.add_listener(self._on_state)
        s.start()
        info = self._read_run()
        spec = info.tasks.get(self.task_name)
        if spec is None:
            raise InputError(f"the run at {cfg.root} has no task {self.task_name!r} (it has {', '.join(info.tasks)})", field="--task")
        command = spec.get("command")
        task = Task(self.task_name, spec["stressor"], spec["ops_per_unit"] if not command else 1.0, SeriesRef(Path("-")),
                    spec["workers"], command=tuple(command) if command else None)
        stress_ng = shutil.which(cfg.stress_ng) if not command else cfg.stress_ng
        if not stress_ng:
            raise InputError(f"stress-ng not found (looked for {cfg.stress_ng!r}); install it: `apt-get install stress-ng`", field="--stress-ng")

        # restore
        cp_path = self.paths.checkpoint(self.task_name)
        cp = s.get(cp_path)
        last = Z.parse_checkpoint(cp_path, cp) if cp is not None else -1
        self.next_step = last + 1
        self._register()
        self._say(f"joined at step {self.next_step} (checkpoint: last completed {last})")
        if last >= 0:
            barrier = Z.StepBarrier(s, self.paths, last, list(info.tasks))
            if s.exists(self.paths.barrier(last)) and not barrier.is_done():
                barrier.leave(self.task_name, cfg.step_timeout_s, interrupt=self._interrupt)

        t = self.next_step
        while True:
            self.next_step = t
            workload = self._wait_step(t, info)
            if workload is None:
                self._say(f"stop order at step {t}")
                return EXIT_OK
            barrier = Z.StepBarrier(s, self.paths, t, list(info.tasks))
            result_path = self.paths.result(self.task_name, t)
            if not s.exists(result_path):
                enter_wait = barrier.enter(self.task_name, cfg.step_timeout_s, interrupt=self._interrupt)
                duration, observed = self._stress(task, workload, stress_ng, t)
                self._report(t, duration, enter_wait, result_path, cp_path, observed)
            barrier.leave(self.task_name, cfg.step_timeout_s, interrupt=self._interrupt)
            t += 1

    def _read_run(self) -> Z.RunInfo:
        s = self.session
        root = self.cfg.root
        v = s.get(root)
        if v is None:
            raise InputError(f"no run at {root} in ZooKeeper {self.cfg.hosts}", field="--root")
        return Z.parse_run(root, v)

    def _wait_step(self, t: int, info: Z.RunInfo) -> float | None | bool:
        s = self.session
        path = self.paths.step(self.task_name, t)

        def check(watch):
            # exists() leaves a watch on a missing node (get() would not)
            v = s.get(path) if s.exists(path, watch=watch) else None
            if v is None:
                if not s.exists(self.cfg.root):
                    raise Stop()  # the run was removed
                return None
            w = Z.parse_step(path, v, t, info.workload_range)
            return ("stop",) if w is None else (w,)

        got = s.wait_for(check, None, interrupt=self._interrupt)
        return None if got[0] == "stop" else got[0]

    def _stress(self, task: Task, workload: float, stress_ng: str, t: int = 0) -> tuple[float, dict]:
        """Run step t (stress-ng, or the task's command); (wall seconds, what it reported on stdout)."""
        is_command = task.kind == "command"
        what = f"task {self.task_name} step {t}: " + ("its command" if is_command else "stress-ng")
        args = task.step_args(workload, t, stress_ng=stress_ng, run_dir=os.environ.get("BSP_RUN_DIR", os.getcwd()))
        env = {**os.environ, **task.step_env(workload, t)} if is_command else None
        start = time.perf_counter()
        try:
            self._child = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if is_command else subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True, env=env,
            )
        except OSError as exc:  # missing, not executable: the program's fault, not worth a restart
            raise InputError(f"{what} cannot start {args[0]!r}: {exc.strerror or exc}", field="command") from None
        try:
            out, err = self._child.communicate(timeout=self.cfg.step_timeout_s)
        except subprocess.TimeoutExpired:
            self._kill_child()
            raise StressFailed(f"{what} ran past the step timeout ({self.cfg.step_timeout_s:g} s, --step-timeout)") from None
        duration = time.perf_counter() - start
        code = self._child.returncode
        self._child = None
        if code < 0 and not self._stopping:
            raise StressKilled(f"{what} was killed by signal {-code} ({_signal_name(-code)}) in the middle of a step")
        if code != 0:
            tail = " ".join((err or b"").decode(errors="replace").split())[-300:]
            raise StressFailed(f"{what} exited with code {code}: {' '.join(args)}: {tail}")
        return duration, (parse_workload_report(out or b"", what) if is_command else {})

    def _report(self, t: int, duration: float, enter_wait: float, result_path: str, cp_path: str, observed: dict | None = None) -> None:
        """The result and the checkpoint, in one transaction: both or neither."""
        from kazoo.exceptions import NodeExistsError

        s = self.session
        value = Z.result_value(t, duration, enter_wait, self.cfg.incarnation, time.time(), **(observed or {}))
        results = s.commit([("create", result_path, value), ("set", cp_path, Z.checkpoint_value(t, self.cfg.incarnation))])
        failed = [r for r in results if isinstance(r, Exception)]
        if failed and not isinstance(results[0], NodeExistsError):
            raise failed[0]
        # NodeExists: an earlier try of this very transaction went through (connection loss), or another
        # incarnation reported t first; either way step t is counted once.


def parse_workload_report(stdout: bytes, what: str) -> dict:
    """The workload a command reported: its last stdout line that is a JSON object with "workload"
    (optionally "next_workload"); {} if it printed none. A line that starts like one but is not valid
    JSON, or a workload that is not a finite number in 0..MAX_WORKLOAD, is an InputError naming `what`."""
    found: dict = {}
    for raw in stdout.decode(errors="replace").splitlines():
        line = raw.strip()
        if not (line.startswith("{") and '"workload"' in line):
            continue
        try:
            v = json.loads(line, parse_constant=lambda c: float(c))  # NaN/Infinity parsed, then refused below
        except ValueError:
            raise InputError(f"{what} printed a malformed workload report {line[:200]!r} (expected one JSON line like {{\"workload\": 37.5}})", field="workload") from None
        if not isinstance(v, dict):
            continue
        found = {"workload": _reported(v, "workload", what)}
        if v.get("next_workload") is not None:
            found["next_workload"] = _reported(v, "next_workload", what)
    return found


def _reported(v: dict, key: str, what: str) -> float:
    x = v.get(key)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)) or not 0 <= float(x) <= Z.MAX_WORKLOAD:
        raise InputError(f"{what} reported {key} {x!r}; expected a finite number in 0..{Z.MAX_WORKLOAD:g}", field=key)
    return float(x)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown"


def main(cfg: WorkerConfig) -> int:
    return Worker(cfg).run()

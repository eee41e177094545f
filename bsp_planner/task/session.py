"""`join()`: a user's long-running process as one task of a live run, over ZooKeeper.

The protocol is the worker's (:mod:`bsp_planner.runtime.worker`), so the coordinator records a library
task's steps exactly as its own worker's:

* join: the run's root must hold run BSP_RUN_ID with a task BSP_TASK, readable with the credentials
  given (the run's digest ACL refuses others); the task's checkpoint says where it restarts
  (:attr:`TaskSession.first_step`); an ephemeral member node (with BSP_INCARNATION) tells the
  coordinator it is ready.
* barrier mode, per step t: wait for the coordinator to publish t (its workload, or a stop order:
  :class:`RunEnded`), enter t's barrier (CPU changes are applied before the coordinator publishes),
  run the block (timed), then leave the barrier with the report and the checkpoint in the same transaction
  as the leave arrival (all or nothing, one round trip).
* observe mode: the block is timed and reported (result + checkpoint, one transaction) without waiting
  for anyone; the program keeps its own synchronisation. The report is committed by a thread of the
  session's own (:mod:`.reporter`), so the step's end costs the application a queue put; a report that
  failed is raised at the next step or at close, which waits for the queued reports.
* on cgroup v1 the ZooKeeper client's threads (and the reporter's) leave the task's CPU-quota group for
  the run's group, so a throttled task's report is not held up to the next CFS period
  (:attr:`TaskSession.report_group` says where they went; None: not moved).

A report for another step than the next one (out of order, or repeated) raises StepOrderError and records
nothing; a workload that is NaN, negative or absurd raises InputError naming task and step.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..zk.barrier import CountingBarrier, StepBarrier, step_barrier
from ..zk.credentials import ENV_AUTH_FILE, Credentials, load_credentials, parse_credentials
from ..zk.schema import (
    DEFAULT_PARENT,
    RunInfo,
    RunPaths,
    check_task_name,
    check_workload,
    checkpoint_value,
    member_value,
    parse_checkpoint,
    parse_run,
    parse_step,
    result_value,
)
from ..zk.session import LOCAL_HINT, Prefetch, ZkSession, ZkUnavailable
from .errors import RunEnded, StepOrderError, TaskJoinError
from .reporter import Reporter, leave_quota
from .step_signal import ENV_STEP_SIGNAL, StepSignal
from .timing import SelfTimedReports, StepTimer

#: the environment the coordinator sets for a process task
ENV = {
    "run_id": "BSP_RUN_ID",
    "task": "BSP_TASK",
    "zookeeper": "BSP_ZOOKEEPER",
    "auth": "BSP_ZK_AUTH",
    "sync": "BSP_SYNC",
    "run_dir": "BSP_RUN_DIR",
    "root": "BSP_ZK_ROOT",
    "incarnation": "BSP_INCARNATION",
    "step_signal": ENV_STEP_SIGNAL,
}
SYNC_MODES = ("barrier", "observe")


def _need(env: dict, key: str) -> str:
    name = ENV[key]
    value = env.get(name, "").strip()
    if not value:
        raise TaskJoinError(
            f"${name} is not set: this program joins a bsp-planner run from the environment its coordinator sets "
            "(run it as a job's `process = [...]` task), or use bsp_planner.task.local_session() to run it alone",
            field=name,
        )
    return value


def join(env: dict | None = None, *, step_timeout_s: float | None = None) -> TaskSession:
    """Join the run named by the environment (see :data:`ENV`); TaskJoinError says what is missing or wrong."""
    env = dict(os.environ if env is None else env)
    run_id = _need(env, "run_id")
    task = _need(env, "task")
    hosts = _need(env, "zookeeper")
    sync = env.get(ENV["sync"], "barrier").strip() or "barrier"
    if sync not in SYNC_MODES:
        raise TaskJoinError(f"expected ${ENV['sync']} barrier or observe, got {sync!r}", field=ENV["sync"])
    try:
        check_task_name(task)
    except Exception:
        raise TaskJoinError(f"${ENV['task']} is not a task name: {task!r}", field=ENV["task"]) from None
    creds = (
        parse_credentials(env[ENV["auth"]], f"${ENV['auth']}") if env.get(ENV["auth"]) else load_credentials(None, env)
    )
    if creds is None:
        raise TaskJoinError(
            f"no ZooKeeper credentials: set ${ENV['auth']} (user:password) or ${ENV_AUTH_FILE}; a task joins only "
            "with its run's",
            field=ENV["auth"],
        )
    root = env.get(ENV["root"]) or f"{DEFAULT_PARENT}/{run_id}"
    try:
        incarnation = int(env.get(ENV["incarnation"], "0"))
    except ValueError:
        raise TaskJoinError(
            f"expected an integer ${ENV['incarnation']}, got {env[ENV['incarnation']]!r}", field=ENV["incarnation"]
        ) from None
    signal = env.get(ENV["step_signal"], "").strip()
    step_signal = StepSignal(signal, task) if signal and sync == "observe" else None
    s = TaskSession(hosts, creds, root, run_id, task, sync, env.get(ENV["run_dir"], ""), incarnation, step_timeout_s)
    s.step_signal = step_signal
    try:
        s._join()
    except BaseException:
        s.close()
        raise
    return s


class TaskSession(SelfTimedReports):
    """One task of a live run (made by :func:`join`, or by the stress-ng worker with its own settings).

    `run_id` None accepts the run the root holds (the worker is told its root, not its id). `interrupt`
    is called while waiting (it may raise to leave); `zk_wait_s` bounds how long ZooKeeper may stay
    unreachable (then ZkUnavailable). A session lost and renewed re-registers the member node."""

    def __init__(
        self,
        hosts: str,
        creds: Credentials,
        root: str,
        run_id: str | None,
        task: str,
        sync: str,
        run_dir: str,
        incarnation: int,
        step_timeout_s: float | None,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 30.0,
        zk_wait_s: float = 120.0,
        interrupt: Callable[[], bool] | None = None,
        unreachable_hint: str = LOCAL_HINT,
    ) -> None:
        self.hosts, self.root, self.run_id, self.task_name = hosts, root, run_id, task
        self.sync, self.run_dir, self.incarnation = sync, run_dir, incarnation
        self.step_timeout_s = step_timeout_s
        self.zk_wait_s = zk_wait_s
        self._user_interrupt = interrupt
        self.paths = RunPaths(root)
        self.session = ZkSession(
            hosts,
            creds,
            session_timeout_s=session_timeout_s,
            connect_timeout_s=connect_timeout_s,
            op_deadline_s=zk_wait_s,
            unreachable_hint=unreachable_hint,
        )
        self.session.add_listener(self._on_state)
        self._need_member = False
        self._ended = False
        self._ahead: Prefetch | None = None  # the next step's publication, asked for ahead of need
        self._reporter: Reporter | None = None  # observe mode: commits the reports from a thread of its own
        #: observe mode, local run: tells the coordinator each step's end ahead of its report (.step_signal)
        self.step_signal: StepSignal | None = None
        #: the run's group the reporting threads were moved to, out of the task's CPU quota (None: not moved)
        self.report_group: str | None = None
        self.first_step = 0
        self._next = 0
        self.info: RunInfo | None = None
        #: where the last step's time went, in seconds (a few perf_counter reads per step): waiting for and
        #: reading the step's publication, entering the barrier, the block, the report, leaving the barrier
        self.timings: dict[str, float] = {}

    def _on_state(self, state: str) -> None:
        if state == "LOST":  # the session expired: its ephemeral member node is gone
            self._need_member = True

    def _interrupt(self) -> bool:
        if self._user_interrupt is not None and self._user_interrupt():
            return True
        s = self.session
        if self._need_member and s.connected:
            self._register()
        if s.down_for() > self.zk_wait_s:
            raise ZkUnavailable(f"ZooKeeper at {self.hosts} unreachable for {s.down_for():.0f} s", field="--zookeeper")
        return False

    # -- joining ---------------------------------------------------------------------------------
    def _join(self) -> None:
        from kazoo.exceptions import NoAuthError

        before = {t.native_id for t in threading.enumerate()}
        s = self.session.start()
        # the ZooKeeper client's threads, and (observe mode) the reporter's, report outside the task's quota
        reporting = [t.native_id for t in threading.enumerate() if t.native_id not in before]
        if self.sync == "observe":
            self._reporter = Reporter(self._report, name=f"bsp-report-{self.task_name}")
            reporting.append(self._reporter.native_id)
        self.report_group = leave_quota(tid for tid in reporting if tid is not None)
        try:
            self._read_run()
            cp_path = self.paths.checkpoint(self.task_name)
            cp = s.get(cp_path)
            last = parse_checkpoint(cp_path, cp) if cp is not None else -1
            self.first_step = self._next = last + 1
            self._register()
        except NoAuthError:
            raise TaskJoinError(
                f"task {self.task_name} is refused by run {self.run_id}: its credentials are not the run's "
                f"({self.root} in ZooKeeper {self.hosts})",
                field=ENV["auth"],
            ) from None
        if self.sync == "barrier" and last >= 0:  # restarted after reporting `last`: leave that barrier too
            barrier = self._barrier(last)
            if s.exists(self.paths.barrier(last)) and not barrier.is_done():
                barrier.leave(self.task_name, self.step_timeout_s, interrupt=self._interrupt)

    def _read_run(self) -> None:
        """The run's description from its root: this task's run, with this task in it (else TaskJoinError)."""
        v = self.session.get(self.root)
        if v is None:
            raise TaskJoinError(
                f"no run at {self.root} in ZooKeeper {self.hosts} (${ENV['run_id']}={self.run_id})", field=ENV["run_id"]
            )
        info = self.info = parse_run(self.root, v)
        if self.run_id is None:
            self.run_id = info.run_id
        elif info.run_id != self.run_id:
            raise TaskJoinError(
                f"{self.root} holds run {info.run_id!r}, not {self.run_id!r}: this task does not belong to it",
                field=ENV["run_id"],
            )
        if self.task_name not in info.tasks:
            raise TaskJoinError(
                f"run {self.run_id} has no task {self.task_name!r} (it has {', '.join(info.tasks)}): this process "
                "does not belong to it",
                field=ENV["task"],
            )

    def _register(self) -> None:
        """The ephemeral member node with this incarnation; a dead incarnation's node (its session not yet
        expired) is replaced, so the coordinator sees this one ready at once."""
        from kazoo.exceptions import NoNodeError

        s = self.session
        path = self.paths.member(self.task_name)
        value = member_value(self.incarnation, os.getpid(), socket.gethostname(), self._next)
        self._need_member = False
        for _ in range(50):
            if s.create(path, value, ephemeral=True):
                return
            try:
                _, stat = s.retry(s.client.get, path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == s.session_id():
                return
            try:
                s.retry(s.client.delete, path, version=stat.version)
            except Exception:
                time.sleep(0.05)
        raise TaskJoinError(
            f"task {self.task_name}: cannot register at {path} (another live process holds it)", field=ENV["task"]
        )

    def close(self, raise_report_error: bool = True) -> None:
        """Commit the reports still queued, then leave the run (the member node goes at once); a report
        that failed is raised here (unless `raise_report_error` is False)."""
        error: BaseException | None = None
        if self._reporter is not None:
            try:
                self._reporter.flush()
            except BaseException as exc:
                error = exc
            self._reporter.close()
            self._reporter = None
        if self.step_signal is not None:
            self.step_signal.close()
        self.session.close()
        if error is not None and raise_report_error:
            raise error

    # -- what the run says -----------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.info.steps if self.info is not None else 0

    @property
    def ended(self) -> bool:
        """True once the run is over for this task (its last step reported, or a stop order seen)."""
        if not self._ended and self._next >= self.steps:  # the coordinator stops a run only after its last step
            self._ended = True
        return self._ended

    def assigned_workload(self, step: int) -> float | None:
        """The workload the run assigns to `step` (a series-driven job), None where it observes them."""
        path = self.paths.step(self.task_name, step)
        v = self.session.get(path)
        if v is None:
            return None
        assert self.info is not None  # read when the task joined
        w = parse_step(path, v, step, self.info.workload_range)
        return None if w is None or v.get("assigned") is False else w

    def _barrier(self, t: int) -> StepBarrier | CountingBarrier:
        """Step t's barrier, of the kind the run's description names (the coordinator counts a counting one)."""
        assert self.info is not None  # read when the task joined
        return step_barrier(self.info.barrier, self.session, self.paths, t, list(self.info.tasks))

    def _wait_published(self, t: int) -> float | None:
        """Until the coordinator publishes step t: its workload, or None for a stop order."""
        s = self.session
        path = self.paths.step(self.task_name, t)
        assert self.info is not None  # read when the task joined
        ahead, self._ahead = self._ahead, None
        # asked for while we waited in the last step's barrier (else, or where that failed, read as usual)
        v = ahead.value(min(self.zk_wait_s, 5.0)) if ahead is not None and ahead.path == path else None

        def check(watch):
            v = s.get(path)  # usually published already: one round trip
            if v is None and s.exists(path, watch=watch):
                v = s.get(path)
            elif v is None and not s.exists(self.root):
                return "ended"
            return v

        if not isinstance(v, dict):
            v = s.wait_for(check, None, interrupt=self._interrupt)
        if v is None:
            raise TimeoutError(f"task {self.task_name}: step {t} was not published within {self.step_timeout_s} s")
        workload = None if v == "ended" else parse_step(path, v, t, self.info.workload_range)
        if workload is None:
            self._ended = True
            raise RunEnded(f"run {self.run_id} ended before step {t}")
        return workload

    # -- one step --------------------------------------------------------------------------------
    @contextmanager
    def step(self, step: int, workload: float | None = None, next_workload: float | None = None) -> Iterator[StepTimer]:
        """Time one superstep's compute and report it (see the module docstring)."""
        what = f"task {self.task_name} step {step}"
        if step != self._next:
            raise StepOrderError(
                f"{what}: reported out of order or repeated (its next step is {self._next}); nothing was recorded",
                field="step",
            )
        if self._reporter is not None:
            self._reporter.check()  # a report of an earlier step failed: say so before running another
        if self._ended or step >= self.steps:
            self._ended = True
            raise RunEnded(f"run {self.run_id} has {self.steps} steps")
        for k, x in (("workload", workload), ("next_workload", next_workload)):
            if x is not None:
                check_workload(x, what, k)
        enter_wait = 0.0
        barrier = None
        t0 = time.perf_counter()
        t_pub = t0
        if self.sync == "barrier":
            assigned = self._wait_published(step)
            t_pub = time.perf_counter()
            barrier = self._barrier(step)
            enter_wait = barrier.enter(self.task_name, self.step_timeout_s, interrupt=self._interrupt)
        else:  # nothing to wait for, nothing to read: the report is the only round trip
            assigned = None
        st = StepTimer(step, assigned, workload, next_workload)
        st.start()
        yield st
        signal = self.step_signal if barrier is None else None
        st.stop(then=None if signal is None else lambda: signal.send(step))
        t_block = time.perf_counter()
        st.check_workloads(what)
        report = self._report_ops(st, enter_wait)
        t_rep = time.perf_counter()
        leave_s = 0.0
        if barrier is None:
            if self._reporter is not None:  # observe mode: the application's thread only queues it
                self._reporter.submit(report)
            else:
                self._report(report)
            t_rep = time.perf_counter()
        self._next = step + 1
        if barrier is not None:  # the report and the checkpoint travel with the leave arrival: one round trip
            if step + 1 < self.steps:
                # the next publication is usually there by the time this barrier releases: asking now, behind
                # the leave arrival, saves the round trip that would follow the release
                self._ahead = self.session.prefetch(self.paths.step(self.task_name, step + 1))
            leave_s = barrier.leave(self.task_name, self.step_timeout_s, interrupt=self._interrupt, with_ops=report)
        self.timings = {
            "published_s": t_pub - t0,
            "enter_s": enter_wait,
            "block_s": st.wall_s,
            "report_s": t_rep - t_block,
            "leave_s": leave_s,
            "total_s": time.perf_counter() - t0,
        }

    def _report_ops(self, st: StepTimer, enter_wait: float) -> list[tuple]:
        """The report and the checkpoint, for one transaction: both or neither, and a step counted once."""
        t = st.step
        value = result_value(
            t,
            st.wall_s,
            enter_wait,
            self.incarnation,
            st.ended_at,
            st.workload,
            st.next_workload,
            st.cpu_s,
            started_at=st.started_at,
        )
        return [
            ("create", self.paths.result(self.task_name, t), value),
            ("set", self.paths.checkpoint(self.task_name), checkpoint_value(t, self.incarnation)),
        ]

    def _report(self, ops: list[tuple]) -> None:
        """Commit the report (observe mode: no barrier to carry it); a report already there is not an error
        (another incarnation reported the step, or a retried commit went through)."""
        from kazoo.exceptions import NodeExistsError

        results = self.session.commit(ops)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed and not isinstance(results[0], NodeExistsError):
            raise failed[0]

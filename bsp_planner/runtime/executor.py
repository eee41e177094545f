"""The live executor: carries out one configuration and one superstep on real tasks (steps 2-5 of
:mod:`.coordinator`), through a backend and ZooKeeper; it decides nothing.

In observe mode, in place, every task's quota for its next step is put in place as its own report of the
step before is committed (`.quota_ahead.QuotaKeeper`, which also says in what order and what that means
for the budget): the decision's where that step is decided (`reconfigure`; with a decision lead
`prepare_ahead`, while the step before still runs), else the planner's latest plan's (`plan_ahead`)."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import numpy as np

from ..loop import StepsEnded
from ..zk.barrier import CountingBarrier, StepBarrier, step_barrier
from ..zk.schema import (
    MalformedValue,
    RunPaths,
    parse_checkpoint,
    parse_member,
    parse_result,
    parse_step,
    step_value,
    stop_value,
)
from ..zk.session import ZkSession
from .backends import Backend, TaskLost, WorkerLaunch
from .own_share import RunGroupMembership
from .quota_ahead import QuotaKeeper, plan_rows
from .run_settings import RunSettings
from .step_signals import StepSignals
from .worker import EXIT_INPUT, EXIT_STRESS

# after the driver's end, how long the tasks may take to report the step they were in, or to exit
DRIVER_GRACE_S = 5.0
# a reconfiguration the platform refuses is re-planned on the nodes' free CPU at most this many times per step
MAX_REPLANS_PER_STEP = 3


def exit_counts(exit_code: int | None) -> dict[str, float]:
    """How a task's process ended, as a watcher's counts: {"signal": 9} where a signal killed it (Popen's
    negative code), {"exit_code": 3} where it exited, nothing where the backend cannot tell."""
    if exit_code is None:
        return {}
    return {"signal": float(-exit_code)} if exit_code < 0 else {"exit_code": float(exit_code)}


def ended_how(exit_code: int | None) -> str:
    """How a task's program ended, as a user reads it: "exited with code 3", or "was killed by SIGKILL
    (signal 9)" where it died of a signal (Popen's negative code, or a shell's 128 + N is left as it is)."""
    if exit_code is not None and exit_code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-exit_code).name} (signal {-exit_code})"
        return f"was killed by signal {-exit_code}"
    return f"exited with code {exit_code}"


class RunFailed(Exception):
    """The run cannot go on (a worker that fails again and again, a stressor that errors)."""


@dataclass
class StepOutcome:
    released_at: float  # time.time() of the step's release
    restarts: dict[str, int]


@dataclass(eq=False)
class LiveExecutor:
    """Tasks are named in the planner's order; ``cpu_of(level)`` gives a level's millicores; `relock` retakes
    a lost coordinator lock. `check_stop` raises KeyboardInterrupt once a stop was asked for (SIGTERM):
    checked between ZooKeeper calls, never inside one, so a stop cannot leave the client half-way through a
    request."""

    settings: RunSettings
    session: ZkSession
    paths: RunPaths
    backend: Backend
    tasks: list[str]
    cpu_of: Callable[[int], float]
    worker_env: dict[str, str]
    incarnation: dict[str, int]
    save_incarnations: Callable[[dict[str, int]], None]
    relock: Callable[[], None]
    say: Callable[[str], None]
    _: KW_ONLY
    # process tasks: the user's long-running program (bsp_planner.task), task -> its argument list
    processes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sync: str = "barrier"
    run_id: str = ""
    run_dir: str = ""
    check_stop: Callable[[], None] = lambda: None
    # when the application's driver (a service with ends_run = true) ended with status 0 (time.time()), else None
    driver_ended: Callable[[], float | None] = lambda: None
    # per task: its port, the run's ports, the job's folder (placeholders)
    task_env: dict[str, dict[str, str]] = field(default_factory=dict)
    levels_now: dict[str, int] = field(default_factory=dict, init=False)
    last_methods: dict[str, str] = field(default_factory=dict, init=False)  # task -> how it last changed
    # task -> when its new quota was in place (time.time(), the tasks' clock), for the last reconfiguration
    quota_at: dict[str, float] = field(default_factory=dict, init=False)
    # observe mode, in place: each task's quota for its next step, written as it reports the step before
    keeper: QuotaKeeper | None = field(default=None, init=False)
    # ...and, on a local run, each task's end of step signalled ahead of its report (task/step_signal.py)
    step_signals: StepSignals | None = field(default=None, init=False)
    planned: tuple[int, np.ndarray] | None = field(default=None, init=False)  # the latest plan (step, rows)
    # the coordinator's CPU share while the tasks saturate the CPUs
    own_share: RunGroupMembership = field(default_factory=RunGroupMembership, init=False)
    # the last reconfiguration's in-place batches (a backend that resizes in batches: kubernetes), as logged
    last_batches: list[dict] = field(default_factory=list, init=False)
    # replan(step, levels_now (tasks,), why: the platform's refusal) -> the levels re-planned on the nodes'
    # free CPU (the coordinator's RunPlanning.replan); None: a refusal stops the run, resumable
    replan: Callable[[int, np.ndarray, TaskLost], np.ndarray] | None = field(default=None, init=False)
    # step -> what made the run re-plan it and what it applied instead (the step log's `replanned`)
    replanned: dict[int, dict] = field(default_factory=dict, init=False)
    # noticed(kind, message, **counts): the run's watchers (`watchers.Watchers.noticed`), told of each task failure
    noticed: Callable[..., None] = field(default=lambda kind, message, **counts: None, init=False)

    # -- workers -----------------------------------------------------------------------------------
    def _launch(self, task: str) -> WorkerLaunch:
        s = self.settings
        k = self.incarnation.get(task, -1) + 1
        self.incarnation[task] = k
        if task in self.processes:
            return self._process_launch(task, k)
        options = {
            "--zookeeper": s.zookeeper,
            "--root": self.paths.root,
            "--task": task,
            "--incarnation": str(k),
            "--stress-ng": s.stress_ng,
            "--session-timeout": f"{s.session_timeout_s:g}",
            "--zk-wait": f"{max(s.zk_wait_s * 4, 60):g}",
            # the worker's own limit is only a backstop, well past the coordinator's step timeout, which always
            # fires first and names the tasks that did not report (one limit racing the other gave either message)
            "--step-timeout": f"{2 * s.step_timeout_s + 30:g}",
        }
        args = ("worker", *(word for option in options.items() for word in option))
        return WorkerLaunch(task=task, args=args, env={**self.worker_env, **self.task_env.get(task, {})}, incarnation=k)

    def _process_launch(self, task: str, k: int) -> WorkerLaunch:
        """A process task: the user's program itself, with the environment bsp_planner.task joins from."""
        from ..inputs.job import substitute

        values = {"task": task, "run_dir": self.run_dir, "python": sys.executable}
        args = tuple(substitute(a, values) for a in self.processes[task])
        env = {
            **self.worker_env,
            **self.task_env.get(task, {}),
            "BSP_RUN_ID": self.run_id,
            "BSP_TASK": task,
            "BSP_ZOOKEEPER": self.settings.zookeeper,
            "BSP_ZK_ROOT": self.paths.root,
            "BSP_SYNC": self.sync,
            "BSP_RUN_DIR": self.run_dir,
            "BSP_INCARNATION": str(k),
            **(self.step_signals.env() if self.step_signals is not None else {}),
        }
        return WorkerLaunch(task=task, args=args, env=env, incarnation=k, program=True)

    def _wait_ready(self, tasks: list[str], next_step: int) -> None:
        """Until every task's member node shows its current incarnation; a worker that dies meanwhile is
        an error (with the end of its log), and so is one whose checkpoint is behind the run log (it would
        wait for a step the coordinator will never publish again)."""
        s = self.session
        pending = set(tasks)
        deadline = time.monotonic() + self.settings.worker_start_s

        def check(watch):
            for t in list(pending):
                path = self.paths.member(t)
                v = s.get(path) if s.exists(path, watch=watch) else None
                if v is None:
                    continue
                member = parse_member(path, v)
                if member["incarnation"] != self.incarnation[t]:
                    continue
                if member["next_step"] < next_step:
                    raise RunFailed(
                        f"task {t}'s worker resumed at step {member['next_step']} but the run log continues at step {next_step}: "
                        f"its checkpoint in ZooKeeper ({self.paths.checkpoint(t)}) is behind the run log"
                    )
                pending.discard(t)
            return True if not pending else None

        def ran_ahead_and_ended(t: str, exit_code: int | None) -> bool:
            # On resume, steps published before the interruption are there at once: a quick process may run
            # them and end normally (exit 0, its checkpoint past the run log) before we saw it join.
            if t not in self.processes or exit_code != 0:
                return False
            v = s.get(self.paths.checkpoint(t))
            return v is not None and parse_checkpoint(self.paths.checkpoint(t), v) >= next_step

        def interrupt():
            self.check_stop()
            for t in list(pending):
                st = self.backend.poll_task(t)
                if st.alive is False and ran_ahead_and_ended(t, st.exit_code):
                    pending.discard(t)
                elif st.alive is False:
                    what = "process" if t in self.processes else "worker"
                    how = f"task {t}'s {what} {ended_how(st.exit_code)} while starting for step {next_step}"
                    self._task_failed(t, next_step, st.exit_code, how)
                    raise RunFailed(
                        f"task {t}'s worker {ended_how(st.exit_code)} while starting:\n{self.backend.log_tail(t)}"
                    )
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"worker(s) {', '.join(sorted(pending))} did not join within {self.settings.worker_start_s:g} s"
                )
            return False

        s.wait_for(check, None, interrupt=interrupt, tick_s=0.05)

    def start_all(self, levels: np.ndarray, next_step: int) -> float:
        """Start every task under its level's CPU; the seconds until all joined."""
        t0 = time.perf_counter()
        self.levels_now = {t: int(levels[i]) for i, t in enumerate(self.tasks)}
        self.backend.check_configuration({t: self.cpu_of(k) for t, k in self.levels_now.items()})
        in_place_observed = self.sync == "observe" and self.settings.reconfigure == "in-place"
        if in_place_observed and self.backend.name == "local" and self.step_signals is None:
            self.step_signals = StepSignals(self.tasks)  # the tasks run on this host: a datagram reaches us
        for t, k in self.levels_now.items():
            self.backend.start_task(self._launch(t), self.cpu_of(k))
        self.save_incarnations(self.incarnation)
        # beside the tasks in the run's group, ahead of them, not behind the whole group in the root one
        self.own_share.join(getattr(self.backend, "run_parent", None))
        self._wait_ready(self.tasks, next_step)
        if in_place_observed:
            self.keeper = keeper = QuotaKeeper(self.tasks, self.levels_now, next_step, self._resize_in_place)
            keeper.decide(next_step, dict(self.levels_now))
            if self.planned is not None:
                self.plan_ahead(*self.planned)
            for t in self.tasks:
                keeper.follow(self.session.exists_async, self.paths.result, t)
            if self.step_signals is not None:
                self.step_signals.deliver(keeper.on_report)
        return time.perf_counter() - t0

    def prepare_ahead(self, levels: np.ndarray, next_step: int) -> None:
        """Observe mode, in place: the configuration of next_step, decided while step next_step - 1 runs.
        Checked whole before anything is written; each task's quota is then written as soon as its report
        of next_step - 1 is there (now, for tasks that reported already)."""
        new = {t: int(levels[i]) for i, t in enumerate(self.tasks)}
        self.backend.check_configuration({t: self.cpu_of(k) for t, k in new.items()})
        if self.keeper is not None:
            self.keeper.check()
            self.keeper.decide(next_step, new)

    def plan_ahead(self, step: int, rows: np.ndarray) -> None:
        """Observe mode, in place: rows (k, tasks), the configurations the planner's latest plan holds for
        step and the k - 1 steps after it; a task that reports a step before the next one is decided goes
        under the plan's quota for it."""
        self.planned = (step, rows)
        if self.keeper is not None:  # row 0 is step's decision, which `reconfigure` / `prepare_ahead` bring
            self.keeper.plan(step + 1, plan_rows(step + 1, rows[1:], self.tasks))

    def _resize_in_place(self, task: str, level: int) -> None:
        self.backend.resize_task(task, self.cpu_of(level))
        self.levels_now[task] = level

    def reconfigure(self, levels: np.ndarray, next_step: int) -> tuple[float, list[str]]:
        """Apply a new configuration to the tasks whose CPU changes (those not already written ahead for
        next_step); (real seconds it took, written ahead included, tasks). Where the platform refuses it
        (a configuration that no longer fits the nodes, a resize the kubelet leaves pending) and the run
        can re-plan (:attr:`replan`), the configuration re-planned on the nodes' free CPU is applied
        instead and recorded in :attr:`replanned`."""
        if self.keeper is not None:  # observe mode, in place: each task as its report arrives (QuotaKeeper)
            new = {t: int(levels[i]) for i, t in enumerate(self.tasks)}
            self.backend.check_configuration({t: self.cpu_of(k) for t, k in new.items()})
            self.keeper.check()
            self.keeper.decide(next_step, new)
            seconds, written = self.keeper.step_writes(next_step)
            self.quota_at = {t: p["quota_at"] for t, p in self.keeper.placements(next_step).items()}
            self.last_methods = dict.fromkeys(written, str(self.settings.reconfigure))
            return seconds, written
        self.quota_at = {}
        self.last_batches = []
        t0 = time.perf_counter()
        changed_all: list[str] = []
        events = getattr(self.backend, "events", None)  # what a backend that times each change did (kubernetes)
        seen = len(events) if events is not None else 0
        for attempt in range(MAX_REPLANS_PER_STEP + 1):
            try:
                changed_all += [t for t in self._apply(levels, next_step) if t not in changed_all]
                break
            except TaskLost as exc:
                if self.replan is None or not getattr(exc, "replan_on_nodes", False) or attempt == MAX_REPLANS_PER_STEP:
                    raise
                holds = getattr(exc, "holds", {})  # what each pod holds now: a batch may have been half applied
                for t, m in holds.items():
                    if t in self.levels_now and abs(m - self.cpu_of(self.levels_now[t])) >= 0.5:
                        self.levels_now[t] = int(levels[self.tasks.index(t)])
                        changed_all.append(t)
                current = np.array([self.levels_now[t] for t in self.tasks], dtype=np.int64)
                levels = np.asarray(self.replan(next_step, current, exc), dtype=np.int64)
                info = self.replanned.setdefault(next_step, {"why": [], "refused": {}})
                info["why"].append(getattr(exc, "message", None) or str(exc))
                refused = getattr(exc, "refused", {})
                info["refused"] |= {t: {"reason": r[0], "node": r[1], "millicores": r[3]} for t, r in refused.items()}
                reasons = {r["reason"] for r in info["refused"].values()}
                info["kind"] = "infeasible" if "Infeasible" in reasons else "deferred" if reasons else "does_not_fit"
                info["levels"] = levels.tolist()
        if not changed_all:
            return 0.0, []
        # how each task really changed: the run's method, unless the backend fell back (a refused resize)
        self.last_methods = {t: str(self.settings.reconfigure) for t in changed_all}
        self.last_methods.update({e.task: e.mode for e in (events or [])[seen:] if e.task in self.last_methods})
        return time.perf_counter() - t0, changed_all

    def _apply(self, levels: np.ndarray, next_step: int) -> list[str]:
        """One attempt at `levels`: checked against the nodes, then applied (in place: the shrinks, then the
        grows, each batch at once where the backend resizes in batches); the tasks changed."""
        new = {t: int(levels[i]) for i, t in enumerate(self.tasks)}
        changed = [t for t in self.tasks if self.levels_now[t] != new[t]]
        if not changed:
            return []
        self.backend.check_configuration({t: self.cpu_of(k) for t, k in new.items()})
        if self.settings.reconfigure == "in-place":
            batches = getattr(self.backend, "resize_tasks", None)
            if batches is not None:  # issued together, awaited together: two round trips, not one per task
                known = len(getattr(self.backend, "batches", []))
                try:
                    done = batches({t: self.cpu_of(new[t]) for t in changed})
                finally:  # a refused batch is logged too
                    self.last_batches += [b.as_dict() for b in getattr(self.backend, "batches", [])[known:]]
                for b in done:
                    self.quota_at |= dict.fromkeys(b.tasks, b.ended_at)
                self.quota_at |= {t: time.time() for t in changed if t not in self.quota_at}
            else:
                # shrink first, so that the sum of the quotas never exceeds the budget in between
                for t in sorted(changed, key=lambda t: new[t] - self.levels_now[t]):
                    self.backend.resize_task(t, self.cpu_of(new[t]))
                    self.quota_at[t] = time.time()
        else:
            for t in changed:
                self.backend.recreate_task(self._launch(t), self.cpu_of(new[t]))
            self.save_incarnations(self.incarnation)
            self._wait_ready(changed, next_step)
            self.quota_at = dict.fromkeys(changed, time.time())
        self.levels_now |= {t: new[t] for t in changed}
        return changed

    # -- one step ----------------------------------------------------------------------------------
    def _barrier(self, t: int) -> StepBarrier | CountingBarrier:
        return step_barrier(self.settings.barrier, self.session, self.paths, t, self.tasks)

    def publish(self, t: int, workloads: np.ndarray, workload_range: tuple[float, float]) -> bool:
        """Step t's barrier and every task's workload, in one transaction; False if it was already there
        (a resumed run), after checking it says the same."""
        from kazoo.exceptions import NodeExistsError

        s = self.session
        barrier = self._barrier(t)
        setup = barrier.setup_ops() if self.sync == "barrier" else []
        ops = setup + [
            ("create", self.paths.step(task, t), step_value(t, workloads[i])) for i, task in enumerate(self.tasks)
        ]
        results = s.commit(ops)
        if not any(isinstance(r, Exception) for r in results):
            return True
        if not isinstance(results[0], NodeExistsError):
            raise next(r for r in results if isinstance(r, Exception))
        for i, task in enumerate(self.tasks):
            path = self.paths.step(task, t)
            v = s.get(path)
            got = parse_step(path, v, t, workload_range) if v is not None else None
            if v is None:
                s.create(path, step_value(t, workloads[i]))
            elif got is None or got != float(workloads[i]):
                raise MalformedValue(
                    f"{path} holds workload {got!r}, the run's series says {float(workloads[i])!r}", field=path
                )
        return False

    def wait_step(self, t: int) -> StepOutcome:
        """Until step t's leave barrier is done (with the counting barrier, this is where its arrivals are
        counted and its phases released); restarts dead workers (a worker, or its stress-ng, killed by a
        signal: the OOM killer, a `kill`)."""
        s = self.session
        barrier = self._barrier(t)
        counting = isinstance(barrier, CountingBarrier)
        observe = self.sync == "observe"
        restarts: dict[str, int] = {}
        deadline = time.monotonic() + self.settings.step_timeout_s
        caps = self.backend.capabilities()
        missing_since: dict[str, float] = {}
        left: set[str] = set()  # observe mode: processes that ended normally without running step t

        def check(watch):
            if observe:  # every task reported step t (the application keeps its own synchronisation)
                reported = [task for task in self.tasks if s.exists(self.paths.result(task, t), watch=watch)]
                if self.keeper is not None:  # a report whose watch was lost
                    for task in reported:
                        self.keeper.on_report(task, t)
                done = len(reported) == len(self.tasks)
            else:  # counting: we count the arrivals, releasing enter, then leave, as each completes
                done = barrier.poll(watch) if counting else barrier.is_done(watch=watch)
            return time.time() if done else None

        def interrupt():
            self.check_stop()
            self.relock()
            driver_ended = self.driver_ended()
            if driver_ended is not None:
                self._after_driver(t, driver_ended)
            for task in self.tasks:
                st = self.backend.poll_task(task)
                dead = st.alive is False
                if st.alive is None and not caps.sees_exit:  # only ZooKeeper can tell
                    if s.exists(self.paths.member(task)):
                        missing_since.pop(task, None)
                    else:
                        since = missing_since.setdefault(task, time.monotonic())
                        dead = time.monotonic() - since > self.settings.session_timeout_s
                if not dead:
                    continue
                if task in self.processes and st.exit_code == 0 and s.exists(self.paths.result(task, t)):
                    continue  # it reported step t (observe mode: perhaps its last) and ended normally
                if (observe or driver_ended is not None) and task in self.processes and st.exit_code == 0:
                    left.add(task)  # the application ended on its own after its last step
                    continue
                restarts[task] = restarts.get(task, 0) + 1
                fatal = task in self.processes or st.exit_code in (EXIT_INPUT, EXIT_STRESS)
                fatal = fatal or restarts[task] > self.settings.max_restarts
                then = "the run fails" if fatal else "restarting it from its checkpoint"
                what = "process" if task in self.processes else "worker"
                how = f"task {task}'s {what} {ended_how(st.exit_code)} in step {t}: {then}"
                self._task_failed(task, t, st.exit_code, how, restarts[task])
                if task in self.processes:  # its state is gone with it: a restart is a resume, not a retry
                    raise RunFailed(
                        f"task {task}'s process {ended_how(st.exit_code)} in step {t} (it keeps its state in "
                        f"memory, so it is not restarted mid-run); its log ends with:\n{self.backend.log_tail(task)}"
                    )
                if st.exit_code in (EXIT_INPUT, EXIT_STRESS):
                    raise RunFailed(
                        f"task {task}'s worker failed in step {t} (exit code {st.exit_code}):\n{self.backend.log_tail(task)}"
                    )
                if restarts[task] > self.settings.max_restarts:
                    raise RunFailed(
                        f"task {task}'s worker died {restarts[task]} times in step {t}; its log ends "
                        f"with:\n{self.backend.log_tail(task)}"
                    )
                self.say(
                    f"step {t}: task {task}'s worker is gone (exit code {st.exit_code}); restarting it from its checkpoint"
                )
                self.backend.start_task(self._launch(task), self.cpu_of(self.levels_now[task]))
                self.save_incarnations(self.incarnation)
                missing_since.pop(task, None)
            if left and all(
                task in left or (self.backend.poll_task(task).alive is False and s.exists(self.paths.result(task, t)))
                for task in self.tasks
            ):
                ran = [task for task in self.tasks if task not in left]
                if ran:
                    raise RunFailed(
                        f"task {', '.join(sorted(left))} ended after step {t - 1} but {', '.join(ran)} ran step {t}: "
                        "the application's tasks ran different numbers of steps"
                    )
                raise StepsEnded(t)  # every task left: the application's own length
            if time.monotonic() > deadline:
                late = [task for task in self.tasks if not s.exists(self.paths.result(task, t))]
                who = f": task {', '.join(late)} did not report step {t}" if late else ""
                raise RunFailed(
                    f"step {t} did not finish within {self.settings.step_timeout_s:g} s (the step timeout: --step-timeout){who}"
                )
            return False

        released = s.wait_for(check, None, interrupt=interrupt, tick_s=0.05)
        return StepOutcome(released, restarts)

    def _task_failed(self, task: str, step: int, exit_code: int | None, message: str, failures: int = 1) -> None:
        """Tell the run's watchers (a Kubernetes Event TaskFailed) that `task`'s process ended mid-run:
        its exit code or signal, the step, and how many times it failed in that step."""
        self.noticed("task_failed", message, step=step, failures=failures, **exit_counts(exit_code))

    def _after_driver(self, t: int, ended_at: float) -> None:
        """The application's driver ended while the coordinator waits for step t: the application ended
        after step t - 1 if no task reports step t (once every task has exited, or after DRIVER_GRACE_S);
        a step some tasks reported and others did not within DRIVER_GRACE_S fails the run."""
        s = self.session
        reported = [task for task in self.tasks if s.exists(self.paths.result(task, t))]
        late = time.time() - ended_at > DRIVER_GRACE_S
        if not reported and (late or all(self.backend.poll_task(task).alive is False for task in self.tasks)):
            raise StepsEnded(t)
        if reported and late:
            missing = [task for task in self.tasks if task not in reported]
            raise RunFailed(
                f"the application's driver service ended (ends_run = true) during step {t}, which "
                f"{', '.join(reported)} reported but {', '.join(missing)} did not within {DRIVER_GRACE_S:g} s"
            )

    def results(self, t: int) -> list[dict]:
        """Every task's report of step t, in the tasks' order; asked for all at once (pipelined: one round
        trip, not one per task), each read again on its own where that failed."""
        s = self.session
        out = []
        ahead = [s.prefetch(self.paths.result(task, t)) for task in self.tasks]
        for task, pending in zip(self.tasks, ahead, strict=True):
            path = self.paths.result(task, t)
            v = pending.value(min(self.settings.zk_wait_s, 5.0))
            if not isinstance(v, dict):
                v = s.get(path)
            if v is None:
                raise MalformedValue(f"step {t} is done but {path} is missing", field=path)
            out.append(parse_result(path, v, t))
        return out

    def cleanup_barrier(self, t: int) -> None:
        if t < 0 or not self.session.exists(self.paths.barrier(t)):
            return
        with contextlib.suppress(Exception):  # only housekeeping: the tree is removed at the end anyway
            self.session.commit(self._barrier(t).cleanup_ops())

    def close_signals(self) -> None:
        if self.step_signals is not None:
            self.step_signals.close()

    def finish(self, steps: int) -> None:
        """Tell every worker to stop after the last step and let them go."""
        if self.keeper is not None:
            self.keeper.close()
        ops = [("create", self.paths.step(task, steps), stop_value(steps)) for task in self.tasks]
        with contextlib.suppress(Exception):
            self.session.commit(ops)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self.backend.poll_task(t).alive for t in self.tasks):
            time.sleep(0.05)
        self.backend.close()

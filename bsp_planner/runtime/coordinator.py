"""The coordinator of a live run (`bsp-planner run`): the one place where a planner's decision meets real tasks.

It builds the planning context exactly as `simulate` does (:mod:`.run_plan`: the experiment file, the
run's nodes, the cost of its reconfiguration method), takes the run (:mod:`.run_store`: the run folder;
:mod:`.run_lock`: the one coordinator lock in ZooKeeper), starts every task through a backend, and runs the
steps through the one step loop `simulate` runs (:class:`bsp_planner.loop.StepLoop`), with
:class:`.live_steps.LiveSteps` as its executor (:func:`.live_steps.run_logged`). Before every superstep t:

1. the loop asks the planner (``planner.decide(t, current)``, the same call the simulator makes);
2. the executor (:mod:`.executor`) applies a changed configuration, ``in-place`` or ``recreate``,
   measuring what that really cost;
3. publishes the step's workloads to ZooKeeper in one transaction (the workers are waiting for them);
4. waits for the step's leave barrier, restarting any worker that dies meanwhile (it reruns the step
   from its checkpoint);
5. reads the measured durations; the loop checks them and learns from them (online forecasts, a
   learning model), and the coordinator appends the step to the run log (flushed).

The planner never sees ZooKeeper or a measurement, so a live run follows the plan the simulator would
charge, and the summary (:mod:`.summary`) compares the two. `--resume RUN` first proves that no live
coordinator holds the run (nothing is touched before), has the loop make its logged decisions again
(`StepLoop.replay`, each checked against the log, learning again from the logged measurements), and
continues with the first step not logged.

Outcomes: finished; :class:`RunInterrupted` (ZooKeeper lost for longer than --zk-wait, Ctrl-C or SIGTERM,
a task lost by the platform, the run folder unwritable): resumable, exit code 3; :class:`RunFailed`
(a task that keeps failing): exit code 1, resumable once the cause is fixed; bad input: InputError, exit 2.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from dataclasses import asdict
from pathlib import Path

from ..core.errors import InputError
from ..inputs.profiles import warn_if_other_processor
from ..inputs.shipped import data_path
from ..profiling.cgroups import CFS_PERIOD_US
from ..zk.credentials import run_credentials, worker_auth_env
from ..zk.schema import DEFAULT_PARENT, RunPaths, run_value
from ..zk.session import ZkSession, ZkUnavailable
from .backends import Backend, TaskLost, make_backend
from .executor import LiveExecutor, RunFailed
from .live_steps import run_logged
from .run_inputs import period_mismatch, profile_period_us
from .run_lock import RunLock
from .run_plan import RunPlanning, spendable_millicores
from .run_root import claim_root, prepare_tree
from .run_settings import RunSettings
from .run_store import RUN_FORMAT, RunStore, RunStoreUnwritable, now_iso, recorded_path
from .runlog import RunLog
from .services import Services
from .stateful import continue_hint, refuse_resume, resolve_reconfigure
from .summary import write_summary
from .watchers import RunWatcher, Watchers

DEFAULT_EXPERIMENT = data_path("experiments/live-default.toml")  # shipped (package data)
DEFAULT_RUNS_DIR = Path("runs")


def _stopped_after(records: list[dict]) -> str:
    return f"the run stopped after step {len(records) - 1}" if records else "the run stopped before its first step"


class RunInterrupted(Exception):
    """The run stopped before its last step but can be resumed (ZooKeeper lost, Ctrl-C, a full disk)."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class LiveResult:
    def __init__(
        self, run_id: str, run_dir: Path, status: str, records: list[dict], summary: dict, paths: dict[str, Path]
    ) -> None:
        self.run_id, self.run_dir, self.status = run_id, run_dir, status
        self.records, self.summary, self.paths = records, summary, paths


class Coordinator(RunPlanning):
    def __init__(
        self,
        settings: RunSettings,
        run_id: str,
        runs_dir: Path = DEFAULT_RUNS_DIR,
        *,
        resume: bool = False,
        backend: Backend | None = None,
        say=None,
        note=None,
        watchers: list[RunWatcher] | None = None,
    ) -> None:
        self.settings = settings = settings.checked()
        self.store = RunStore(runs_dir, run_id)
        self.run_id = self.store.run_id
        self.run_dir = self.store.run_dir
        self.resume = resume
        self._backend = backend
        self.say = say or (lambda text: None)
        self.note = note or self.say  # the lines -q keeps (the cost the run plans with)
        self.watchers = Watchers(watchers or [], self.say)  # metrics, events, a job resource's status
        self.session: ZkSession | None = None
        self.backend: Backend | None = None
        self.lock: RunLock | None = None
        self.executor: LiveExecutor | None = None
        self._lock_lost = False
        self._created_root = False
        self.summary: dict = {}
        self.paths_out: dict[str, Path] = {}
        self.instance = secrets.token_hex(8)  # names this coordinator in its ZooKeeper lock and run.json
        self.stop_requested = threading.Event()
        self.services: Services | None = None
        self.application_length: int | None = None  # steps the application ran, where it ended on its own

    def request_stop(self) -> bool:
        """Ask a running coordinator to stop as Ctrl-C does (resumable, exit 3), at its next safe point: between
        ZooKeeper calls, within a wait's tick. False before the steps started (then the caller stops it at once)."""
        if self.executor is None or self.session is None:
            return False
        self.stop_requested.set()
        self.session.wake_all()
        return True

    def _check_stop(self) -> None:
        if self.stop_requested.is_set():
            raise KeyboardInterrupt
        if self.services:
            self.services.check(self._check_stop)  # restarts a service that exited, or fails the run

    def _worker_env(self) -> dict[str, str]:
        env = worker_auth_env(self.settings.zk_auth, self.run_dir / "zk-auth", self.creds)
        env["BSP_RUN_DIR"] = str(self.run_dir.resolve())  # {run_dir} of command tasks
        return env

    # == ZooKeeper: the run's root and its one coordinator ============================================
    def _connect(self) -> None:
        s = self.settings
        self.session = ZkSession(
            s.zookeeper,
            self.creds,
            session_timeout_s=s.session_timeout_s,
            connect_timeout_s=s.zk_wait_s,
            op_deadline_s=s.zk_wait_s,
        ).start()
        self.session.add_listener(lambda st: setattr(self, "_lock_lost", True) if st == "LOST" else None)

    def _claim(self, logged_steps: int) -> None:
        """Create the run's root (or find our own, on resume), take the coordinator lock, and make sure
        the tasks' checkpoints are not behind the run log (a server that lost its data)."""
        s = self.session
        assert s is not None  # run() opened it
        tasks = [{"name": t.name, **t.identity()} for t in self.job.tasks]
        value = run_value(
            self.run_id, self.job.name, tasks, self.exp.workload_range, self.exp.steps, self.settings.barrier
        )
        self.lock = RunLock(s, self.paths.lock, self.run_id, self.instance)
        self._created_root = claim_root(
            s, self.paths, self.creds, value, self.run_id, self.tasks, self.resume, self.lock, self.settings.barrier
        )
        # the one coordinator: a live one refuses us here, before anything of the run was touched
        self.lock.acquire(self.settings.session_timeout_s * 1.5 + 5, ended_instance=self.store.ended_instance())
        self._lock_lost = False
        rebuilt = prepare_tree(s, self.paths, self.tasks, logged_steps, self.store.incarnations())
        if rebuilt:
            what = (
                "has no state of this run"
                if self._created_root
                else f"has checkpoints behind the run log for {', '.join(rebuilt)}"
            )
            self.zk_state_note = (
                f"ZooKeeper {s.hosts} {what} (the server lost its data, or it is another server); "
                f"rebuilt the tasks' checkpoints from the run log: continuing at step {logged_steps}"
            )
            self.say(self.zk_state_note)

    def _relock_if_lost(self) -> None:
        if self._lock_lost and self.session is not None and self.session.connected:
            self.say("ZooKeeper session expired and was renewed; taking the coordinator lock again")
            self.lock = RunLock(self.session, self.paths.lock, self.run_id, self.instance)
            self.lock.acquire(self.settings.session_timeout_s * 1.5 + 5, ended_instance=None)
            self._lock_lost = False

    # == the run ======================================================================================
    def _prepare(self):
        """Everything before the first task starts. Nothing of an existing run is written before this
        coordinator holds its lock."""
        from ..loop import ReplayMismatch, StepLoop
        from ..planners.base import make_planner

        s = self.settings
        self.zk_state_note = ""
        if self.resume:
            self.store.read_meta()
        self._load()
        if self.resume:
            before = self.store.meta.get("inputs", {}).get("sha256", {})
            changed = [k for k, v in self.inputs["sha256"].items() if before.get(k) not in (None, v)]
            if changed:
                raise InputError(
                    f"the {', '.join(changed)} changed since run {self.run_id} started; a resumed run must plan from "
                    "the same inputs",
                    field="--resume",
                )
        records = RunLog.load(self.run_dir) if self.resume else []
        if self.resume:  # a run the tool said cannot be resumed is not
            refuse_resume(self.job, self.run_id, len(records))
        self.creds = run_credentials(s.zk_auth, self.run_dir / "zk-auth", may_create=not self.resume)
        self.paths = RunPaths(s.zk_root or f"{DEFAULT_PARENT}/{self.run_id}")
        if s.cfs_period_us is None:  # the quotas run at the period the profile was measured at
            s.cfs_period_us = profile_period_us(self.exp) or CFS_PERIOD_US
        elif s.backend == "local" and (note := period_mismatch(self.exp, s.cfs_period_us)):
            self.say(note)
        self.backend = self._backend or make_backend(
            s.backend,
            run_id=self.run_id,
            log_dir=self.run_dir / "logs",
            **{k: getattr(s, k) for k in ("stress_ng", "cgroup_prefix", "reconfigure", "cpu_weight", "cfs_period_us")},
            **(s.kubernetes if s.backend in ("kubernetes", "k8s") else {}),
        )
        self._plan_on_nodes()  # the planning context on the run's nodes (the experiment's, or the backend's)
        if s.backend == "local":  # the tasks run on this host's processor
            warn_if_other_processor(self.exp.profile_path)
        caps = self.backend.capabilities()
        # process tasks keep their state in memory: in place by default, never recreated unless restorable
        s.reconfigure = resolve_reconfigure(
            s.reconfigure, self.job, self.backend.default_reconfigure, caps.in_place, self.backend.name
        )
        if s.reconfigure == "auto":  # in place where the backend can (Kubernetes 1.33+), else recreation
            s.reconfigure = "in-place" if caps.in_place else "recreate"
        if s.reconfigure == "in-place" and not caps.in_place:
            raise InputError(
                f"the {self.backend.name} backend cannot resize a task in place; use --reconfigure recreate",
                field="--reconfigure",
            )
        c = self.exp.cpu
        budget = c.budget_millicores
        if self.resume and (replans := self.store.meta.get("replans")):  # it spends what its last re-plan had
            budget = spendable_millicores(budget, list(replans[-1]["nodes"].values()))
        self.backend.check(self.job, max(c.max_millicores, c.exppo_max_millicores or 0), budget, path=self.exp.path)
        self._plan_with_method_cost()
        # the one step loop `simulate` runs, with the experiment's [planner] settings; on resume it makes the
        # logged decisions again (each checked against the log) before anything of the run is touched
        loop = StepLoop(
            make_planner(s.planner, self.exp.planner),
            self.ctx,
            mode=s.mode,
            predictions=self.predictions,
            task_names=self.tasks,
            decide_ahead=self.scen.decide_ahead,
        )
        try:
            self.replay(loop, records)  # through the nodes of each re-plan the run made (run.json's replans)
        except ReplayMismatch as exc:
            raise InputError(str(exc), path=self.run_dir / "steps.jsonl", line=exc.step + 1) from None
        self._connect()
        self._claim(len(records))
        # the run is ours from here on
        resumes = self.store.meta.get("resumes", [])
        if self.resume:
            resumes = resumes + [now_iso()]
        self.store.write_meta(
            format=RUN_FORMAT,
            run_id=self.run_id,
            created=self.store.meta.get("created", now_iso()),
            settings={**asdict(s), "experiment": recorded_path(s.experiment, self.run_dir)},
            inputs=self.inputs,
            zk_root=self.paths.root,
            tasks=self.tasks,
            steps=self.exp.steps,
            backend=self.backend.info(),
            instance=self.instance,
            status="starting",
            resumes=resumes,
            reconfigure_cost=self.reconfigure_cost,
            **({"cluster": self.cluster_record} if self.cluster_record else {}),
            **({"zk_state": self.zk_state_note} if self.zk_state_note else {}),
        )
        runlog = RunLog(self.run_dir, self.tasks)
        try:
            runlog.rewrite(records)  # drop a torn line; the CSV follows the JSON lines
        except OSError as exc:
            raise RunStoreUnwritable(f"cannot write the run log in {self.run_dir}: {exc.strerror or exc}") from None
        self.backend.cleanup_stale()
        self._make_services()
        self.executor = LiveExecutor(
            s,
            self.session,
            self.paths,
            self.backend,
            self.tasks,
            self.cpu_of,
            self._worker_env(),
            self.store.incarnations(),
            lambda inc: self.store.write_meta(incarnations=dict(inc)),
            self._relock_if_lost,
            self.say,
            processes={t.name: t.process for t in self.job.tasks if t.process is not None},  # bound in run()
            sync=self.job.sync,
            run_id=self.run_id,
            run_dir=str(self.run_dir.resolve()),
            check_stop=self._check_stop,
            driver_ended=lambda: self.services.driver_ended if self.services else None,
        )
        return loop, records, runlog

    def _make_services(self) -> None:
        """A free port for every task and service (`{port}`, `{port:NAME}`, BSP_PORT) and the run's services
        (`[[service]]`, started in run() on the backend's service runner)."""
        from ..inputs.placeholders import choose_ports

        assert self.backend is not None  # made in _prepare
        run_dir, ports = str(self.run_dir.resolve()), choose_ports(self.job.port_names)
        # the runner: None only without services (nothing to start)
        runner = self.backend.service_runner(self.run_dir / "logs", run_dir) if self.job.services else None
        self.services = Services(self.job.services, ports, self.job.job_dir, run_dir, runner, self.say)

    def _bind_placeholders(self) -> None:
        """Once the services run: the process tasks' argument lists with `{port}`, `{port:NAME}`, `{job_dir}`
        and `{host:NAME}` substituted, and every task's environment (BSP_PORT, BSP_PORTS, BSP_HOSTS...)."""
        from ..inputs.job import substitute

        assert self.executor is not None and self.services is not None  # made in _prepare
        sv = self.services
        self.executor.processes = {  # () : an image run as built
            t.name: tuple(substitute(a, sv.values(t.name)) for a in t.process)
            for t in self.job.tasks
            if t.process is not None
        }
        self.executor.task_env = {t: sv.env(t) for t in self.job.task_names}

    def _abandon(self, exc: BaseException) -> None:
        """A run that failed before any task started: a new one leaves nothing (its folder, its znodes);
        a resumed one that holds the lock records why, and stays resumable; one refused (another
        coordinator holds the run) has touched nothing."""
        holds = self.lock is not None and self.lock.held
        if self.session is not None:
            if self._created_root and not self.resume:
                with contextlib.suppress(Exception):
                    self.session.delete_tree(self.paths.root)
            if self.lock is not None:
                self.lock.release()
            self.session.close()
        if not self.resume:
            self.store.discard()
        elif holds:
            with contextlib.suppress(RunStoreUnwritable):
                self.store.write_meta(status="interrupted", message=f"resume failed: {exc}", ended=now_iso())

    def run(self) -> LiveResult:
        if not self.resume:
            self.store.claim_new()  # of two runs started with one id, one gets the folder, the other stops here
        try:
            loop, records, runlog = self._prepare()
        except RunStoreUnwritable as exc:
            self._abandon(exc)
            raise RunInterrupted(
                f"{exc}; nothing ran; free some space (or fix the folder's permissions) and `bsp-planner run --resume "
                f"{self.run_id}`",
                self.run_id,
            ) from None
        except OSError as exc:  # the run folder of a new run (its credentials, its profile copy) cannot be written
            self._abandon(exc)
            raise InputError(
                f"cannot write {exc.filename or self.run_dir}: {exc.strerror or exc}",
                path=self.run_dir,
                field="--runs-dir",
            ) from None
        except BaseException as exc:
            self._abandon(exc)
            raise
        status, message = "failed", ""

        def then(failed: bool = False) -> str:  # `--resume`, unless a task's state died with its process
            return continue_hint(self.job, self.run_id, len(records), failed=failed)

        try:
            self.store.write_meta(status="running")
            self.watchers.run_started(self.run_id, self.tasks, self.exp.steps)
            assert self.services is not None  # made in _prepare
            self.services.start_all(self._check_stop)  # each waited ready before any task starts
            self._bind_placeholders()
            run_logged(self, loop, records, runlog)
            assert self.executor is not None and self.session is not None  # set up by _prepare
            self.executor.finish(self.exp.steps)
            if not self.settings.keep_zk:
                self.session.delete_tree(self.paths.root)
            status = "finished"
            # fewer steps than the experiment's `steps`: the application ended on its own (its own length)
            self.application_length = len(records) if len(records) < self.exp.steps else None
        except (ZkUnavailable, TaskLost, KeyboardInterrupt, RunStoreUnwritable) as exc:
            status = "interrupted"
            why = "interrupted (Ctrl-C or SIGTERM)" if isinstance(exc, KeyboardInterrupt) else str(exc)
            message = f"{why}; {_stopped_after(records)}; {then()}"
            raise RunInterrupted(message, self.run_id) from None
        except RunFailed as exc:
            message = f"{exc}\n{_stopped_after(records)}; {then(failed=True)}"
            raise RunFailed(message) from None
        except InputError as exc:  # met mid-run (a malformed value in ZooKeeper, a refused pod): still resumable
            message = f"{exc.message}; {_stopped_after(records)}; {then(failed=True)}"
            raise InputError(message, path=exc.path, line=exc.line, field=exc.field) from None
        except Exception as exc:  # not foreseen: say what and where it stopped rather than lose the run
            message = (
                f"unexpected {type(exc).__name__}: {exc}; {_stopped_after(records)}; "
                f"its steps so far are logged; {then()}"
            )
            raise RunFailed(message) from exc
        finally:
            assert self.backend is not None and self.session is not None  # set up by _prepare
            if self.executor is not None:
                self.executor.close_signals()
                self.executor.own_share.leave()  # out of the run's group before the backend removes it
            try:
                try:
                    self.backend.close()
                finally:
                    if self.services is not None:
                        self.services.stop_all()  # after the tasks that use them
            finally:
                if self.lock is not None:
                    self.lock.release()
                self.session.close()
                try:
                    self.store.write_meta(
                        status=status, message=message, ended=now_iso(), prepare_ms=round(loop.prepare_ms, 3)
                    )
                except RunStoreUnwritable as exc:
                    self.say(f"could not record the run's status: {exc}")
                if records:
                    try:
                        self.summary, self.paths_out = write_summary(self, records, loop.prepare_ms)
                    except Exception as exc:  # never hide the run's own outcome behind a reporting problem
                        self.say(f"could not write the summary: {exc}")
                self.watchers.run_ended(status, message, self.summary)
        return LiveResult(self.run_id, self.run_dir, status, records, self.summary, self.paths_out)

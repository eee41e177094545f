"""The coordinator of a live run: the one place where a planner's decision meets real tasks.

    bsp-planner run --backend local --planner mpc [--experiment live-default]

It builds the planning context exactly as `simulate` does (:func:`bsp_planner.scenario.build_scenario`
on an experiment file), starts every task through a backend under its configured CPU, and then, before
every superstep t:

1. asks the planner (``planner.decide(t, current)``, the same call the simulator makes);
2. if the configuration changed, has the backend apply it, ``in-place`` (rewrite the running tasks'
   quotas) or ``recreate`` (stop, start again under the new quota; the worker restores its checkpoint),
   and measures what that really cost;
3. publishes the step's workloads to ZooKeeper in one transaction (the workers are waiting for them);
4. waits for the step's leave barrier, restarting any worker that dies meanwhile (it reruns the step
   from its checkpoint);
5. reads the measured durations, appends the step to the run log (flushed), and goes on.

The planner never sees ZooKeeper or a measurement, so a live run follows the plan the simulator would
charge, and the summary compares the two. `--resume RUN` rebuilds the planner's state by replaying its
decisions over the logged steps (checked against the log) and continues with the first step not logged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..shipped import data_path
from . import zk as Z
from .backends import Backend, TaskLost, WorkerLaunch, make_backend
from .runlog import RunLog, atomic_write, step_chart
from .worker import EXIT_INPUT, EXIT_STRESS

RECONFIGURE = ("recreate", "in-place", "auto")
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_EXPERIMENT = data_path("experiments/live-default.toml")  # shipped (package data)
DEFAULT_RUNS_DIR = Path("runs")
RUN_FORMAT = 1


class RunInterrupted(Exception):
    """The run stopped before its last step but can be resumed (ZooKeeper lost, Ctrl-C)."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunFailed(Exception):
    """The run cannot go on (a worker that fails again and again, a stressor that errors)."""


@dataclass
class RunSettings:
    """Everything a run (and its resumption) needs; stored in run.json, credentials excepted."""

    experiment: str
    planner: str = "mpc"
    mode: str = "perfect"
    reconfigure: str = "recreate"
    overrides: list[str] = field(default_factory=list)
    backend: str = "local"
    zookeeper: str = Z.DEFAULT_HOSTS
    zk_root: str | None = None  # default: /bsp-planner/runs/<run-id>
    zk_auth: str = "generated"  # generated (runs/<id>/zk-auth) | file:<path> | env
    session_timeout_s: float = 10.0
    zk_wait_s: float = 30.0  # bounded wait for an unreachable ZooKeeper, at start and during the run
    worker_start_s: float = 60.0  # how long a (re)started worker may take to join
    step_timeout_s: float = 600.0
    max_restarts: int = 3  # restarts of one task within one step before the run fails
    stress_ng: str = "stress-ng"
    cgroup_prefix: str = "bsp-planner"
    cpu_weight: str = "guaranteed"  # local backend: the run group's weight, guaranteed | workers
    keep_zk: bool = False  # leave the run's znodes after a finished run
    kubernetes: dict = field(default_factory=dict)  # the kubernetes backend's options (namespace, image, ...)

    def validate(self) -> None:
        if self.reconfigure not in RECONFIGURE:
            raise InputError(f"expected --reconfigure {' or '.join(RECONFIGURE)}, got {self.reconfigure!r}", field="--reconfigure")
        if self.mode not in ("perfect", "forecast"):
            raise InputError(f"expected --mode perfect or forecast, got {self.mode!r}", field="--mode")
        for name in ("session_timeout_s", "zk_wait_s", "worker_start_s", "step_timeout_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"expected {name} > 0, got {getattr(self, name)!r}", field=name)

    @classmethod
    def from_dict(cls, d: dict) -> RunSettings:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def new_run_id() -> str:
    return f"live-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise InputError(f"a run id is 1-64 letters, digits, '_' or '-', got {run_id!r}", field="--run-id")
    return run_id


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LiveResult:
    run_id: str
    run_dir: Path
    status: str
    records: list[dict]
    summary: dict
    paths: dict[str, Path]


class Coordinator:
    def __init__(
        self,
        settings: RunSettings,
        run_id: str,
        runs_dir: Path = DEFAULT_RUNS_DIR,
        *,
        resume: bool = False,
        backend: Backend | None = None,
        say=None,
    ) -> None:
        settings.validate()
        self.settings = settings
        self.run_id = check_run_id(run_id)
        self.run_dir = Path(runs_dir) / run_id
        self.resume = resume
        self._backend = backend
        self.say = say or (lambda text: None)
        self.session: Z.ZkSession | None = None
        self.backend: Backend | None = None
        self.incarnation: dict[str, int] = {}
        self.levels_now: dict[str, int] = {}
        self.run_meta: dict = {}
        self._lock_lost = False
        self.summary: dict = {}
        self.paths_out: dict[str, Path] = {}
        self.instance = secrets.token_hex(8)  # names this coordinator in its ZooKeeper lock and run.json
        self._ended_instance: str | None = None  # a previous coordinator of this run known to have ended

    # == preparation ==================================================================================
    def _load(self) -> None:
        from ..experiment import load_experiment
        from ..job import load_job
        from ..planners.base import make_planner
        from ..scenario import build_scenario
        from ..shipped import find_experiment

        s = self.settings
        make_planner(s.planner)  # an unknown planner fails before anything starts
        overrides = list(s.overrides) + [f"strategies={s.planner}", f"modes={s.mode}"]
        exp = load_experiment(find_experiment(s.experiment), overrides)
        source_profile = str(exp.profile_path)
        self._check_profile_matches(exp)
        self._fit_profile(exp)
        self.exp = exp
        self.job = load_job(exp.job_path)
        for t in self.job.task_names:
            Z.check_task_name(t, self.job.path)
        self.scen = build_scenario(exp)
        self.ctx = self.scen.contexts[s.mode]
        self.tasks = self.scen.task_names
        self.inputs = {
            "experiment": str(exp.path),
            "job": str(exp.job_path),
            "profile": str(exp.profile_path),
            "profile_source": source_profile,
            "sha256": {k: _sha256(p) for k, p in (("experiment", exp.path), ("job", exp.job_path), ("profile", exp.profile_path))},
        }

    def _check_profile_matches(self, exp) -> None:
        """The profile predicts a task only if it timed that very task: same stressor, ops per workload
        unit and stress-ng instances (its metadata records them). A live run measures the job's tasks, so
        a mismatch would compare them with predictions for something else."""
        from ..job import load_job
        from ..profiles import metadata_path

        meta_file = metadata_path(exp.profile_path)
        if not meta_file.is_file():
            return
        try:
            measured = json.loads(meta_file.read_text()).get("tasks", {})
        except ValueError:
            return
        job = load_job(exp.job_path)
        for t in job.tasks:
            m = measured.get(t.name)
            if not isinstance(m, dict):
                continue
            mine = {"stressor": t.stressor, "ops_per_unit": t.ops_per_unit, "workers": t.workers}
            theirs = {k: m.get(k) for k in mine}
            if any(theirs[k] is not None and theirs[k] != mine[k] for k in mine):
                raise InputError(
                    f"task {t.name!r} is {mine} in the job but the profile timed {theirs} ({meta_file}); "
                    "re-measure the profile for this job (`bsp-planner profile run`) or make the task the profiled one",
                    path=exp.job_path,
                    field=f"task '{t.name}'",
                )

    def _fit_profile(self, exp) -> None:
        """A job made of some of a profile's tasks: predict from those tasks' rows (written to the run
        folder), since the performance model wants a profile with exactly the job's tasks."""
        from ..job import load_job
        from ..profiles import load_profile, metadata_path, read_profile_rows

        job = load_job(exp.job_path)
        profile = load_profile(exp.profile_path)
        names = set(job.task_names)
        if not names < set(profile.tasks):
            return  # exactly the job's tasks (fine), or some are missing (build_scenario says so)
        rows = [r for r in read_profile_rows(exp.profile_path) if r["task"] in names]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        sub = self.run_dir / "profile.csv"
        lines = ["task,workload,cpu_millicores,duration_s,repeat"]
        lines += [f"{r['task']},{r['workload']:g},{r['cpu_millicores']:g},{r['duration_s']!r},{r['repeat']}" for r in rows]
        atomic_write(sub, "\n".join(lines) + "\n")
        meta = metadata_path(exp.profile_path)
        if meta.is_file():
            d = json.loads(meta.read_text())
            d["subset_of"] = str(exp.profile_path)
            atomic_write(metadata_path(sub), json.dumps(d, indent=2) + "\n")
        self.say(f"the profile has more tasks than the job; predicting from {sub} (the job's {len(names)} tasks)")
        exp.profile = str(sub.resolve())

    def _credentials(self) -> Z.Credentials:
        s = self.settings
        kind = s.zk_auth
        if kind == "generated":
            path = self.run_dir / "zk-auth"
            if path.is_file():
                return Z.read_credentials_file(path)
            if self.resume:
                raise InputError(f"the run's credentials file {path} is missing", path=path, field="zk-auth")
            return Z.read_credentials_file(Z.write_credentials_file(path, Z.generate_credentials()))
        if kind.startswith("file:"):
            return Z.read_credentials_file(kind[5:])
        if kind == "env":
            creds = Z.load_credentials(None)
            if creds is None:
                raise InputError(f"this run takes its ZooKeeper credentials from ${Z.ENV_AUTH}, which is not set", field="zk-auth")
            return creds
        raise InputError(f"unknown credentials source {kind!r}", field="zk-auth")

    def _worker_env(self) -> dict[str, str]:
        kind = self.settings.zk_auth
        if kind == "generated":
            return {Z.ENV_AUTH_FILE: str((self.run_dir / "zk-auth").resolve())}
        if kind.startswith("file:"):
            return {Z.ENV_AUTH_FILE: str(Path(kind[5:]).resolve())}
        return {Z.ENV_AUTH: f"{self.creds.user}:{self.creds.password}"}

    @property
    def zk_root(self) -> str:
        return self.settings.zk_root or f"{Z.DEFAULT_PARENT}/{self.run_id}"

    def _write_meta(self, **changes) -> None:
        self.run_meta.update(changes)
        atomic_write(self.run_dir / "run.json", json.dumps(self.run_meta, indent=2, default=str) + "\n")

    # == ZooKeeper ====================================================================================
    def _connect(self) -> None:
        s = self.settings
        self.session = Z.ZkSession(
            s.zookeeper, self.creds, session_timeout_s=s.session_timeout_s, connect_timeout_s=s.zk_wait_s, op_deadline_s=s.zk_wait_s
        ).start()
        self.session.add_listener(lambda st: setattr(self, "_lock_lost", True) if st == "LOST" else None)

    def _claim(self) -> None:
        """Create the run's root (or find our own, on resume) and take the coordinator lock."""
        from kazoo.exceptions import NoAuthError

        s = self.session
        root = self.paths.root
        parent = root.rsplit("/", 1)[0]
        tasks = [{"name": t.name, "stressor": t.stressor, "ops_per_unit": t.ops_per_unit, "workers": t.workers} for t in self.job.tasks]
        value = Z.run_value(self.run_id, self.job.name, tasks, self.exp.workload_range, self.exp.steps)
        try:
            if parent:
                s.ensure_path(parent, acl=self.creds.parent_acl())
            created = s.create(root, value)
        except NoAuthError:
            raise Z.RootHeld(
                f"cannot create {root}: its parent belongs to someone else in ZooKeeper {s.hosts}; choose another --zk-root",
                field="--zk-root",
            ) from None
        if not created:
            try:
                existing = s.get(root)
            except NoAuthError:
                raise Z.RootHeld(
                    f"{root} is held by another run (its ACL does not admit this run's credentials); choose another --zk-root",
                    field="--zk-root",
                ) from None
            info = Z.parse_run(root, existing or {})
            if info.run_id != self.run_id:
                raise Z.RootHeld(f"{root} is held by run {info.run_id!r}; choose another --zk-root", field="--zk-root")
            if not self.resume:
                raise Z.RootHeld(f"{root} already holds run {self.run_id!r}; continue it with --resume {self.run_id}", field="--zk-root")
            if [info.tasks.get(t) is not None for t in self.tasks] != [True] * len(self.tasks):
                raise Z.RootHeld(f"{root} holds run {self.run_id!r} with other tasks than this job", field="--zk-root")
        self._take_lock()
        # the rest of the tree (idempotent: a resumed run finds it)
        s.create(self.paths.members)
        s.create(self.paths.tasks)
        s.create(self.paths.barriers)
        for t in self.tasks:
            s.create(self.paths.task(t))
            s.create(self.paths.steps(t))
            s.create(self.paths.results(t))
            s.create(self.paths.checkpoint(t), Z.checkpoint_value(-1, 0))

    def _take_lock(self) -> None:
        from kazoo.exceptions import NoNodeError

        s = self.session
        lock = self.paths.coordinator
        me = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": self.run_id, "instance": self.instance}
        deadline = time.monotonic() + self.settings.session_timeout_s * 1.5 + 5
        while True:
            if s.create(lock, me, ephemeral=True):
                break
            try:
                raw, stat = s.retry(s.client.get, lock)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == s.session_id():
                break
            other = Z.decode(lock, raw)
            pid = Z.get_int(lock, other, "pid", 0)
            host = Z.get_str(lock, other, "host")
            ended = self._ended_instance is not None and other.get("instance") == self._ended_instance
            if ended or (host == socket.gethostname() and not _pid_alive(pid)):
                # a coordinator of this run that has ended (or was killed), whose session has not expired yet
                try:
                    s.retry(s.client.delete, lock, version=stat.version)
                except Exception:
                    pass
                continue
            if time.monotonic() > deadline:
                raise Z.RootHeld(f"run {self.run_id!r} is being coordinated by pid {pid} on {host}", field="--resume")
            time.sleep(0.2)
        self._lock_lost = False

    def _relock_if_lost(self) -> None:
        if self._lock_lost and self.session.connected:
            self.say("ZooKeeper session expired and was renewed; taking the coordinator lock again")
            self._take_lock()

    # == workers ======================================================================================
    def _launch(self, task: str) -> WorkerLaunch:
        s = self.settings
        k = self.incarnation.get(task, -1) + 1
        self.incarnation[task] = k
        args = (
            "worker",
            "--zookeeper", s.zookeeper,
            "--root", self.paths.root,
            "--task", task,
            "--incarnation", str(k),
            "--stress-ng", s.stress_ng,
            "--session-timeout", f"{s.session_timeout_s:g}",
            "--zk-wait", f"{max(s.zk_wait_s * 4, 60):g}",
        )
        return WorkerLaunch(task=task, args=args, env=self._worker_env(), incarnation=k)

    def _cpu(self, level: int) -> float:
        return float(self.scen.cpu.to_millicores(level))

    def _wait_ready(self, tasks: list[str]) -> None:
        """Until every task's member node shows its current incarnation; a worker that dies meanwhile is
        an error (with the end of its log)."""
        s = self.session
        pending = set(tasks)
        deadline = time.monotonic() + self.settings.worker_start_s

        def check(watch):
            for t in list(pending):
                path = self.paths.member(t)
                v = s.get(path) if s.exists(path, watch=watch) else None
                if v is not None and Z.parse_member(path, v)["incarnation"] == self.incarnation[t]:
                    pending.discard(t)
            return True if not pending else None

        def interrupt():
            for t in pending:
                st = self.backend.poll_task(t)
                if st.alive is False:
                    raise RunFailed(f"task {t}'s worker exited with code {st.exit_code} while starting:\n{self.backend.log_tail(t)}")
            if time.monotonic() > deadline:
                raise RunFailed(f"worker(s) {', '.join(sorted(pending))} did not join within {self.settings.worker_start_s:g} s")
            return False

        s.wait_for(check, None, interrupt=interrupt, tick_s=0.05)

    def _start_all(self, levels: np.ndarray) -> float:
        t0 = time.perf_counter()
        self.backend.check_configuration({t: self._cpu(int(levels[i])) for i, t in enumerate(self.tasks)})
        for i, t in enumerate(self.tasks):
            self.backend.start_task(self._launch(t), self._cpu(int(levels[i])))
            self.levels_now[t] = int(levels[i])
        self._save_incarnations()
        self._wait_ready(self.tasks)
        return time.perf_counter() - t0

    def _reconfigure(self, levels: np.ndarray) -> tuple[float, list[str]]:
        """Apply a new configuration to the tasks whose CPU changes; (real seconds it took, tasks)."""
        changed = [t for i, t in enumerate(self.tasks) if self.levels_now[t] != int(levels[i])]
        if not changed:
            return 0.0, []
        t0 = time.perf_counter()
        self.backend.check_configuration({t: self._cpu(int(levels[i])) for i, t in enumerate(self.tasks)})
        if self.settings.reconfigure == "in-place":
            # shrink first, so that the sum of the quotas never exceeds the budget in between
            order = sorted(changed, key=lambda t: int(levels[self.tasks.index(t)]) - self.levels_now[t])
            for t in order:
                self.backend.resize_task(t, self._cpu(int(levels[self.tasks.index(t)])))
        else:
            for t in changed:
                self.backend.recreate_task(self._launch(t), self._cpu(int(levels[self.tasks.index(t)])))
            self._save_incarnations()
            self._wait_ready(changed)
        for t in changed:
            self.levels_now[t] = int(levels[self.tasks.index(t)])
        return time.perf_counter() - t0, changed

    def _save_incarnations(self) -> None:
        self._write_meta(incarnations=dict(self.incarnation))

    # == one step =====================================================================================
    def _publish(self, t: int) -> bool:
        """Step t's barrier and every task's workload, in one transaction; False if it was already there
        (a resumed run), after checking it says the same."""
        from kazoo.exceptions import NodeExistsError

        s = self.session
        w = self.scen.actual_workloads[:, t]
        barrier = Z.StepBarrier(s, self.paths, t, self.tasks)
        ops = barrier.setup_ops() + [("create", self.paths.step(task, t), Z.step_value(t, w[i])) for i, task in enumerate(self.tasks)]
        results = s.commit(ops)
        if not any(isinstance(r, Exception) for r in results):
            return True
        if not isinstance(results[0], NodeExistsError):
            raise next(r for r in results if isinstance(r, Exception))
        for i, task in enumerate(self.tasks):
            path = self.paths.step(task, t)
            v = s.get(path)
            got = Z.parse_step(path, v, t, self.exp.workload_range) if v is not None else None
            if v is None:
                s.create(path, Z.step_value(t, w[i]))
            elif got is None or got != float(w[i]):
                raise Z.MalformedValue(f"{path} holds workload {got!r}, the run's series says {float(w[i])!r}", field=path)
        return False

    def _wait_step(self, t: int) -> tuple[float, dict[str, int]]:
        """Until step t's leave barrier is done; restarts dead workers. (release time.time(), restarts)."""
        s = self.session
        barrier = Z.StepBarrier(s, self.paths, t, self.tasks)
        restarts: dict[str, int] = {}
        deadline = time.monotonic() + self.settings.step_timeout_s
        caps = self.backend.capabilities()
        missing_since: dict[str, float] = {}

        def check(watch):
            return time.time() if barrier.is_done(watch=watch) else None

        def interrupt():
            self._relock_if_lost()
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
                if st.exit_code in (EXIT_INPUT, EXIT_STRESS):
                    raise RunFailed(f"task {task}'s worker failed (exit code {st.exit_code}):\n{self.backend.log_tail(task)}")
                restarts[task] = restarts.get(task, 0) + 1
                if restarts[task] > self.settings.max_restarts:
                    raise RunFailed(
                        f"task {task}'s worker died {restarts[task]} times in step {t}; its log ends with:\n{self.backend.log_tail(task)}"
                    )
                self.say(f"step {t}: task {task}'s worker is gone (exit code {st.exit_code}); restarting it from its checkpoint")
                self.backend.start_task(self._launch(task), self._cpu(self.levels_now[task]))
                self._save_incarnations()
                missing_since.pop(task, None)
            if time.monotonic() > deadline:
                raise RunFailed(f"step {t} did not finish within {self.settings.step_timeout_s:g} s")
            return False

        released = s.wait_for(check, None, interrupt=interrupt, tick_s=0.05)
        return released, restarts

    def _results(self, t: int) -> list[dict]:
        s = self.session
        out = []
        for task in self.tasks:
            path = self.paths.result(task, t)
            v = s.get(path)
            if v is None:
                raise Z.MalformedValue(f"step {t} is done but {path} is missing", field=path)
            out.append(Z.parse_result(path, v, t))
        return out

    def _cleanup_barrier(self, t: int) -> None:
        if t < 0 or not self.session.exists(self.paths.barrier(t)):
            return
        try:
            self.session.commit(Z.StepBarrier(self.session, self.paths, t, self.tasks).cleanup_ops())
        except Exception:
            pass  # only housekeeping: the tree is removed at the end anyway

    # == the run ======================================================================================
    def _prepare(self):
        """Everything before the first task starts: inputs, checks, credentials, ZooKeeper, the root."""
        from ..planners.base import make_planner

        s = self.settings
        meta_path = self.run_dir / "run.json"
        if self.resume:
            if not meta_path.is_file():
                raise InputError(f"no run {self.run_id!r} in {self.run_dir.parent} (run.json missing)", path=meta_path, field="--resume")
            self.run_meta = json.loads(meta_path.read_text())
            if self.run_meta.get("status") == "finished":
                raise InputError(f"run {self.run_id!r} has finished; nothing to resume", path=meta_path, field="--resume")
            if self.run_meta.get("status") in ("interrupted", "failed"):
                # it wrote that on its way out: a lock it left (its session not yet expired) is stale
                self._ended_instance = self.run_meta.get("instance")
            self.incarnation = {k: int(v) for k, v in self.run_meta.get("incarnations", {}).items()}
        elif meta_path.is_file():
            raise InputError(f"run {self.run_id!r} already exists in {self.run_dir.parent}; continue it with --resume {self.run_id}", field="--run-id")
        self._load()
        if self.resume:
            before = self.run_meta.get("inputs", {}).get("sha256", {})
            changed = [k for k, v in self.inputs["sha256"].items() if before.get(k) not in (None, v)]
            if changed:
                raise InputError(
                    f"the {', '.join(changed)} changed since run {self.run_id} started; a resumed run must plan from the same inputs",
                    field="--resume",
                )
        self.creds = self._credentials()
        self.paths = Z.RunPaths(self.zk_root)
        self.backend = self._backend or make_backend(
            s.backend, run_id=self.run_id, log_dir=self.run_dir / "logs", stress_ng=s.stress_ng, cgroup_prefix=s.cgroup_prefix,
            reconfigure=s.reconfigure, cpu_weight=s.cpu_weight,
            **(s.kubernetes if s.backend in ("kubernetes", "k8s") else {}),
        )
        caps = self.backend.capabilities()
        if s.reconfigure == "auto":  # in place where the backend can (Kubernetes 1.33+), else recreation
            s.reconfigure = "in-place" if caps.in_place else "recreate"
        if s.reconfigure == "in-place" and not caps.in_place:
            raise InputError(f"the {self.backend.name} backend cannot resize a task in place; use --reconfigure recreate", field="--reconfigure")
        c = self.exp.cpu
        self.backend.check(self.job, max(c.max_millicores, c.exppo_max_millicores or 0), c.budget_millicores, path=self.exp.path)

        resumes = self.run_meta.get("resumes", [])
        if self.resume:
            resumes = resumes + [_now()]
        self._write_meta(
            format=RUN_FORMAT,
            run_id=self.run_id,
            created=self.run_meta.get("created", _now()),
            settings=asdict(s),
            inputs=self.inputs,
            zk_root=self.paths.root,
            tasks=self.tasks,
            steps=self.exp.steps,
            backend=self.backend.info(),
            instance=self.instance,
            status="starting",
            resumes=resumes,
        )
        runlog = RunLog(self.run_dir, self.tasks)
        records = RunLog.load(self.run_dir) if self.resume else []
        runlog.rewrite(records)  # drop a torn line; the CSV follows the JSON lines

        planner = make_planner(s.planner)
        t_prep = time.perf_counter()
        planner.reset(self.ctx)
        prepare_ms = (time.perf_counter() - t_prep) * 1e3
        current = self._replay(planner, records)
        self.backend.cleanup_stale()
        self._connect()
        self._claim()
        return planner, prepare_ms, current, records, runlog

    def run(self) -> LiveResult:
        fresh = not (self.run_dir / "run.json").is_file()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:  # nothing runs yet: a failure here is a plain error, not a resumable interruption
            planner, prepare_ms, current, records, runlog = self._prepare()
        except BaseException as exc:
            if self.session is not None:
                self.session.close()
            if fresh and not self.resume:
                import shutil

                shutil.rmtree(self.run_dir, ignore_errors=True)  # a run that never started leaves nothing
            elif self.run_meta:  # the run is still where it was: resumable once the problem is fixed
                self._write_meta(status="interrupted", message=f"resume failed: {exc}", ended=_now())
            raise
        status, message = "failed", ""
        try:
            self._write_meta(status="running")
            self._loop(planner, records, current, runlog)
            self._finish()
            status = "finished"
        except (Z.ZkUnavailable, TaskLost, KeyboardInterrupt) as exc:
            status = "interrupted"
            why = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else str(exc)
            message = f"{why}; the run stopped after step {len(records) - 1}; continue it with `bsp-planner run --resume {self.run_id}`"
            raise RunInterrupted(message, self.run_id) from None
        except RunFailed as exc:
            message = str(exc)
            raise
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                self.backend.close()
            finally:
                self.session.close()
                self._write_meta(status=status, message=message, ended=_now(), prepare_ms=round(prepare_ms, 3))
                if records:
                    try:
                        self.paths_out = self._summarize(records, prepare_ms)
                    except Exception as exc:  # never hide the run's own outcome behind a reporting problem
                        self.say(f"could not write the summary: {exc}")
        return LiveResult(self.run_id, self.run_dir, status, records, self.summary, self.paths_out)

    def _replay(self, planner, records: list[dict]) -> np.ndarray | None:
        """The planner's decisions over the logged steps again, each checked against the log: after this
        the planner is in the state it was in when the last logged step ended."""
        current = None
        for rec in records:
            t = rec["step"]
            d = planner.decide(t, current)
            levels = np.asarray(d.levels, dtype=np.int64)
            if levels.tolist() != rec["levels"]:
                raise InputError(
                    f"replaying the planner gives {levels.tolist()} at step {t}, the run log has {rec['levels']}; "
                    "the run cannot be resumed with the same plan",
                    path=self.run_dir / "steps.jsonl",
                    line=t + 1,
                )
            current = levels
        return current

    def _loop(self, planner, records: list[dict], current: np.ndarray | None, runlog: RunLog) -> None:
        ctx = self.ctx
        n = len(self.tasks)
        first = len(records)
        for t in range(first, self.exp.steps):
            t_dec = time.perf_counter()
            d = planner.decide(t, current)
            decision_ms = (time.perf_counter() - t_dec) * 1e3
            levels = np.asarray(d.levels, dtype=np.int64)
            if levels.shape != (n,) or np.any(levels < 0) or np.any(levels > ctx.max_level.max()):
                raise RunFailed(f"planner {planner.name} returned an invalid configuration {levels!r} at step {t}")
            total = float(self.scen.cpu.to_millicores(levels).sum())
            if total > self.exp.cpu.budget_millicores + 1e-6:
                raise RunFailed(f"planner {planner.name} asked for {total:g}m at step {t}, over the budget")
            reconfigured = current is not None and not np.array_equal(levels, current)
            if t == first:
                start_s = self._start_all(levels)
                self.say(f"started {n} workers in {start_s:.2f} s" + (f" (resuming at step {t})" if t else ""))
                reconfig_s = start_s if reconfigured else 0.0
            else:
                self._relock_if_lost()
                reconfig_s, _ = self._reconfigure(levels)
            t_pub = time.perf_counter()
            fresh = self._publish(t)
            published = time.perf_counter()
            released_at, restarts = self._wait_step(t)
            t_done = time.perf_counter()
            res = self._results(t)
            rec = self._record(t, d.action, levels, reconfigured, reconfig_s, decision_ms, t_done - t_pub, published - t_pub, released_at, res, restarts, not fresh)
            runlog.append(rec)
            records.append(rec)
            self._cleanup_barrier(t - 1)
            current = levels
            self.say(
                f"step {t:4d}: {rec['step_s']:.3f} s (predicted {rec['predicted_step_s']:.3f} s)"
                + (f", reconfigured in {reconfig_s:.3f} s" if reconfigured else "")
                + (f", {sum(restarts.values())} restart(s)" if restarts else "")
            )

    def _record(self, t, action, levels, reconfigured, reconfig_s, decision_ms, wall_s, publish_s, released_at, res, restarts, resumed) -> dict:
        scen = self.scen
        n = len(self.tasks)
        pred = scen.actual[np.arange(n), levels, t]
        forecast = self.ctx.configs.predicted[t, np.arange(n), levels, 0]
        measured = np.array([r["duration_s"] for r in res])
        slowest = float(measured.max())
        step_s = max(wall_s, slowest) if resumed else wall_s
        tasks = []
        for i, task in enumerate(self.tasks):
            tasks.append(
                {
                    "task": task,
                    "level": int(levels[i]),
                    "cpu_millicores": self._cpu(int(levels[i])),
                    "workload": float(scen.actual_workloads[i, t]),
                    "predicted_s": float(pred[i]),
                    "forecast_s": float(forecast[i]),
                    "measured_s": float(measured[i]),
                    "enter_wait_s": res[i]["enter_wait_s"],
                    "incarnation": res[i]["incarnation"],
                }
            )
        return {
            "step": t,
            "action": int(action),
            "reconfigured": bool(reconfigured),
            "reconfig_s": float(reconfig_s),
            "decision_ms": float(decision_ms),
            "step_s": float(step_s),
            "predicted_step_s": float(pred.max()),
            "slowest_s": slowest,
            "sync_s": float(step_s - slowest),
            "barrier_s": float(max(0.0, released_at - max(r["finished_at"] for r in res))),
            "publish_s": float(publish_s),
            "restarts": int(sum(restarts.values())),
            "resumed": bool(resumed),
            "levels": [int(x) for x in levels],
            "tasks": tasks,
        }

    def _finish(self) -> None:
        """Tell every worker to stop, let them go, and remove the run's znodes (unless --keep-zk)."""
        s = self.session
        m = self.exp.steps
        ops = [("create", self.paths.step(task, m), Z.stop_value(m)) for task in self.tasks]
        try:
            s.commit(ops)
        except Exception:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self.backend.poll_task(t).alive for t in self.tasks):
            time.sleep(0.05)
        self.backend.close()
        if not self.settings.keep_zk:
            s.delete_tree(self.paths.root)

    # == summary ======================================================================================
    def _summarize(self, records: list[dict], prepare_ms: float) -> dict[str, Path]:
        from ..planners.base import make_planner
        from ..report import comparison_rows, to_csv, to_markdown
        from ..simulation import StrategyResult, floor_result, simulate

        k = len(records)
        mode = self.settings.mode
        name = self.settings.planner
        levels = np.array([r["levels"] for r in records], dtype=np.int64)
        step_s = np.array([r["step_s"] for r in records])
        reconf = np.array([r["reconfigured"] for r in records], dtype=bool)
        reconf_s = np.array([r["reconfig_s"] for r in records])
        measured_penalty = float(reconf_s[reconf].mean()) if reconf.any() else 0.0
        live = StrategyResult(
            strategy=f"{name} (live)", mode=mode, levels=levels, step_s=step_s, reconfigured=reconf,
            penalty_s=measured_penalty, decision_ms=np.array([r["decision_ms"] for r in records]),
            actions=np.array([r["action"] for r in records]), prepare_ms=prepare_ms,
        )
        sim_full = simulate(make_planner(name), self.ctx, self.scen.actual, mode)
        floor_full = floor_result(self.ctx, self.scen.actual, mode)

        def head(r: StrategyResult, label: str) -> StrategyResult:
            return StrategyResult(
                strategy=label, mode=r.mode, levels=r.levels[:k], step_s=r.step_s[:k], reconfigured=r.reconfigured[:k],
                penalty_s=r.penalty_s, decision_ms=r.decision_ms[:k], actions=r.actions[:k], prepare_ms=r.prepare_ms,
            )

        sim = head(sim_full, f"{name} (simulated)")
        floor = head(floor_full, "floor")
        rows = comparison_rows([floor, sim, live])
        pred = np.array([r["predicted_step_s"] for r in records])
        slow = np.array([r["slowest_s"] for r in records])
        err = (step_s - pred) / pred
        barrier = np.array([r["barrier_s"] for r in records])
        sync = np.array([r["sync_s"] for r in records])
        live_total = float(step_s.sum() + reconf_s[reconf].sum())
        sim_measured_penalty = float(sim.compute_s + reconf_s[reconf].sum())
        summary = {
            "run_id": self.run_id,
            "planner": name,
            "mode": mode,
            "reconfigure": self.settings.reconfigure,
            "steps_done": k,
            "steps": self.exp.steps,
            "same_plan_as_simulated": bool(np.array_equal(sim.levels, levels)),
            "live_total_s": round(live_total, 4),
            "simulated_total_s": round(sim.total_s, 4),
            "simulated_total_measured_penalty_s": round(sim_measured_penalty, 4),
            "total_error_pct": round(100 * (live_total / sim.total_s - 1), 2) if sim.total_s else None,
            "total_error_measured_penalty_pct": round(100 * (live_total / sim_measured_penalty - 1), 2) if sim_measured_penalty else None,
            "compute_error_pct": round(100 * (step_s.sum() / pred.sum() - 1), 2),
            "step_error_pct": {
                "mean": round(100 * float(err.mean()), 2),
                "mean_abs": round(100 * float(np.abs(err).mean()), 2),
                "max_abs": round(100 * float(np.abs(err).max()), 2),
            },
            "slowest_task_error_pct_mean": round(100 * float(((slow - pred) / pred).mean()), 2),
            "barrier_s": {"mean": round(float(barrier.mean()), 5), "p95": round(float(np.percentile(barrier, 95)), 5), "max": round(float(barrier.max()), 5)},
            "sync_s": {"mean": round(float(sync.mean()), 5), "p95": round(float(np.percentile(sync, 95)), 5)},
            "reconfigurations": int(reconf.sum()),
            "reconfig_s_mean": round(measured_penalty, 4),
            "penalty_s_assumed": self.exp.penalty_s,
            "restarts": int(sum(r["restarts"] for r in records)),
            "rows": rows,
        }
        self.summary = summary
        paths = {
            "md": self.run_dir / "summary.md",
            "csv": self.run_dir / "summary.csv",
            "json": self.run_dir / "summary.json",
            "chart": self.run_dir / "chart.png",
            "steps": self.run_dir / "steps.csv",
            "jsonl": self.run_dir / "steps.jsonl",
        }
        atomic_write(paths["csv"], to_csv(rows))
        atomic_write(paths["json"], json.dumps(summary, indent=2) + "\n")
        lines = [
            f"# Live run {self.run_id}",
            "",
            f"- experiment: {self.inputs['experiment']}",
            f"- job: {self.job.name} ({len(self.tasks)} tasks), planner {name}, {mode} mode, reconfigure {self.settings.reconfigure}",
            f"- steps: {k} of {self.exp.steps}; same plan as simulated: {'yes' if summary['same_plan_as_simulated'] else 'NO'}",
            f"- total: live {live_total:.3f} s, simulated {sim.total_s:.3f} s (penalty {self.exp.penalty_s:g} s per reconfiguration) "
            f"-> {summary['total_error_pct']:+.2f}%; with the measured reconfiguration cost: {sim_measured_penalty:.3f} s "
            f"-> {summary['total_error_measured_penalty_pct']:+.2f}%",
            f"- per-step error (measured step vs predicted): mean {summary['step_error_pct']['mean']:+.2f}%, "
            f"mean |.| {summary['step_error_pct']['mean_abs']:.2f}%, max |.| {summary['step_error_pct']['max_abs']:.2f}%",
            f"- barrier overhead (last task's report to release): mean {1e3 * barrier.mean():.1f} ms, p95 {1e3 * np.percentile(barrier, 95):.1f} ms",
            f"- reconfigurations: {int(reconf.sum())}, mean real cost {measured_penalty:.3f} s ({self.settings.reconfigure})",
            f"- worker restarts: {summary['restarts']}",
            "",
            to_markdown(rows),
        ]
        atomic_write(paths["md"], "\n".join(lines))
        step_chart(records, paths["chart"], f"{self.run_id}: {name}, {mode}, {self.settings.reconfigure}", self.exp.penalty_s)
        return paths

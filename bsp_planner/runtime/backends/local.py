"""The local backend: each task is a `bsp-planner worker` process in its own CPU-quota cgroup on this host.

A task's CPU limit is its cgroup's CFS quota (:class:`~bsp_planner.profiling.cgroups.CpuQuotaGroup`, the
mechanism a kubelet uses for a container's limit). The worker joins its group between fork and exec, so
its Python, its stress-ng children and everything they start run under the quota. `resize_task` rewrites
the quota of the running group (in place); `recreate_task` stops the worker (SIGTERM: it leaves with its
checkpoint in ZooKeeper), removes the group, and starts a new worker in a new group, which restores.
:meth:`LocalBackend.measure_reconfigure_cost` measures what each method costs here before a run plans.

Nothing outlives the run: workers get SIGTERM if the coordinator dies (PR_SET_PDEATHSIG), every stop
removes the task's group after killing whatever is still inside, and a resumed run first removes the
groups a killed coordinator left. A run's groups are ``<cgroup-prefix>.live.<run-id>/<task>`` (e.g.
``/sys/fs/cgroup/cpu/bsp-planner.live.<run-id>/bsearch``), the parent weighed by --cpu-weight (`_weigh_run`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InputError
from ...core.leftovers import running
from ...core.signals import kill_group
from ...profiling.cgroups import (
    CFS_PERIOD_US,
    DEFAULT_PREFIX,
    MAX_SHARES,
    CpuQuotaGroup,
    Hierarchy,
    check_period_us,
    detect_hierarchy,
    owner_pid,
    quota_us,
)
from ...task.reporter import RUN_GROUP_INFIX, move_threads
from ..services import log_tail, spawn_logged
from . import Backend, Capabilities, TaskStatus, WorkerLaunch
from .local_services import SERVICE_GROUP_INFIX, LocalServiceRunner, check_service_programs

# A recreation's probe: our worker's interpreter and imports, then "ready" (then it waits for SIGTERM)
PROBE_READY = (
    "import sys, bsp_planner.cli, bsp_planner.runtime.worker, bsp_planner.task; "
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
)
RECREATE_PROBES = 3
PROBE_TIMEOUT_S = 60.0
MIN_PROBE_MILLICORES = 10


def machine_millicores() -> float:
    """The CPUs this process may run on, in millicores."""
    return 1000.0 * len(os.sched_getaffinity(0))


@dataclass
class _Task:
    group: CpuQuotaGroup
    proc: subprocess.Popen
    launch: WorkerLaunch


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        run_id: str,
        log_dir: str | Path,
        *,
        stress_ng: str = "stress-ng",
        cgroup_prefix: str = DEFAULT_PREFIX,
        hierarchy: Hierarchy | None = None,
        python: str = sys.executable,
        capacity_millicores: float | None = None,
        cpu_weight: str = "guaranteed",
        cfs_period_us: int = CFS_PERIOD_US,
    ) -> None:
        """`cfs_period_us`: the CFS period of every task's quota (the quota is the task's CPU share of it);
        the profiler's setting of the same name has the same default, so a profile and a run agree."""
        self.cpu_weight = cpu_weight  # "guaranteed" or "workers" (RunSettings checks it): see _weigh_run
        self.cfs_period_us = check_period_us(cfs_period_us)
        self.run_id = run_id
        self.log_dir = Path(log_dir)
        self.stress_ng = stress_ng
        self.prefix = cgroup_prefix
        self._hierarchy = hierarchy
        self.python = python
        self.capacity = capacity_millicores if capacity_millicores is not None else machine_millicores()
        self.tasks: dict[str, _Task] = {}
        self.workers: dict[str, int] = {}  # stress-ng instances per task, from the job (check)
        self.probe_millicores = 1000.0  # the quota a recreation is measured under: budget / tasks (check)
        self._workdir: tempfile.TemporaryDirectory | None = None

    @property
    def hierarchy(self) -> Hierarchy:
        if self._hierarchy is None:
            self._hierarchy = detect_hierarchy()
        return self._hierarchy

    def capabilities(self) -> Capabilities:
        return Capabilities(in_place=True, sees_exit=True)

    def info(self) -> dict:
        h = self.hierarchy
        return {
            "backend": self.name,
            "cgroup": {
                "version": h.version,
                "root": str(h.root),
                "run_group": self.run_prefix,
                "cpu_weight": self.cpu_weight,
                "cfs_period_us": self.cfs_period_us,
            },
            "capacity_millicores": self.capacity,
        }

    # -- checks ------------------------------------------------------------------------------------
    def check(self, job, millicores_max: float, budget_millicores: float, path=None) -> None:
        """stress-ng and its stressors present, cgroups writable, the job fits this machine, and its services'
        programs are here to run."""
        from ...profiling.local import LocalBackend as ProfilingBackend

        if budget_millicores > self.capacity + 1e-9:
            raise InputError(
                f"the configuration's total CPU ({budget_millicores:g}m) exceeds this machine "
                f"({self.capacity:g}m = {self.capacity / 1000:g} CPUs); the local backend runs every task here, "
                f"so lower cpu.budget_millicores to at most {self.capacity:g}",
                path=path,
                field="cpu.budget_millicores",
            )
        if millicores_max > self.capacity + 1e-9:
            raise InputError(
                f"one task may get up to {millicores_max:g}m, more than this machine has ({self.capacity:g}m)",
                path=path,
                field="cpu.max_millicores",
            )
        imaged = [t.name for t in job.tasks if getattr(t, "image", None)]
        if imaged:
            raise InputError(
                f"task(s) {', '.join(imaged)} name a container image, which only the kubernetes backend runs (their "
                "programs are the image's); run with --backend kubernetes, or drop `image` to run the programs on "
                "this machine",
                path=path or job.path,
                field="task.image",
            )
        check_service_programs(job, path)
        self.workers = {t.name: t.workers for t in job.tasks}
        self.probe_millicores = max(MIN_PROBE_MILLICORES, round(budget_millicores / max(1, len(job.tasks))))
        probe = ProfilingBackend(stress_ng=self.stress_ng, prefix=self.prefix, hierarchy=self._hierarchy)
        probe.check(list(job.tasks), job.path)  # stress-ng, its stressors, and a throw-away cgroup
        self.stress_ng = probe.stress_ng_path()
        self.stale_probes_removed = self.remove_stale_probes()

    def remove_stale_probes(self) -> list[str]:
        """Kill and remove the ``probe-<pid>-...`` groups (in any ``<prefix>.live.*``) whose coordinator died
        measuring its reconfiguration costs, before its run folder existed (so no `--resume` reaches them),
        and their run's group once empty; returns ``group/probe`` names."""
        removed: list[str] = []
        for parent in sorted(self.hierarchy.root.glob(f"{self.prefix}{RUN_GROUP_INFIX}*")):
            if not parent.is_dir():
                continue
            for child in sorted(p for p in parent.iterdir() if p.is_dir() and p.name.startswith("probe-")):
                pid = owner_pid(child.name)
                if pid is None or pid == os.getpid() or running(pid):
                    continue
                g = self._group(child.name, prefix=parent.name)
                g.created = True  # it exists: remove() kills what is inside, then removes it (and an empty parent)
                with contextlib.suppress(OSError):
                    g.remove()
                    removed.append(f"{parent.name}/{child.name}")
        return removed

    # -- groups ------------------------------------------------------------------------------------
    @property
    def run_prefix(self) -> str:
        """The run's own parent group, ``<cgroup-prefix>.live.<run-id>``: its tasks' groups live in it."""
        return f"{self.prefix}{RUN_GROUP_INFIX}{self.run_id}"

    @property
    def run_parent(self) -> Path:
        return self.hierarchy.root / self.run_prefix

    def _group(self, name: str, millicores: float | None = None, prefix: str | None = None) -> CpuQuotaGroup:
        """A group of the run's (or of `prefix`), its quota at the run's CFS period."""
        return CpuQuotaGroup(
            name,
            millicores=millicores,
            prefix=prefix or self.run_prefix,
            hierarchy=self.hierarchy,
            period_us=self.cfs_period_us,
        )

    def _weigh_run(self) -> None:
        """The weight of the run's parent group against the host's other processes.

        ``"guaranteed"`` (default): the largest weight, so that every task gets the CPU it is configured
        with ahead of unrelated work, as a Guaranteed pod does on its node (the quotas still cap each task,
        and the budget is at most the machine). The plan assumes exactly that; on a busy shared host the
        other setting lets unrelated work starve the tasks (BENCHMARKS.md: +22-35% instead of +2-3%).
        ``"workers"``: what all its stress-ng workers would weigh outside any group (1024 each), as the
        profiler weighs its runs; without even that, on cgroup v1, the whole run would compete with every
        busy process with the weight of one process."""
        if self.cpu_weight == "guaranteed":
            shares = MAX_SHARES
        else:
            shares = max(2, min(MAX_SHARES, 1024 * max(1, sum(self.workers.values()) or len(self.tasks))))
        path = self.run_parent
        with contextlib.suppress(OSError):  # a weight is an improvement, not a requirement: the quotas still hold
            if self.hierarchy.version == 1:
                (path / "cpu.shares").write_text(str(shares))
            else:
                (path / "cpu.weight").write_text(str(1 + ((shares - 2) * 9999) // (MAX_SHARES - 2)))

    def cleanup_stale(self) -> list[str]:
        """Kill and remove this run's groups (its tasks' and its services') and its scratch folders
        (:meth:`_cwd`) that a killed coordinator left behind."""
        removed: list[str] = self._remove_stale_scratch()
        services = self.hierarchy.root / self.services_prefix
        if services.is_dir():  # its services, and whatever they started (a daemon): nothing of them goes on
            for p in sorted(x for x in services.iterdir() if x.is_dir()):
                g = self._group(p.name, prefix=self.services_prefix)
                g.created = True
                g.remove()
                removed.append(f"{self.services_prefix}/{p.name}")
        parent = self.run_parent
        if not parent.is_dir():
            return removed
        for p in sorted(parent.iterdir()):
            if p.is_dir() and p.name not in self.tasks:
                g = self._group(p.name)
                g.created = True  # it exists: remove() kills what is inside, then removes it
                g.remove()
                removed.append(f"{self.run_prefix}/{p.name}")
        if not self.tasks:
            with contextlib.suppress(OSError):
                parent.rmdir()
        return removed

    def _cwd(self) -> str:
        # stress-ng stressors such as chmod make scratch files in their working directory
        if self._workdir is None:
            self._workdir = tempfile.TemporaryDirectory(prefix=self._scratch_prefix)
        return self._workdir.name

    @property
    def _scratch_prefix(self) -> str:
        # named as the run's group (<cgroup prefix>.live.<run id>), which is one live run's on a host
        return f"{self.run_prefix}-"

    def _remove_stale_scratch(self) -> list[str]:
        """This run's scratch folders in the temp dir, but this coordinator's own: a name is the prefix
        and tempfile's 8 random characters, none a '-' (so run "a"'s never matches run "a-2"'s)."""
        removed = []
        root = Path(tempfile.gettempdir())
        own = self._workdir.name if self._workdir is not None else None
        for p in sorted(root.glob(glob.escape(self._scratch_prefix) + "*")):
            rest = p.name[len(self._scratch_prefix) :]
            if p.is_dir() and len(rest) == 8 and "-" not in rest and str(p) != own:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(str(p))
        return removed

    # -- lifecycle ---------------------------------------------------------------------------------
    def start_task(self, launch: WorkerLaunch, millicores: float) -> None:
        quota_us(millicores, self.cfs_period_us)  # a clear error before anything is created
        old = self.tasks.pop(launch.task, None)
        if old is not None:  # a dead (or unwanted) worker: nothing of it may survive
            self._reap(old, timeout_s=0.0)
        group = self._group(launch.task, millicores)
        if group.path.exists():  # left by an earlier coordinator of this run
            group.created = True
            group.remove()
        group.create()
        # the weight its stress-ng workers would have outside any group (1024 each), as the profiler gives
        # its runs, so that on a busy host the quota limits a task, not a lowered share
        group.set_weight(1024 * self.workers.get(launch.task, 1))
        self._weigh_run()
        env = {**os.environ, **launch.env, "PYTHONUNBUFFERED": "1"}
        args = list(launch.args) if launch.program else [self.python, "-m", "bsp_planner.cli", *launch.args]
        header = f"incarnation {launch.incarnation}, {millicores:g}m"
        try:  # the group's preexec_fn: the coordinator's death, even by SIGKILL, ends the worker
            proc, _ = spawn_logged(
                args, self.log_dir / f"{launch.task}.log", header, self._cwd(), env, group.preexec_fn
            )
        except BaseException:
            group.remove()
            raise
        self.tasks[launch.task] = _Task(group, proc, launch)

    def measure_reconfigure_cost(self, method: str) -> float | None:
        """Seconds one reconfiguration costs here, measured now on throw-away groups (median of a few).

        in-place: rewriting a CFS quota, times the tasks a reconfiguration changes at most.
        recreate: what a reconfiguration that recreates every task costs (as in-place counts every task):
        per task in turn, SIGTERM to a running worker-like process and its exit, its group removed, a new
        group made and a new process started in it; then until all of them have loaded what a worker
        loads (:data:`PROBE_READY`), each under the quota a task gets on average (budget / tasks, from
        :meth:`check`). Not included: the worker's ZooKeeper join and leave (a few round trips on the
        same host) and, for a process task, whatever its own program does before its first step; the
        per-step records (``reconfig_s``) hold what each reconfiguration really cost, join included."""
        import statistics

        if method == "in-place":
            n = max(1, len(self.workers))
            times = []
            with self._group(f"probe-{os.getpid()}", 1000, prefix=self.prefix) as g:
                for i in range(7):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        g.set_quota(500 if i % 2 else 1000)
                    times.append(time.perf_counter() - t0)
            return statistics.median(times)
        if method == "recreate":
            return statistics.median(self._probe_restart() for _ in range(RECREATE_PROBES))
        return None

    def _probe_restart(self) -> float:
        """One recreation probe (:meth:`measure_reconfigure_cost`): seconds from the first stop to the last ready."""
        n = max(1, len(self.workers))
        olds: list[CpuQuotaGroup] = []
        news: list[CpuQuotaGroup] = []
        procs: list[subprocess.Popen] = []
        try:
            for i in range(n):
                olds.append(self._probe_group(f"a{i}"))
                procs.append(self._spawn_probe(olds[i]))
            self._weigh_run()
            first = list(procs)
            for p in first:
                self._await_ready(p)
            t0 = time.perf_counter()
            for i, p in enumerate(first):
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=PROBE_TIMEOUT_S)
                olds[i].remove()
                news.append(self._probe_group(f"b{i}"))
                procs.append(self._spawn_probe(news[i]))
            for p in procs[n:]:
                self._await_ready(p)
            return time.perf_counter() - t0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=PROBE_TIMEOUT_S)
                for pipe in (p.stdin, p.stdout):
                    if pipe is not None:
                        pipe.close()
            for g in olds + news:
                g.remove()

    def _probe_group(self, suffix: str) -> CpuQuotaGroup:
        # in the run's own parent group, weighed as it will be for the workers (_weigh_run): the probes
        # compete with the host's other work as the run's workers will (on a busy host that decides it)
        return self._group(f"probe-{os.getpid()}-{suffix}", self.probe_millicores).create()

    def _spawn_probe(self, group: CpuQuotaGroup) -> subprocess.Popen:
        """A process in `group` that loads what a worker loads, then says "ready" (see _await_ready)."""
        return subprocess.Popen(
            [self.python, "-c", PROBE_READY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=group.preexec_fn,
            cwd="/",  # it writes nothing; the tasks' scratch folder is made when the first task starts
        )

    def _await_ready(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None  # a pipe (_spawn_probe)
        if proc.stdout.readline().strip() != b"ready":  # blocks until the probe is ready (or dies: EOF)
            proc.kill()
            proc.wait(timeout=PROBE_TIMEOUT_S)
            raise InputError(
                f"cannot measure the cost of a recreation: a probe worker ({self.python}) did not start (exit code "
                f"{proc.returncode}); give it in the experiment instead: [reconfigure_cost] recreate_s = ...",
                field="reconfigure_cost.recreate_s",
            )

    def resize_task(self, task: str, millicores: float) -> None:
        if task not in self.tasks:
            raise InputError(f"task {task!r} is not running", field="task")
        self.tasks[task].group.set_quota(millicores)

    def recreate_task(self, launch: WorkerLaunch, millicores: float) -> None:
        self.stop_task(launch.task)
        self.start_task(launch, millicores)

    def stop_task(self, task: str, timeout_s: float = 10.0) -> TaskStatus:
        t = self.tasks.pop(task, None)
        if t is None:
            return TaskStatus(alive=False)
        return self._reap(t, timeout_s)

    def _reap(self, t: _Task, timeout_s: float) -> TaskStatus:
        """SIGTERM the worker (it exits at once, its checkpoint is in ZooKeeper), wait, then kill anything
        left in its group and remove the group."""
        if t.proc.poll() is None and timeout_s > 0:
            with contextlib.suppress(ProcessLookupError):
                t.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                t.proc.wait(timeout=timeout_s)
        if t.proc.poll() is None:
            kill_group(t.proc.pid)
        t.group.remove()  # kills whatever is still inside (stress-ng children of a killed worker)
        with contextlib.suppress(subprocess.TimeoutExpired):
            t.proc.wait(timeout=5)
        return TaskStatus(alive=False, exit_code=t.proc.returncode)

    def poll_task(self, task: str) -> TaskStatus:
        t = self.tasks.get(task)
        if t is None:
            return TaskStatus(alive=False, detail="not started")
        code = t.proc.poll()
        return TaskStatus(alive=code is None, exit_code=code)

    def pid(self, task: str) -> int | None:
        t = self.tasks.get(task)
        return None if t is None else t.proc.pid

    def log_tail(self, task: str, limit: int = 2000) -> str:
        return log_tail(self.log_dir / f"{task}.log", limit)

    @property
    def services_prefix(self) -> str:
        """The parent group of the run's services, ``<cgroup-prefix>.services.<run-id>`` (local_services)."""
        return f"{self.prefix}{SERVICE_GROUP_INFIX}{self.run_id}"

    def service_runner(self, log_dir, cwd: str) -> LocalServiceRunner:
        return LocalServiceRunner(log_dir, cwd, group_parent=self.services_prefix, hierarchy=self.hierarchy)

    def close(self) -> None:
        """Stop every worker (in parallel: SIGTERM to all, then wait) and remove every group."""
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for t in tasks:
            if t.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    t.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for t in tasks:
            with contextlib.suppress(subprocess.TimeoutExpired):
                t.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            self._reap(t, timeout_s=0.0)
        self._remove_run_group()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def _remove_run_group(self, wait_s: float = 5.0) -> None:
        """The run's own group, once its tasks' groups are gone. Threads that sat in it beside them (a
        task's reporter, the coordinator's while it ran) may still be counted there for a moment after their
        process ended or moved, so the removal is retried until they are gone; live ones are moved to the
        hierarchy's root group. A group that still holds a task's group is not ours to remove yet."""
        parent = self.run_parent
        deadline = time.monotonic() + wait_s
        while parent.is_dir() and not any(p.is_dir() for p in parent.iterdir()):
            try:
                parent.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
            with contextlib.suppress(OSError):  # cgroup v2 (no tasks file): only waiting helps
                move_threads(map(int, (parent / "tasks").read_text().split()), self.hierarchy.root / "tasks")
            time.sleep(0.02)

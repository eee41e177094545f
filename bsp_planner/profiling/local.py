"""The local profiling backend: each run is one stress-ng process (or a command task's program) in its
own fresh CPU-quota cgroup; a long-running process task is started once per CPU level in such a group
and driven through a profiling session (:mod:`.process`).

By default the groups get the highest CPU weight (``cpu.shares`` 262144, v2 ``cpu.weight`` 10000), so that
the quota, not the host's other load, limits a run (:meth:`~.cgroups.CpuQuotaGroup.set_weight` says why);
``cpu_shares=None`` leaves the kernel's default weight (one group = one ordinary process).

The duration of a run is the wall-clock time of the stress-ng process, from just before it is started
to its exit. The child joins its cgroup between fork and exec (``preexec_fn``), so none of its work runs
outside the quota, and it gets its own session so that a terminal's Ctrl-C reaches only the runner,
which then kills the whole group and removes the cgroup.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path

from ..core.errors import InputError
from ..core.leftovers import running
from ..inputs.job import Task
from ..inputs.placeholders import alone_values
from ..task.profiling import PROFILE_SYNC
from ..task.reports import parse_workload_report
from .cgroups import (
    CFS_PERIOD_US,
    DEFAULT_PREFIX,
    MAX_SHARES,
    CpuQuotaGroup,
    Hierarchy,
    check_period_us,
    detect_hierarchy,
    quota_us,
    remove_stale_groups,
)
from .process import ProcessSteps, drive_process, kill_run, stop_run
from .results import RunResult, stderr_tail

STRESS_NG_INSTALL = "apt-get install stress-ng"
SCRATCH_TMPFS = "/dev/shm"
SCRATCH_PREFIX = "bsp-planner-stress-"  # + <pid of the profile run>-<random>


def check_program(task: Task, job_path: Path | None = None) -> str:
    """The full path of a command/process task's program; InputError if it is missing or not executable."""
    argv = task.command or task.process or ()
    kind = task.kind
    if task.runs_image_entrypoint:
        raise InputError(
            f"task '{task.name}' runs its image {task.image!r} as built (no `process` given): only the kubernetes "
            "backend can run an image; profile it with `profile run --backend kubernetes`",
            path=job_path,
            field=f"{task.name}.image",
        )
    prog = (argv[0] if argv else "").replace("{python}", sys.executable)
    found = prog if "/" in prog else shutil.which(prog)
    if not found or not os.path.exists(found):
        raise InputError(
            f"task '{task.name}': its {kind} program {prog!r} was not found" + ("" if "/" in prog else " on PATH"),
            path=job_path,
            field=f"{task.name}.{kind}",
        )
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise InputError(
            f"task '{task.name}': its {kind} program {found!r} is not executable (chmod +x it, or name its interpreter first)",
            path=job_path,
            field=f"{task.name}.{kind}",
        )
    return found


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


class LocalBackend:
    """Runs tasks' stress-ng stressors on this host, each under a CFS quota equal to its CPU level."""

    name = "local-cgroup"

    def __init__(
        self,
        *,
        stress_ng: str = "stress-ng",
        prefix: str = DEFAULT_PREFIX,
        workdir: str | Path | None = None,
        hierarchy: Hierarchy | None = None,
        cpu_shares: int | None = MAX_SHARES,
        cfs_period_us: int = CFS_PERIOD_US,
    ) -> None:
        """`cfs_period_us`: the CFS period of every run's quota; the live local backend's setting of the
        same name has the same default, so that a run is limited as its profile was."""
        self.cfs_period_us = check_period_us(cfs_period_us, field="--cfs-period-us")
        if cpu_shares is not None and not 2 <= cpu_shares <= MAX_SHARES:
            raise InputError(f"expected cpu shares in 2..{MAX_SHARES}, got {cpu_shares}", field="--cpu-shares")
        self.cpu_shares = cpu_shares
        self.stress_ng = stress_ng
        self.prefix = prefix
        self.workdir = Path(workdir) if workdir is not None else None
        self._hierarchy = hierarchy
        self._own_workdir: tempfile.TemporaryDirectory | None = None
        self.stale_removed: list[str] = []  # groups of killed profile runs that check() removed
        self.on_progress: Callable[[str], None] | None = None  # told where a profiled process is (runner)

    # stress-ng stressors such as chmod make scratch files in their working directory: by default
    # runs happen in a private temporary directory on tmpfs (/dev/shm) where the host has one, so that
    # they cost CPU rather than waiting on a disk journal shared with the rest of the host; it is
    # removed by close() / leaving a ``with`` block
    def _cwd(self) -> Path:
        if self.workdir is None:
            shm = Path(SCRATCH_TMPFS)
            base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None
            # named by our pid: check() of a later profile run removes the folder a killed one left
            self._own_workdir = tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base)
            self.workdir = Path(self._own_workdir.name)
        return self.workdir

    def scratch_fs(self) -> str:
        """The file system type of the runs' working directory (from /proc/mounts)."""
        cwd = str(self._cwd().resolve())
        best, fstype = "", "unknown"
        with contextlib.suppress(OSError):
            for line in Path("/proc/mounts").read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and (cwd == parts[1] or cwd.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) > len(best):
                        best, fstype = parts[1], parts[2]
        return fstype

    def close(self) -> None:
        if self._own_workdir is not None:
            self._own_workdir.cleanup()
            self._own_workdir = None
            self.workdir = None

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- checks, done once before any run ----------------------------------------------------------
    @cached_property
    def hierarchy(self) -> Hierarchy:
        return self._hierarchy or detect_hierarchy()

    def stress_ng_path(self) -> str:
        found = shutil.which(self.stress_ng)
        if not found:
            raise InputError(
                f"stress-ng not found (looked for '{self.stress_ng}' on PATH); install it: `{STRESS_NG_INSTALL}`",
                field="stress-ng",
            )
        return found

    @cached_property
    def stress_ng_version(self) -> str | None:
        """None without stress-ng: a profile of command or process tasks only does not need it."""
        if (found := shutil.which(self.stress_ng)) is None:
            return None
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip() or "unknown"

    @cached_property
    def installed_stressors(self) -> set[str]:
        out = subprocess.run([self.stress_ng_path(), "--stressors"], capture_output=True, text=True, timeout=30)
        return set(out.stdout.split())

    def check(self, tasks: Sequence[Task], job_path: Path | None = None) -> None:
        """Fail early, with what to do: stress-ng missing, a stressor it lacks, a command task's program
        missing or not executable, no cgroup permission."""
        stressors = [t for t in tasks if t.kind == "stressor"]
        for t in tasks:
            if t.kind != "stressor":
                check_program(t, job_path)
        installed = self.installed_stressors if stressors else set()
        for t in stressors:
            if installed and t.stressor not in installed:
                raise InputError(
                    f"task '{t.name}': the installed stress-ng ({self.stress_ng_version}) has no "
                    f"stressor '{t.stressor}'",
                    path=job_path,
                    field="stressor",
                )
        # groups a killed profile run left behind (with its stress-ng still running in them) would
        # steal CPU from these measurements: remove them first
        self.stale_removed = remove_stale_groups(self.prefix, self.hierarchy) + remove_stale_scratch()
        # a throw-away group proves we may create, limit and remove groups before hours of runs
        with CpuQuotaGroup(f"check-{os.getpid()}", millicores=1000, prefix=self.prefix, hierarchy=self.hierarchy):
            pass

    def info(self) -> dict:
        h = self.hierarchy
        return {
            "backend": self.name,
            "cgroup": {"version": h.version, "root": str(h.root), "prefix": self.prefix},
            "stress_ng": self.stress_ng_version,
            "scratch_fs": self.scratch_fs(),
            "cpu_shares": self.cpu_shares,
            "cfs_period_us": self.cfs_period_us,
            "cpu_shares_note": "cgroup CPU weight of each run's group and its prefix group (v1 cpu.shares; "
            "v2 cpu.weight converted as a kubelet does; null = kernel default); high so the quota, not "
            "other load on the host, limits the runs",
        }

    # -- one run ---------------------------------------------------------------------------------
    def _group(self, task: Task, cpu_millicores: float) -> CpuQuotaGroup:
        """A fresh group for one run of `task` (created on entering it), named so that a later runner
        can tell whether its owner is gone (:func:`remove_stale_groups`)."""
        quota_us(cpu_millicores, self.cfs_period_us)  # a clear error before creating anything
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in task.name)
        return CpuQuotaGroup(
            f"{safe}-{os.getpid()}-{time.monotonic_ns()}",
            millicores=cpu_millicores,
            prefix=self.prefix,
            hierarchy=self.hierarchy,
            period_us=self.cfs_period_us,
        )

    def run(self, task: Task, workload: float, cpu_millicores: float, timeout_s: float) -> RunResult:
        """Run `workload` units of a stressor or command `task` under a `cpu_millicores` quota; never leaves
        the cgroup behind. The result carries the run's CPU seconds and its group's throttling."""
        if task.kind == "process":
            raise InputError(
                f"task '{task.name}' is a long-running process: it is profiled a whole CPU level at a time "
                "(run_process), not one workload per start",
                field="process",
            )
        stress_ng = self.stress_ng_path() if task.kind == "stressor" else "stress-ng"
        values, run_env = alone_values(task.name, task.command or (), task.job_dir)  # {port}, {job_dir}
        args = task.step_args(workload, 0, stress_ng=stress_ng, run_dir=str(self._cwd()), run_values=values)
        env = None
        if task.kind == "command":  # BSP_SYNC=profile: it runs alone, sized by {workload} / BSP_WORKLOAD
            env = {**os.environ, **run_env, **task.step_env(workload, 0), "BSP_SYNC": PROFILE_SYNC}
        with self._group(task, cpu_millicores) as group:
            if self.cpu_shares is not None:
                group.set_weight(self.cpu_shares)
            return self._run_in(group, args, env, timeout_s, report=task.kind == "command")

    def _run_in(
        self, group: CpuQuotaGroup, args: list[str], env: dict | None, timeout_s: float, report: bool = False
    ) -> RunResult:
        """One program started inside `group`, timed from just before its start to its exit.

        Its CPU seconds are this process's children's resource usage before and after reaping it: the
        runner starts one run at a time, so no other child is reaped in between."""
        proc = None
        try:
            cpu_before = _children_cpu_s()
            start = time.perf_counter()
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if report else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=self._cwd(),
                env=env,
                preexec_fn=group.preexec_fn,
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_run(proc, group)
                proc.communicate()
                return RunResult(None, f"timeout after {timeout_s:g} s")
            duration = time.perf_counter() - start
            cpu_s = _children_cpu_s() - cpu_before
        except BaseException:
            # Ctrl-C or anything else: no stress-ng may outlive the run, nor its cgroup
            if proc is not None:
                stop_run(proc, group)
            raise
        if proc.returncode != 0:
            detail = stderr_tail(err)
            return RunResult(None, f"exit code {proc.returncode}" + (f": {detail}" if detail else ""))
        reported = None
        if report:
            try:
                reported = parse_workload_report(out or b"", "its command").get("workload")
            except InputError as exc:
                return RunResult(None, exc.message)
        return RunResult(duration, cpu_s=cpu_s, cpu_stat=group.cpu_stat(), reported_workload=reported)

    def run_process(
        self,
        task: Task,
        workloads: list[float],
        cpu_millicores: float,
        timeout_s: float,
        steps: ProcessSteps,
    ) -> dict[float, RunResult]:
        """Profile a long-running `process` task at every one of `workloads` under one `cpu_millicores`
        quota: one start, its profiling session assigning the workloads in turn (see
        :mod:`bsp_planner.profiling.process`). Returns each workload's cell; never leaves the group behind."""
        with self._group(task, cpu_millicores) as group:
            if self.cpu_shares is not None:
                group.set_weight(self.cpu_shares)
            results = drive_process(task, workloads, group, timeout_s, steps, self._cwd(), self.on_progress)
            stat = group.cpu_stat()  # the whole process's: every CPU level's cells share one group
            return {w: replace(r, cpu_stat=stat) if r.ok else r for w, r in results.items()}


def remove_stale_scratch() -> list[str]:
    """Remove the scratch folders of profile runs that were killed (SIGKILL: no cleanup ran): those named
    by a pid that no longer runs. Returns the removed folders."""
    removed = []
    for base in {Path(SCRATCH_TMPFS), Path(tempfile.gettempdir())}:
        try:
            folders = sorted(base.glob(f"{SCRATCH_PREFIX}*"))
        except OSError:
            continue
        for folder in folders:
            pid = folder.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or int(pid) == os.getpid() or running(int(pid)) or not folder.is_dir():
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

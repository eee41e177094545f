"""The Kubernetes profiler: the profiling grid as Kubernetes Jobs (thesis section 4.1.2).

Each grid cell (task, workload, CPU level, repeat) is one Job whose single container has CPU requests =
limits = the cell's CPU level and runs ``python -m bsp_planner.profiling.pod_measure -- stress-ng ...``: the
stressor's wall-clock time under the kubelet's CFS quota, as the local profiler measures it under its
own cgroup. A command task's cell runs ``... measure -- <its command>`` instead, in the task's own
image when it names one (the image then needs bsp-planner installed, as for live runs). The result
comes back in the container's termination message (pods ``list``, no log access).

:class:`KubernetesProfiler` is a plain backend of :func:`bsp_planner.profiling.runner.run_grid`
(``check``, ``info``, ``run``), so the files and the resume are the local profiler's, written by the same
code (:mod:`.runner`). The parallelism comes from looking ahead: told the cells the runner will ask for
(:meth:`KubernetesProfiler.expect`, which :func:`run_grid_kubernetes` does), it keeps up to ``parallelism``
Jobs running while the runner waits for the first; results are handed back in the runner's order.

Jobs are labelled ``bsp-planner.io/profile=<id>`` (by default derived from the profile's path) and
deleted once their result is written, so Jobs of a session that was killed keep running in the cluster
and the next session collects their results instead of running those cells again. Leaving a ``with``
block (Ctrl-C included) deletes the Jobs still running; finished ones whose rows were not written yet
stay for the next session to read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..core import atomic
from ..core.errors import InputError
from ..inputs.job import Job, Task
from ..inputs.profiles import metadata_path
from ..k8s import manifests as M
from ..k8s import names as N
from ..k8s.cluster import Cluster, pod_state, terminated
from ..k8s.config import connect, resolve_image
from ..task.profiling import PROFILE_ENV, plan_text
from . import runner as R
from .grid import level_text
from .local import RunResult
from .process import ProcessSteps, process_args

DEFAULT_PARALLELISM = 4
DEFAULT_STARTUP_S = 300.0  # scheduling + image pull allowance per Job
PYTHON_PLACEHOLDER = "{python}"  # left for the measurement in the container to fill with its own Python
IMAGE_PYTHON = "python3"  # `{python}` of a process task in its pod: the image's Python, as in a live run


def cell_text(cell: R.Cell) -> str:
    task, w, c, r = cell
    return f"{task},{level_text(w)},{level_text(c)},{r}"


def cell_id(cell: R.Cell) -> str:
    return hashlib.sha256(cell_text(cell).encode()).hexdigest()[:10]


def default_profile_id(out: str | Path) -> str:
    """A stable id for the profile at `out`: its folder's name and a hash of its absolute path."""
    p = Path(out).resolve()
    return N.dns_label(f"{p.parent.name}-{hashlib.sha256(str(p).encode()).hexdigest()[:6]}".lower(), 24)


@dataclass
class _Active:
    job: str
    submitted: float


@dataclass
class KubernetesProfiler:
    """Runs profiling cells as Jobs in one namespace, up to `parallelism` at once (see the module)."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    image: str | None = None
    image_pull_policy: str = M.DEFAULT_IMAGE_PULL_POLICY
    memory: str = M.DEFAULT_MEMORY
    node_selector: dict[str, str] = field(default_factory=dict)
    parallelism: int = DEFAULT_PARALLELISM
    startup_timeout_s: float = DEFAULT_STARTUP_S
    profile_id: str = "adhoc"
    poll_s: float = 1.0
    cluster: Cluster | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    name = "kubernetes"

    def __post_init__(self) -> None:
        if isinstance(self.parallelism, bool) or not isinstance(self.parallelism, int) or self.parallelism < 1:
            raise InputError(f"expected a whole number >= 1, got {self.parallelism!r}", field="--parallel")
        if not self.startup_timeout_s > 0:
            raise InputError(
                f"expected a positive number of seconds, got {self.startup_timeout_s!r}", field="--startup-timeout"
            )
        if not N.is_dns_label(self.profile_id) or len(self.profile_id) > 24:
            raise InputError(
                f"a profile id is at most 24 lowercase letters, digits and '-', got {self.profile_id!r}",
                field="--profile-id",
            )
        self._cluster: Cluster = self.cluster or Cluster(
            connect(self.namespace, kubeconfig=self.kubeconfig, context=self.context)
        )
        self.cluster, self.namespace = self._cluster, self._cluster.namespace
        self.nodes: dict[str, str] = {}  # node -> CPU model, of the nodes that ran cells
        self._ahead: list[R.Cell] = []  # cells the runner will ask for, in its order
        self._tasks: dict[str, Task] = {}
        self._active: dict[R.Cell, _Active] = {}  # submitted, not finished
        self._done: dict[R.Cell, tuple[RunResult, str]] = {}  # finished, result not handed out yet (job name)
        self._adopted = False
        self.jobs_created = 0
        self.process_jobs = 0

    def __enter__(self) -> KubernetesProfiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @cached_property
    def settings(self) -> M.PodSettings:
        image = resolve_image(self.image, self._cluster.pod_image)
        return M.PodSettings(
            self._cluster.namespace, image, self.image_pull_policy, self.memory, dict(self.node_selector)
        )

    # -- the runner's backend ----------------------------------------------------------------------
    def check(self, tasks: Sequence[Task], job_path: Path | None = None) -> None:
        """The namespace answers with the Role's rights and the image is known. (Whether the image's
        stress-ng has a stressor, or a process task's image its program, shows in that task's first run:
        a failed cell, with the reason.)"""
        self._cluster.list_jobs(M.profile_selector(self.profile_id))
        self.settings  # noqa: B018

    def info(self) -> dict:
        caps = self._cluster.capabilities()
        return {
            "backend": self.name,
            "kubernetes": {
                "server_version": caps.git_version,
                "where": self._cluster.conn.where,
                "namespace": self.namespace,
                "image": self.settings.image,
                "parallelism": self.parallelism,
                "profile_id": self.profile_id,
                "node_selector": dict(self.node_selector),
            },
        }

    def expect(self, tasks: Sequence[Task], cells: Sequence[R.Cell]) -> None:
        """The cells the runner is about to ask for, in its order: they run `parallelism` at a time. (A
        process task's cells are not looked ahead: one Job runs all its workloads at a CPU level, see
        :meth:`run_process`.)"""
        self._tasks.update({t.name: t for t in tasks})
        processes = {t.name for t in tasks if t.kind == "process"}
        self._ahead = [c for c in cells if c[0] not in processes]

    def run(self, task: Task, workload: float, cpu_millicores: float, timeout_s: float) -> RunResult:
        """The result of one cell: from the Jobs already running ahead when it was expected, else from a
        Job started now."""
        self._tasks[task.name] = task
        key = (task.name, float(workload), float(cpu_millicores))
        cell = next((c for c in self._ahead if c[:3] == key), None)
        if cell is None:  # not announced: a one-off cell, numbered after whatever repeats ran before
            cell = (*key, -1 - sum(1 for c in self._done if c[:3] == key))
        else:
            self._ahead.remove(cell)
            self._ahead.insert(0, cell)  # submitted first if it is not yet
        self._adopt()
        while cell not in self._done:
            self._fill(cell, timeout_s)
            if not self._collect(timeout_s):
                self.sleep(self.poll_s)
        if cell in self._ahead:
            self._ahead.remove(cell)
        result, job = self._done.pop(cell)
        self._cluster.delete_job(job)  # only now: a killed session leaves it for the next to collect
        return result

    def run_process(
        self, task: Task, workloads: list[float], cpu_millicores: float, timeout_s: float, steps: ProcessSteps
    ) -> dict[float, RunResult]:
        """Profile a `process` task at every one of `workloads` under `cpu_millicores` as the local profiler
        does, in one Job (:mod:`.pod_process`, :func:`~bsp_planner.k8s.manifests.process_profile_job`): the
        program (or image as built) started once with the local profiler's plan. Returns each workload's cell."""
        self._adopt()
        self.process_jobs += 1
        levels = "/".join(level_text(w) for w in workloads)
        text = f"{task.name},process,{level_text(cpu_millicores)},{levels},{self.process_jobs}"
        cid = hashlib.sha256(f"{text},{self.clock()}".encode()).hexdigest()[:10]
        plan = steps.plan(task.name, workloads, Path(M.SCRATCH_DIR) / "reports.jsonl")
        plan_file = f"{M.SCRATCH_DIR}/plan.json"
        program = None
        if not task.runs_image_entrypoint:
            args = process_args(task, f"{M.SCRATCH_DIR}/run")
            program = [IMAGE_PYTHON if a == sys.executable else a for a in args]
        env = {PROFILE_ENV: plan_file, "BSP_TASK": task.name, "BSP_RUN_DIR": M.SCRATCH_DIR}
        # one step may take timeout_s; a workload runs warm-up and measured steps, at least min_measure_s
        step_s = (steps.warmup + steps.measure + 1) * timeout_s + steps.min_measure_s
        deadline_s = self.startup_timeout_s + len(workloads) * step_s
        body = M.process_profile_job(
            self.settings,
            self.profile_id,
            cid,
            text,
            task.name,
            cpu_millicores,
            program,
            plan_text(plan),
            plan_file,
            timeout_s,
            deadline_s,
            image=task.image,
            env=env,
        )
        self._cluster.create_job(body)
        self.jobs_created += 1
        submitted = self.clock()
        try:
            while True:
                outcome = self._process_outcome(cid, workloads, self.clock() - submitted)
                if outcome is not None:
                    return outcome
                self.sleep(self.poll_s)
        finally:
            self._delete_quietly(body["metadata"]["name"])  # its program may still run (a hang): it ends with its Job

    def _process_outcome(self, cid: str, workloads: Sequence[float], waited_s: float) -> dict[float, RunResult] | None:
        """Each workload's cell once the collector ended (or the Job failed without it), else None."""
        job, pod = self._existing().get(cid), self._newest_pods().get(cid)
        collector = terminated(pod, M.COLLECTOR_CONTAINER)
        if job is None or not collector:
            deadline = f"its deadline ({(job or {}).get('spec', {}).get('activeDeadlineSeconds')} s)"
            ended = self._ended(job, pod, waited_s, deadline)
            return None if ended is None else dict.fromkeys(map(float, workloads), ended)
        report = _report(pod, collector)
        if not report or "cells" not in report:
            failure = f"the collector of its step reports failed: {(report or {}).get('reason', '?')}"
            return dict.fromkeys(map(float, workloads), RunResult(None, failure))
        self._note_node(report, pod)
        profiled = terminated(pod, M.PROFILED_CONTAINER)
        why = None
        if profiled and profiled.get("exitCode") not in (0, None):
            tail = " ".join((profiled.get("message") or "").split())[-300:]
            why = f"its process exited with code {profiled.get('exitCode')} {report.get('where', '')}".rstrip()
            why += f": {tail}" if tail else ""
        out: dict[float, RunResult] = {}
        for w in workloads:
            c = report["cells"].get(level_text(w)) or {"reason": "no result for this workload"}
            if c.get("duration_s") is not None:
                out[float(w)] = RunResult(float(c["duration_s"]), cpu_s=c.get("cpu_s"))
            else:
                out[float(w)] = RunResult(None, why or c.get("reason") or "failed")
        return out

    def abandon(self, task: str) -> None:
        """The runner gave task `task` up for this session (its runs all failed the same way): its cells are
        no longer looked ahead, and its Jobs, running or finished, are deleted (the next session runs them
        afresh, not from a result of the cause that made it give up)."""
        self._ahead = [c for c in self._ahead if c[0] != task]
        for cell in [c for c in self._active if c[0] == task]:
            self._delete_quietly(self._active.pop(cell).job)
        for cell in [c for c in self._done if c[0] == task]:
            self._delete_quietly(self._done.pop(cell)[1])

    def _delete_quietly(self, job: str) -> None:
        with contextlib.suppress(Exception):
            self._cluster.delete_job(job)

    def close(self) -> None:
        """Delete the Jobs still running (their cells are measured again by the next session); finished
        ones not handed to the runner yet stay, for the next session to read."""
        for a in list(self._active.values()):
            self._delete_quietly(a.job)
        self._active.clear()

    # -- Jobs --------------------------------------------------------------------------------------
    def job_body(self, task: Task, cell: R.Cell, timeout_s: float) -> dict:
        """One cell's Job: the measurement around stress-ng, or around the task's command (in the task's
        image when it names one; ``{python}`` is the container's own Python, ``{run_dir}`` its scratch
        folder, BSP_WORKLOAD/BSP_STEP/BSP_TASK in its environment, as the live worker runs it)."""
        _, workload, cpu, _ = cell
        if task.kind == "command":
            program = task.step_args(workload, 0, run_dir=M.SCRATCH_DIR)
            program = [PYTHON_PLACEHOLDER if a == sys.executable else a for a in program]
            env = task.step_env(workload, 0)
        else:
            program, env = task.stress_ng_args(workload, stress_ng="stress-ng"), {}
        command = ["python", "-m", "bsp_planner.profiling.pod_measure", "--timeout", f"{timeout_s:g}", "--", *program]
        return M.profile_job(
            self.settings,
            self.profile_id,
            cell_id(cell),
            cell_text(cell),
            task.name,
            cpu,
            command,
            timeout_s,
            self.startup_timeout_s,
            image=task.image,
            env=env,
        )

    def _existing(self) -> dict[str | None, dict]:
        """This profile's Jobs in the cluster, by cell id (None: a Job without one)."""
        jobs = self._cluster.list_jobs(M.profile_selector(self.profile_id))
        return {(j["metadata"].get("labels") or {}).get(N.LABEL_CELL): j for j in jobs}

    def _newest_pods(self) -> dict[str | None, dict]:
        """The newest pod of each of this profile's cells, by cell id."""
        pods = self._cluster.list_pods(M.profile_selector(self.profile_id))
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return {(p["metadata"].get("labels") or {}).get(N.LABEL_CELL): p for p in pods}

    def _adopt(self) -> None:
        """Once, before the first run: Jobs of this profile left by an earlier session. Those of expected
        cells are waited for and read; the others (cells measured since, or no longer asked for) are deleted."""
        if self._adopted:
            return
        self._adopted = True
        wanted = {cell_id(c): c for c in self._ahead}
        for cid, job in self._existing().items():
            if cid in wanted:
                self._active[wanted[cid]] = _Active(job["metadata"]["name"], self.clock())
            else:
                self._cluster.delete_job(job["metadata"]["name"])

    def _fill(self, head: R.Cell, timeout_s: float) -> None:
        todo = [head] + [c for c in self._ahead if c != head]
        for cell in todo:
            if len(self._active) >= self.parallelism:
                return
            if cell in self._active or cell in self._done or cell[0] not in self._tasks:
                continue
            body = self.job_body(self._tasks[cell[0]], cell, timeout_s)
            name = body["metadata"]["name"]
            if self._cluster.create_job(body) is None:  # a stale Job of that name: start afresh
                self._cluster.delete_job(name)
                deadline = self.clock() + 60
                while cell_id(cell) in self._existing() and self.clock() < deadline:
                    self.sleep(self.poll_s)
                self._cluster.create_job(body)
            self.jobs_created += 1
            self._active[cell] = _Active(name, self.clock())

    def _collect(self, timeout_s: float) -> bool:
        """Move the Jobs that ended to _done (one list of Jobs and one of pods per call); True if any did."""
        if not self._active:
            return False
        jobs, pods, now = self._existing(), self._newest_pods(), self.clock()
        results = {
            c: self._outcome(jobs.get(cell_id(c)), pods.get(cell_id(c)), now - a.submitted, timeout_s)
            for c, a in self._active.items()
        }
        ended = {cell: result for cell, result in results.items() if result is not None}
        for cell, result in ended.items():
            self._done[cell] = (result, self._active.pop(cell).job)
        return bool(ended)

    def _outcome(self, job: dict | None, pod: dict | None, waited_s: float, timeout_s: float) -> RunResult | None:
        """A finished cell's result, or None while it runs."""
        report = _report(pod)
        if job is not None and (_conditions(job).get("Complete") or (job.get("status") or {}).get("succeeded")):
            if report and report.get("duration_s") is not None:
                self._note_node(report, pod)
                return RunResult(float(report["duration_s"]))
            return RunResult(None, "the Job completed but its pod's result is missing")
        why = (report or {}).get("reason") or (pod_state(pod, N.COMPONENT_PROFILER).problem if pod else None)
        return self._ended(job, pod, waited_s, f"{timeout_s:g} s + {self.startup_timeout_s:g} s to start", why)

    def _ended(
        self, job: dict | None, pod: dict | None, waited_s: float, deadline: str, why: str | None = None
    ) -> RunResult | None:
        """A failed result for a Job that is gone, failed (`deadline`: what it ran past, when that was why;
        else `why`, else the Job's message) or stuck (:meth:`_stuck`); None while it may still end."""
        if job is None:
            return RunResult(None, "the Job was deleted before it finished (by someone else?)")
        failed = _conditions(job).get("Failed")
        if failed or (job.get("status") or {}).get("failed"):
            if (failed or {}).get("reason") == "DeadlineExceeded":
                return RunResult(None, f"timeout: the Job ran past {deadline}")
            return RunResult(None, why or (failed or {}).get("message") or "the Job failed")
        stuck = self._stuck(pod, waited_s)
        return None if stuck is None else RunResult(None, stuck)

    def _note_node(self, report: dict, pod: dict | None) -> None:
        """The node that ran a cell and its CPU model, from the measurement's report (else the pod's node)."""
        node = report.get("node") or ((pod or {}).get("spec") or {}).get("nodeName") or "?"
        self.nodes.setdefault(node, report.get("cpu_model") or "unknown")

    def _stuck(self, pod: dict | None, waited_s: float) -> str | None:
        """Why a Job that has not ended never will: its pod cannot start, or it has none past startup_timeout_s."""
        if pod is not None:
            st = pod_state(pod, N.COMPONENT_PROFILER)
            if st.phase == "Pending" and (st.fatal_waiting or waited_s > self.startup_timeout_s):
                return f"did not start within {waited_s:.0f} s: {st.waiting}"
        elif waited_s > self.startup_timeout_s:
            return f"no pod within {self.startup_timeout_s:g} s (a quota? admission?)"
        return None


def _conditions(job: dict | None) -> dict[str, dict]:
    """A Job's conditions that hold, by type."""
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return {c.get("type"): c for c in conds if c.get("status") == "True"}


def _report(pod: dict | None, term: dict | None = None) -> dict | None:
    """The JSON the measurement (or a process Job's collector: `term`) left in its termination message."""
    term = terminated(pod) if term is None else term
    if not term:
        return None
    msg = (term.get("message") or "").strip()
    if msg.startswith("{"):
        try:
            return json.loads(msg)
        except ValueError:
            return None
    return {
        "duration_s": None,
        "reason": f"exit code {term.get('exitCode')}: {' '.join(msg.split())[-300:]}".rstrip(": "),
    }


def run_grid_kubernetes(
    job: Job,
    out: str | Path,
    grid: R.Grid,
    profiler: KubernetesProfiler,
    *,
    tasks: Sequence[str] | None = None,
    **options,
) -> R.GridReport:
    """:func:`~bsp_planner.profiling.runner.run_grid` (its keyword `options` too) with the cells run as
    Kubernetes Jobs, `profiler.parallelism` at a time: the runner's checks, files and resume; the profiler
    is told which cells the runner will ask for (the runner's own order, less the cells the profile already has)."""
    selected = R.select_tasks(job, tasks)
    cells = R.plan_cells(selected, R.validate_grid(grid))
    try:
        measured = R.measured_cells(Path(out))
    except InputError:  # a damaged file: run_grid says what is wrong with it; no look-ahead meanwhile
        measured = set(cells)
    profiler.expect(selected, [c for c in cells if c not in measured])
    try:
        with profiler:
            return R.run_grid(job, out, grid, profiler, tasks=tasks, **options)
    finally:  # the nodes that ran cells (node -> CPU model), under "kubernetes": the runner's host fields
        # describe the machine that drove the profile, not the ones that measured
        if profiler.nodes and (meta_file := metadata_path(out)).is_file():
            meta = json.loads(meta_file.read_text())
            k8s = meta.setdefault("kubernetes", {})
            k8s["nodes"] = {**(k8s.get("nodes") or {}), **profiler.nodes}
            atomic.write_json(meta_file, meta)

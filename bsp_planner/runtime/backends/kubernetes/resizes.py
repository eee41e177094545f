"""The Kubernetes backend's reconfigurations: in-place resizes through ``pods/resize``, and what one costs.

``in-place`` patches the ``pods/resize`` subresource (Kubernetes 1.33+) and waits until the kubelet reports
the new limit applied; ``recreate`` deletes the pod and creates it again (:mod:`.pods`). ``auto`` takes
in-place where the server lists ``pods/resize``.

A step's reconfiguration (:meth:`KubernetesResizes.resize_tasks`) resizes its pods in two batches: every
shrink patched at once and awaited together, then every grow, so the CPU the run holds never exceeds the
budget in between and a reconfiguration costs at most two round trips, however many tasks change. A resize
the kubelet leaves pending (``PodResizePending``: ``Deferred``, the node has no room now; ``Infeasible``,
it never will) is taken back (the pod patched to the CPU it holds) and reported as :class:`ResizePending`:
the run re-reads the nodes and re-plans on what is free, and never asks for the refused value again.

A single :meth:`~KubernetesResizes.resize_task` (a quota written ahead in observe mode) waits instead: a
resize the kubelet calls Infeasible, or that is still pending after ``resize_timeout_s``, falls back to
recreation, except for a process task (its state is in memory): the run then stops
(:class:`ResizeRefused`), resumable, saying Infeasible or Deferred. Every reconfiguration is timed and kept
in ``events`` (task, mode, seconds, detail) for the run log, each batch in ``batches``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ....core.errors import InputError
from ....k8s import manifests as M
from ....k8s import names as N
from ....k8s.cluster import PodState, pod_state, resize_done
from .. import TaskLost
from .nodes import KubernetesNodes
from .pods import IMAGE_PYTHON, PodLost, ReconfigEvent

PROBE_TASK = "cost-probe"  # the task name of the pod that measures a recreation (never a job's task)
MIN_PROBE_MILLICORES = 10
IN_PLACE_PROBES = 3  # batches of the in-place probe pods: down, up, down (the median is planned with)
MAX_PROBE_PODS = 8  # the in-place probe resizes as many pods at once as the job has tasks, at most this many
#: a reconfiguration under a CPU budget moves CPU from some tasks to others: a batch of shrinks, then of grows
BATCHES_PER_RECONFIGURATION = 2
PROBE_SLEEP = "import time; time.sleep(3600)"  # the in-place probe's container: runs until deleted
#: method -> (what its probe measures, the experiment's setting that spares it)
PROBED = {"in-place": ("an in-place resize", "in_place_s"), "recreate": ("a pod recreation", "recreate_s")}


class ResizeRefused(TaskLost):
    """A process task cannot be resized in place (the kubelet calls it Infeasible, or defers it past the
    timeout, or its node has no room) and is never recreated behind its back: the run stops, resumable."""


class ResizePending(TaskLost):
    """The kubelet left some of a batch's resizes pending (``Deferred``: no room on the node now;
    ``Infeasible``: more than the node has): they were taken back (each pod keeps the CPU it holds, in
    ``KubernetesResizes.tasks``), the others applied. ``refused``: task -> (reason, node, the kubelet's
    message, the millicores it refused). Unhandled, it stops the run, resumable."""

    replan_on_nodes = True  # the run re-reads the nodes and re-plans on what is free (executor.py)

    def __init__(self, message: str, refused: dict[str, tuple[str, str, str, float]], holds: dict[str, float]) -> None:
        super().__init__(message, field="kubernetes")
        self.refused = refused
        self.holds = holds  # task -> the millicores its pod holds now (what applied, what was taken back)

    @property
    def kind(self) -> str:
        """'infeasible' if any resize can never fit its node, else 'deferred'."""
        return "infeasible" if any(r[0] == "Infeasible" for r in self.refused.values()) else "deferred"


@dataclass
class ResizeBatch:
    """One batch of a reconfiguration: its direction ('shrink' or 'grow'), its tasks, the seconds from its
    first patch until the kubelet reported the last one applied (or refused)."""

    direction: str
    tasks: list[str]
    seconds: float
    refused: list[str] = field(default_factory=list)
    ended_at: float = 0.0  # time.time() when the last of its resizes was applied (the tasks' clock)

    def as_dict(self) -> dict:
        out = {"direction": self.direction, "tasks": len(self.tasks), "seconds": round(self.seconds, 4)}
        return out | ({"refused": list(self.refused)} if self.refused else {})


class KubernetesResizes(KubernetesNodes):
    """Resizes a task's pod in place (or recreates it where the plan or the kubelet says so), and measures
    what each way costs on this cluster."""

    def resize_task(self, task: str, millicores: float) -> None:
        """In place through pods/resize, waiting until the kubelet applied it; recreation where the plan
        from check_configuration says so, where the server cannot resize, or where the kubelet refuses."""
        if task not in self.tasks:
            raise InputError(f"task {task!r} is not running", field="task")
        t = self.tasks[task]
        if t.plan == "recreate" or self.mode != "in-place":
            return self.recreate_task(t.launch, millicores, detail="planned" if t.plan == "recreate" else "")
        started = self.clock()
        name = self._pod_name(task)
        try:
            self._cluster.resize_pod(name, M.resize_patch(millicores))
        except Exception:
            # A self-synchronising process may run its last steps and exit 0 before the coordinator
            # catches up; an ended pod cannot be (and need not be) resized: its CPU is spent.
            if task in self.processes and pod_state(self._cluster.get_pod(name)).phase == "Succeeded":
                t.millicores = float(millicores)
                return
            raise
        st = t.last = self._await_resize(name, millicores, started)
        if st.problem:
            raise PodLost(
                f"task {task!r}: {st.problem} (pod {name}); the run stops and can be resumed", field="kubernetes"
            )
        if resize_done(st, millicores):
            t.millicores = float(millicores)
            t.plan = None
            self.events.append(ReconfigEvent(task, "in-place", float(millicores), self.clock() - started))
            return
        why = (
            f"the kubelet calls it Infeasible: {st.resize_infeasible}"
            if st.resize_infeasible
            else f"not applied after {self.resize_timeout_s:g} s ({_resize_progress(st)})"
        )
        return self._after_failed_resize(task, millicores, why, started)

    def resize_tasks(self, millicores: Mapping[str, float]) -> list[ResizeBatch]:
        """A step's reconfiguration, task -> new CPU: the tasks check_configuration planned to recreate (or
        every task, where the run does not resize in place) recreated one by one; the others resized in
        place in two batches, the shrinks then the grows, each patched at once and awaited together.
        Returns the batches (also appended to :attr:`batches`). Raises :class:`ResizePending` once the
        batch that met a pending resize is over (the refused ones taken back; a grow batch is not started
        after a shrink batch met one: the run re-plans first)."""
        for task in millicores:
            if task not in self.tasks:
                raise InputError(f"task {task!r} is not running", field="task")
        resizable = self._resizable() if self.mode == "in-place" else set()
        elsewise = {
            k: float(m) for k, m in millicores.items() if self.tasks[k].plan == "recreate" or k not in resizable
        }
        in_place = {k: float(m) for k, m in millicores.items() if k not in elsewise}
        shrinks = {k: m for k, m in in_place.items() if m < self.tasks[k].millicores}
        grows = {k: m for k, m in in_place.items() if k not in shrinks}
        done: list[ResizeBatch] = []
        for direction, batch in (("shrink", shrinks), ("recreate", elsewise), ("grow", grows)):
            if direction == "recreate":  # one by one, between the batches: their room is freed by the shrinks
                for task, m in batch.items():
                    self.resize_task(task, m)  # recreation (or, for a process that ended, nothing to do)
            elif batch:
                done.append(self._resize_batch(direction, batch))
                self.batches.append(done[-1])
                if done[-1].refused:
                    raise self._pending(done[-1])
        return done

    def _resizable(self) -> set[str]:
        """The running tasks whose pods can be resized (a process that ended cannot, and need not be)."""
        ended = {
            task
            for task in self.processes & set(self.tasks)
            if pod_state(self._cluster.get_pod(self._pod_name(task))).phase == "Succeeded"
        }
        return set(self.tasks) - ended

    def _resize_batch(self, direction: str, batch: Mapping[str, float]) -> ResizeBatch:
        """Patch every pod of `batch` (task -> CPU), then read the run's pods (one list per poll) until each
        resize is applied, refused (pending: Deferred or Infeasible, then taken back) or failed."""
        started = self.clock()
        names = {self._pod_name(task): task for task in batch}
        for name, task in names.items():
            self._cluster.resize_pod(name, M.resize_patch(batch[task]))
        waiting = dict(names)
        refused: dict[str, PodState] = {}
        while waiting:
            pods = {p["metadata"]["name"]: p for p in self._cluster.list_pods(N.run_selector(self.run_key))}
            for name, task in list(waiting.items()):
                st = self.tasks[task].last = pod_state(pods.get(name))
                if st.problem:
                    raise PodLost(
                        f"task {task!r}: {st.problem} (pod {name}); the run stops and can be resumed",
                        field="kubernetes",
                    )
                if resize_done(st, batch[task]):
                    self.tasks[task].millicores = batch[task]
                    self.tasks[task].plan = None
                    self.events.append(ReconfigEvent(task, "in-place", batch[task], self.clock() - started))
                    del waiting[name]
                elif st.resize and st.resize.startswith("pending:"):  # Deferred or Infeasible: not now
                    refused[task] = st
                    del waiting[name]
            if waiting and self.clock() >= started + self.resize_timeout_s:
                task = next(iter(waiting.values()))
                st = self.tasks[task].last or pod_state(None)
                why = f"not applied after {self.resize_timeout_s:g} s ({_resize_progress(st)})"
                for task in waiting.values():  # recreated (a process task: the run stops), never retried as is
                    self._after_failed_resize(task, batch[task], why, started)
                waiting = {}
            elif waiting:
                self.sleep(self.poll_s)
        for task in refused:  # taken back: the pod keeps (and is asked for) the CPU it holds
            self._cluster.resize_pod(self._pod_name(task), M.resize_patch(self.tasks[task].millicores))
        self.refused = {}
        for task, st in refused.items():
            reason = "Infeasible" if st.resize_infeasible is not None else "Deferred"
            message = (st.resize or "").removeprefix("pending:").strip().removeprefix(reason).strip()
            self.refused[task] = (reason, st.node or "?", message, batch[task])
        return ResizeBatch(direction, list(batch), self.clock() - started, sorted(refused), time.time())

    def _pending(self, batch: ResizeBatch) -> ResizePending:
        refused = {t: r for t, r in self.refused.items() if t in batch.refused}
        parts = [
            f"task {task!r} {self.tasks[task].millicores:g}m -> {m:g}m on node {node}: {reason} ({message})"
            for task, (reason, node, message, m) in sorted(refused.items())
        ]
        holds = {task: t.millicores for task, t in self.tasks.items()}
        return ResizePending(
            f"the kubelet left {len(refused)} resize(s) pending, taken back: {'; '.join(parts)}", refused, holds
        )

    def _after_failed_resize(self, task: str, millicores: float, why: str, started: float) -> None:
        """A resize not applied in time: a process task stops the run; any other task is recreated."""
        t = self.tasks[task]
        name = self._pod_name(task)
        if task in self.processes:
            raise ResizeRefused(
                f"task {task!r}: the in-place resize of pod {name} from {t.millicores:g}m to {millicores:g}m "
                f"failed: {why}. A process task keeps its state in memory and is never recreated behind its "
                "back; the run stops here and can be resumed (lower cpu.max_millicores, free room on the "
                "node, or run with --reconfigure recreate if the program restores its own state)",
                field="kubernetes",
            )
        self._warn(f"in-place resize of {task!r} to {millicores:g}m: {why}; recreating the pod instead")
        self.recreate_task(t.launch, millicores, detail=f"resize failed: {why}", started=started)

    def _await_resize(self, name: str, millicores: float, started: float) -> PodState:
        """The pod's state once the kubelet applied `millicores`, called the resize Infeasible, the pod has a
        problem, or resize_timeout_s passed since `started`."""
        while True:
            st = pod_state(self._cluster.get_pod(name))
            if resize_done(st, millicores) or st.problem or st.resize_infeasible:
                return st
            if self.clock() >= started + self.resize_timeout_s:
                return st
            self.sleep(self.poll_s)

    # -- what a reconfiguration costs on this cluster ----------------------------------------------
    def measure_reconfigure_cost(self, method: str) -> float | None:
        """As :meth:`Backend.measure_reconfigure_cost`, with a probe pod of the run's image under the average
        task's CPU (budget / tasks); None, with a warning, where the probe cannot run. The per-step records
        hold what each real reconfiguration cost (:attr:`events`).

        in-place: the ``pods/resize`` round trip of a running probe pod until the kubelet reports the new
        limit applied (:func:`~bsp_planner.k8s.cluster.resize_done`: ``containerStatuses[].resources``
        shows it, no PodResizePending/InProgress condition left), down to half and back, median of
        :data:`IN_PLACE_PROBES` (:attr:`in_place_probe`). None where the server cannot resize.
        recreate: created -> scheduled -> container started -> our worker's interpreter and imports done
        (it runs ``bsp-planner worker --help`` and exits) -> deleted and gone. Our wall clock times it;
        the pod's timestamps (creation, container start and finish: whole seconds) say where the time
        went (:attr:`recreate_probe`, in run.json's backend info)."""
        if method not in PROBED or (method == "in-place" and not self._cluster.capabilities().resize_subresource):
            return None
        try:
            return self._measure_in_place() if method == "in-place" else self._measure_recreate()
        except TaskLost:
            raise
        except InputError as exc:
            self._warn(f"could not measure {PROBED[method][0]} ({exc}); planning with the experiment's penalty_s")
            return None

    def _cannot_measure(self, method: str, why: str) -> None:
        what, setting = PROBED[method]
        self._warn(
            f"could not measure {what}: {why}; planning with the experiment's penalty_s (or give [reconfigure_cost] "
            f"{setting})"
        )

    def _probe_body(self, name: str, millicores: float, args: list[str], command: list[str]) -> dict:
        """A probe pod of the run's image, as a worker's but for a task no job names (:data:`PROBE_TASK`)."""
        body = M.worker_pod(self.settings, self.run_key, PROBE_TASK, millicores, args, command=command, env={})
        body["metadata"]["name"] = name
        return body

    def _measure_recreate(self) -> float | None:
        """The recreation half of :meth:`measure_reconfigure_cost`."""
        name = N.dns_label(f"bsp-{self.run_key}-cost-probe")
        body = self._probe_body(name, self.probe_millicores, ["worker", "--help"], ["bsp-planner"])
        self._delete_pods([name], 0)
        started = self.clock()
        self._cluster.create_pod(body)
        deadline = started + float(self.pending_timeout_s or 120.0)
        while True:
            pod = self._cluster.get_pod(name)
            st = pod_state(pod)
            if st.phase in ("Succeeded", "Failed") or st.problem:
                break
            if (st.phase == "Pending" and st.fatal_waiting) or self.clock() >= deadline:
                waited, state = self.clock() - started, st.waiting or st.phase
                self._cannot_measure("recreate", f"the probe pod {name} did not finish within {waited:.0f} s ({state})")
                self._cluster.delete_pod(name, 0)
                return None
            self.sleep(self.poll_s)
        ran_s = self.clock() - started
        deleted = self.clock()
        self._delete_pods([name], 0)
        gone_s = self.clock() - deleted
        if st.exit_code not in (0, None):
            self._warn(
                f"the recreation probe pod {name} exited with code {st.exit_code} ({st.problem}); its time still "
                "counts, but check the image: it runs `bsp-planner worker --help`"
            )
        self.recreate_probe = {
            "seconds": round(ran_s + gone_s, 3),
            "start_to_exit_s": round(ran_s, 3),
            "delete_to_gone_s": round(gone_s, 3),
            "millicores": self.probe_millicores,
            **_pod_timeline(pod),
        }
        return ran_s + gone_s

    def _measure_in_place(self) -> float | None:
        """The in-place half of :meth:`measure_reconfigure_cost`: as many probe pods as the job has tasks
        (:data:`MAX_PROBE_PODS` at most) resized at once, as a step's batch is, down to half and back
        (:data:`IN_PLACE_PROBES` batches); a reconfiguration costs :data:`BATCHES_PER_RECONFIGURATION`
        times the median batch. The pods are deleted afterwards, and on failure."""
        count = max(1, min(MAX_PROBE_PODS, self.task_count))
        names = [N.dns_label(f"bsp-{self.run_key}-resize-probe-{i}") for i in range(count)]
        high = self.probe_millicores
        low = float(max(MIN_PROBE_MILLICORES, round(high / 2)))
        samples: list[float] = []
        try:
            self._delete_pods(names, 0)
            for name in names:
                self._cluster.create_pod(self._probe_body(name, high, [], [IMAGE_PYTHON, "-c", PROBE_SLEEP]))
            deadline = self.clock() + float(self.pending_timeout_s or 120.0)
            for name in names:
                while not (st := pod_state(self._cluster.get_pod(name))).running:
                    if (
                        st.problem
                        or st.phase in ("Succeeded", "Failed")
                        or st.fatal_waiting
                        or self.clock() >= deadline
                    ):
                        state = st.problem or st.waiting or st.phase
                        self._cannot_measure("in-place", f"the probe pod {name} did not run ({state})")
                        return None
                    self.sleep(self.poll_s)
            for i in range(IN_PLACE_PROBES):
                target = low if i % 2 == 0 else high
                started = self.clock()
                for name in names:
                    self._cluster.resize_pod(name, M.resize_patch(target))
                for name in names:
                    if not resize_done(st := self._await_resize(name, target, started), target):
                        why = f"the probe pod {name}'s resize to {target:g}m was not applied ({_resize_progress(st)})"
                        self._cannot_measure("in-place", why)
                        return None
                samples.append(self.clock() - started)
        finally:
            self._delete_pods(names, 0)
        batch_s = statistics.median(samples)
        self.in_place_probe = {
            "seconds": round(BATCHES_PER_RECONFIGURATION * batch_s, 4),
            "batch_s": round(batch_s, 4),
            "batches_per_reconfiguration": BATCHES_PER_RECONFIGURATION,
            "pods": count,
            "samples_s": [round(x, 4) for x in samples],
            "millicores": [high, low],
        }
        return BATCHES_PER_RECONFIGURATION * batch_s


def _timestamp(text: str | None) -> float | None:
    """An RFC 3339 timestamp of the API ('2026-11-23T09:30:44Z') in seconds since the epoch."""
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def _pod_timeline(pod: dict | None) -> dict[str, float]:
    """Where a finished pod's time went, from its own timestamps (whole seconds): creation to its
    container's start (scheduling, image, container creation) and the container's run."""
    created = _timestamp(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
    cs = (((pod or {}).get("status") or {}).get("containerStatuses") or [{}])[0]
    state = cs.get("state") or {}
    term = state.get("terminated") or {}
    started = _timestamp(term.get("startedAt") or (state.get("running") or {}).get("startedAt"))
    finished = _timestamp(term.get("finishedAt"))
    out: dict[str, float] = {}
    if created is not None and started is not None:
        out["created_to_started_s"] = max(0.0, started - created)
    if started is not None and finished is not None:
        out["started_to_finished_s"] = max(0.0, finished - started)
    return out


def _resize_progress(st: PodState) -> str:
    """Where a resize stands, from the pod's conditions and generations (for messages)."""
    parts = [st.resize or "no resize condition"]
    if st.generation is not None and st.observed_generation is not None and st.observed_generation < st.generation:
        parts.append(f"the kubelet has seen generation {st.observed_generation} of {st.generation}")
    if st.actual_cpu_m is not None:
        parts.append(f"applied limit {st.actual_cpu_m:g}m")
    return "; ".join(parts)

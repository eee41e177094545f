"""The Kubernetes backend's reconfigurations: in-place resizes through ``pods/resize``, and what one costs.

``in-place`` patches the ``pods/resize`` subresource (Kubernetes 1.33+) and waits until the kubelet reports
the new limit applied; ``recreate`` deletes the pod and creates it again (:mod:`.pods`). ``auto`` takes
in-place where the server lists ``pods/resize``. A resize the kubelet calls Infeasible, or that is still
pending after ``resize_timeout_s``, falls back to recreation, except for a process task (its state is in
memory): the run then stops (:class:`ResizeRefused`), resumable, saying Infeasible or Deferred. Every
reconfiguration is timed and kept in ``events`` (task, mode, seconds, detail) for the run log.
"""

from __future__ import annotations

import statistics
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
IN_PLACE_PROBES = 3  # resizes of the in-place probe pod: down, up, down (the median is planned with)
PROBE_SLEEP = "import time; time.sleep(3600)"  # the in-place probe's container: runs until deleted
#: method -> (what its probe measures, the experiment's setting that spares it)
PROBED = {"in-place": ("an in-place resize", "in_place_s"), "recreate": ("a pod recreation", "recreate_s")}


class ResizeRefused(TaskLost):
    """A process task cannot be resized in place (the kubelet calls it Infeasible, or defers it past the
    timeout, or its node has no room) and is never recreated behind its back: the run stops, resumable."""


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
        if task in self.processes:
            raise ResizeRefused(
                f"task {task!r}: the in-place resize of pod {name} from {t.millicores:g}m to {millicores:g}m "
                f"failed: {why}. A process task keeps its state in memory and is never recreated behind its "
                "back; the run stops here and can be resumed (lower cpu.max_millicores, free room on the "
                "node, or run with --reconfigure recreate if the program restores its own state)",
                field="kubernetes",
            )
        self._warn(f"in-place resize of {task!r} to {millicores:g}m: {why}; recreating the pod instead")
        return self.recreate_task(t.launch, millicores, detail=f"resize failed: {why}", started=started)

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
        """The in-place half of :meth:`measure_reconfigure_cost` (the pod is deleted afterwards, and on failure)."""
        name = N.dns_label(f"bsp-{self.run_key}-resize-probe")
        high = self.probe_millicores
        low = float(max(MIN_PROBE_MILLICORES, round(high / 2)))
        body = self._probe_body(name, high, [], [IMAGE_PYTHON, "-c", PROBE_SLEEP])
        samples: list[float] = []
        try:
            self._delete_pods([name], 0)
            self._cluster.create_pod(body)
            deadline = self.clock() + float(self.pending_timeout_s or 120.0)
            while not (st := pod_state(self._cluster.get_pod(name))).running:
                if st.problem or st.phase in ("Succeeded", "Failed") or st.fatal_waiting or self.clock() >= deadline:
                    state = st.problem or st.waiting or st.phase
                    self._cannot_measure("in-place", f"the probe pod {name} did not run ({state})")
                    return None
                self.sleep(self.poll_s)
            for i in range(IN_PLACE_PROBES):
                target = low if i % 2 == 0 else high
                started = self.clock()
                self._cluster.resize_pod(name, M.resize_patch(target))
                if not resize_done(st := self._await_resize(name, target, started), target):
                    why = f"the probe pod {name}'s resize to {target:g}m was not applied ({_resize_progress(st)})"
                    self._cannot_measure("in-place", why)
                    return None
                samples.append(self.clock() - started)
        finally:
            self._delete_pods([name], 0)
        self.in_place_probe = {
            "seconds": round(statistics.median(samples), 4),
            "samples_s": [round(x, 4) for x in samples],
            "millicores": [high, low],
        }
        return statistics.median(samples)


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

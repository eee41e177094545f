"""Kubernetes Events from a live run, on its coordinator's Job (a `RunWatcher`, see `runtime/watchers.py`).

What `kubectl describe job <coordinator>` and `kubectl get events` then show, one reason per kind of news:

=====================  =======  =============================================================
reason                 type     when
=====================  =======  =============================================================
RunStarted             Normal   the run (or its resumption) is taken, before its first step
Reconfigured           Normal   a step changed the configuration (method, CPU per task, cost)
WorkerRestarted        Warning  a task's worker died mid-step and reran it from its checkpoint
ResizeDeferred         Warning  the platform postponed a resize (no room on the node now)
ResizeInfeasible       Warning  a resize the node can never take
Replanned              Normal   the run planned again on what the nodes have free
TaskFailed             Warning  a task's worker or process ended mid-run (task, exit code or signal, step)
RunFinished            Normal   the run's end: steps, live and simulated totals, reconfigurations
RunInterrupted         Warning  the run stopped, resumable (its message says how to resume)
RunFailed              Warning  the run failed
=====================  =======  =============================================================

Repeats of one reason do not flood the namespace: as the kubelet does, the first makes an Event and each
later one updates it (``count`` + 1, ``lastTimestamp``, the latest ``message``), so ``kubectl get events``
shows e.g. ``Reconfigured ... (x12 over 3m)``. The counts a change of course comes with
(``noticed(kind, message, tasks=2)``) end its message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ....k8s.objects import ReportingCluster

COMPONENT = "bsp-planner-coordinator"
MAX_MESSAGE = 1024  # the API server refuses longer Event messages

#: noticed(kind, ...) -> (reason, type)
NOTICED = {
    "deferred": ("ResizeDeferred", "Warning"),
    "infeasible": ("ResizeInfeasible", "Warning"),
    "replanned": ("Replanned", "Normal"),
    "task_failed": ("TaskFailed", "Warning"),
}
#: noticed kinds the step records already carry (their `restarts`): not told twice
FROM_STEP_RECORDS = {"restarted"}
ENDED = {"finished": ("RunFinished", "Normal"), "interrupted": ("RunInterrupted", "Warning")}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.replace("-", "_").split("_")) or "Noticed"


def coordinator_object(api: ReportingCluster, pod_name: str) -> dict[str, str]:
    """The object a run's Events are about: the Job that owns the coordinator's pod (what `kubectl describe job`
    shows), else the pod itself."""
    pod = api.get_pod(pod_name) or {}
    meta = pod.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"), None)
    if owner is not None:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner.get("uid", "")}
    else:
        ref = {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": meta.get("uid", "")}
    return {**{k: v for k, v in ref.items() if v}, "namespace": api.namespace}


class KubernetesEvents:
    """A RunWatcher posting the run's news as Events on its coordinator's Job (see the module)."""

    def __init__(self, api: ReportingCluster, pod_name: str) -> None:
        self.api = api
        self.pod_name = pod_name
        self.involved: dict[str, str] | None = None
        self.run_id = ""
        self._posted: dict[str, tuple[str, int]] = {}  # reason -> (its Event's name, count)

    def post(self, reason: str, kind: str, message: str) -> None:
        """One Event of `reason`, or the existing one counted once more."""
        if self.involved is None:
            self.involved = coordinator_object(self.api, self.pod_name)
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        now = _now()
        if reason in self._posted:
            name, count = self._posted[reason]
            patch = {"count": count + 1, "lastTimestamp": now, "message": message, "type": kind}
            if self.api.patch_event(name, patch) is not None:
                self._posted[reason] = (name, count + 1)
                return
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.involved['name']}.", "namespace": self.api.namespace},
            "involvedObject": self.involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": f"bsp-planner.io/{COMPONENT}",
            "reportingInstance": self.pod_name,
        }
        created = self.api.create_event(body) or {}
        self._posted[reason] = ((created.get("metadata") or {}).get("name", ""), 1)

    # -- RunWatcher --------------------------------------------------------------------------------
    def run_started(self, run_id: str, tasks: list[str], steps: int) -> None:
        self.run_id = run_id
        self.post("RunStarted", "Normal", f"run {run_id}: {len(tasks)} task(s), {steps} step(s)")

    def step_logged(self, rec: dict[str, Any]) -> None:
        t = rec["step"]
        if rec.get("reconfigured"):
            method = rec.get("reconfig_method") or "reconfiguration"
            cpu = ", ".join(f"{x['task']}={x['cpu_millicores']:g}m" for x in rec.get("tasks") or [])
            text = f"step {t}: {method} in {rec.get('reconfig_s', 0.0):.2f} s; CPU now {cpu}"
            self.post("Reconfigured", "Normal", text)
        if rec.get("restarts"):
            self.post(
                "WorkerRestarted",
                "Warning",
                f"step {t}: {rec['restarts']} worker restart(s) (a worker died and reran the step from its checkpoint)",
            )

    def noticed(self, kind: str, message: str, **counts: float) -> None:
        if kind in FROM_STEP_RECORDS:
            return
        reason, type_ = NOTICED.get(kind, (_camel(kind), "Normal"))
        numbers = ", ".join(f"{k}={v:g}" for k, v in sorted(counts.items()))
        self.post(reason, type_, f"{message} ({numbers})" if numbers else message)

    def run_ended(self, status: str, message: str, summary: dict[str, Any]) -> None:
        reason, type_ = ENDED.get(status, ("RunFailed", "Warning"))
        if summary:
            text = (
                f"run {self.run_id} {status}: {summary.get('steps_done')} step(s), live {summary['live_total_s']:.2f} s, "
                f"simulated {summary['simulated_total_s']:.2f} s, {summary.get('reconfigurations', 0)} reconfiguration(s)"
            )
        else:
            text = f"run {self.run_id} {status} before its first step"
        first_line = (message or "").strip().splitlines()[:1]
        self.post(reason, type_, f"{text}: {first_line[0]}" if first_line else text)

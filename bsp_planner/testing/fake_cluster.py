"""The fake API server's cluster: its nodes, pods and Jobs, and the "scheduler" and "kubelet" that move
them on (see :mod:`.fake_apiserver`). FOR LOGIC TESTS ONLY."""

from __future__ import annotations

import copy
import itertools
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from ..k8s.binpack import node_unschedulable, pod_cpu_request, pod_holds_resources
from ..k8s.capabilities import parse_version
from ..k8s.names import cpu_millicores
from .fake_rbac import Call, Rule
from .fake_resources import FakeResources


class PodProcess(Protocol):
    """What pod_runner returns for a pod's container: a Popen-like process (with, optionally,
    ``log_tail() -> str``: its output so far, for terminationMessagePolicy FallbackToLogsOnError)."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


@dataclass
class JobOutcome:
    """What a profiling Job's container does: exit code and termination message (after `delay_s`)."""

    exit_code: int
    message: str = ""
    delay_s: float = 0.0
    reason: str | None = None  # e.g. 'DeadlineExceeded' for a Job that ran out of time
    # a pod of several containers (a process profiling Job): container name -> (exit code, message);
    # the containers not named end with exit_code and message
    containers: dict[str, tuple[int, str]] | None = None


@dataclass
class FakeState:
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)
    jobs: dict[tuple[str, str], dict] = field(default_factory=dict)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCluster:
    """The objects and how they move on, and who may touch them (`rules`, `calls`); every change happens
    under `lock`, when a request comes in (:meth:`_advance`), never in the background."""

    def __init__(
        self,
        *,
        version: str = "v1.33.1",
        start_delay_s: float = 0.0,
        delete_delay_s: float = 0.0,
        resize_delay_s: float = 0.0,
        job_runner: Callable[[dict], JobOutcome] | None = None,
        pod_runner: Callable[[dict], PodProcess] | None = None,
        resize_subresource: bool | None = None,
        rules: list[Rule] | None = None,
    ) -> None:
        self.version = version
        self.major, self.minor = parse_version(None, None, version)
        # discovery lists pods/resize (by default from 1.33 on); `rules`: RBAC, None allows everything
        self.resize_subresource = (
            (self.major, self.minor) >= (1, 33) if resize_subresource is None else resize_subresource
        )
        self.rules = rules
        self.calls: list[Call] = []  # every request, for tests of which verbs the code uses
        # 1.35+: pods carry metadata.generation (bumped by a resize) and status.observedGeneration
        self._generations = (self.major, self.minor) >= (1, 35)
        self.start_delay_s = start_delay_s
        self.delete_delay_s = delete_delay_s
        self.resize_delay_s = resize_delay_s
        self.job_runner = job_runner
        self.pod_runner = pod_runner
        self._procs: dict[tuple[str, str], PodProcess] = {}
        self.state = FakeState()
        self.lock = threading.RLock()
        self._rv = itertools.count(1)
        self._pending_delete: dict[tuple[str, str], float] = {}
        self._started_at: dict[tuple[str, str], float] = {}
        self._resize_at: dict[tuple[str, str], float] = {}
        self._job_done_at: dict[tuple[str, str], tuple[float, JobOutcome]] = {}
        self._job_pods: dict[tuple[str, str], JobOutcome] = {}
        self.resources = FakeResources(self)  # CRDs and their objects, Events, Jobs whose pod died
        # test control: before_resize(namespace, pod name) runs as a resize arrives, before the kubelet takes
        # it (e.g. someone else's pod lands on the node: add_foreign_pod, and the resize is Deferred)
        self.before_resize: Callable[[str, str], None] | None = None

    # -- test controls -----------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        cpu: str,
        *,
        labels: dict | None = None,
        taints: list | None = None,
        unschedulable: bool = False,
        ready: bool = True,
    ) -> None:
        with self.lock:
            self.state.nodes[name] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                "spec": {"unschedulable": unschedulable, **({"taints": taints} if taints else {})},
                "status": {
                    "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
            self._stamp(self.state.nodes[name])

    def add_foreign_pod(self, namespace: str, name: str, node: str, cpu: str) -> None:
        """A pod of someone else, bound to `node` and holding `cpu` there."""
        with self.lock:
            containers = [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]
            status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
            status["containerStatuses"] = _running(containers)
            meta = {"name": name, "namespace": namespace}
            self._add_pod(meta, {"containers": containers, "nodeName": node}, status)

    def _add_pod(self, meta: dict, spec: dict, status: dict) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
        self._stamp(pod)
        self.state.pods[(meta["namespace"], meta["name"])] = pod

    def evict(self, namespace: str, name: str, message: str = "The node was low on resource: memory.") -> None:
        with self.lock:
            pod = self.state.pods[(namespace, name)]
            pod["status"].update(reason="Evicted", message=message)
            _finish(pod, 137)

    def pod(self, namespace: str, name: str) -> dict | None:
        with self.lock:
            return copy.deepcopy(self.state.pods.get((namespace, name)))

    def pods(self, namespace: str) -> list[dict]:
        return self._copies(self.state.pods, namespace)

    def jobs(self, namespace: str) -> list[dict]:
        return self._copies(self.state.jobs, namespace)

    def _copies(self, store: dict[tuple[str, str], dict], namespace: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for (ns, _), o in sorted(store.items()) if ns == namespace]

    # -- simulation --------------------------------------------------------------------------------
    def _stamp(self, obj: dict) -> None:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_iso())
        meta["resourceVersion"] = str(next(self._rv))

    def _node_free(self, node: str, skip: tuple[str, str] | None = None) -> float:
        alloc = cpu_millicores(self.state.nodes[node]["status"]["allocatable"]["cpu"])
        pods = [p for key, p in self.state.pods.items() if key != skip and p["spec"].get("nodeName") == node]
        return alloc - sum(pod_cpu_request(p) for p in pods if pod_holds_resources(p))

    def _schedulable(self, node: dict, pod: dict) -> bool:
        """Ready, not cordoned or tainted, and chosen by the pod's nodeSelector and required node affinity."""
        return node_unschedulable(node, pod["spec"].get("nodeSelector")) is None and _affinity_allows(node, pod)

    def _probe_readiness(self) -> None:
        """A running container's tcpSocket readiness probe, as the kubelet runs it: ready while its port (on
        127.0.0.1, where pod_runner's processes run) accepts a connection."""
        for pod in self.state.pods.values():
            if pod["status"].get("phase") != "Running":
                continue
            for c, cs in zip(pod["spec"]["containers"], pod["status"].get("containerStatuses") or [], strict=False):
                port = ((c.get("readinessProbe") or {}).get("tcpSocket") or {}).get("port")
                if port is None or "running" not in (cs.get("state") or {}):
                    continue
                try:
                    with socket.create_connection(("127.0.0.1", int(port)), timeout=0.2):
                        cs["ready"] = True
                except OSError:
                    cs["ready"] = False

    def _advance(self) -> None:
        """Move the world forward: finish deletions, schedule, start containers, apply resizes, run jobs."""
        now = time.monotonic()
        for key, at in list(self._pending_delete.items()):
            proc = self._procs.get(key)
            if proc is not None:  # SIGTERM, SIGKILL once the grace period is over; gone once it exited
                _terminate(proc, kill=now >= at)
            if (proc is not None and proc.poll() is not None) or (proc is None and now >= at):
                self.state.pods.pop(key, None)
                self._procs.pop(key, None)
                del self._pending_delete[key]
        for key, proc in list(self._procs.items()):
            pod = self.state.pods.get(key)
            code = proc.poll()
            if pod is None or code is None or key in self._pending_delete or pod["status"].get("phase") != "Running":
                continue
            message = getattr(proc, "message", "")
            policy = pod["spec"]["containers"][0].get("terminationMessagePolicy")
            if not message and code != 0 and policy == "FallbackToLogsOnError" and hasattr(proc, "log_tail"):
                # as the kubelet: the last 80 lines or 2048 bytes of the log, whichever is shorter
                message = "\n".join(proc.log_tail().splitlines()[-80:]).encode()[-2048:].decode(errors="replace")
            _finish(pod, code, message)
        for key, pod in sorted(self.state.pods.items(), key=lambda kv: kv[1]["metadata"]["creationTimestamp"]):
            if pod["status"].get("phase") == "Pending" and key not in self._pending_delete:
                self._schedule_and_start(key, pod, now)
        self._probe_readiness()
        for key, pod in self.state.pods.items():  # the kubelet retries a Deferred resize once the room is there
            pending = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodResizePending"]
            node = pod["spec"].get("nodeName")
            if pending and pending[0].get("reason") == "Deferred" and node in self.state.nodes:
                if pod_cpu_request(pod) <= self._node_free(node, skip=key) + 1e-6:
                    _resize_condition(pod, type="PodResizeInProgress", status="True")
                    self._resize_at[key] = now + self.resize_delay_s
        for key, at in list(self._resize_at.items()):
            pod = self.state.pods.get(key)
            if pod is not None and now < at:
                continue
            del self._resize_at[key]
            if pod is not None:
                for c, cs in zip(pod["spec"]["containers"], pod["status"].get("containerStatuses") or [], strict=False):
                    cs["resources"] = copy.deepcopy(c.get("resources") or {})
                if self._generations:
                    pod["status"]["observedGeneration"] = pod["metadata"].get("generation", 1)
                _resize_condition(pod)
        for key, (at, outcome) in list(self._job_done_at.items()):
            if now < at:
                continue
            del self._job_done_at[key]
            pod = self.state.pods.get(key)
            if pod is None:
                continue
            ok = outcome.exit_code == 0
            _finish(pod, outcome.exit_code, outcome.message, containers=outcome.containers)
            job = self.state.jobs.get((key[0], pod["metadata"]["labels"]["job-name"]))
            if job is not None:
                cond = "Complete" if ok else "Failed"
                job["status"] = {
                    "succeeded" if ok else "failed": 1,
                    "active": 0,
                    "conditions": [{"type": cond, "status": "True", "reason": outcome.reason or cond}],
                }
                self._stamp(job)
        self.resources.advance_jobs()

    def _schedule_and_start(self, key: tuple[str, str], pod: dict, now: float) -> None:
        """A pending pod goes to the first node that admits it and has room; it starts after start_delay_s."""
        status = pod["status"]
        if not pod["spec"].get("nodeName"):
            need = pod_cpu_request(pod)
            candidates = [nm for nm, nd in sorted(self.state.nodes.items()) if self._schedulable(nd, pod)]
            fit = [nm for nm in candidates if self._node_free(nm) + 1e-6 >= need]
            if not fit:
                total = len(self.state.nodes)
                status["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": f"0/{total} nodes are available: {total} Insufficient cpu.",
                    }
                ]
                return
            pod["spec"]["nodeName"] = fit[0]
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            self._started_at[key] = now + self.start_delay_s
        if now < self._started_at.get(key, now):
            return
        status.update(phase="Running", startTime=now_iso(), podIP="127.0.0.1")  # pod_runner's processes run here
        status["containerStatuses"] = _running(pod["spec"]["containers"])
        if self._generations:
            status["observedGeneration"] = pod["metadata"].get("generation", 1)
        if key in self._job_pods:
            self._job_done_at[key] = (now + self._job_pods[key].delay_s, self._job_pods[key])
        elif self.pod_runner is not None:
            try:
                self._procs[key] = self.pod_runner(copy.deepcopy(pod))
            except OSError as exc:  # the program is not in the image: the runtime cannot start it
                # as the kubelet reports it (restartPolicy Never): reason StartError, exit code 128, the pod Failed
                program = (pod["spec"]["containers"][0].get("command") or ["?"])[0]
                why = "executable file not found in $PATH" if isinstance(exc, FileNotFoundError) else None
                message = (
                    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc "
                    f'create failed: unable to start container process: exec: "{program}": '
                    f"{why or exc.strerror or exc}: unknown"
                )
                _finish(pod, 128, message, "StartError")

    def _run_job(self, ns: str, job: dict) -> None:
        outcome = self.job_runner(copy.deepcopy(job)) if self.job_runner else JobOutcome(0, "")
        template = copy.deepcopy(job["spec"]["template"])
        name = f"{job['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        meta = template.setdefault("metadata", {})
        meta["name"] = name
        meta["namespace"] = ns
        meta.setdefault("labels", {}).update(
            {"job-name": job["metadata"]["name"], "batch.kubernetes.io/job-name": job["metadata"]["name"]}
        )
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "controller": True}
        meta["ownerReferences"] = [{**owner, "uid": job["metadata"]["uid"]}]  # as the Job controller sets it
        self._add_pod(meta, template["spec"], {"phase": "Pending"})
        self._job_pods[(ns, name)] = outcome
        job["status"] = {"active": 1}

    def _resize(self, ns: str, name: str, pod: dict) -> None:
        """A resize the patch made to the pod's spec, as the kubelet takes it (1.33+): Infeasible beyond the
        node's allocatable CPU, Deferred beyond what the other pods leave (retried as room frees), else in
        progress until resize_delay_s has passed."""
        if self.before_resize is not None:
            self.before_resize(ns, name)
        self._stamp(pod)
        if self._generations:  # a resize is a spec change: the kubelet acts on the new generation
            pod["metadata"]["generation"] = int(pod["metadata"].get("generation", 1)) + 1
        need = pod_cpu_request(pod)
        room = self._node_free(pod["spec"]["nodeName"], skip=(ns, name))  # alloc - the other pods
        alloc = cpu_millicores(self.state.nodes[pod["spec"]["nodeName"]]["status"]["allocatable"]["cpu"])
        if need > alloc or need > room + 1e-6:
            reason, message = (
                ("Infeasible", f"Node didn't have enough capacity: cpu, requested: {need:.0f}, capacity: {alloc:.0f}")
                if need > alloc
                else ("Deferred", "Node didn't have enough resource: cpu")
            )
            _resize_condition(pod, type="PodResizePending", status="True", reason=reason, message=message)
            if self._generations:
                pod["status"]["observedGeneration"] = pod["metadata"]["generation"]
        else:
            _resize_condition(pod, type="PodResizeInProgress", status="True")
            self._resize_at[(ns, name)] = time.monotonic() + self.resize_delay_s
            self._advance()


def _running(containers: list[dict]) -> list[dict]:
    """The status of containers that just started (ready at once, or with a probe once it passes)."""
    return [
        {
            "name": c["name"],
            "ready": "readinessProbe" not in c,
            "restartCount": 0,
            "image": c.get("image", ""),
            "imageID": "",
            "state": {"running": {"startedAt": now_iso()}},
            "resources": copy.deepcopy(c.get("resources") or {}),
        }
        for c in containers
    ]


def _finish(
    pod: dict,
    code: int,
    message: str = "",
    reason: str | None = None,
    containers: dict[str, tuple[int, str]] | None = None,
) -> None:
    """The pod Succeeded (exit `code` 0) or Failed, its containers terminated with `code` and `message` (or,
    by name, what `containers` says) and the kubelet's `reason` (else Completed or Error by exit code)."""
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    for cs in pod["status"].get("containerStatuses") or []:
        c_code, c_message = (containers or {}).get(cs["name"], (code, message))
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        cs["ready"] = False
        cs["state"] = {
            "terminated": {
                "exitCode": c_code,
                "reason": reason or ("Completed" if c_code == 0 else "Error"),
                "message": c_message,
                "finishedAt": now_iso(),
                **({"startedAt": started} if started else {}),
            }
        }


def _resize_condition(pod: dict, **condition) -> None:
    """The pod's resize condition replaced by `condition` (none: the resize is done)."""
    kept = [c for c in pod["status"].get("conditions") or [] if not c["type"].startswith("PodResize")]
    pod["status"]["conditions"] = kept + ([condition] if condition else [])


def _affinity_allows(node: dict, pod: dict) -> bool:
    """The pod's required node affinity (one of its terms matches: every matchFields on metadata.name and
    every matchExpressions on the labels, operators In / NotIn / Exists / DoesNotExist) admits the node."""
    required = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    labels = node["metadata"].get("labels") or {}

    def holds(req: dict, value: str | None) -> bool:
        op, values = req.get("operator"), req.get("values") or []
        return {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }.get(str(op), False)

    def matches(term: dict) -> bool:
        fields = all(holds(r, node["metadata"]["name"]) for r in term.get("matchFields") or [])
        exprs = all(holds(r, labels.get(r.get("key"))) for r in term.get("matchExpressions") or [])
        return fields and exprs

    return not terms or any(matches(t) for t in terms)


def _terminate(proc: PodProcess, kill: bool = False) -> None:
    """SIGTERM (the pod's grace period), or SIGKILL once it is over."""
    if proc.poll() is None:
        try:
            proc.kill() if kill else proc.terminate()
        except OSError:
            pass

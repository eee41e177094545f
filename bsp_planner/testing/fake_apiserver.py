"""FakeApiServer: an in-process HTTP server speaking enough of the Kubernetes REST API for bsp-planner's
calls. FOR LOGIC TESTS ONLY.

It lets the real ``kubernetes`` client (its URL building, serialisation, content types, error mapping)
drive the backend's and the profiler's reconcile logic on this machine, where no cluster exists. It is
not a cluster and proves nothing about one: its "scheduler" puts a pending pod on the first node (of
those its nodeSelector and required node affinity admit) whose allocatable CPU covers the requests already
there, its "kubelet" starts containers and applies resizes
at once (or after a set delay) and runs profiling Jobs by calling a function the test gives, and it
evicts a pod when a test says so. What it does check like a real server:

- request bodies against the client's own models (unknown or missing fields -> 422), and a patch's
  content type (a dict sent as a JSON patch -> 400, as a real server answers);
- names (DNS-1123) and duplicates (409), missing objects (404);
- (optionally) a pod's container as a local process: ``pod_runner(pod)`` returns a ``Popen``-like
  object when the pod starts; its exit makes the pod Succeeded or Failed, deleting the pod terminates
  it; an OSError from it (the program is not in the image) fails the container with reason StartError
  and exit code 128, as the kubelet reports it. No CPU limit is applied to it: resizes only change the
  reported status;
- a container's tcpSocket readiness probe (on 127.0.0.1, where pod_runner's processes run; ``podIP`` is
  127.0.0.1): ``containerStatuses[].ready`` while the port accepts connections;
- resize progress as the kubelet reports it since 1.33: conditions ``PodResizePending`` (reason
  Deferred: no room on the node now; Infeasible: more than the node's allocatable) and
  ``PodResizeInProgress``, the applied values in ``containerStatuses[].resources``, and from 1.35
  ``metadata.generation`` (bumped by the resize) against ``status.observedGeneration``;
- authorisation, when given RBAC rules (e.g. parsed from jobs/k8s/rbac.yaml): a request its rules do
  not grant gets 403, like the API server's RBAC authoriser. Every request is recorded in ``calls`` as
  (verb, apiGroup, resource[/subresource], namespace), for tests of which verbs the code uses.

Everything runs on 127.0.0.1 with a port the OS chooses; ``with FakeApiServer() as api:`` stops it.
Code under test reaches it as it reaches any cluster, through a kubeconfig file: ``api.kubeconfig``.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

from ..k8s.binpack import pod_cpu_request
from ..k8s.names import cpu_millicores


class PodProcess(Protocol):
    """What pod_runner returns for a pod's container: a Popen-like process (with, optionally,
    ``log_tail() -> str``: its output so far, for terminationMessagePolicy FallbackToLogsOnError)."""

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

#: (group, resource) -> model class name that validates a body
_MODELS = {("", "pods"): "V1Pod", ("batch", "jobs"): "V1Job"}

RESOURCE_LIST = [
    ("pods", "Pod", True, ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
    ("pods/log", "Pod", True, ["get"]),
    ("pods/status", "Pod", True, ["get", "patch", "update"]),
    ("nodes", "Node", False, ["create", "delete", "get", "list", "patch", "update", "watch"]),
    ("configmaps", "ConfigMap", True, ["create", "delete", "get", "list", "patch", "update", "watch"]),
    ("namespaces", "Namespace", False, ["create", "delete", "get", "list", "patch", "update", "watch"]),
]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Rule:
    """One RBAC PolicyRule: apiGroups x resources x verbs (``*`` matches anything)."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    namespace: str | None  # None: cluster-wide (a ClusterRole through a ClusterRoleBinding)

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        return (
            ("*" in self.groups or group in self.groups)
            and ("*" in self.resources or resource in self.resources)
            and ("*" in self.verbs or verb in self.verbs)
        )


@dataclass
class Call:
    verb: str
    group: str
    resource: str  # 'pods', 'pods/resize'...
    namespace: str | None
    name: str | None
    status: int = 0


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


class FakeApiServer:
    """See the module docstring. For logic tests only."""

    def __init__(
        self,
        *,
        version: str = "v1.33.1",
        resize_subresource: bool | None = None,
        rules: list[Rule] | None = None,
        start_delay_s: float = 0.0,
        delete_delay_s: float = 0.0,
        resize_delay_s: float = 0.0,
        job_runner: Callable[[dict], JobOutcome] | None = None,
        pod_runner: Callable[[dict], PodProcess] | None = None,
    ) -> None:
        self.version = version
        m = re.match(r"v(\d+)\.(\d+)", version)
        self.major, self.minor = (int(m.group(1)), int(m.group(2))) if m else (1, 0)
        self.resize_subresource = (
            (self.major, self.minor) >= (1, 33) if resize_subresource is None else resize_subresource
        )
        # 1.35+: pods carry metadata.generation (bumped by a resize) and status.observedGeneration
        self._generations = (self.major, self.minor) >= (1, 35)
        self.rules = rules  # None: everything allowed
        self.start_delay_s = start_delay_s
        self.delete_delay_s = delete_delay_s
        self.resize_delay_s = resize_delay_s
        self.job_runner = job_runner
        self.pod_runner = pod_runner
        self._procs: dict[tuple[str, str], PodProcess] = {}
        self.state = FakeState()
        self.calls: list[Call] = []
        self.lock = threading.RLock()
        self._rv = itertools.count(1)
        self._pending_delete: dict[tuple[str, str], float] = {}
        self._started_at: dict[tuple[str, str], float] = {}
        self._resize_at: dict[tuple[str, str], float] = {}
        self._job_done_at: dict[tuple[str, str], tuple[float, JobOutcome]] = {}
        self._job_pods: dict[tuple[str, str], JobOutcome] = {}
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self._kubeconfig_dir: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-apiserver", daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            for proc in self._procs.values():
                _terminate(proc, kill=True)
            self._procs.clear()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self._kubeconfig_dir is not None:
            shutil.rmtree(self._kubeconfig_dir, ignore_errors=True)
            self._kubeconfig_dir = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self.server is not None, "start() first"
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def kubeconfig(self) -> str:
        """A kubeconfig file pointing at this server (written on first use, removed by stop())."""
        if self._kubeconfig_dir is None:
            self._kubeconfig_dir = tempfile.mkdtemp(prefix="fake-apiserver-")
        path = f"{self._kubeconfig_dir}/kubeconfig"
        self.write_kubeconfig(path)
        return path

    def write_kubeconfig(self, path) -> str:
        """Write a kubeconfig for this server to `path` (JSON, which is YAML) and return the path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        }
        with open(path, "w") as fh:
            json.dump(config, fh)
        return str(path)

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
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                    "creationTimestamp": now_iso(),
                    "resourceVersion": str(next(self._rv)),
                },
                "spec": {"unschedulable": unschedulable, **({"taints": taints} if taints else {})},
                "status": {
                    "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    "nodeInfo": _node_info(),
                },
            }

    def add_foreign_pod(self, namespace: str, name: str, node: str, cpu: str) -> None:
        """A pod of someone else, bound to `node` and holding `cpu` there."""
        with self.lock:
            pod: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
            }
            self._stamp(pod)
            pod["spec"]["nodeName"] = node
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": True,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"running": {"startedAt": now_iso()}},
                    }
                ],
            }
            self.state.pods[(namespace, name)] = pod

    def evict(self, namespace: str, name: str, message: str = "The node was low on resource: memory.") -> None:
        with self.lock:
            pod = self.state.pods[(namespace, name)]
            pod["status"].update(phase="Failed", reason="Evicted", message=message)
            for cs in pod["status"].get("containerStatuses") or []:
                cs["state"] = {"terminated": {"exitCode": 137, "reason": "Error"}}
                cs["ready"] = False

    def pod(self, namespace: str, name: str) -> dict | None:
        with self.lock:
            p = self.state.pods.get((namespace, name))
            return copy.deepcopy(p) if p else None

    def pods(self, namespace: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(p) for (ns, _), p in sorted(self.state.pods.items()) if ns == namespace]

    def jobs(self, namespace: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(j) for (ns, _), j in sorted(self.state.jobs.items()) if ns == namespace]

    def used_permissions(self) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every authorised namespaced request made so far."""
        with self.lock:
            return {(c.group, c.resource, c.verb) for c in self.calls if c.namespace is not None and c.status != 403}

    # -- simulation --------------------------------------------------------------------------------
    def _stamp(self, obj: dict) -> None:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_iso())
        meta["resourceVersion"] = str(next(self._rv))

    def _node_free(self, node: str, skip: tuple[str, str] | None = None) -> float:
        alloc = cpu_millicores(self.state.nodes[node]["status"]["allocatable"]["cpu"])
        used = sum(
            pod_cpu_request(p)
            for key, p in self.state.pods.items()
            if key != skip
            and p["spec"].get("nodeName") == node
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        )
        return alloc - used

    def _schedulable(self, node: dict, pod: dict) -> bool:
        spec = node["spec"]
        if spec.get("unschedulable") or node["status"]["conditions"][0]["status"] != "True":
            return False
        if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
            return False
        labels = node["metadata"].get("labels") or {}
        if not all(labels.get(k) == v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
            return False
        return _affinity_allows(node, pod)

    def _probe_readiness(self) -> None:
        """A running container's tcpSocket readiness probe, as the kubelet runs it: ready while its port (on
        127.0.0.1, where pod_runner's processes run) accepts a connection."""
        import socket

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
            pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            message = getattr(proc, "message", "")
            policy = pod["spec"]["containers"][0].get("terminationMessagePolicy")
            if not message and code != 0 and policy == "FallbackToLogsOnError" and hasattr(proc, "log_tail"):
                message = _log_fallback(proc.log_tail())
            for cs in pod["status"]["containerStatuses"]:
                cs["ready"] = False
                cs["state"] = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "message": message,
                        "startedAt": ((cs.get("state") or {}).get("running") or {}).get("startedAt", now_iso()),
                        "finishedAt": now_iso(),
                    }
                }
        for key, pod in sorted(self.state.pods.items(), key=lambda kv: kv[1]["metadata"]["creationTimestamp"]):
            status = pod["status"]
            if status.get("phase") != "Pending" or key in self._pending_delete:
                continue
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
                    continue
                pod["spec"]["nodeName"] = fit[0]
                status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                self._started_at[key] = now + self.start_delay_s
            if now >= self._started_at.get(key, now):
                status["phase"] = "Running"
                status["startTime"] = now_iso()
                status["podIP"] = "127.0.0.1"  # its container is a local process (pod_runner), if any
                status["containerStatuses"] = [
                    {
                        "name": c["name"],
                        "ready": "readinessProbe" not in c,  # with a probe: once it passes (_probe_readiness)
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "",
                        "state": {"running": {"startedAt": now_iso()}},
                        "resources": copy.deepcopy(c.get("resources") or {}),
                    }
                    for c in pod["spec"]["containers"]
                ]
                if self._generations:
                    status["observedGeneration"] = pod["metadata"].get("generation", 1)
                if key in self._job_pods:
                    self._job_done_at[key] = (now + self._job_pods[key].delay_s, self._job_pods[key])
                elif self.pod_runner is not None:
                    try:
                        self._procs[key] = self.pod_runner(copy.deepcopy(pod))
                    except OSError as exc:  # the program is not in the image: the runtime cannot start it
                        _start_error(pod, pod["spec"]["containers"][0].get("command") or ["?"], exc)
        self._probe_readiness()
        for key, at in list(self._resize_at.items()):
            pod = self.state.pods.get(key)
            if pod is None:
                del self._resize_at[key]
                continue
            if now >= at:
                for c, cs in zip(pod["spec"]["containers"], pod["status"].get("containerStatuses") or [], strict=False):
                    cs["resources"] = copy.deepcopy(c.get("resources") or {})
                if self._generations:
                    pod["status"]["observedGeneration"] = pod["metadata"].get("generation", 1)
                pod["status"]["conditions"] = [
                    c for c in pod["status"]["conditions"] if not c["type"].startswith("PodResize")
                ]
                del self._resize_at[key]
        for key, (at, outcome) in list(self._job_done_at.items()):
            if now < at:
                continue
            del self._job_done_at[key]
            pod = self.state.pods.get(key)
            if pod is None:
                continue
            ok = outcome.exit_code == 0
            pod["status"]["phase"] = "Succeeded" if ok else "Failed"
            for cs in pod["status"]["containerStatuses"]:
                code, message = (outcome.containers or {}).get(cs["name"], (outcome.exit_code, outcome.message))
                cs["ready"] = False
                cs["state"] = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "message": message,
                        "finishedAt": now_iso(),
                    }
                }
            job = self.state.jobs.get((key[0], pod["metadata"]["labels"]["job-name"]))
            if job is not None:
                cond = "Complete" if ok else "Failed"
                job["status"] = {
                    "succeeded" if ok else "failed": 1,
                    "active": 0,
                    "conditions": [{"type": cond, "status": "True", "reason": outcome.reason or cond}],
                }
                self._stamp(job)

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
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": template["spec"],
            "status": {"phase": "Pending"},
        }
        self._stamp(pod)
        self.state.pods[(ns, name)] = pod
        self._job_pods[(ns, name)] = outcome
        job["status"] = {"active": 1}


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


def _node_info() -> dict:
    return {
        "architecture": "amd64",
        "bootID": "",
        "containerRuntimeVersion": "fake://1",
        "kernelVersion": "fake",
        "kubeProxyVersion": "",
        "kubeletVersion": "fake",
        "machineID": "",
        "operatingSystem": "linux",
        "osImage": "fake",
        "systemUUID": "",
    }


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _match_labels(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    for part in selector.split(","):
        if "!=" in part:
            k, v = part.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in part:
            k, v = part.split("=", 1)
            if labels.get(k.strip()) != v.strip().lstrip("="):
                return False
        elif part.strip() and part.strip() not in labels:
            return False
    return True


def _match_fields(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    for part in selector.split(","):
        neg = "!=" in part
        k, v = part.split("!=" if neg else "=", 1)
        path = k.strip().split(".")
        cur: Any = obj
        for p in path:
            cur = (cur or {}).get(p) if isinstance(cur, dict) else None
        if (str(cur) == v.strip()) == neg:
            return False
    return True


def _log_fallback(log: str) -> str:
    """terminationMessagePolicy FallbackToLogsOnError: the last 80 lines or 2048 bytes of the log,
    whichever is shorter (what the kubelet takes when the container failed without a message)."""
    tail = "\n".join(log.splitlines()[-80:])
    return tail.encode()[-2048:].decode(errors="replace")


def _start_error(pod: dict, command: list[str], exc: OSError) -> None:
    """What the kubelet reports when the runtime cannot start a container's program (restartPolicy
    Never): the container terminated with reason StartError and exit code 128, the pod Failed."""
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        f'failed: unable to start container process: exec: "{command[0]}": '
        + ("executable file not found in $PATH" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc)))
        + ": unknown"
    )
    pod["status"]["phase"] = "Failed"
    for cs in pod["status"]["containerStatuses"]:
        cs["ready"] = False
        cs["state"] = {
            "terminated": {"exitCode": 128, "reason": "StartError", "message": message, "finishedAt": now_iso()}
        }


def _merge(dst: dict, patch: dict) -> None:
    """Strategic merge for the shapes bsp-planner sends: maps merge, `containers` merge by name."""
    for k, v in patch.items():
        if k == "containers" and isinstance(v, list):
            by_name = {c["name"]: c for c in dst.get("containers") or []}
            for c in v:
                if c.get("name") in by_name:
                    _merge(by_name[c["name"]], c)
                else:
                    dst.setdefault("containers", []).append(copy.deepcopy(c))
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        import socket

        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stalls

    # routing: /version, /api/v1, /api/v1/nodes, /api/v1/pods,
    # /api/v1/namespaces/{ns}/{res}[/{name}[/{sub}]], /apis/batch/v1/namespaces/{ns}/jobs[/{name}]
    def _route(self):
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        if parts == ["version"]:
            return ("version", None, None, None, None, None, q)
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[:3] == ["apis", "batch", "v1"]:
            group, rest = "batch", parts[3:]
        else:
            return None
        if not rest:
            return ("discovery", group, None, None, None, None, q)
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return ("resource", group, resource, ns, name, sub, q)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        fake = self.fake
        route = self._route()
        body = self._body() if method in ("POST", "PUT", "PATCH") else None
        if route is None:
            return self._send(
                404, _status(404, "NotFound", f"the server could not find the requested resource {self.path}")
            )
        kind, group, resource, ns, name, sub, q = route
        if kind == "version":
            return self._send(
                200,
                {
                    "major": str(fake.major),
                    "minor": str(fake.minor),
                    "gitVersion": fake.version,
                    "gitCommit": "fake",
                    "gitTreeState": "clean",
                    "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.24",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        if kind == "discovery":
            res = RESOURCE_LIST + (
                [("pods/resize", "Pod", True, ["get", "patch", "update"])] if fake.resize_subresource else []
            )
            if group == "batch":
                res = [("jobs", "Job", True, ["create", "delete", "get", "list", "patch", "update", "watch"])]
            return self._send(
                200,
                {
                    "kind": "APIResourceList",
                    "groupVersion": f"{group + '/' if group else ''}v1",
                    "resources": [
                        {"name": r, "singularName": "", "namespaced": nsd, "kind": k, "verbs": v}
                        for r, k, nsd, v in res
                    ],
                },
            )
        full = f"{resource}/{sub}" if sub else resource
        if method == "GET":
            verb = "watch" if q.get("watch") in ("true", "1") else ("get" if name else "list")
        else:
            verb = {
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection",
            }[method]
        call = Call(verb, group, full, ns, name)
        with fake.lock:
            fake.calls.append(call)
            if fake.rules is not None and not any(r.allows(verb, group, full, ns) for r in fake.rules):
                call.status = 403
                scope = f' in the namespace "{ns}"' if ns else " at the cluster scope"
                return self._send(
                    403,
                    _status(
                        403,
                        "Forbidden",
                        f'{full} is forbidden: User cannot {verb} resource "{full}" in API group "{group}"{scope}',
                    ),
                )
            try:
                fake._advance()
                code, out = self._serve(method, verb, group, resource, ns, name, sub, q, body)
            except Exception as exc:  # a bug of the fake or of a test's job_runner: say so, keep serving
                code, out = 500, _status(500, "InternalError", f"FakeApiServer: {type(exc).__name__}: {exc}")
            call.status = code
            return self._send(code, out)

    def _serve(self, method, verb, group, resource, ns, name, sub, q, body):
        fake = self.fake
        store = {("", "pods"): fake.state.pods, ("batch", "jobs"): fake.state.jobs}
        if (group, resource) == ("", "nodes"):
            if verb == "list":
                return 200, {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(fake.state.nodes.values()),
                }
            return 405, _status(405, "MethodNotAllowed", "the fake serves only node lists")
        if (group, resource) not in store:
            return 404, _status(404, "NotFound", f"the fake does not serve {group}/{resource}")
        objects = store[(group, resource)]
        kind = {"pods": "Pod", "jobs": "Job"}[resource]
        if verb == "list":
            items = [
                o
                for (ons, _), o in sorted(objects.items())
                if (ns is None or ons == ns)
                and _match_labels(o, q.get("labelSelector"))
                and _match_fields(o, q.get("fieldSelector"))
            ]
            return 200, {
                "kind": f"{kind}List",
                "apiVersion": "v1" if not group else f"{group}/v1",
                "metadata": {"resourceVersion": str(next(fake._rv))},
                "items": items,
            }
        if verb == "create":
            err = _validate(group, resource, body)
            if err:
                return 422, _status(422, "Invalid", err)
            oname = body["metadata"].get("name") or ""
            if not (_DNS_SUBDOMAIN.match(oname) and len(oname) <= (63 if resource == "pods" else 253)):
                return 422, _status(
                    422, "Invalid", f'{kind} "{oname}" is invalid: metadata.name: must be a DNS-1123 name'
                )
            if body["metadata"].get("namespace", ns) != ns:
                return 400, _status(
                    400, "BadRequest", "the namespace of the object does not match the namespace of the request"
                )
            if (ns, oname) in objects:
                return 409, _status(409, "AlreadyExists", f'{resource} "{oname}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = ns
            fake._stamp(obj)
            if resource == "pods":
                obj["status"] = {"phase": "Pending"}
                if fake._generations:
                    obj["metadata"]["generation"] = 1
            objects[(ns, oname)] = obj
            if resource == "jobs":
                fake._run_job(ns, obj)
            fake._advance()
            return 201, obj
        if (ns, name) not in objects:
            return 404, _status(404, "NotFound", f'{resource} "{name}" not found')
        obj = objects[(ns, name)]
        if verb == "get" and not sub:
            return 200, obj
        if verb == "delete" and not sub:
            if resource == "pods":
                grace = q.get("gracePeriodSeconds")
                delay = 0.0 if grace == "0" else fake.delete_delay_s
                obj["metadata"].setdefault("deletionTimestamp", now_iso())
                fake._pending_delete.setdefault((ns, name), time.monotonic() + delay)
                fake._advance()
                return 200, obj
            del objects[(ns, name)]
            if resource == "jobs":
                for key, p in list(fake.state.pods.items()):
                    if key[0] == ns and (p["metadata"].get("labels") or {}).get("job-name") == name:
                        fake._pending_delete.setdefault(key, time.monotonic())
                return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            return 200, obj
        if verb == "patch" and resource == "pods" and sub == "resize":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype == "application/json-patch+json" and not isinstance(body, list):
                return 400, _status(
                    400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
                )
            if ctype not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
                return 415, _status(415, "UnsupportedMediaType", f"the fake takes merge patches, got {ctype}")
            extra = set(body) - {"spec"} or set(body.get("spec", {})) - {"containers"}
            if extra:
                return 422, _status(
                    422, "Invalid", f"resize may change only spec.containers[*].resources, got {sorted(extra)}"
                )
            if obj["status"].get("phase") != "Running":
                return 400, _status(400, "BadRequest", "the fake resizes only running pods")
            trial = copy.deepcopy(obj["spec"])
            _merge(trial, body["spec"])
            for c in trial["containers"]:
                r = c.get("resources") or {}
                if (r.get("requests") or {}).get("cpu") != (r.get("limits") or {}).get("cpu"):
                    return 422, _status(422, "Invalid", "Pod QOS Class may not change as a result of resizing")
            obj["spec"] = trial
            fake._stamp(obj)
            if fake._generations:  # a resize is a spec change: the kubelet acts on the new generation
                obj["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
            room = fake._node_free(obj["spec"]["nodeName"], skip=(ns, name))  # alloc - the other pods
            alloc = cpu_millicores(fake.state.nodes[obj["spec"]["nodeName"]]["status"]["allocatable"]["cpu"])
            if pod_cpu_request(obj) > alloc:
                obj["status"]["conditions"] = [
                    c for c in obj["status"]["conditions"] if not c["type"].startswith("PodResize")
                ] + [
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": "Infeasible",
                        "message": f"Node didn't have enough capacity: cpu, requested: {pod_cpu_request(obj):.0f}, "
                        f"capacity: {alloc:.0f}",
                    }
                ]
                if fake._generations:
                    obj["status"]["observedGeneration"] = obj["metadata"]["generation"]
            elif pod_cpu_request(obj) > room + 1e-6:
                obj["status"]["conditions"] = [
                    c for c in obj["status"]["conditions"] if not c["type"].startswith("PodResize")
                ] + [
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": "Deferred",
                        "message": "Node didn't have enough resource: cpu",
                    }
                ]
                if fake._generations:
                    obj["status"]["observedGeneration"] = obj["metadata"]["generation"]
            else:
                obj["status"]["conditions"] = [
                    c for c in obj["status"]["conditions"] if not c["type"].startswith("PodResize")
                ] + [{"type": "PodResizeInProgress", "status": "True"}]
                fake._resize_at[(ns, name)] = time.monotonic() + fake.resize_delay_s
                fake._advance()
            return 200, obj
        return 405, _status(
            405, "MethodNotAllowed", f"the fake does not serve {verb} on {resource}{'/' + sub if sub else ''}"
        )


def _validate(group: str, resource: str, body) -> str | None:
    """Check a body with the client's own model (unknown fields and missing required ones fail)."""
    from kubernetes import client

    if not isinstance(body, dict):
        return "expected a JSON object"
    model = getattr(client, _MODELS[(group, resource)])
    try:
        model.model_validate(body)
    except Exception as exc:  # pydantic.ValidationError
        return f"{model.__name__}: {exc}"
    return None


def rules_from_manifests(docs: list[dict], namespace: str, service_account: str) -> list[Rule]:
    """The RBAC rules the manifests grant to one service account: Roles (namespaced) and ClusterRoles
    bound to it by RoleBindings (namespaced) or ClusterRoleBindings (cluster-wide)."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    out: list[Rule] = []
    for b in docs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = b.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == service_account
            and s.get("namespace", b["metadata"].get("namespace")) == namespace
            for s in subjects
        ):
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], ref["name"]))
        if role is None:
            continue
        scope = None if b["kind"] == "ClusterRoleBinding" else b["metadata"].get("namespace", namespace)
        for r in role.get("rules") or []:
            out.append(
                Rule(
                    tuple(r.get("apiGroups") or [""]),
                    tuple(r.get("resources") or []),
                    tuple(r.get("verbs") or []),
                    scope,
                )
            )
    return out

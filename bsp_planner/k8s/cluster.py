"""The API calls bsp-planner makes, and how a pod's status reads.

:class:`Cluster` wraps the official client's ``CoreV1Api``, ``BatchV1Api`` and ``VersionApi`` for one
namespace and hands back plain camelCase dicts (the server's own JSON), so the logic above it (the
runtime backend, the profiler, the bin packing) never touches client models. Each method is one REST
call; :data:`ROLE_RULES` lists, per resource, the verbs these methods use, and the kustomize base's
Role grants exactly those (a test checks both against the calls recorded by the fake API server).

Nodes and pods of other namespaces are read only for the fit check. That needs cluster-wide read
access, which the base Role (namespaced) does not give: :meth:`Cluster.list_nodes` returns None on
403 and the check is skipped with a warning, unless the optional component
``jobs/k8s/components/node-reader`` is applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from . import names as n
from .capabilities import ServerCapabilities, detect
from .config import Connection

STRATEGIC_MERGE = "application/strategic-merge-patch+json"

#: (apiGroup, resource) -> verbs, for the namespaced Role of jobs/k8s/rbac.yaml.
ROLE_RULES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("create", "delete", "get", "list"),
    ("", "pods/resize"): ("patch",),
    ("batch", "jobs"): ("create", "delete", "list"),
    # a run's Events and its BspJob's status (bsp_planner.k8s.objects, written by the coordinator's watchers)
    ("", "events"): ("create", "patch"),
    ("bsp-planner.io", "bspjobs/status"): ("get", "patch"),
}
#: cluster-wide reads for the fit check, granted only by the optional node-reader component.
CLUSTER_READ_RULES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "nodes"): ("list",),
    ("", "pods"): ("list",),
}


class KubernetesError(InputError):
    """An API call failed in a way the user has to act on (permissions, a missing namespace...)."""


def _reason(exc) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return body.get("message") or exc.reason or str(exc.status)
    except (ValueError, TypeError):
        return f"{exc.status} {exc.reason}"


class Cluster:
    """One namespace of one cluster, through the official client."""

    def __init__(self, conn: Connection, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self.conn = conn
        self.namespace = conn.namespace
        self.core = client.CoreV1Api(conn.api_client)
        self.batch = client.BatchV1Api(conn.api_client)
        self.version_api = client.VersionApi(conn.api_client)
        self.timeout = request_timeout_s
        self._caps: ServerCapabilities | None = None

    def _call(self, what: str, fn: Callable, *args, missing_ok=False, exists_ok=False, forbidden_ok=False, **kw):
        """One API call's answer as a dict; None where the call says it may be missing (404), exist already
        (409) or be forbidden (401/403); any other failure as a KubernetesError that says what to do."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError  # urllib3 2.x: MaxRetryError and co. are not OSError

        try:
            return self.conn.api_client.sanitize_for_serialization(fn(*args, _request_timeout=self.timeout, **kw))
        except ApiException as exc:
            if {404: missing_ok, 409: exists_ok, 401: forbidden_ok, 403: forbidden_ok}.get(exc.status):
                return None
            if exc.status in (401, 403):
                raise KubernetesError(
                    f"{what}: forbidden ({_reason(exc)}); is the namespace '{self.namespace}' right, and does "
                    f"the account ({self.conn.where}) have the Role in jobs/k8s/rbac.yaml?",
                    field="kubernetes",
                ) from exc
            raise KubernetesError(f"{what}: {_reason(exc)}", field="kubernetes") from exc
        except (OSError, HTTPError) as exc:
            raise KubernetesError(
                f"{what}: cannot reach the Kubernetes API server at {self.conn.host} ({self.conn.where}): "
                f"{getattr(exc, 'reason', None) or exc}; point at another cluster with --kubeconfig FILE and "
                "--context NAME (or $KUBECONFIG), or check that the cluster is up",
                field="kubernetes",
            ) from None

    def _list(self, what: str, fn: Callable, *args, **kw) -> list[dict] | None:
        out = self._call(what, fn, *args, **kw)
        return None if out is None else out.get("items") or []

    # -- discovery ---------------------------------------------------------------------------------
    def capabilities(self) -> ServerCapabilities:
        if self._caps is None:
            version = self._call("read the server version", self.version_api.get_code)
            resources = self._call("read the core API's resources", self.core.get_api_resources)
            self._caps = detect(version, resources)
        return self._caps

    # -- pods --------------------------------------------------------------------------------------
    def create_pod(self, body: dict) -> dict | None:
        """The created pod, or None if one of that name exists already."""
        what = f"create pod {body['metadata']['name']}"
        return self._call(what, self.core.create_namespaced_pod, self.namespace, body, exists_ok=True)

    def get_pod(self, name: str) -> dict | None:
        return self._call(f"read pod {name}", self.core.read_namespaced_pod, name, self.namespace, missing_ok=True)

    def pod_image(self, name: str) -> str | None:
        """The image of a pod's first container (the coordinator's own pod: its workers run the same)."""
        containers = ((self.get_pod(name) or {}).get("spec") or {}).get("containers") or []
        return containers[0].get("image") if containers else None

    def list_pods(self, selector: str) -> list[dict]:
        fn = self.core.list_namespaced_pod
        return self._list(f"list pods ({selector})", fn, self.namespace, label_selector=selector) or []

    def delete_pod(self, name: str, grace_s: int | None = None) -> None:
        kw: dict[str, Any] = {} if grace_s is None else {"grace_period_seconds": int(grace_s)}
        self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name, self.namespace, missing_ok=True, **kw)

    def resize_pod(self, name: str, patch: dict) -> dict:
        fn = self.core.patch_namespaced_pod_resize
        return self._call(f"resize pod {name}", fn, name, self.namespace, patch, _content_type=STRATEGIC_MERGE)

    # -- jobs --------------------------------------------------------------------------------------
    def create_job(self, body: dict) -> dict | None:
        what = f"create job {body['metadata']['name']}"
        return self._call(what, self.batch.create_namespaced_job, self.namespace, body, exists_ok=True)

    def list_jobs(self, selector: str) -> list[dict]:
        fn = self.batch.list_namespaced_job
        return self._list(f"list jobs ({selector})", fn, self.namespace, label_selector=selector) or []

    def delete_job(self, name: str) -> None:
        """Deletes the job and (in the background) its pods."""
        fn = self.batch.delete_namespaced_job
        self._call(f"delete job {name}", fn, name, self.namespace, propagation_policy="Background", missing_ok=True)

    # -- cluster-wide reads for the fit check (optional) ---------------------------------------------
    def list_nodes(self) -> list[dict] | None:
        """Every node, or None when the account may not list nodes (the fit check is then skipped)."""
        return self._list("list nodes", self.core.list_node, forbidden_ok=True)

    def list_all_pods(self) -> list[dict] | None:
        """Every unfinished pod of every namespace (their requests occupy the nodes), or None (403)."""
        return self._list(
            "list pods in all namespaces",
            self.core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            forbidden_ok=True,
        )


# -- reading a pod's status ----------------------------------------------------------------------------
FATAL_WAITING = {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"}


@dataclass(frozen=True)
class PodState:
    name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown | Gone
    node: str | None
    running: bool  # the container is running
    problem: str | None  # why the pod is lost for good (evicted, failed, deleted by someone), else None
    waiting: str | None = None  # why a pending pod is not running yet (unschedulable, image pull...)
    fatal_waiting: bool = False  # that reason will not go away by waiting
    actual_cpu_m: float | None = None  # its CPU limit as the kubelet reports it applied (1.33+), else None
    resize: str | None = None  # None, or 'pending: <reason> <message>' or 'in progress'
    resize_infeasible: str | None = None  # the kubelet says the resize cannot be done on this node
    exit_code: int | None = None  # the container's, once it terminated
    platform_lost: bool = False  # the platform took the pod (evicted, deleted, preempted, rejected by the
    #                              kubelet), as opposed to a container that exited by itself
    generation: int | None = None  # metadata.generation (1.35+: bumped by every resize)
    observed_generation: int | None = None  # status.observedGeneration: the generation the kubelet acted on


def _container(items: list[dict] | None, name: str) -> dict:
    """The container (spec or status) called `name`, else the first, else {}."""
    return next((c for c in items or [] if c.get("name") == name), (items or [{}])[0])


def pod_state(pod: dict | None, container: str = n.WORKER_CONTAINER) -> PodState:
    if pod is None:
        return PodState("?", "Gone", None, False, "the pod is gone (deleted outside bsp-planner?)", platform_lost=True)
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name = meta.get("name", "?")
    phase = status.get("phase") or "Pending"
    node = spec.get("nodeName")
    cstat = _container(status.get("containerStatuses"), container)
    state = cstat.get("state") or {}
    running = phase == "Running" and "running" in state
    conds = {c.get("type"): c for c in status.get("conditions") or []}

    problem = None
    if meta.get("deletionTimestamp"):
        problem = "the pod is being deleted (by someone else: a drain, a preemption, kubectl delete?)"
    if phase == "Failed":
        why = status.get("reason") or ""
        msg = status.get("message") or ""
        term = state.get("terminated") or {}
        if not why and term:
            why = f"container exited with code {term.get('exitCode')} ({term.get('reason') or 'Error'})"
            msg = (term.get("message") or "").strip()[-300:]
        problem = f"the pod failed: {why or 'Failed'}" + (f": {msg}" if msg else "")
    elif phase == "Succeeded":
        problem = "the worker exited before the run ended"
    dt = conds.get("DisruptionTarget")
    if dt and dt.get("status") == "True" and problem is None:
        problem = f"the pod is being disrupted ({dt.get('reason')}: {dt.get('message') or ''})".rstrip(": )") + ")"
    if status.get("reason") == "Evicted":
        problem = f"the pod was evicted: {status.get('message') or ''}".rstrip(": ")

    waiting, fatal = None, False
    if phase == "Pending" and problem is None:
        sched = conds.get("PodScheduled")
        if sched and sched.get("status") == "False":
            waiting = f"unschedulable: {sched.get('message') or sched.get('reason') or ''}".rstrip(": ")
        w = state.get("waiting") or {}
        if w.get("reason") and w.get("reason") != "ContainerCreating":
            waiting = f"{w['reason']}: {w.get('message') or ''}".rstrip(": ")
            fatal = w["reason"] in FATAL_WAITING
        waiting = waiting or ("not yet scheduled" if not node else "starting")

    applied = ((cstat.get("resources") or {}).get("limits") or {}).get("cpu")  # the kubelet's report (1.33+)
    actual_cpu = n.cpu_millicores(applied) if applied else None

    resize, infeasible = None, None
    pend = conds.get("PodResizePending")
    if pend and pend.get("status") == "True":
        resize = f"pending: {pend.get('reason') or ''} {pend.get('message') or ''}".strip()
        if pend.get("reason") == "Infeasible":
            infeasible = pend.get("message") or "infeasible on this node"
    elif (conds.get("PodResizeInProgress") or {}).get("status") == "True":
        resize = "in progress"
    code = (state.get("terminated") or {}).get("exitCode")
    lost = problem is not None and (
        bool(meta.get("deletionTimestamp"))
        or status.get("reason")
        in ("Evicted", "Preempting", "OutOfcpu", "OutOfmemory", "NodeLost", "Terminated", "Shutdown")
        or (dt is not None and dt.get("status") == "True")
        or (phase == "Failed" and code is None)
    )
    return PodState(
        name,
        phase,
        node,
        running,
        problem,
        waiting,
        fatal,
        actual_cpu,
        resize,
        infeasible,
        code,
        lost,
        _int_or_none(meta.get("generation")),
        _int_or_none(status.get("observedGeneration")),
    )


def _int_or_none(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def terminated(pod: dict | None, container: str | None = None) -> dict:
    """A container's last termination (exitCode, reason, message): the named one's, else the first that has
    one; {} if it has none."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if container not in (None, cs.get("name")):
            continue
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term or container is not None:
            return term or {}
    return {}


def resize_done(state: PodState, target_m: float) -> bool:
    """The kubelet applied the new limit: the status reports it, no resize is pending or running, and
    (where the server keeps pod generations, 1.35+) the kubelet has acted on the resized spec: status
    ``observedGeneration`` has caught up with ``metadata.generation`` (the conditions alone may still be
    those of the generation before the resize)."""
    caught_up = (
        state.generation is None or state.observed_generation is None or state.observed_generation >= state.generation
    )
    return (
        state.running
        and caught_up
        and state.resize is None
        and state.actual_cpu_m is not None
        and abs(state.actual_cpu_m - target_m) < 0.5
    )

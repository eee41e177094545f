"""The Kubernetes backend: each task of a live run is a Pod running `bsp-planner worker`, its CPU request
and limit equal to the task's configured CPU.

    pod      bsp-<run>-<task>, labels app.kubernetes.io/* + bsp-planner.io/run=<run> + bsp-planner.io/task,
             one container `worker` (command `bsp-planner`, the coordinator's worker arguments), CPU and
             memory requests = limits (Guaranteed QoS), restartPolicy Never, no API token
    ZooKeeper the StatefulSet of jobs/k8s; workers reach it at zookeeper.<namespace>.svc:2181 (the
             coordinator may reach it elsewhere, e.g. through `kubectl port-forward`); the worker
             arguments' ZooKeeper address is rewritten to the in-cluster one
    credentials the run's ZooKeeper credentials reach the workers from a Secret (``zk_auth_secret``, key
             ``auth``) when one is named, otherwise as a plain environment value of the pod
    own programs a command task's pod runs our worker in the task's ``image`` (the run's otherwise), which
             runs the command every step as on the local backend (so the image needs bsp-planner); a
             process task's pod runs the user's program itself (container command = ``process``) with
             the BSP_* environment of bsp_planner.task, ``{python}`` the image's ``python3`` and
             BSP_RUN_DIR the pods' run folder (``/scratch``, or a shared claim: ``run_dir_claim``); a
             task that gives only an ``image`` runs that image as built (its ENTRYPOINT/CMD: the pod
             sets no ``command``/``args``), a process task with the same environment

Reconfiguration (``reconfigure``): ``in-place`` patches the ``pods/resize`` subresource (Kubernetes 1.33+)
and waits until the kubelet reports the new limit applied; ``recreate`` deletes the pod (SIGTERM: the
worker leaves, its checkpoint is in ZooKeeper), waits until it is gone and creates it again with the new
limit (the new worker restores from the checkpoint). ``auto`` takes in-place where the server lists
``pods/resize``. A resize the kubelet calls Infeasible, or that is still pending after
``resize_timeout_s``, falls back to recreation, except for a process task (its state is in memory):
the run then stops (:class:`ResizeRefused`), resumable, saying Infeasible or Deferred. Every reconfiguration is timed and kept in
:attr:`KubernetesBackend.events` (task, mode, seconds, detail) for the run log.

Before a configuration is applied, :meth:`KubernetesBackend.check_configuration` packs it onto the
nodes' allocatable CPU next to every other pod's requests (when the account may read nodes: see
jobs/k8s/components/node-reader) and refuses, with the numbers, a configuration that cannot be placed.
A pod that stays Pending past ``pending_timeout_s``, or that is evicted, fails or is deleted by someone
else, makes :meth:`poll_task` raise :class:`PodLost`: the coordinator stops, and since every completed
step is in ZooKeeper and the run log, the run resumes from there.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InputError
from ...k8s import manifests as M
from ...k8s import names as N
from ...k8s.binpack import DoesNotFit, NodeCapacity, fits_in_place, node_capacities, pack
from ...k8s.capabilities import RECONFIGURE_MODES, choose_reconfigure_mode
from ...k8s.cluster import Cluster, PodState, pod_state, resize_done, terminated
from ...k8s.config import connect, parse_node_selector, resolve_image
from . import Backend, Capabilities, TaskLost, TaskStatus, WorkerLaunch

log = logging.getLogger("bsp_planner.runtime")

ENV_HOSTS = "BSP_PLANNER_ZOOKEEPER"
ENV_AUTH = "BSP_PLANNER_ZK_AUTH"
ENV_AUTH_FILE = "BSP_PLANNER_ZK_AUTH_FILE"
ENV_PREFIX = "BSP_PLANNER_K8S_"
ZK_FLAGS = ("--zookeeper", "--zk", "--zk-hosts")
STRESS_NG_FLAG = "--stress-ng"
IMAGE_STRESS_NG = "stress-ng"  # on the PATH of the image jobs/Dockerfile builds
SECRET_KEY = "auth"
ENV_RUN_DIR = "BSP_RUN_DIR"
ENV_TASK_HOSTS = "BSP_ZOOKEEPER"  # what bsp_planner.task joins through (process tasks)
ENV_TASK_AUTH = "BSP_ZK_AUTH"
IMAGE_PYTHON = "python3"  # `{python}` in a pod: the image's Python (the one bsp-planner is installed in)


class PodLost(TaskLost):  # the coordinator stops a run on TaskLost and leaves it resumable
    """A task's pod cannot run: pending past the timeout, evicted, preempted or deleted. The run stops and
    stays resumable (every completed step is in ZooKeeper and the run log)."""


class ConfigurationDoesNotFit(TaskLost):
    """A configuration cannot be placed on the nodes' allocatable CPU (checked before any pod changes, so
    the run stops where it is and resumes once the cluster has room)."""


class ImageUnusable(TaskLost):
    """A task's container could not start its program (not in the image): the run stops, resumable."""


class ResizeRefused(TaskLost):
    """A process task cannot be resized in place (the kubelet calls it Infeasible, or defers it past the
    timeout, or its node has no room) and is never recreated behind its back: the run stops, resumable."""


START_FAILURES = ("StartError", "ContainerCannotRun")
PROBE_TASK = "cost-probe"  # the task name of the pod that measures a recreation (never a job's task)
MIN_PROBE_MILLICORES = 10
IN_PLACE_PROBES = 3  # resizes of the in-place probe pod: down, up, down (the median is planned with)
PROBE_SLEEP = "import time; time.sleep(3600)"  # the in-place probe's container: runs until deleted


@dataclass
class ReconfigEvent:
    task: str
    mode: str  # 'in-place' | 'recreate' | 'start'
    millicores: float
    seconds: float
    detail: str = ""


@dataclass
class _Task:
    launch: WorkerLaunch
    millicores: float
    created_at: float  # monotonic time of the pod's creation (the pending clock)
    last: PodState | None = None
    plan: str | None = None  # 'in-place' | 'recreate' for the configuration being applied
    last_logged: str = ""


def _running(state: PodState | None) -> bool:
    """Whether a polled pod runs (poll_task has set the state of every task it polled)."""
    return state is not None and state.running


@dataclass
class KubernetesBackend(Backend):
    run_id: str
    log_dir: str | Path | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    image: str | None = None
    image_pull_policy: str = M.DEFAULT_IMAGE_PULL_POLICY
    reconfigure: str | None = None  # auto | in-place | recreate (default: $BSP_PLANNER_K8S_RECONFIGURE or auto)
    worker_zk_hosts: str | None = None
    zk_auth_secret: str | None = None
    memory: str = M.DEFAULT_MEMORY
    node_selector: dict[str, str] | None = None
    pending_timeout_s: float | None = None
    resize_timeout_s: float = 60.0
    delete_timeout_s: float = 120.0
    termination_grace_s: int = 10
    poll_s: float = 0.5
    fit_check: bool = True
    run_dir_claim: str | None = None  # a PersistentVolumeClaim shared by the run's pods as BSP_RUN_DIR
    stress_ng: str = IMAGE_STRESS_NG  # accepted for the coordinator's make_backend call; pods use the image's
    cgroup_prefix: str | None = None  # accepted likewise; the kubelet makes the pods' cgroups
    cluster: Cluster | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    name = "kubernetes"

    def __post_init__(self) -> None:
        given = self.reconfigure is not None
        self._from_env()
        self.run_key = N.run_key(self.run_id)
        if self.reconfigure not in RECONFIGURE_MODES:
            source = "--reconfigure" if given else f"${ENV_PREFIX}RECONFIGURE"  # say where the value came from
            raise InputError(f"expected one of {', '.join(RECONFIGURE_MODES)}, got {self.reconfigure!r}", field=source)
        for name in ("pending_timeout_s", "resize_timeout_s", "delete_timeout_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"expected a positive number of seconds, got {getattr(self, name)!r}", field=name)
        if self.cluster is None:
            self.cluster = Cluster(connect(self.namespace, kubeconfig=self.kubeconfig, context=self.context))
        self.namespace = self.cluster.namespace
        self.tasks: dict[str, _Task] = {}
        self.images: dict[str, str] = {}  # task -> its own image (command/process tasks that name one)
        self.processes: set[str] = set()  # process tasks: resized in place only, never recreated behind their back
        self.as_built: set[str] = set()  # image tasks without a program: the image's ENTRYPOINT/CMD runs
        self.probe_millicores = 1000.0  # the CPU a recreation is measured under: budget / tasks (check)
        self.recreate_probe: dict = {}  # what measure_reconfigure_cost('recreate') saw
        self.in_place_probe: dict = {}  # what measure_reconfigure_cost('in-place') saw
        self.events: list[ReconfigEvent] = []
        self.placement: dict[str, str] = {}  # task -> the node the plan put it on (place)
        self.warnings: list[str] = []
        self._mode: tuple[str, str] | None = None
        self._capacity_m: float | None | bool = False  # False: not read yet
        self._settings: M.PodSettings | None = None
        if self.worker_zk_hosts is None:
            self.worker_zk_hosts = f"{N.ZOOKEEPER_SERVICE}.{self.namespace}.svc:{N.ZOOKEEPER_PORT}"

    def _from_env(self) -> None:
        """Settings not given fall back on $BSP_PLANNER_K8S_* (so the coordinator Job of jobs/k8s sets them
        in its environment), then on the defaults."""
        env = os.environ
        if self.namespace is None:
            self.namespace = env.get(f"{ENV_PREFIX}NAMESPACE") or None
        if self.reconfigure is None:
            self.reconfigure = env.get(f"{ENV_PREFIX}RECONFIGURE") or "auto"
        if self.worker_zk_hosts is None:
            self.worker_zk_hosts = env.get(f"{ENV_PREFIX}WORKER_ZOOKEEPER") or None
        if self.zk_auth_secret is None:
            self.zk_auth_secret = env.get(f"{ENV_PREFIX}ZK_AUTH_SECRET") or None
        if self.run_dir_claim is None:
            self.run_dir_claim = env.get(f"{ENV_PREFIX}RUN_DIR_CLAIM") or None
        if self.node_selector is None:
            self.node_selector = parse_node_selector(env.get(f"{ENV_PREFIX}NODE_SELECTOR", ""))
        if self.pending_timeout_s is None:
            text = env.get(f"{ENV_PREFIX}PENDING_TIMEOUT") or "120"
            try:
                self.pending_timeout_s = float(text)
            except ValueError:
                raise InputError(f"expected seconds, got {text!r}", field=f"${ENV_PREFIX}PENDING_TIMEOUT") from None

    @property
    def _cluster(self) -> Cluster:
        """The cluster: the one given, or the one __post_init__ connected to."""
        assert self.cluster is not None
        return self.cluster

    # -- what the platform can do ------------------------------------------------------------------
    @property
    def default_reconfigure(self) -> str:
        """--reconfigure when not given: $BSP_PLANNER_K8S_RECONFIGURE, else auto (in place where the
        server can resize pods)."""
        assert self.reconfigure is not None  # _from_env fills it
        return self.reconfigure

    @property
    def mode(self) -> str:
        """'in-place' or 'recreate', from --reconfigure and the server's capabilities."""
        if self._mode is None:
            self._mode = choose_reconfigure_mode(self.default_reconfigure, self._cluster.capabilities())
        return self._mode[0]

    def capabilities(self) -> Capabilities:
        """in_place: the server can resize (and --reconfigure is not recreate); capacity: the schedulable
        nodes' free allocatable CPU when first asked (None where nodes cannot be read)."""
        if self._capacity_m is False:
            nodes = self._node_capacities(movable_own=True)
            self._capacity_m = (
                None if nodes is None else sum(max(0.0, c.free_m) for c in nodes if c.unschedulable is None)
            )
        return Capabilities(
            in_place=self.mode == "in-place", recreate=True, sees_exit=True, capacity_millicores=self._capacity_m
        )

    def info(self) -> dict:
        caps = self._cluster.capabilities()
        return {
            "backend": self.name,
            "kubernetes": {
                **caps.as_dict(),
                "namespace": self.namespace,
                "where": self._cluster.conn.where,
                "image": self._settings.image if self._settings else self.image,
                "reconfigure": self.mode,
                "reconfigure_reason": self._mode[1] if self._mode else "",
                "worker_zookeeper": self.worker_zk_hosts,
                "zk_auth_secret": self.zk_auth_secret,
                "pending_timeout_s": self.pending_timeout_s,
                **({"recreate_probe": dict(self.recreate_probe)} if self.recreate_probe else {}),
                **({"in_place_probe": dict(self.in_place_probe)} if self.in_place_probe else {}),
            },
            "warnings": list(self.warnings),
        }

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            log.warning(text)

    @property
    def settings(self) -> M.PodSettings:
        if self._settings is None:
            image = resolve_image(self.image, self._cluster.pod_image)
            self._settings = M.PodSettings(
                self._cluster.namespace,
                image,
                self.image_pull_policy,
                self.memory,
                dict(self.node_selector or {}),
                self.termination_grace_s,
            )
        return self._settings

    # -- checks ------------------------------------------------------------------------------------
    def check(self, job, millicores_max: float, budget_millicores: float, path=None) -> None:
        """The namespace is reachable with the Role's rights, the reconfiguration mode is possible, the
        image is known, and (where nodes can be read) the budget and the largest task fit the nodes."""
        by_log = [sv.name for sv in getattr(job, "services", ()) if sv.ready_log_line is not None]
        if by_log:
            raise InputError(
                f"service(s) {', '.join(by_log)} wait for a log line, which the kubernetes backend cannot read (the "
                'Role grants no log access); give ready = { tcp_port = "{port}" }: a readiness probe on the pod',
                path=getattr(job, "path", None) or path,
                field="service.ready.log_line",
            )
        n = max(1, len(getattr(job, "tasks", ())))
        self.probe_millicores = float(max(MIN_PROBE_MILLICORES, round(budget_millicores / n)))
        self.images = {t.name: t.image for t in getattr(job, "tasks", ()) if getattr(t, "image", None)}
        self.processes = {t.name for t in getattr(job, "tasks", ()) if getattr(t, "kind", "stressor") == "process"}
        self.as_built = {t.name for t in getattr(job, "tasks", ()) if getattr(t, "runs_image_entrypoint", False)}
        self._cluster.list_pods(N.run_selector(self.run_key))  # reachability and the Role, at once
        self.mode  # noqa: B018  (raises if in-place is forced and impossible)
        self.settings  # noqa: B018  (raises if no image is known)
        nodes = self._node_capacities(movable_own=True)
        if nodes is None:
            return
        usable = [c for c in nodes if c.unschedulable is None]
        free = sum(max(0.0, c.free_m) for c in usable)
        biggest = max((c.free_m for c in usable), default=0.0)
        where = "; ".join(c.describe() for c in nodes)
        if budget_millicores > free + 1e-6:
            raise ConfigurationDoesNotFit(
                f"the CPU budget ({budget_millicores:g}m) exceeds the free allocatable CPU of the schedulable "
                f"nodes ({free:.0f}m: {where}); lower cpu.budget_millicores or add nodes",
                path=path,
                field="cpu.budget_millicores",
            )
        if millicores_max > biggest + 1e-6:
            raise ConfigurationDoesNotFit(
                f"one task may get up to {millicores_max:g}m but no node has more than {biggest:.0f}m free "
                f"({where}); lower cpu.max_millicores",
                path=path,
                field="cpu.max_millicores",
            )

    def _node_capacities(self, *, movable_own: bool) -> list | None:
        if not self.fit_check:
            return None
        nodes = self._cluster.list_nodes()
        pods = self._cluster.list_all_pods() if nodes is not None else None
        if nodes is None or pods is None:
            self._warn(
                "cannot read the cluster's nodes and pods (the Role is namespaced): the fit check is off and a "
                "pod that cannot be placed stops the run after the pending timeout; apply "
                "jobs/k8s/components/node-reader to turn it on"
            )
            return None
        own = set(N.pod_name(self.run_key, t) for t in self.tasks)

        def movable(pod: Mapping) -> bool:
            meta = pod.get("metadata") or {}
            return (
                movable_own
                and meta.get("namespace") == self.namespace
                and ((meta.get("labels") or {}).get(N.LABEL_RUN) == self.run_key or meta.get("name") in own)
            )

        return node_capacities(nodes, pods, movable=movable, node_selector=self.node_selector)

    def cluster_nodes(self) -> list[tuple[str, float]] | None:
        """Every schedulable node (not cordoned, tainted, unready, or left out by the node selector) with
        its allocatable CPU less the requests of the pods that are not this run's: the cluster the run
        plans on. None where nodes cannot be read (the fit check is off): the run plans one pool."""
        nodes = self._node_capacities(movable_own=True)
        if nodes is None:
            return None
        return [(c.name, max(0.0, c.free_m)) for c in nodes if c.unschedulable is None]

    def place(self, placement: dict[str, str]) -> None:
        """Pin each task's pod to its node (a required node affinity on the node's name, so the scheduler
        still checks its room), from the next pod created on."""
        self.placement = dict(placement)

    def check_configuration(self, millicores: Mapping[str, float]) -> dict[str, str]:
        """Can `millicores` (task -> CPU) be applied? Returns task -> how: 'start', 'keep', 'in-place' or
        'recreate' (resize_task follows this plan), or raises ConfigurationDoesNotFit.

        In in-place mode, a running pod keeps its node: its increase must fit there (decreases first free
        room); a task whose increase does not fit there is recreated instead, and every pod to (re)create
        must then be packed into what is left. In recreate mode all changed pods are packed again."""
        plan: dict[str, str] = {}
        for task, m in millicores.items():
            t = self.tasks.get(task)
            if t is None:
                plan[task] = "start"
            elif abs(t.millicores - m) < 0.5:
                plan[task] = "keep"
            else:
                plan[task] = self.mode
        nodes = self._node_capacities(movable_own=False)
        if nodes is not None:
            try:
                plan = self._fit(millicores, plan, nodes)
            except DoesNotFit as exc:
                raise ConfigurationDoesNotFit(
                    f"the configuration does not fit the cluster: {exc}", field="configuration"
                ) from None
        for task, how in plan.items():
            if task in self.tasks:
                self.tasks[task].plan = how
        return plan

    def _fit(self, millicores: Mapping[str, float], plan: dict[str, str], nodes: list) -> dict[str, str]:
        # current occupancy of this run's pods, by node
        where: dict[str, str | None] = {}
        for task, t in self.tasks.items():
            where[task] = t.last.node if t.last is not None else None
            if where[task] is None:
                where[task] = pod_state(self._cluster.get_pod(self._pod_name(task))).node
        in_place = {
            task: (node, self.tasks[task].millicores, float(millicores[task]))
            for task, how in plan.items()
            if how == "in-place" and (node := where.get(task))
        }
        ok = fits_in_place(in_place, nodes)
        for task, fits in ok.items():
            if not fits and task in self.processes:
                node, was, want = in_place[task]
                raise ConfigurationDoesNotFit(
                    f"task {task!r}'s CPU cannot grow in place from {was:g}m to {want:g}m on its node {node} (not enough "
                    "free allocatable CPU there), and a process task is never recreated behind its back (its state is "
                    "in memory)",
                    field="configuration",
                )
            if not fits:
                plan[task] = "recreate"
        # the pods that will be (re)created leave their node first; the in-place ones change in place
        room = {c.name: c.free_m for c in nodes}
        for task, how in plan.items():
            if how == "recreate" and where.get(task) in room:
                room[where[task]] += self.tasks[task].millicores
            elif how == "in-place" and where.get(task) in room:
                room[where[task]] -= float(millicores[task]) - self.tasks[task].millicores
        placed = {t: float(millicores[t]) for t, how in plan.items() if how in ("start", "recreate")}
        for task in [t for t in placed if self.placement.get(t) in room]:  # pinned: its own node must hold it
            node = self.placement[task]
            if placed[task] > room[node] + 1e-6:
                raise DoesNotFit(
                    f"task {task!r} needs {placed[task]:g}m on its node {node}, which has {room[node]:.0f}m free"
                )
            room[node] -= placed.pop(task)
        if placed:
            caps = [
                NodeCapacity(c.name, c.allocatable_m, c.allocatable_m - room[c.name], c.unschedulable) for c in nodes
            ]
            pack(placed, caps)
        return plan

    # -- pods --------------------------------------------------------------------------------------
    @property
    def _worker_hosts(self) -> str:
        """The ZooKeeper address the pods reach (__post_init__ fills it)."""
        assert self.worker_zk_hosts is not None
        return self.worker_zk_hosts

    def _pod_name(self, task: str) -> str:
        return N.pod_name(self.run_key, task)

    def _worker_args(self, launch: WorkerLaunch) -> list[str]:
        """The coordinator's worker arguments, with the ZooKeeper address the pods reach and the image's
        stress-ng (the coordinator's may be a path on its own machine)."""
        replace = {f: self._worker_hosts for f in ZK_FLAGS}
        replace[STRESS_NG_FLAG] = IMAGE_STRESS_NG
        args = list(launch.args)
        out: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            flag, eq, _ = a.partition("=")
            if a in replace and i + 1 < len(args):
                out += [a, replace[a]]
                i += 2
                continue
            out.append(f"{flag}={replace[flag]}" if eq and flag in replace else a)
            i += 1
        return out

    @property
    def pod_run_dir(self) -> str:
        """BSP_RUN_DIR (and ``{run_dir}``) inside the pods: the shared claim's mount when the run has one,
        else each pod's own scratch folder (tasks of different pods then share no files)."""
        return M.RUN_DIR_MOUNT if self.run_dir_claim else M.SCRATCH_DIR

    def _program_args(self, launch: WorkerLaunch) -> list[str]:
        """A process task's program as the pod runs it: the coordinator's substitutions made for its own
        machine are mapped to the pod's (``{python}``: the image's ``python3``; ``{run_dir}``: the pods'
        run folder)."""
        local_run_dir = launch.env.get(ENV_RUN_DIR) or ""
        out = []
        for a in launch.args:
            if a == sys.executable:
                a = IMAGE_PYTHON
            elif local_run_dir and local_run_dir in a:
                a = a.replace(local_run_dir, self.pod_run_dir)
            out.append(a)
        return out

    def _worker_env(self, launch: WorkerLaunch) -> tuple[dict[str, str], list[dict]]:
        env = {k: v for k, v in launch.env.items() if k not in (ENV_AUTH, ENV_AUTH_FILE, ENV_TASK_AUTH)}
        env[ENV_HOSTS] = self._worker_hosts
        if ENV_RUN_DIR in env:  # the coordinator's folder: not in the pod
            env[ENV_RUN_DIR] = self.pod_run_dir
        if ENV_TASK_HOSTS in env:  # a process task joins through the address the pods reach
            env[ENV_TASK_HOSTS] = self._worker_hosts
        refs: list[dict] = []
        has_auth = any(k in launch.env for k in (ENV_AUTH, ENV_AUTH_FILE, ENV_TASK_AUTH))
        if self.zk_auth_secret:
            refs.append(
                {"name": ENV_AUTH, "valueFrom": {"secretKeyRef": {"name": self.zk_auth_secret, "key": SECRET_KEY}}}
            )
        elif has_auth:
            auth = launch.env.get(ENV_TASK_AUTH) or launch.env.get(ENV_AUTH)
            if auth is None:
                from ...zk import read_credentials_file

                c = read_credentials_file(launch.env[ENV_AUTH_FILE])
                auth = f"{c.user}:{c.password}"
            env[ENV_AUTH] = auth
            self._warn(
                "the ZooKeeper credentials are passed to the worker pods as a plain environment value (readable by "
                "whoever may read pods in the namespace); name a Secret with --zk-auth-secret instead"
            )
        return env, refs

    def _pod_body(self, launch: WorkerLaunch, millicores: float) -> dict:
        """A stressor or command task: our worker (in the task's image, if it names one); a process task:
        the user's program, in its image."""
        env, refs = self._worker_env(launch)
        image = self.images.get(launch.task)
        if launch.task in self.as_built and not launch.program:
            raise InputError(
                f"task '{launch.task}' runs its image as built (no `command` or `process`), but the coordinator "
                "launched our worker for it: this coordinator does not start such tasks as processes yet",
                field=f"{launch.task}.image",
            )
        command: list[str] | None
        args: list[str]
        if launch.program and not launch.args:  # an image task without `process`: its ENTRYPOINT/CMD
            command, args = None, []
        elif launch.program:
            command, args = self._program_args(launch), []
        else:
            command, args = ["bsp-planner"], self._worker_args(launch)
        body = M.worker_pod(
            self.settings,
            self.run_key,
            launch.task,
            millicores,
            args,
            env=env,
            command=command,
            image=image,
            run_dir_claim=self.run_dir_claim,
        )
        container = body["spec"]["containers"][0]
        container["env"] += refs
        if launch.task in self.placement:
            body["spec"]["affinity"] = M.on_node(self.placement[launch.task])
        body["metadata"]["annotations"][f"{N.DOMAIN}/incarnation"] = str(launch.incarnation)
        return body

    def _delete_and_wait(self, task: str, grace_s: int | None) -> dict | None:
        """Delete the task's pod and wait until it is gone; returns the pod as last seen (None if none)."""
        name = self._pod_name(task)
        pod = self._cluster.get_pod(name)
        if pod is None:
            return None
        last = pod
        self._cluster.delete_pod(name, grace_s)
        deadline = self.clock() + self.delete_timeout_s
        while True:
            pod = self._cluster.get_pod(name)
            if pod is None:
                return last
            last = pod
            if self.clock() >= deadline:
                raise PodLost(
                    f"pod {name} is still terminating {self.delete_timeout_s:g} s after its deletion; the run stops "
                    f"(resume it once the pod is gone: `kubectl -n {self.namespace} get pod {name}`)",
                    field="kubernetes",
                )
            self.sleep(self.poll_s)

    def start_task(self, launch: WorkerLaunch, millicores: float) -> None:
        """Create the task's pod (after removing any earlier one of the same name). Returns once it is
        created: scheduling and start are watched by poll_task (the coordinator waits for the worker's
        ZooKeeper membership meanwhile)."""
        started = self.clock()
        old = self.tasks.pop(launch.task, None)
        self._delete_and_wait(launch.task, 0 if old is None else self.termination_grace_s)
        body = self._pod_body(launch, millicores)
        if self._cluster.create_pod(body) is None:  # created by someone in between
            self._delete_and_wait(launch.task, 0)
            self._cluster.create_pod(body)
        self.tasks[launch.task] = _Task(launch, float(millicores), self.clock())
        self.events.append(ReconfigEvent(launch.task, "start", float(millicores), self.clock() - started))

    def resize_task(self, task: str, millicores: float) -> None:
        """In place through pods/resize, waiting until the kubelet applied it; recreation where the plan
        from check_configuration says so, where the server cannot resize, or where the kubelet refuses."""
        t = self._get(task)
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
        deadline = started + self.resize_timeout_s
        while True:
            st = pod_state(self._cluster.get_pod(name))
            t.last = st
            if st.problem:
                raise PodLost(
                    f"task {task!r}: {st.problem} (pod {name}); the run stops and can be resumed", field="kubernetes"
                )
            if resize_done(st, millicores):
                t.millicores = float(millicores)
                t.plan = None
                self.events.append(ReconfigEvent(task, "in-place", float(millicores), self.clock() - started))
                return
            if st.resize_infeasible or self.clock() >= deadline:
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
            self.sleep(self.poll_s)

    def recreate_task(
        self, launch: WorkerLaunch, millicores: float, *, detail: str = "", started: float | None = None
    ) -> None:
        """Delete the pod (SIGTERM: the worker leaves with its checkpoint in ZooKeeper), wait until it is
        gone, create it again with the new CPU."""
        started = self.clock() if started is None else started
        old = self.tasks.pop(launch.task, None)
        self._keep_log(launch.task, self._delete_and_wait(launch.task, self.termination_grace_s))
        self._cluster.create_pod(self._pod_body(launch, millicores))
        self.tasks[launch.task] = _Task(launch, float(millicores), self.clock())
        self.events.append(
            ReconfigEvent(
                launch.task,
                "recreate",
                float(millicores),
                self.clock() - started,
                detail or (f"from {old.millicores:g}m" if old else ""),
            )
        )

    def stop_task(self, task: str, timeout_s: float = 10.0) -> TaskStatus:
        self.tasks.pop(task, None)
        last = self._delete_and_wait(task, max(0, int(timeout_s)))
        self._keep_log(task, last)
        if last is None:
            return TaskStatus(alive=False)
        st = pod_state(last)
        return TaskStatus(alive=False, exit_code=st.exit_code, detail=st.problem or "")

    def poll_task(self, task: str) -> TaskStatus:
        """Alive while pending (within the timeout) or running; not alive, with the exit code, once the worker
        exited by itself (the coordinator restarts it or fails). Raises PodLost when the pod is pending past
        the timeout (or can never start), or the platform took it: evicted, preempted, refused by the
        kubelet, deleted by someone else."""
        t = self.tasks.get(task)
        if t is None:
            return TaskStatus(alive=False, detail="not started")
        name = self._pod_name(task)
        pod = self._cluster.get_pod(name)
        st = pod_state(pod)
        t.last = st
        if st.problem and st.platform_lost:
            self._keep_log(task, pod)
            raise PodLost(
                f"task {task!r}: {st.problem} (pod {name}); the run stops here and can be resumed", field="kubernetes"
            )
        if st.phase == "Failed":
            self._refuse_start_failure(task, pod)
        if st.phase in ("Succeeded", "Failed"):  # the worker exited by itself: the coordinator decides
            if t.last_logged != st.name + st.phase:
                self._keep_log(task, pod)
                t.last_logged = st.name + st.phase
            return TaskStatus(alive=False, exit_code=st.exit_code, detail=st.problem or "")
        if st.phase == "Pending":
            waited = self.clock() - t.created_at
            assert self.pending_timeout_s is not None  # _from_env fills it
            if st.fatal_waiting or waited > self.pending_timeout_s:
                raise PodLost(
                    f"task {task!r}: pod {name} is still pending after {waited:.0f} s ({st.waiting}); the run stops "
                    f"and can be resumed once the cluster can place it (check `kubectl -n {self.namespace} describe pod "
                    f"{name}`, or lower the CPU budget)",
                    field="kubernetes",
                )
            return TaskStatus(alive=True, detail=f"pending: {st.waiting}")
        return TaskStatus(alive=True)

    def _refuse_start_failure(self, task: str, pod: dict | None) -> None:
        """A container the runtime could not start at all (its program is not in the image: reason
        StartError / ContainerCannotRun) is the job's mistake, not a crash worth a restart: say which
        program, which image, and what the image needs."""
        term = terminated(pod)
        if term.get("reason") not in START_FAILURES:
            return
        self._keep_log(task, pod)
        image = self.images.get(task) or self.settings.image
        why = " ".join((term.get("message") or "").split())[-400:]
        t = self.tasks.get(task)
        if t is not None and t.launch.program:
            if t.launch.args:
                what = f"its process program {t.launch.args[0]!r}"
                need = "the `process` program must be in the image (on its PATH, or an absolute path in the image)"
            else:
                what = "the image's own program (ENTRYPOINT/CMD)"
                need = "the image must have an ENTRYPOINT or CMD, or the task must name its program in `process`"
        else:
            what = "the bsp-planner worker"
            need = (
                "a command task's container runs `bsp-planner worker`, which runs the command every step: install "
                "bsp-planner in the image (`pip install 'bsp-planner[live]'`) or build it FROM the bsp-planner image "
                "(docs/kubernetes.md)"
            )
        raise ImageUnusable(
            f"task {task!r}: the container of image {image!r} could not start {what} ({term.get('reason')}: {why}); "
            f"{need}; the run stops and can be resumed once the image is fixed",
            field="kubernetes",
        )

    def wait_running(self, tasks: list[str] | None = None) -> float:
        """Block until the tasks' pods run (or raise PodLost as poll_task does); returns the seconds waited."""
        start = self.clock()
        todo = list(tasks if tasks is not None else self.tasks)
        while todo:
            todo = [t for t in todo if not (self.poll_task(t).alive and _running(self.tasks[t].last))]
            if todo:
                self.sleep(self.poll_s)
        return self.clock() - start

    def millicores(self, task: str) -> float | None:
        t = self.tasks.get(task)
        return None if t is None else t.millicores

    def log_tail(self, task: str, limit: int = 2000) -> str:
        """The worker's last words: the termination message of its container (its log's tail when it failed),
        which needs no log access; also kept in <log_dir>/<task>.log."""
        pod = self._cluster.get_pod(self._pod_name(task))
        text = _termination_message(pod)
        if not text and self.log_dir is not None:
            try:
                text = (Path(self.log_dir) / f"{task}.log").read_text(errors="replace")
            except OSError:
                text = ""
        return text[-limit:]

    def _keep_log(self, task: str, pod: dict | None) -> None:
        """Append what the pod said on its way out (state, reason, termination message) to <log_dir>/<task>.log."""
        if self.log_dir is None or pod is None:
            return
        st = pod_state(pod)
        line = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pod {st.name} on {st.node or '-'}: {st.phase}"
        if st.phase == "Succeeded":  # exit code 0: the normal end, or (mid-run) the coordinator says why it is not
            line += " (the worker exited with code 0)"
        elif st.problem:
            line += f" ({st.problem})"
        msg = _termination_message(pod)
        path = Path(self.log_dir)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / f"{task}.log", "a") as fh:
            fh.write(line + "\n" + (msg + "\n" if msg else ""))

    # -- what a reconfiguration costs on this cluster ----------------------------------------------
    def measure_reconfigure_cost(self, method: str) -> float | None:
        """Seconds one reconfiguration with `method` costs on this cluster, measured now with a probe pod
        of the run's image under the average task's CPU (budget / tasks); None where the probe cannot run
        (with a warning: the experiment's penalty_s is planned with then). The per-step records hold what
        each real reconfiguration cost (:attr:`events`).

        in-place: the ``pods/resize`` round trip of a running probe pod until the kubelet reports the new
        limit applied (:func:`~bsp_planner.k8s.cluster.resize_done`: ``containerStatuses[].resources``
        shows it, no PodResizePending/InProgress condition left), down to half and back, median of
        :data:`IN_PLACE_PROBES` (:attr:`in_place_probe`). None where the server cannot resize.
        recreate: created -> scheduled -> container started -> our worker's interpreter and imports done
        (it runs ``bsp-planner worker --help`` and exits) -> deleted and gone. Our wall clock times it;
        the pod's timestamps (creation, container start and finish: whole seconds) say where the time
        went (:attr:`recreate_probe`, in run.json's backend info)."""
        if method == "in-place":
            return self._measure_in_place() if self._cluster.capabilities().resize_subresource else None
        if method != "recreate":
            return None
        name = N.dns_label(f"bsp-{self.run_key}-cost-probe")
        body = M.worker_pod(
            self.settings, self.run_key, PROBE_TASK, self.probe_millicores, ["worker", "--help"], env={}
        )
        body["metadata"]["name"] = name
        started = self.clock()
        try:
            self._cluster.delete_pod(name, 0)
            if self._cluster.get_pod(name) is not None:
                self._wait_gone(name)
            started = self.clock()
            self._cluster.create_pod(body)
            deadline = started + float(self.pending_timeout_s or 120.0)
            while True:
                pod = self._cluster.get_pod(name)
                st = pod_state(pod)
                if st.phase in ("Succeeded", "Failed") or st.problem:
                    break
                if (st.phase == "Pending" and st.fatal_waiting) or self.clock() >= deadline:
                    self._warn(
                        f"could not measure a pod recreation: the probe pod {name} did not finish within "
                        f"{self.clock() - started:.0f} s ({st.waiting or st.phase}); planning with the experiment's "
                        "penalty_s (or give [reconfigure_cost] recreate_s)"
                    )
                    self._cluster.delete_pod(name, 0)
                    return None
                self.sleep(self.poll_s)
            ran_s = self.clock() - started
            deleted = self.clock()
            self._cluster.delete_pod(name, 0)
            self._wait_gone(name)
            gone_s = self.clock() - deleted
        except TaskLost:
            raise
        except InputError as exc:
            self._warn(f"could not measure a pod recreation ({exc}); planning with the experiment's penalty_s")
            return None
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
        """The in-place half of :meth:`measure_reconfigure_cost`: a probe pod that sleeps, resized
        down and up again IN_PLACE_PROBES times in all, each resize timed from the patch to the kubelet's
        report that it applied; the median. The pod is deleted afterwards (and on any failure)."""
        import statistics

        name = N.dns_label(f"bsp-{self.run_key}-resize-probe")
        high = self.probe_millicores
        low = float(max(MIN_PROBE_MILLICORES, round(high / 2)))
        body = M.worker_pod(
            self.settings, self.run_key, PROBE_TASK, high, [], command=[IMAGE_PYTHON, "-c", PROBE_SLEEP], env={}
        )
        body["metadata"]["name"] = name
        samples: list[float] = []
        try:
            self._cluster.delete_pod(name, 0)
            self._wait_gone(name)
            self._cluster.create_pod(body)
            deadline = self.clock() + float(self.pending_timeout_s or 120.0)
            while not (st := pod_state(self._cluster.get_pod(name))).running:
                if st.problem or st.phase in ("Succeeded", "Failed") or st.fatal_waiting or self.clock() >= deadline:
                    self._warn(
                        f"could not measure an in-place resize: the probe pod {name} did not run "
                        f"({st.problem or st.waiting or st.phase}); planning with the experiment's penalty_s (or give "
                        "[reconfigure_cost] in_place_s)"
                    )
                    return None
                self.sleep(self.poll_s)
            for i in range(IN_PLACE_PROBES):
                target = low if i % 2 == 0 else high
                started = self.clock()
                self._cluster.resize_pod(name, M.resize_patch(target))
                while not resize_done(st := pod_state(self._cluster.get_pod(name)), target):
                    if st.resize_infeasible or st.problem or self.clock() >= started + self.resize_timeout_s:
                        self._warn(
                            f"could not measure an in-place resize: the probe pod {name}'s resize to {target:g}m "
                            f"was not applied ({_resize_progress(st)}); planning with the experiment's penalty_s "
                            "(or give [reconfigure_cost] in_place_s)"
                        )
                        return None
                    self.sleep(self.poll_s)
                samples.append(self.clock() - started)
        except TaskLost:
            raise
        except InputError as exc:
            self._warn(f"could not measure an in-place resize ({exc}); planning with the experiment's penalty_s")
            return None
        finally:
            self._cluster.delete_pod(name, 0)
            self._wait_gone(name)
        self.in_place_probe = {
            "seconds": round(statistics.median(samples), 4),
            "samples_s": [round(x, 4) for x in samples],
            "millicores": [high, low],
        }
        return statistics.median(samples)

    def _wait_gone(self, name: str) -> None:
        deadline = self.clock() + self.delete_timeout_s
        while self._cluster.get_pod(name) is not None and self.clock() < deadline:
            self.sleep(self.poll_s)

    def cleanup_stale(self) -> list[str]:
        """Delete this run's pods that an earlier, killed coordinator left behind."""
        removed = []
        for pod in self._cluster.list_pods(N.run_selector(self.run_key)):
            name = pod["metadata"]["name"]
            task = (pod["metadata"].get("annotations") or {}).get(N.ANNOTATION_TASK)
            if task in self.tasks:
                continue
            self._cluster.delete_pod(name, 0)
            removed.append(name)
        deadline = self.clock() + self.delete_timeout_s
        while removed and any(self._cluster.get_pod(n) is not None for n in removed) and self.clock() < deadline:
            self.sleep(self.poll_s)
        return removed

    def service_runner(self, log_dir, cwd: str) -> KubernetesServices:
        """The job's services as pods of the run (:func:`~bsp_planner.k8s.manifests.service_pod`)."""
        return KubernetesServices(self, Path(log_dir))

    def close(self) -> None:
        """Delete every pod of the run (all at once, then wait until they are gone)."""
        names = [self._pod_name(t) for t in self.tasks]
        self.tasks.clear()
        for name in names:
            self._cluster.delete_pod(name, self.termination_grace_s)
        deadline = self.clock() + self.delete_timeout_s
        while names and self.clock() < deadline:
            names = [n for n in names if self._cluster.get_pod(n) is not None]
            if names:
                self.sleep(self.poll_s)

    def _get(self, task: str) -> _Task:
        if task not in self.tasks:
            raise InputError(f"task {task!r} is not running", field="task")
        return self.tasks[task]


def _timestamp(text: str | None) -> float | None:
    """An RFC 3339 timestamp of the API ('2026-11-23T09:30:44Z') in seconds since the epoch."""
    from datetime import datetime

    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
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


def _termination_message(pod: dict | None) -> str:
    return (terminated(pod).get("message") or "").strip()


class KubernetesServices:
    """A run's services as pods (:class:`~bsp_planner.runtime.services.ServiceRunner`): ready when the pod's
    readiness probe on its port passes (Ready), at the pod's IP (``{host:NAME}``), stopped by deleting the
    pod. What a pod said on its way out is appended to ``<log_dir>/<service>.log``."""

    def __init__(self, backend: KubernetesBackend, log_dir: Path) -> None:
        self.b = backend
        self.log_dir = log_dir

    def _name(self, service: str) -> str:
        return self.b._pod_name(service)

    def launch(self, name: str, args: list[str], env: dict[str, str], ready_port: int | None) -> None:
        b = self.b
        self._delete([name])
        local_run_dir = env.get(ENV_RUN_DIR, "")
        command = [
            IMAGE_PYTHON if a == sys.executable else a.replace(local_run_dir, b.pod_run_dir) if local_run_dir else a
            for a in args
        ]
        pod_env = {k: v for k, v in env.items() if not k.startswith("BSP_PLANNER_")}
        if ENV_RUN_DIR in pod_env:
            pod_env[ENV_RUN_DIR] = b.pod_run_dir
        body = M.service_pod(
            b.settings, b.run_key, name, command, env=pod_env, ready_port=ready_port, run_dir_claim=b.run_dir_claim
        )
        b._cluster.create_pod(body)

    def _pod(self, name: str) -> dict | None:
        return self.b._cluster.get_pod(self._name(name))

    def exit_code(self, name: str) -> int | None:
        pod = self._pod(name)
        if pod is None:
            return -1  # deleted by someone else: gone as surely as a process that exited
        st = pod_state(pod)
        if st.phase in ("Succeeded", "Failed") or st.problem:
            self.b._keep_log(name, pod)
            return st.exit_code if st.exit_code is not None else -1
        return None

    def ready(self, name: str, port: int | None, pattern) -> bool:
        pod = self._pod(name)
        if pod is None or pod.get("status", {}).get("phase") != "Running":
            return False
        statuses = pod["status"].get("containerStatuses") or []
        return bool(statuses) and all(c.get("ready") for c in statuses)

    def host(self, name: str) -> str:
        pod = self._pod(name) or {}
        return str(pod.get("status", {}).get("podIP") or self._name(name))

    def tail(self, name: str) -> str:
        pod = self._pod(name)
        text = _termination_message(pod)
        if not text:
            try:
                text = (self.log_dir / f"{name}.log").read_text(errors="replace")
            except OSError:
                text = ""
        return text[-1500:]

    def stop(self, names: list[str]) -> None:
        for name in names:
            self.b._keep_log(name, self._pod(name))
        self._delete(names, self.b.termination_grace_s)

    def _delete(self, names: list[str], grace_s: int = 0) -> None:
        b = self.b
        pods = [self._name(n) for n in names]
        for p in pods:
            if b._cluster.get_pod(p) is not None:
                b._cluster.delete_pod(p, grace_s)
        deadline = b.clock() + b.delete_timeout_s
        while pods and b.clock() < deadline:
            pods = [p for p in pods if b._cluster.get_pod(p) is not None]
            if pods:
                b.sleep(b.poll_s)

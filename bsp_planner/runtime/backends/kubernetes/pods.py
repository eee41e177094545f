"""The Kubernetes backend's pods: the settings, what a task's pod runs, and creating, pinning and deleting it.

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
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ....core.errors import InputError
from ....k8s import manifests as M
from ....k8s import names as N
from ....k8s.capabilities import RECONFIGURE_MODES, choose_reconfigure_mode
from ....k8s.cluster import Cluster, PodState, pod_state, terminated
from ....k8s.config import connect, parse_node_selector, resolve_image
from ....zk.credentials import ENV_AUTH, ENV_AUTH_FILE
from ....zk.session import ENV_HOSTS
from .. import Backend, TaskLost, TaskStatus, WorkerLaunch

log = logging.getLogger("bsp_planner.runtime")

ENV_PREFIX = "BSP_PLANNER_K8S_"
#: settings not given -> $BSP_PLANNER_K8S_<key> (the coordinator Job of jobs/k8s sets them)
ENV_SETTINGS = {
    "namespace": "NAMESPACE",
    "reconfigure": "RECONFIGURE",
    "worker_zk_hosts": "WORKER_ZOOKEEPER",
    "zk_auth_secret": "ZK_AUTH_SECRET",
    "run_dir_claim": "RUN_DIR_CLAIM",
}
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


@dataclass
class KubernetesPods(Backend):
    """The settings of a run's pods, and each task's pod created, pinned, deleted and its last words kept."""

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
        self._cluster: Cluster = self.cluster or Cluster(
            connect(self.namespace, kubeconfig=self.kubeconfig, context=self.context)
        )
        self.cluster, self.namespace = self._cluster, self._cluster.namespace
        self.tasks: dict[str, _Task] = {}
        self.images: dict[str, str] = {}  # task -> its own image (command/process tasks that name one)
        self.processes: set[str] = set()  # process tasks: resized in place only, never recreated behind their back
        self.as_built: set[str] = set()  # image tasks without a program: the image's ENTRYPOINT/CMD runs
        self.probe_millicores = 1000.0  # the CPU a reconfiguration is measured under: budget / tasks (check)
        self.recreate_probe: dict = {}  # what measure_reconfigure_cost('recreate') saw
        self.in_place_probe: dict = {}  # what measure_reconfigure_cost('in-place') saw
        self.events: list[ReconfigEvent] = []
        self.batches: list = []  # each in-place batch of a reconfiguration (resizes.ResizeBatch)
        # task -> (reason, node, the kubelet's message, millicores) of the resizes the kubelet left pending last
        self.refused: dict[str, tuple[str, str, str, float]] = {}
        self.task_count = 1  # the job's tasks (check): how many probe pods an in-place batch is measured with
        self.placement: dict[str, str] = {}  # task -> the node the plan put it on (place)
        self.warnings: list[str] = []
        self._mode: tuple[str, str] | None = None
        # the ZooKeeper address the pods reach
        self._worker_hosts = self.worker_zk_hosts or f"{N.ZOOKEEPER_SERVICE}.{self.namespace}.svc:{N.ZOOKEEPER_PORT}"
        self.worker_zk_hosts = self._worker_hosts

    def _from_env(self) -> None:
        """Settings not given fall back on $BSP_PLANNER_K8S_* (:data:`ENV_SETTINGS`), then on the defaults."""
        env = os.environ
        for attr, key in ENV_SETTINGS.items():
            if getattr(self, attr) is None:
                setattr(self, attr, env.get(ENV_PREFIX + key) or None)
        if self.reconfigure is None:
            self.reconfigure = "auto"
        if self.node_selector is None:
            self.node_selector = parse_node_selector(env.get(f"{ENV_PREFIX}NODE_SELECTOR", ""))
        if self.pending_timeout_s is None:
            text = env.get(f"{ENV_PREFIX}PENDING_TIMEOUT") or "120"
            try:
                self.pending_timeout_s = float(text)
            except ValueError:
                raise InputError(f"expected seconds, got {text!r}", field=f"${ENV_PREFIX}PENDING_TIMEOUT") from None

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

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            log.warning(text)

    @cached_property
    def settings(self) -> M.PodSettings:
        image = resolve_image(self.image, self._cluster.pod_image)
        return M.PodSettings(
            self._cluster.namespace,
            image,
            self.image_pull_policy,
            self.memory,
            dict(self.node_selector or {}),
            self.termination_grace_s,
        )

    # -- what a pod runs ---------------------------------------------------------------------------
    def _pod_name(self, task: str) -> str:
        return N.pod_name(self.run_key, task)

    def _worker_args(self, launch: WorkerLaunch) -> list[str]:
        """The coordinator's worker arguments, with the ZooKeeper address the pods reach and the image's
        stress-ng (the coordinator's may be a path on its own machine)."""
        replace = {f: self._worker_hosts for f in ZK_FLAGS}
        replace[STRESS_NG_FLAG] = IMAGE_STRESS_NG
        out: list[str] = []
        args = iter(launch.args)
        for a in args:
            flag, eq, _ = a.partition("=")
            if a in replace:  # `--flag value`: the value replaced (a flag with none stays as it is)
                out += [a] if next(args, None) is None else [a, replace[a]]
            else:
                out.append(f"{flag}={replace[flag]}" if eq and flag in replace else a)
        return out

    @property
    def pod_run_dir(self) -> str:
        """BSP_RUN_DIR (and ``{run_dir}``) inside the pods: the shared claim's mount when the run has one,
        else each pod's own scratch folder (tasks of different pods then share no files)."""
        return M.RUN_DIR_MOUNT if self.run_dir_claim else M.SCRATCH_DIR

    def _in_pod(self, args: Iterable[str], local_run_dir: str) -> list[str]:
        """A program's arguments, the coordinator's substitutions made for its own machine mapped to the
        pod's: ``{python}`` is the image's ``python3``, ``{run_dir}`` the pods' run folder."""
        return [
            IMAGE_PYTHON if a == sys.executable else a.replace(local_run_dir, self.pod_run_dir) if local_run_dir else a
            for a in args
        ]

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
                from ....zk.credentials import read_credentials_file

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
        the user's program, in its image; pinned to its node when the plan placed it (:meth:`place`)."""
        env, refs = self._worker_env(launch)
        if launch.task in self.as_built and not launch.program:
            raise InputError(
                f"task '{launch.task}' runs its image as built (no `command` or `process`), but the coordinator "
                "launched our worker for it: this coordinator does not start such tasks as processes yet",
                field=f"{launch.task}.image",
            )
        command: list[str] | None = ["bsp-planner"]
        args = [] if launch.program else self._worker_args(launch)
        if launch.program:  # the user's program; an image task without `process`: its ENTRYPOINT/CMD (None)
            command = self._in_pod(launch.args, launch.env.get(ENV_RUN_DIR) or "") if launch.args else None
        body = M.worker_pod(
            self.settings,
            self.run_key,
            launch.task,
            millicores,
            args,
            env=env,
            command=command,
            image=self.images.get(launch.task),
            run_dir_claim=self.run_dir_claim,
        )
        body["spec"]["containers"][0]["env"] += refs
        if launch.task in self.placement:
            body["spec"]["affinity"] = M.on_node(self.placement[launch.task])
        body["metadata"]["annotations"][f"{N.DOMAIN}/incarnation"] = str(launch.incarnation)
        return body

    def place(self, placement: dict[str, str]) -> None:
        """Pin each task's pod to its node (a required node affinity on the node's name, so the scheduler
        still checks its room), from the next pod created on."""
        self.placement = dict(placement)

    # -- creating and deleting ---------------------------------------------------------------------
    def _delete_pods(self, names: Iterable[str], grace_s: int | None, *, must_go: bool = False) -> dict[str, dict]:
        """Delete the pods `names` and wait until they are gone, delete_timeout_s at most (then PodLost if
        `must_go`); returns each pod that was there as last seen (its final state and termination message)."""
        last = {n: pod for n in names if (pod := self._cluster.get_pod(n)) is not None}
        for name in last:
            self._cluster.delete_pod(name, grace_s)
        deadline = self.clock() + self.delete_timeout_s
        still = dict(last)
        while still := {n: pod for n in still if (pod := self._cluster.get_pod(n)) is not None}:
            last.update(still)
            if self.clock() >= deadline:
                if not must_go:
                    break
                name = ", ".join(still)
                raise PodLost(
                    f"pod {name} is still terminating {self.delete_timeout_s:g} s after its deletion; the run stops "
                    f"(resume it once the pod is gone: `kubectl -n {self.namespace} get pod {name}`)",
                    field="kubernetes",
                )
            self.sleep(self.poll_s)
        return last

    def _delete_task_pod(self, task: str, grace_s: int | None) -> dict | None:
        """Delete the task's pod and wait until it is gone; returns the pod as last seen (None if none)."""
        name = self._pod_name(task)
        return self._delete_pods([name], grace_s, must_go=True).get(name)

    def start_task(self, launch: WorkerLaunch, millicores: float) -> None:
        """Create the task's pod (after removing any earlier one of the same name). Returns once it is
        created: scheduling and start are watched by poll_task (the coordinator waits for the worker's
        ZooKeeper membership meanwhile)."""
        started = self.clock()
        old = self.tasks.pop(launch.task, None)
        self._delete_task_pod(launch.task, 0 if old is None else self.termination_grace_s)
        body = self._pod_body(launch, millicores)
        if self._cluster.create_pod(body) is None:  # created by someone in between
            self._delete_task_pod(launch.task, 0)
            self._cluster.create_pod(body)
        self.tasks[launch.task] = _Task(launch, float(millicores), self.clock())
        self.events.append(ReconfigEvent(launch.task, "start", float(millicores), self.clock() - started))

    def recreate_task(
        self, launch: WorkerLaunch, millicores: float, *, detail: str = "", started: float | None = None
    ) -> None:
        """Delete the pod (SIGTERM: the worker leaves with its checkpoint in ZooKeeper), wait until it is
        gone, create it again with the new CPU."""
        started = self.clock() if started is None else started
        old = self.tasks.pop(launch.task, None)
        self._keep_log(launch.task, self._delete_task_pod(launch.task, self.termination_grace_s))
        self._cluster.create_pod(self._pod_body(launch, millicores))
        self.tasks[launch.task] = _Task(launch, float(millicores), self.clock())
        detail = detail or (f"from {old.millicores:g}m" if old else "")
        self.events.append(ReconfigEvent(launch.task, "recreate", float(millicores), self.clock() - started, detail))

    def stop_task(self, task: str, timeout_s: float = 10.0) -> TaskStatus:
        self.tasks.pop(task, None)
        last = self._delete_task_pod(task, max(0, int(timeout_s)))
        self._keep_log(task, last)
        if last is None:
            return TaskStatus(alive=False)
        st = pod_state(last)
        return TaskStatus(alive=False, exit_code=st.exit_code, detail=st.problem or "")

    # -- what a pod said on its way out -------------------------------------------------------------
    def _last_words(self, pod_name: str, log_file: Path | None, limit: int) -> str:
        """The termination message of the pod's container (its log's tail when it failed), which needs no
        log access; else what `log_file` kept of it."""
        text = (terminated(self._cluster.get_pod(pod_name)).get("message") or "").strip()
        if not text and log_file is not None:
            with contextlib.suppress(OSError):
                text = log_file.read_text(errors="replace")
        return text[-limit:]

    def log_tail(self, task: str, limit: int = 2000) -> str:
        """The worker's last words (:meth:`_last_words`), also kept in <log_dir>/<task>.log."""
        log_file = None if self.log_dir is None else Path(self.log_dir) / f"{task}.log"
        return self._last_words(self._pod_name(task), log_file, limit)

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
        msg = (terminated(pod).get("message") or "").strip()
        path = Path(self.log_dir)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / f"{task}.log", "a") as fh:
            fh.write(line + "\n" + (msg + "\n" if msg else ""))

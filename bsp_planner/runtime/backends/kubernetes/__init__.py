"""The Kubernetes backend: each task of a live run is a Pod running `bsp-planner worker`, its CPU request
and limit equal to the task's configured CPU.

One class, :class:`KubernetesBackend`, built up by concern: :mod:`.pods` (settings, what a pod runs,
creating, pinning and deleting it), :mod:`.nodes` (does a configuration fit the nodes), :mod:`.resizes`
(in-place resizes and what a reconfiguration costs), :mod:`.services` (the job's services as pods), and
here what the coordinator asks of any backend: checks, capabilities, polling, cleanup.

A pod that stays Pending past ``pending_timeout_s``, or that is evicted, fails or is deleted by someone
else, makes :meth:`KubernetesBackend.poll_task` raise :class:`~.pods.PodLost`: the coordinator stops,
and since every completed step is in ZooKeeper and the run log, the run resumes from there.
"""

from __future__ import annotations

from pathlib import Path

from ....core.errors import InputError
from ....k8s import names as N
from ....k8s.cluster import pod_state, terminated
from .. import Capabilities, TaskLost, TaskStatus
from .pods import PodLost
from .resizes import MIN_PROBE_MILLICORES, KubernetesResizes
from .services import KubernetesServices

START_FAILURES = ("StartError", "ContainerCannotRun")


class ImageUnusable(TaskLost):
    """A task's container could not start its program (not in the image): the run stops, resumable."""


class KubernetesBackend(KubernetesResizes):
    """Runs a live run's tasks as pods (see the module)."""

    def capabilities(self) -> Capabilities:
        """in_place: the server can resize (and --reconfigure is not recreate)."""
        return Capabilities(in_place=self.mode == "in-place", sees_exit=True)

    def info(self) -> dict:
        caps = self._cluster.capabilities()
        return {
            "backend": self.name,
            "kubernetes": {
                **caps.as_dict(),
                "namespace": self.namespace,
                "where": self._cluster.conn.where,
                "image": self.settings.image if "settings" in vars(self) else self.image,  # not resolved here
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
        tasks = list(getattr(job, "tasks", ()))
        self.task_count = max(1, len(tasks))
        self.probe_millicores = float(max(MIN_PROBE_MILLICORES, round(budget_millicores / max(1, len(tasks)))))
        self.images = {t.name: t.image for t in tasks if getattr(t, "image", None)}
        self.processes = {t.name for t in tasks if getattr(t, "kind", "stressor") == "process"}
        self.as_built = {t.name for t in tasks if getattr(t, "runs_image_entrypoint", False)}
        self._cluster.list_pods(N.run_selector(self.run_key))  # reachability and the Role, at once
        self.mode  # noqa: B018  (raises if in-place is forced and impossible)
        self.settings  # noqa: B018  (raises if no image is known)
        self._check_fit(millicores_max, budget_millicores, path)

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
            todo = [t for t in todo if not (self.poll_task(t).alive and (st := self.tasks[t].last) and st.running)]
            if todo:
                self.sleep(self.poll_s)
        return self.clock() - start

    def cleanup_stale(self) -> list[str]:
        """Delete this run's pods that an earlier, killed coordinator left behind."""
        stale = [
            pod["metadata"]["name"]
            for pod in self._cluster.list_pods(N.run_selector(self.run_key))
            if (pod["metadata"].get("annotations") or {}).get(N.ANNOTATION_TASK) not in self.tasks
        ]
        self._delete_pods(stale, 0)
        return stale

    def service_runner(self, log_dir, cwd: str) -> KubernetesServices:
        """The job's services as pods of the run (:func:`~bsp_planner.k8s.manifests.service_pod`)."""
        return KubernetesServices(self, Path(log_dir))

    def close(self) -> None:
        """Delete every pod of the run (all at once, then wait until they are gone)."""
        names = [self._pod_name(t) for t in self.tasks]
        self.tasks.clear()
        self._delete_pods(names, self.termination_grace_s)

"""A Kubernetes run's services (``[[service]]``: a broker the tasks connect to) as pods of the run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ....k8s import manifests as M
from ....k8s.cluster import pod_state
from .pods import ENV_RUN_DIR

if TYPE_CHECKING:
    from .pods import KubernetesPods


class KubernetesServices:
    """A run's services as pods (:class:`~bsp_planner.runtime.services.ServiceRunner`): ready when the pod's
    readiness probe on its port passes (Ready), at the pod's IP (``{host:NAME}``), stopped by deleting the
    pod. What a pod said on its way out is appended to ``<log_dir>/<service>.log``."""

    def __init__(self, backend: KubernetesPods, log_dir: Path) -> None:
        self.b = backend
        self.log_dir = log_dir

    def _name(self, service: str) -> str:
        return self.b._pod_name(service)

    def launch(self, name: str, args: list[str], env: dict[str, str], ready_port: int | None) -> None:
        b = self.b
        self._delete([name])
        command = b._in_pod(args, env.get(ENV_RUN_DIR, ""))
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
        return self.b._last_words(self._name(name), self.log_dir / f"{name}.log", 1500)

    def stop(self, names: list[str]) -> None:
        for name in names:
            self.b._keep_log(name, self._pod(name))
        self._delete(names, self.b.termination_grace_s)

    def _delete(self, names: list[str], grace_s: int = 0) -> None:
        self.b._delete_pods([self._name(n) for n in names], grace_s)

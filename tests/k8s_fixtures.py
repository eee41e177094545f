"""What the tests against FakeApiServer share (tests/test_k8s_*.py import it, as they import
zk_fixtures): the namespace and Secret names, and a fake kubelet that runs a pod's container here.

FOR LOGIC TESTS ONLY: the kubelet applies no CPU limit; `bsp-planner` is this checkout's CLI and `python3`
this Python (an image with bsp-planner installed), except in images named ``plain/...`` (no bsp-planner:
OSError, which the fake reports as a StartError). /scratch is one local folder shared by the pods.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bsp_planner.k8s import manifests as M

NS = "bsp-planner"
SECRET = "bsp-planner-zk-auth"
NO_BSP_PLANNER = "plain/"  # images whose name starts so have no bsp-planner on their PATH


def container_env(pod: dict, c: dict, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """This process's environment plus the container's: values, Secrets, the downward API."""
    env = dict(os.environ)
    for e in c["env"]:
        src = e.get("valueFrom") or {}
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
        elif src.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod["metadata"]["name"]
        elif src.get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[e["name"]] = pod["spec"]["nodeName"]
    return env


def kubelet(
    tmp_path: Path,
    secrets: dict[str, dict[str, str]],
    *,
    workers_only: bool = False,
    entrypoints: dict[str, list[str]] | None = None,
):
    """A pod_runner for FakeApiServer: start a pod's container here (see the module). `workers_only`:
    every pod must run our worker (`bsp-planner`), as for a job of stress-ng tasks. `entrypoints`: what an
    image runs as built (its ENTRYPOINT + CMD), for a container that sets no `command`."""
    scratch = tmp_path / "scratch"

    def run_pod(pod: dict):
        c = pod["spec"]["containers"][0]
        command = c["command"] if "command" in c else (entrypoints or {})[c["image"]]
        argv = list(command) + list(c.get("args") or [])
        if workers_only:  # our worker, or the probe pod that measures an in-place resize (it sleeps)
            assert c["command"] == ["bsp-planner"] or "-resize-probe" in pod["metadata"]["name"]
        if argv[0] == "bsp-planner":
            if c["image"].startswith(NO_BSP_PLANNER):
                raise FileNotFoundError(2, "No such file or directory", "bsp-planner")
            argv = [sys.executable, "-m", "bsp_planner.cli", *argv[1:]]
        elif argv[0] == "python3":
            argv[0] = sys.executable
        env = {k: v.replace(M.SCRATCH_DIR, str(scratch)) for k, v in container_env(pod, c, secrets).items()}
        argv = [a.replace(M.SCRATCH_DIR, str(scratch)) for a in argv]
        scratch.mkdir(exist_ok=True)
        log_path = tmp_path / f"{pod['metadata']['name']}.log"
        log = open(log_path, "ab")
        return Container(
            log_path,
            argv,
            env=env,
            cwd=scratch,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    return run_pod


class Container(subprocess.Popen):
    """A container's process, whose log the fake kubelet can read (FallbackToLogsOnError)."""

    def __init__(self, log_path: Path, *args, **kw) -> None:
        self.log_path = log_path
        super().__init__(*args, **kw)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")


def fake_cluster_backend(run_id: str, api, zk_server, tmp_path: Path, reconfigure: str = "auto"):
    """The Kubernetes backend of a live test on the fake API server `api`: the test namespace and ZooKeeper
    Secret, workers pointed at `zk_server`, a short poll, pod logs under tmp_path/logs."""
    from bsp_planner.runtime.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(
        run_id,
        kubeconfig=api.kubeconfig,
        namespace=NS,
        image="bsp-planner:dev",
        reconfigure=reconfigure,
        worker_zk_hosts=zk_server.hosts,
        zk_auth_secret=SECRET,
        poll_s=0.02,
        log_dir=tmp_path / "logs",
    )

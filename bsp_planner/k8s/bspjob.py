"""The BspJob custom resource: one live run in a cluster, as an object `kubectl get bspjobs` lists.

A BspJob's ``spec`` holds what `bsp-planner run` is told on its command line (the experiment, the job, the
planner and its settings, the reconfiguration method, the steps); the operator (:mod:`.operator`) runs it
as a coordinator Job (:func:`coordinator_job`) and the coordinator reports its progress into ``status``.
``read_spec`` checks a spec once, every refusal one line naming the field (``spec.steps: ...``), so that
the operator can write it into ``status.message`` instead of starting anything.

``status`` (camelCase, as the API's own): ``phase`` (Pending, Running, Resuming, Succeeded, Failed),
``message``, ``attempt`` and ``resumes`` (coordinator Jobs made, and how many of them resumed the run),
``job`` (the current coordinator Job), and from the coordinator: ``step`` (steps done), ``steps``,
``progress`` ("12/40"), ``reconfigurations``, ``liveSeconds`` (so far), and at the end ``runStatus``,
``liveTotalSeconds``, ``simulatedTotalSeconds``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import InputError
from . import manifests as m
from . import names as n

GROUP = "bsp-planner.io"
VERSION = "v1alpha1"
PLURAL = "bspjobs"
KIND = "BspJob"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_BSPJOB = f"{n.DOMAIN}/bspjob"
COMPONENT_COORDINATOR = "coordinator"
COORDINATOR_CONTAINER = "coordinator"
#: the environment variable that names the BspJob a coordinator reports to
BSPJOB_ENV = "BSP_PLANNER_BSPJOB"
#: the PersistentVolumeClaim, ZooKeeper Secret and address of the kustomize base (jobs/k8s)
RUNS_CLAIM = "bsp-planner-runs"
ZK_AUTH_SECRET = "bsp-planner-zk-auth"

PHASES = ("Pending", "Running", "Resuming", "Succeeded", "Failed")
FINAL_PHASES = ("Succeeded", "Failed")
MODES = ("perfect", "forecast")
RECONFIGURE = ("auto", "in-place", "recreate")
DEFAULT_MAX_RESUMES = 3
SPEC_FIELDS = tuple(
    "experiment job planner plannerSettings mode reconfigure steps online learn set maxResumes image".split()
)

_RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")  # a run id and a DNS label, room for "-<attempt>"
_SETTING_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_PLANNER = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*(:[^\s]+)?$")  # mpc, static:4, rl:PATH


@dataclass(frozen=True)
class BspJobSpec:
    """A checked BspJob spec (see :func:`read_spec`)."""

    run_id: str
    experiment: str
    planner: str = "mpc"
    mode: str = "perfect"
    reconfigure: str = "auto"
    steps: int | None = None
    job: str | None = None
    online: bool = False
    learn: bool = False
    planner_settings: dict[str, str] = field(default_factory=dict)
    set: tuple[str, ...] = ()
    max_resumes: int = DEFAULT_MAX_RESUMES
    image: str | None = None

    def run_args(self) -> list[str]:
        """`bsp-planner run` options of a new run of this spec (the run id, folder and ZooKeeper come from
        the coordinator Job's environment)."""
        args = ["--experiment", self.experiment, "--planner", self.planner, "--mode", self.mode]
        args += ["--reconfigure", self.reconfigure]
        if self.steps is not None:
            args += ["--steps", str(self.steps)]
        if self.job is not None:
            args += ["--job", self.job]
        args += ["--online"] * self.online + ["--learn"] * self.learn
        for key, value in sorted(self.planner_settings.items()):
            args += ["--set", f"planner.{key}={value}"]
        for item in self.set:
            args += ["--set", item]
        return args


def _text(spec: dict, key: str, default: str | None = None, *, choices: tuple[str, ...] = ()) -> str | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"expected a non-empty string, got {value!r}", field=f"spec.{key}")
    if choices and value not in choices:
        raise InputError(f"expected one of {', '.join(choices)}, got {value!r}", field=f"spec.{key}")
    return value


def _whole(spec: dict, key: str, default: int | None, lowest: int) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InputError(f"expected a whole number >= {lowest}, got {value!r}", field=f"spec.{key}")
    return value


def _flag(spec: dict, key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {value!r}", field=f"spec.{key}")
    return value


def read_spec(name: str, spec: Any) -> BspJobSpec:
    """A BspJob's `spec` checked: an InputError naming the field (``spec.steps``) for the first bad value."""
    if not _RUN_ID.match(name or ""):
        raise InputError(
            f"a BspJob's name is its run id: 1-52 lowercase letters, digits or '-', got {name!r}", field="metadata.name"
        )
    if not isinstance(spec, dict):
        raise InputError(f"expected a mapping, got {type(spec).__name__}", field="spec")
    unknown = sorted(set(spec) - set(SPEC_FIELDS))
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(unknown)}; expected {', '.join(SPEC_FIELDS)}", field="spec")
    planner = _text(spec, "planner", "mpc")
    assert planner is not None
    if not _PLANNER.match(planner):
        raise InputError(f"expected a planner such as mpc, static:4 or exppo, got {planner!r}", field="spec.planner")
    settings = spec.get("plannerSettings") or {}
    if not isinstance(settings, dict):
        raise InputError(f"expected a mapping of setting -> value, got {settings!r}", field="spec.plannerSettings")
    for key, value in settings.items():
        if not _SETTING_KEY.match(str(key)) or not isinstance(value, str | int | float | bool):
            raise InputError(
                f"expected NAME: value (a number, string or boolean), got {key!r}: {value!r}",
                field=f"spec.plannerSettings.{key}",
            )
    items = spec.get("set") or []
    if not isinstance(items, list):
        raise InputError(f"expected a list of KEY=VALUE, got {items!r}", field="spec.set")
    for i, item in enumerate(items):
        key, eq, _ = str(item).partition("=") if isinstance(item, str) else ("", "", "")
        if not eq or not _SETTING_KEY.match(key.strip()):
            raise InputError(f"expected KEY=VALUE or SECTION.KEY=VALUE, got {item!r}", field=f"spec.set[{i}]")
    experiment = _text(spec, "experiment", "live-default")
    assert experiment is not None
    return BspJobSpec(
        run_id=name,
        experiment=experiment,
        planner=planner,
        mode=_text(spec, "mode", "perfect", choices=MODES) or "perfect",
        reconfigure=_text(spec, "reconfigure", "auto", choices=RECONFIGURE) or "auto",
        steps=_whole(spec, "steps", None, 1),
        job=_text(spec, "job"),
        online=_flag(spec, "online"),
        learn=_flag(spec, "learn"),
        planner_settings={str(k): _setting_text(v) for k, v in settings.items()},
        set=tuple(str(i) for i in items),
        max_resumes=_whole(spec, "maxResumes", DEFAULT_MAX_RESUMES, 0) or 0,
        image=_text(spec, "image"),
    )


def _setting_text(value: str | int | float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- the coordinator Job -------------------------------------------------------------------------------
#: a new run, or (its run folder exists: an earlier pod of this BspJob started it) the run resumed
COORDINATOR_SCRIPT = """set -e
runs="${RUNS_DIR:-/runs}"
if [ -f "$runs/$RUN_ID/run.json" ]; then
  exec bsp-planner run --resume "$RUN_ID" --runs-dir "$runs" --zookeeper "$BSP_PLANNER_ZOOKEEPER"
fi
exec bsp-planner run --backend kubernetes --run-id "$RUN_ID" --runs-dir "$runs" --zookeeper "$BSP_PLANNER_ZOOKEEPER" "$@"
"""


#: the coordinator's pod first waits until ZooKeeper takes connections (an init container, as the base's Job
#: in jobs/k8s/coordinator.yaml does with the same script), so that a BspJob applied together with ZooKeeper
#: does not spend its coordinator, and a resume, on a server still starting. Its address:
#: BSP_PLANNER_ZOOKEEPER (host:port[,host:port][/chroot], the coordinator's own); how long it waits:
#: BSP_PLANNER_ZK_WAIT_S. Its last line, when it gives up, is the pod's termination message.
WAIT_CONTAINER = "wait-for-zookeeper"
WAIT_FOR_ZOOKEEPER = """import os, socket, sys, time
where = os.environ.get("BSP_PLANNER_ZOOKEEPER", "")
wait = os.environ.get("BSP_PLANNER_ZK_WAIT_S", "600")
try:
    servers = [(h, int(p or 2181)) for h, _, p in (s.partition(":") for s in where.split("/")[0].split(","))]
    assert all(h for h, _ in servers)
except (ValueError, AssertionError):
    print(f"error: BSP_PLANNER_ZOOKEEPER: expected host:port[,host:port...], got {where!r}", file=sys.stderr)
    sys.exit(2)
try:
    wait_s = float(wait)
    assert 0 <= wait_s < float("inf")
except (ValueError, AssertionError):
    print(f"error: BSP_PLANNER_ZK_WAIT_S: expected seconds >= 0, got {wait!r}", file=sys.stderr)
    sys.exit(2)
deadline, said = time.monotonic() + wait_s, False
while True:
    for host, port in servers:
        try:
            socket.create_connection((host, port), timeout=2).close()
            sys.exit(0)
        except OSError:
            pass
    if time.monotonic() > deadline:
        sys.exit(f"ZooKeeper ({where}) did not answer within {wait_s:g} s")
    if not said:
        print(f"waiting for ZooKeeper ({where}), up to {wait_s:g} s", flush=True)
        said = True
    time.sleep(2)
"""
#: the operator's Job is not retried by Kubernetes (backoffLimit 0: the operator decides), so its pod waits
#: longer than the base's (240 s, its Job retried up to 3 times); a longer wait than this is a resume
ZOOKEEPER_WAIT_S = 600
ZOOKEEPER_ADDRESS = f"{n.ZOOKEEPER_SERVICE}:{n.ZOOKEEPER_PORT}"


def wait_for_zookeeper(image: str, wait_s: float = ZOOKEEPER_WAIT_S) -> dict:
    """The init container that holds a coordinator's pod until ZooKeeper (the base's service) answers."""
    return {
        "name": WAIT_CONTAINER,
        "image": image,
        "imagePullPolicy": m.DEFAULT_IMAGE_PULL_POLICY,
        "command": ["python", "-c", WAIT_FOR_ZOOKEEPER],
        "env": [
            {"name": "BSP_PLANNER_ZOOKEEPER", "value": ZOOKEEPER_ADDRESS},
            {"name": "BSP_PLANNER_ZK_WAIT_S", "value": f"{wait_s:g}"},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": m.unprivileged(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def job_name(bspjob: str, attempt: int) -> str:
    """The coordinator Job of one attempt: ``<bspjob>-<attempt>`` (a DNS label: its pods' names extend it)."""
    return f"{bspjob}-{attempt}"


METRICS_PORT = 8000  # the coordinator's /metrics, as in jobs/k8s/coordinator.yaml
METRICS_ANNOTATIONS = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": str(METRICS_PORT),
    "prometheus.io/path": "/metrics",
}


def coordinator_job(bspjob: dict, spec: BspJobSpec, attempt: int, image: str) -> dict:
    """The coordinator of `bspjob` (its whole object: name, uid) as a Job of one pod, owned by the BspJob (deleting
    it deletes the Job). It runs as jobs/k8s/coordinator.yaml's Job does (the same account, run volume, ZooKeeper
    Secret and address, first waiting for ZooKeeper: :func:`wait_for_zookeeper`); ``backoffLimit: 0``: a pod that
    dies ends the Job, and the operator decides whether the next attempt resumes the run."""
    meta = bspjob["metadata"]
    labels = n.app_labels(COMPONENT_COORDINATOR, {LABEL_BSPJOB: meta["name"], n.LABEL_RUN: spec.run_id})
    env = [
        {"name": "RUN_ID", "value": spec.run_id},
        {"name": BSPJOB_ENV, "value": meta["name"]},
        {"name": "BSP_PLANNER_ZOOKEEPER", "value": ZOOKEEPER_ADDRESS},
        {"name": "BSP_PLANNER_ZK_AUTH", "valueFrom": {"secretKeyRef": {"name": ZK_AUTH_SECRET, "key": "auth"}}},
        {"name": "BSP_PLANNER_K8S_ZK_AUTH_SECRET", "value": ZK_AUTH_SECRET},
        {"name": "BSP_PLANNER_K8S_WORKER_ZOOKEEPER", "value": ZOOKEEPER_ADDRESS},
        {"name": "BSP_PLANNER_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "HOME", "value": "/tmp"},
        {"name": "MPLCONFIGDIR", "value": "/tmp/matplotlib"},
        # its run's Prometheus metrics, as the base's coordinator serves them (docs/metrics.md)
        {"name": "BSP_PLANNER_METRICS_PORT", "value": str(METRICS_PORT)},
        {"name": "BSP_PLANNER_METRICS_HOST", "value": "0.0.0.0"},
    ]
    container = {
        "name": COORDINATOR_CONTAINER,
        "image": image,
        "imagePullPolicy": m.DEFAULT_IMAGE_PULL_POLICY,
        "command": ["sh", "-c", COORDINATOR_SCRIPT, "coordinator"],
        "args": spec.run_args(),
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": m.unprivileged(),
        # the last lines of its output (a refusal's one line) become the pod's termination message
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "runs", "mountPath": "/runs"}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    owner = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(meta["name"], attempt), "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": METRICS_ANNOTATIONS},
                "spec": {
                    "serviceAccountName": n.SERVICE_ACCOUNT,
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": m.RUN_AS_USER,
                        "runAsGroup": m.RUN_AS_USER,
                        "fsGroup": m.RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "initContainers": [wait_for_zookeeper(image)],
                    "containers": [container],
                    "volumes": [
                        {"name": "runs", "persistentVolumeClaim": {"claimName": RUNS_CLAIM}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }

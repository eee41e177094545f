"""The objects bsp-planner creates, as plain dicts in the API's own (camelCase) form.

The official client sends a dict body as it is, so what these functions return is exactly what reaches
the API server; the tests validate each one against the client's models (which forbid unknown fields)
and against the kustomize base (service account, namespace, labels).

Every container runs with CPU requests = limits = its configured CPU (and memory requests = limits),
so the pod is in the Guaranteed QoS class and its CFS quota is the configuration's, as under the local
backend's cgroups. Worker pods declare ``resizePolicy: NotRequired`` so that an in-place resize changes
the quota of the running container without a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from . import names as n

DEFAULT_MEMORY = "256Mi"
DEFAULT_IMAGE_PULL_POLICY = "IfNotPresent"
RUN_AS_USER = 10001  # the user jobs/Dockerfile creates
SCRATCH_DIR = "/scratch"  # stress-ng writes its temporary files in its working directory
RUN_DIR_MOUNT = "/bsp-run"  # where a run's shared folder (a PersistentVolumeClaim) is mounted, if it has one


def _env(env: dict[str, str] | None = None) -> list[dict]:
    """The pod's and node's names, a writable home and temporary directory (the root filesystem is
    read-only; the scratch volume is not), then `env`."""
    downward: list[dict] = [
        {"name": "BSP_PLANNER_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "BSP_PLANNER_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOME", "value": SCRATCH_DIR},
        {"name": "TMPDIR", "value": SCRATCH_DIR},
        {"name": "MPLCONFIGDIR", "value": f"{SCRATCH_DIR}/.matplotlib"},
    ]
    return downward + [{"name": k, "value": v} for k, v in sorted((env or {}).items())]


def unprivileged() -> dict:
    """A container's securityContext as ours run: no privilege escalation, a read-only root filesystem, no
    capabilities (a fresh dict: manifests are edited after they are built)."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def _container(name: str, image: str, settings: PodSettings, cpu_millicores: float, env: list[dict]) -> dict:
    """A container of ours: CPU and memory requests = limits, in the scratch folder, unprivileged."""
    amount = {"cpu": n.cpu_quantity(cpu_millicores), "memory": settings.memory}
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "env": env,
        "resources": {"requests": dict(amount), "limits": dict(amount)},
        "workingDir": SCRATCH_DIR,
        "volumeMounts": [{"name": "scratch", "mountPath": SCRATCH_DIR}],
        "securityContext": unprivileged(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod_spec(settings: PodSettings, container: dict) -> dict:
    """A pod that runs once (``restartPolicy: Never``), with no API token, as the image's user."""
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.termination_grace_s,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    }
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    return spec


@dataclass(frozen=True)
class PodSettings:
    """What every pod bsp-planner creates shares: where it runs and from which image."""

    namespace: str
    image: str
    image_pull_policy: str = DEFAULT_IMAGE_PULL_POLICY
    memory: str = DEFAULT_MEMORY
    node_selector: dict[str, str] = field(default_factory=dict)
    termination_grace_s: int = 5


def worker_pod(
    settings: PodSettings,
    run_id: str,
    task: str,
    cpu_millicores: float,
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    command: Sequence[str] | None = ("bsp-planner",),
    image: str | None = None,
    run_dir_claim: str | None = None,
) -> dict:
    """The pod of one task of a live run: `args` are the worker's arguments (``bsp-planner <args>``,
    e.g. ``worker --task ...``); the worker reads its task's stressor (or command) and workloads from
    ZooKeeper. A process task's pod runs the user's program instead (`command`, no `args`), and a task
    with its own `image` runs that image (the run's otherwise). `command` None: the container sets neither
    ``command`` nor ``args``, so the image runs as built (its ENTRYPOINT and CMD).

    ``restartPolicy: Never``: a worker that fails is reported by the coordinator, which stops the run
    (resumable), rather than restarted behind its back. `run_dir_claim`: a PersistentVolumeClaim mounted
    at :data:`RUN_DIR_MOUNT` in every pod of the run (the tasks' shared run folder, ``{run_dir}``)."""
    container = _container(n.WORKER_CONTAINER, image or settings.image, settings, cpu_millicores, _env(env))
    if command is not None:
        container.update(command=list(command), args=list(args))
    container["resizePolicy"] = [{"resourceName": r, "restartPolicy": "NotRequired"} for r in ("cpu", "memory")]
    spec = _pod_spec(settings, container)
    if run_dir_claim:  # the claim's files belong to the pods' group, whoever created the volume
        spec["volumes"].append({"name": "run-dir", "persistentVolumeClaim": {"claimName": run_dir_claim}})
        container["volumeMounts"].append({"name": "run-dir", "mountPath": RUN_DIR_MOUNT})
        spec["securityContext"]["fsGroup"] = RUN_AS_USER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": n.pod_name(run_id, task),
            "namespace": settings.namespace,
            "labels": n.app_labels(n.COMPONENT_WORKER, {n.LABEL_RUN: run_id}, task),
            "annotations": {n.ANNOTATION_TASK: task, n.ANNOTATION_CPU: str(int(cpu_millicores))},
        },
        "spec": spec,
    }


def on_node(node: str) -> dict:
    """A pod's affinity that requires the node named `node` (its metadata.name, which unlike the hostname
    label always is the node's name); the scheduler still checks that the node has room."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


SERVICE_CPU_REQUEST_MILLICORES = 100.0  # a service's CPU request; no limit: the plan does not size it


def service_pod(
    settings: PodSettings,
    run_id: str,
    service: str,
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    ready_port: int | None = None,
    run_dir_claim: str | None = None,
) -> dict:
    """The pod of one of a run's services (`[[service]]`: a broker the tasks connect to): the run's image
    running `command`, with a CPU request but no CPU limit (it is not a task the plan sizes), and a
    readiness probe on `ready_port` (the coordinator waits for the pod's Ready condition before any task
    starts). Labelled as the run's pods are, so that a resumed run's cleanup finds a stale one."""
    body = worker_pod(
        settings,
        run_id,
        service,
        SERVICE_CPU_REQUEST_MILLICORES,
        [],
        env=env,
        command=command,
        run_dir_claim=run_dir_claim,
    )
    container = body["spec"]["containers"][0]
    del container["resources"]["limits"]["cpu"], container["resizePolicy"]
    if ready_port is not None:
        container["ports"] = [{"containerPort": int(ready_port), "protocol": "TCP"}]
        container["readinessProbe"] = {"tcpSocket": {"port": int(ready_port)}, "periodSeconds": 1}
    body["metadata"]["annotations"][f"{n.DOMAIN}/service"] = service
    return body


def resize_patch(cpu_millicores: float) -> dict:
    """The strategic-merge patch for the ``pods/resize`` subresource: the worker container's new CPU
    request and limit (kept equal, so the pod stays Guaranteed; memory is left as it is)."""
    cpu = n.cpu_quantity(cpu_millicores)
    resources = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return {"spec": {"containers": [{"name": n.WORKER_CONTAINER, "resources": resources}]}}


# -- profiling ---------------------------------------------------------------------------------------
def profile_selector(profile_id: str) -> str:
    return f"{n.LABEL_PROFILE}={profile_id},{n.LABEL_COMPONENT}={n.COMPONENT_PROFILER}"


def profile_job(
    settings: PodSettings,
    profile_id: str,
    cell_id: str,
    cell_text: str,
    task: str,
    cpu_millicores: float,
    command: Sequence[str],
    timeout_s: float,
    startup_s: float,
    *,
    image: str | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """One profiling run (one grid cell) as a Job: a single pod, never retried (a failure is logged by
    the runner and retried by the next session), killed by ``activeDeadlineSeconds`` if the run's own
    timeout (enforced inside the container) and the allowance for scheduling and image pull are spent.
    The result travels in the container's termination message (no log access needed). A command task
    that names its own `image` is measured in that image, with `env` (BSP_WORKLOAD...) added."""
    labels = n.app_labels(n.COMPONENT_PROFILER, {n.LABEL_PROFILE: profile_id, n.LABEL_CELL: cell_id}, task)
    annotations = {n.ANNOTATION_CELL: cell_text, n.ANNOTATION_TASK: task, n.ANNOTATION_CPU: str(int(cpu_millicores))}
    container = _container(n.COMPONENT_PROFILER, image or settings.image, settings, cpu_millicores, _env(env))
    container.update(command=list(command), terminationMessagePath="/dev/termination-log")
    pod_spec = _pod_spec(settings, container)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": n.dns_label(f"bspp-{profile_id}-{cell_id}"),
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "activeDeadlineSeconds": int(timeout_s + startup_s) + 1,
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
        },
    }


PROFILED_CONTAINER = "profiled"  # a process task's program in a process profiling Job
COLLECTOR_CONTAINER = "collector"  # reads its step reports (bsp_planner.profiling.pod_process)
COLLECTOR_CPU_MILLICORES = 100.0


def process_profile_job(
    settings: PodSettings,
    profile_id: str,
    cell_id: str,
    cell_text: str,
    task: str,
    cpu_millicores: float,
    program: Sequence[str] | None,
    plan_json: str,
    plan_file: str,
    timeout_s: float,
    deadline_s: float,
    *,
    image: str | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """A process task profiled at one CPU level as a Job (see :mod:`bsp_planner.profiling.pod_process`):
    an init container writes the plan to `plan_file`; the ``profiled`` container runs `program` (None:
    the image as built, no ``command``/``args``) in `image` with `env` (BSP_PROFILE...) under
    `cpu_millicores`; the ``collector`` container (the run's image, 100m) follows the step reports and
    leaves each workload's cell in its termination message. `deadline_s` bounds the whole Job."""
    job = profile_job(
        settings,
        profile_id,
        cell_id,
        cell_text,
        task,
        cpu_millicores,
        ["python"],
        0.0,
        deadline_s,
        image=image,
        env=env,
    )
    spec = job["spec"]["template"]["spec"]
    main = spec["containers"][0]
    main["name"] = PROFILED_CONTAINER
    del main["command"]
    if program is not None:
        main["command"] = list(program)
    module = ["python", "-m", "bsp_planner.profiling.pod_process"]

    def helper(name: str, command: list[str], env: dict[str, str] | None = None) -> dict:  # the run's image, 100m
        c = _container(name, settings.image, settings, COLLECTOR_CPU_MILLICORES, _env(env))
        return {**c, "command": command, "terminationMessagePath": "/dev/termination-log"}

    spec["initContainers"] = [helper("plan", [*module, "plan", plan_file], {"BSP_PROFILE_PLAN_JSON": plan_json})]
    spec["containers"].append(helper(COLLECTOR_CONTAINER, [*module, "collect", plan_file, f"{timeout_s:g}"]))
    return job

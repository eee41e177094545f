"""The BspJob operator (`bsp-planner k8s operator`): each BspJob's run as a coordinator Job, resumed when
its coordinator dies, its phase in the BspJob's status.

:func:`reconcile` is the whole logic, one look at one BspJob through :class:`~.objects.ReportingCluster`;
kopf (:func:`run`) calls it when a BspJob appears and when the operator starts, and the operator looks at
every unfinished BspJob each ``interval_s`` (:func:`reconcile_all`). What it does, by the BspJob's state:

- a spec :func:`~.bspjob.read_spec` refuses: phase Failed, the one-line reason in ``message``; nothing made;
- no coordinator Job yet: creates attempt 1 (``<name>-1``), phase Pending;
- the Job's pod waits for ZooKeeper (its init container, :func:`~.bspjob.wait_for_zookeeper`): the phase
  stays, ``message`` says so;
- the Job's pod runs: phase Running (the coordinator itself reports its step and totals into ``status``);
- the Job completed: phase Succeeded;
- the Job failed because the coordinator refused its inputs or the run failed (exit codes 2 and 1, as
  `bsp-planner run` exits): phase Failed with the coordinator's last line. Anything else (the run stopped
  resumable, exit 3; the pod evicted, deleted or its node lost; ZooKeeper not answering within the wait;
  the Job deleted): the next attempt
  (``<name>-2``...), whose coordinator finds the run's folder on the volume and runs ``bsp-planner run
  --resume`` (phase Resuming until its pod runs), up to ``spec.maxResumes`` times, then Failed.

The operator writes ``phase``, ``message``, ``attempt``, ``resumes`` and ``job`` only; once a BspJob is
Succeeded or Failed it is left alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..core.errors import InputError
from . import bspjob as b
from .cluster import pod_state, terminated
from .config import POD_ENV, connect, resolve_image
from .objects import ReportingCluster

logger = logging.getLogger(__name__)

#: `bsp-planner run` exit codes after which the run is not resumed by itself
NOT_RESUMED = {1: "the run failed", 2: "the coordinator refused its inputs"}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error:", "run failed:", "stopped:"))]
    return (errors or lines or [""])[-1][:300]


def _coordinator_end(api: ReportingCluster, job_name: str) -> tuple[int | None, str]:
    """How the Job's coordinator pod ended: its exit code (None: the pod is gone, or the platform took it)
    and why, in one line."""
    pods = api.list_pods(f"job-name={job_name}")
    if not pods:
        return None, "the coordinator pod is gone (deleted, or its node was lost)"
    pod = pods[-1]
    st = pod_state(pod, b.COORDINATOR_CONTAINER)
    term = terminated(pod, b.COORDINATOR_CONTAINER)
    code = term.get("exitCode")
    waited = _init_state(pod).get("terminated") or {}
    if code is None and waited.get("exitCode") not in (None, 0):  # ZooKeeper never answered: it never started
        why = _last_line(waited.get("message") or "") or f"{b.WAIT_CONTAINER} exited with code {waited['exitCode']}"
        return None, f"the coordinator never started: {why}"
    if st.platform_lost or code is None:
        return None, st.problem or "the coordinator pod was lost"
    why = _last_line(term.get("message") or "") or f"exit code {code}"
    return int(code), f"the coordinator exited with code {code}: {why}"


def _init_state(pod: dict) -> dict:
    """The state of a coordinator pod's wait for ZooKeeper (`bspjob.wait_for_zookeeper`): {"running": ...},
    {"terminated": {...}}, ...; {} where the pod has none (yet)."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return next((cs.get("state") or {} for cs in statuses if cs.get("name") == b.WAIT_CONTAINER), {})


def _job_state(job: dict | None) -> str:
    """'gone', 'complete', 'failed' or 'active'."""
    if job is None:
        return "gone"
    conds = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    if conds.get("Complete") == "True":
        return "complete"
    if conds.get("Failed") == "True":
        return "failed"
    return "active"


def _tell(api: ReportingCluster, bspjob: dict, reason: str, kind: str, message: str) -> None:
    """An Event on the BspJob (what `kubectl describe bspjob` lists); one that cannot be posted is logged."""
    meta = bspjob["metadata"]
    involved = {"apiVersion": b.API_VERSION, "kind": b.KIND, "name": meta["name"], "namespace": api.namespace}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": api.namespace},
        "involvedObject": {**involved, **({"uid": meta["uid"]} if meta.get("uid") else {})},
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "bsp-planner-operator"},
    }
    try:
        api.create_event(body)
    except InputError as exc:
        logger.warning("%s", exc)


def reconcile(api: ReportingCluster, bspjob: dict, image: Callable[[], str]) -> dict[str, Any]:
    """One look at `bspjob` (the whole object); returns the status fields it wrote ({} if none). `image`:
    the coordinator's image when the spec names none (resolved only when a Job is made)."""
    meta, status = bspjob["metadata"], bspjob.get("status") or {}
    name = meta["name"]
    if status.get("phase") in b.FINAL_PHASES:
        return {}

    def write(**fields: Any) -> dict[str, Any]:
        changed = {k: v for k, v in fields.items() if status.get(k) != v}
        if changed:
            api.patch_bspjob_status(name, changed)
        if "phase" in changed and changed["phase"] in ("Resuming", *b.FINAL_PHASES):
            reason = {"Resuming": "Resuming", "Succeeded": "Succeeded", "Failed": "Failed"}[changed["phase"]]
            _tell(api, bspjob, reason, "Normal" if reason == "Succeeded" else "Warning", fields.get("message", ""))
        return changed

    try:
        spec = b.read_spec(name, bspjob.get("spec"))
    except InputError as exc:
        return write(phase="Failed", message=f"{exc}")

    def start(attempt: int, why: str) -> dict[str, Any]:
        job = b.coordinator_job(bspjob, spec, attempt, spec.image or image())
        api.create_job(job)  # None: it exists already (an earlier look made it)
        resumes = attempt - 1
        phase = "Pending" if attempt == 1 else "Resuming"
        return write(phase=phase, attempt=attempt, resumes=resumes, job=job["metadata"]["name"], message=why)

    attempt = int(status.get("attempt") or 0)
    if attempt == 0:
        return start(1, "coordinator Job created")
    job_name = b.job_name(name, attempt)
    job = api.get_job(job_name)
    state = _job_state(job)
    if state == "complete":
        return write(phase="Succeeded", message=f"the run finished (coordinator Job {job_name})")
    if state == "active":
        pods = api.list_pods(f"job-name={job_name}")
        running = any(pod_state(p, b.COORDINATOR_CONTAINER).running for p in pods)
        waiting = f"waiting for ZooKeeper ({b.ZOOKEEPER_ADDRESS}) before the coordinator starts"
        if running:
            return write(
                phase="Running",
                **({"message": "ZooKeeper answered; the coordinator runs"} if status.get("message") == waiting else {}),
            )
        if any("running" in _init_state(p) for p in pods):  # the pod's init container: in `kubectl get bspjobs -o wide`
            return write(message=waiting)
        return {}
    code, why = (
        (None, f"the coordinator Job {job_name} was deleted") if job is None else _coordinator_end(api, job_name)
    )
    if code in NOT_RESUMED:
        return write(phase="Failed", message=f"{NOT_RESUMED[code]}: {why}")
    if attempt - 1 >= spec.max_resumes:
        return write(phase="Failed", message=f"not resumed after {spec.max_resumes} resume(s): {why}")
    return start(attempt + 1, f"{why}; resuming the run (attempt {attempt + 1})")


def reconcile_all(api: ReportingCluster, image: Callable[[], str]) -> None:
    """One look at every BspJob of the namespace that is not finished yet."""
    for obj in api.list_bspjobs():
        if (obj.get("status") or {}).get("phase") not in b.FINAL_PHASES:
            reconcile(api, obj, image)


# -- kopf ------------------------------------------------------------------------------------------------
def run(
    namespace: str | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    interval_s: float = 10.0,
    image: str | None = None,
    stop_flag: Any = None,
) -> None:
    """Run the operator for one namespace until stopped (kopf, standalone: one replica, no peering);
    `stop_flag`: a threading.Event that stops it when set (else Ctrl-C or SIGTERM)."""
    import asyncio

    try:
        import kopf
    except ImportError:  # pragma: no cover - the kubernetes extra has it
        raise InputError(
            "the operator needs kopf: pip install 'bsp-planner[kubernetes]'", field="k8s operator"
        ) from None

    conn = connect(namespace, kubeconfig=kubeconfig, context=context)
    api = ReportingCluster(conn)
    # the coordinator's image: --image, $BSP_PLANNER_IMAGE, else the operator pod's own image
    own_image = lambda: resolve_image(image, api.pod_image)  # noqa: E731
    if image is None and not os.environ.get(POD_ENV):
        own_image()  # refused now (exit 2), not at the first BspJob
    registry = kopf.OperatorRegistry()

    def look(body: Any, **_: Any) -> None:
        # the object as it is now: kopf's copy may predate the status this operator wrote a moment ago
        reconcile(api, api.get_bspjob(body["metadata"]["name"]) or dict(body), own_image)

    # every `interval_s`, each unfinished BspJob (a task of the operator's own: kopf's timers would put a
    # finalizer on every BspJob, and a BspJob could then not be deleted while the operator is down)
    looking: list[asyncio.Task] = []

    async def every_interval() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(reconcile_all, api, own_image)
            except InputError as exc:  # the API server unreachable for a moment, a 403: said, tried again
                logger.warning("%s", exc)

    async def start_looking(**_: Any) -> None:
        looking.append(asyncio.get_running_loop().create_task(every_interval()))

    async def stop_looking(**_: Any) -> None:
        for task in looking:
            task.cancel()

    kopf.on.startup(registry=registry)(_settings)
    kopf.on.startup(registry=registry)(start_looking)
    kopf.on.cleanup(registry=registry)(stop_looking)
    kopf.on.login(registry=registry)(lambda **kw: _login(conn, **kw))
    kopf.on.create(b.GROUP, b.VERSION, b.PLURAL, id="create", registry=registry)(look)
    kopf.on.resume(b.GROUP, b.VERSION, b.PLURAL, id="resume", registry=registry)(look)
    namespaces = [conn.namespace]
    asyncio.run(
        kopf.operator(registry=registry, standalone=True, clusterwide=False, namespaces=namespaces, stop_flag=stop_flag)
    )


def _settings(settings: Any, **_: Any) -> None:
    """What the operator's namespaced Role allows: no scanning of namespaces or CRDs (cluster-wide reads);
    kopf's own bookkeeping in the BspJobs' annotations, never in their status (the CRD's schema owns it)."""
    import kopf

    settings.scanning.disabled = True
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=b.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=b.GROUP)


def _login(conn: Any, **_: Any) -> Any:
    """kopf's connection: the same cluster, account and CA the official client was configured with."""
    import kopf

    cfg = conn.api_client.configuration
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization") or ""
    scheme, _space, token = header.rpartition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        default_namespace=conn.namespace,
    )

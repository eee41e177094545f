"""The Kubernetes manifests: the kustomize base in jobs/k8s and the objects the code generates.

Checked without a cluster: every object against the official client's models (which forbid unknown
fields and require the required ones), and against each other (labels and selectors, the service
account, the namespace, the image, the ZooKeeper address and Secret the code expects, the RBAC rules
the code's calls need, the Pod Security "restricted" profile the namespace enforces). The base is also
rendered with `kubectl kustomize` where kubectl is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)
import yaml

from bsp_planner.core.errors import InputError
from bsp_planner.k8s import manifests as M
from bsp_planner.k8s import names as N
from bsp_planner.k8s.cluster import CLUSTER_READ_RULES, ROLE_RULES

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "jobs" / "k8s"
NODE_READER = BASE / "components" / "node-reader" / "node-reader.yaml"

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
MODELS = {
    "Namespace": "V1Namespace",
    "Service": "V1Service",
    "StatefulSet": "V1StatefulSet",
    "ServiceAccount": "V1ServiceAccount",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Job": "V1Job",
    "Pod": "V1Pod",
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "CustomResourceDefinition": "V1CustomResourceDefinition",
}


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render_base() -> list[dict]:
    """What `kubectl kustomize jobs/k8s` makes of the base, for the transformers it uses (namespace,
    labels without selectors, images), so the checks below run where kubectl is missing too; the test
    `test_kubectl_kustomize_renders_the_same` holds the two together."""
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    ns = kust["namespace"]
    extra = {}
    for entry in kust.get("labels", []):
        assert entry.get("includeSelectors") is False and entry.get("includeTemplates") is True
        extra.update(entry["pairs"])
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kust.get("images", [])}
    docs = []
    for res in kust["resources"]:
        for d in load_all(BASE / res):
            meta = d.setdefault("metadata", {})
            if d["kind"] not in CLUSTER_SCOPED:
                meta["namespace"] = ns
            meta.setdefault("labels", {}).update(extra)
            for c in _containers(d):
                name = c["image"].split(":")[0]
                if name in images:
                    c["image"] = images[name]
            spec = d.get("spec") or {}
            for tmpl in ([spec["template"]] if "template" in spec else []) + list(
                spec.get("volumeClaimTemplates") or []
            ):
                tmpl.setdefault("metadata", {}).setdefault("labels", {}).update(extra)
            docs.append(d)
    return docs


def _pod_spec(doc: dict) -> dict | None:
    if doc["kind"] == "Pod":
        return doc["spec"]
    tmpl = (doc.get("spec") or {}).get("template")
    return tmpl["spec"] if tmpl else None


def _containers(doc: dict) -> list[dict]:
    spec = _pod_spec(doc)
    if spec is None:
        return []
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def validate(doc: dict) -> None:
    from kubernetes import client

    getattr(client, MODELS[doc["kind"]]).model_validate(doc)


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return render_base()


# -- the base ----------------------------------------------------------------------------------------
def test_every_object_of_the_base_validates_against_the_client_models(base):
    kinds = sorted(d["kind"] for d in base)
    assert kinds == sorted(
        [
            "Namespace",
            "Service",
            "Service",
            "StatefulSet",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "PersistentVolumeClaim",
            "Job",
            "CustomResourceDefinition",
        ]
    )
    for d in base + load_all(NODE_READER):
        validate(d)


def test_the_model_validation_catches_a_misspelt_field(base):
    """The check above has teeth: an unknown field fails, as it would with a real API server's strict
    field validation."""
    job = dict(by_kind(base, "Job")["bsp-planner-coordinator"])
    job["spec"] = dict(job["spec"], backofLimit=3)
    with pytest.raises(Exception, match="backofLimit"):
        validate(job)


def test_namespace_service_account_and_names_are_the_ones_the_code_uses(base):
    assert list(by_kind(base, "Namespace")) == [N.DEFAULT_NAMESPACE]
    namespaced = [d for d in base if d["kind"] not in CLUSTER_SCOPED]
    assert {d["metadata"]["namespace"] for d in namespaced} == {N.DEFAULT_NAMESPACE}
    assert list(by_kind(base, "ServiceAccount")) == [N.SERVICE_ACCOUNT]
    svc = by_kind(base, "Service")[N.ZOOKEEPER_SERVICE]
    assert [p["port"] for p in svc["spec"]["ports"]] == [N.ZOOKEEPER_PORT]


def test_services_select_the_zookeeper_pods(base):
    sts = by_kind(base, "StatefulSet")["zookeeper"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    services = by_kind(base, "Service")
    assert services[sts["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"  # the governing service is headless
    ports = {p["name"]: p["containerPort"] for c in sts["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    for svc in services.values():
        assert svc["spec"]["selector"].items() <= pod_labels.items(), svc["metadata"]["name"]
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports and ports[p["targetPort"]] == p["port"]
    # the probes look at a port the container has
    c = sts["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["tcpSocket"]["port"] in ports


def test_zookeeper_keeps_its_data_and_transaction_log_on_the_volume(base):
    sts = by_kind(base, "StatefulSet")["zookeeper"]
    c = sts["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    claims = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    assert set(mounts) <= set(claims)
    env = {e["name"]: e.get("value") for e in c["env"]}
    for key in ("ZOO_DATA_DIR", "ZOO_DATA_LOG_DIR"):
        assert any(env[key].startswith(m + "/") for m in mounts.values()), key


def test_the_coordinator_job_uses_the_account_the_secret_and_the_zookeeper_service(base):
    job = by_kind(base, "Job")["bsp-planner-coordinator"]
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] in by_kind(base, "ServiceAccount")
    assert spec["restartPolicy"] == "Never"
    c = next(c for c in spec["containers"] if c["name"] == "coordinator")
    env = {e["name"]: e for e in c["env"]}
    secret = env["BSP_PLANNER_ZK_AUTH"]["valueFrom"]["secretKeyRef"]
    # the workers get the same Secret: the backend reads its name from the coordinator's environment
    assert env["BSP_PLANNER_K8S_ZK_AUTH_SECRET"]["value"] == secret["name"]
    assert secret["key"] == "auth"
    svc = N.ZOOKEEPER_SERVICE
    assert env["BSP_PLANNER_ZOOKEEPER"]["value"] == f"{svc}:{N.ZOOKEEPER_PORT}"
    assert env["BSP_PLANNER_K8S_WORKER_ZOOKEEPER"]["value"] == f"{svc}:{N.ZOOKEEPER_PORT}"
    assert env["BSP_PLANNER_POD"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    script = c["command"][-1]
    assert "--backend kubernetes" in script and "--resume" in script and "--runs-dir /runs" in script
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/runs"]]["persistentVolumeClaim"]["claimName"] in by_kind(base, "PersistentVolumeClaim")
    # exit codes of `bsp-planner run`: 1 failed, 2 bad input -> fail the Job; 3 (stopped, resumable) -> retry
    rules = job["spec"]["podFailurePolicy"]["rules"]
    fail = next(r for r in rules if r["action"] == "FailJob")
    assert fail["onExitCodes"]["containerName"] == "coordinator" and sorted(fail["onExitCodes"]["values"]) == [1, 2]


def test_the_coordinator_and_its_workers_run_the_same_image(base):
    images = {c["image"] for d in base for c in _containers(d) if not c["image"].startswith("zookeeper")}
    assert images == {"bsp-planner:dev"}


def test_rbac_grants_exactly_what_the_code_calls_and_nothing_cluster_wide(base):
    roles = by_kind(base, "Role")
    assert list(roles) == [N.SERVICE_ACCOUNT]
    granted = {}
    for r in roles[N.SERVICE_ACCOUNT]["rules"]:
        assert "*" not in r["verbs"] and "*" not in r["resources"]
        for g in r["apiGroups"]:
            for res in r["resources"]:
                granted[(g, res)] = tuple(sorted(r["verbs"]))
    assert granted == {k: tuple(sorted(v)) for k, v in ROLE_RULES.items()}
    binding = by_kind(base, "RoleBinding")[N.SERVICE_ACCOUNT]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": N.SERVICE_ACCOUNT}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": N.SERVICE_ACCOUNT, "namespace": N.DEFAULT_NAMESPACE}
    ]
    assert not [d for d in base if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_the_optional_node_reader_only_lists_nodes_and_pods():
    docs = load_all(NODE_READER)
    role = by_kind(docs, "ClusterRole")["bsp-planner-node-reader"]
    granted = {
        (g, res): tuple(sorted(r["verbs"])) for r in role["rules"] for g in r["apiGroups"] for res in r["resources"]
    }
    assert granted == {k: tuple(sorted(v)) for k, v in CLUSTER_READ_RULES.items()}
    b = by_kind(docs, "ClusterRoleBinding")["bsp-planner-node-reader"]
    assert b["roleRef"]["name"] == "bsp-planner-node-reader"
    assert b["subjects"] == [{"kind": "ServiceAccount", "name": N.SERVICE_ACCOUNT, "namespace": N.DEFAULT_NAMESPACE}]
    kust = yaml.safe_load((NODE_READER.parent / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component" and kust["resources"] == [NODE_READER.name]


def restricted_violations(doc: dict) -> list[str]:
    """The Pod Security Standard 'restricted' rules that apply to these pods."""
    spec = _pod_spec(doc)
    out = []
    psc = spec.get("securityContext") or {}
    for c in _containers(doc):
        sc = c.get("securityContext") or {}
        where = f"{doc['metadata']['name']}/{c['name']}"
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or (sc.get("capabilities") or {}).get("add"):
            out.append(f"{where}: capabilities")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) or 0 in (sc.get("runAsUser"), psc.get("runAsUser")):
            out.append(f"{where}: runAsNonRoot")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccompProfile")
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"{doc['metadata']['name']}: hostPath volume")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        out.append(f"{doc['metadata']['name']}: host namespaces")
    return out


def test_every_pod_meets_the_restricted_pod_security_standard_the_namespace_enforces(base):
    ns = by_kind(base, "Namespace")[N.DEFAULT_NAMESPACE]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    generated = [
        M.worker_pod(SETTINGS, "run-1", "affinity", 500, ["worker"]),
        M.profile_job(SETTINGS, "p", "c", "affinity,10,500,0", "affinity", 500, ["true"], 10, 10),
        M.process_profile_job(SETTINGS, "p", "c", "p,process", "p", 500, None, "{}", "/scratch/plan.json", 10, 60),
        M.worker_pod(SETTINGS, "run-1", "p", 500, [], command=None, image="me/app:1"),
    ]
    pods = [d for d in base if _pod_spec(d) is not None] + generated
    assert len(pods) == 6
    assert [v for d in pods for v in restricted_violations(d)] == []


def test_the_dockerfile_builds_the_image_the_manifests_expect():
    text = (ROOT / "jobs" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[1-9]-slim", text, re.M)
    assert "stress-ng" in text
    extras = re.search(r'pip install --no-cache-dir "\.\[([a-z,]+)\]"', text).group(1).split(",")
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) == {"live", "kubernetes"} and set(extras) <= set(declared)
    uid = int(re.search(r"useradd --uid (\d+)", text).group(1))
    assert re.search(rf"^USER {uid}(:{uid})?$", text, re.M)
    assert uid == M.RUN_AS_USER
    assert re.search(r'^ENTRYPOINT \["bsp-planner"\]', text, re.M)  # the worker pods' command
    # every COPY source of the Dockerfile passes its allow-list .dockerignore
    ignore = [
        ln.strip()
        for ln in (ROOT / "jobs" / "Dockerfile.dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for src in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for s in src.split():
            assert s == "." or s in allowed, s
    for needed in ("pyproject.toml", "README.md", "LICENSE", "bsp_planner"):  # the shipped defaults are package data
        assert needed in allowed
    assert ignore[0] == "*"


def test_the_coordinator_runs_as_the_image_user(base):
    spec = by_kind(base, "Job")["bsp-planner-coordinator"]["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == M.RUN_AS_USER


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed (the base is then checked from its files only)"
)
def test_kubectl_kustomize_renders_the_same(base):
    out = subprocess.run(["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered)) == sorted(map(key, base))
    mine = {key(d): d for d in base}
    for d in rendered:
        assert d == mine[key(d)], key(d)
        validate(d)


# -- what the code generates -------------------------------------------------------------------------
SETTINGS = M.PodSettings(namespace="bsp-planner", image="bsp-planner:dev", node_selector={"pool": "bsp"})


def test_a_worker_pod_is_guaranteed_and_resizable_in_place():
    pod = M.worker_pod(SETTINGS, "live-1", "nyc_taxi.1", 750, ["worker", "--task", "nyc_taxi.1"], env={"A": "b"})
    validate(pod)
    c = pod["spec"]["containers"][0]
    assert c["name"] == N.WORKER_CONTAINER
    assert c["command"] == ["bsp-planner"] and c["args"] == ["worker", "--task", "nyc_taxi.1"]
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "750m", "memory": M.DEFAULT_MEMORY}
    assert {p["resourceName"]: p["restartPolicy"] for p in c["resizePolicy"]} == {
        "cpu": "NotRequired",
        "memory": "NotRequired",
    }
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["nodeSelector"] == {"pool": "bsp"}
    labels = pod["metadata"]["labels"]
    assert labels[N.LABEL_RUN] == "live-1" and labels[N.LABEL_COMPONENT] == N.COMPONENT_WORKER
    assert all(N.is_label_value(v) for v in labels.values())
    assert pod["metadata"]["annotations"][N.ANNOTATION_TASK] == "nyc_taxi.1"
    assert N.is_dns_label(pod["metadata"]["name"])
    # the run's selector finds it
    sel = dict(p.split("=") for p in N.run_selector("live-1").split(","))
    assert sel.items() <= labels.items()
    # a writable scratch directory for stress-ng's files, on a read-only root
    assert c["workingDir"] == M.SCRATCH_DIR and {"name": "TMPDIR", "value": M.SCRATCH_DIR} in c["env"]
    assert {"name": "A", "value": "b"} in c["env"]


def test_resize_patch_changes_only_the_worker_cpu():
    patch = M.resize_patch(1500)
    assert patch == {
        "spec": {
            "containers": [
                {"name": N.WORKER_CONTAINER, "resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1500m"}}}
            ]
        }
    }
    assert M.resize_patch(2000)["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"


def test_a_profiling_job_runs_one_cell_once_under_its_cpu_level():
    job = M.profile_job(
        SETTINGS,
        "prof-1",
        "0123456789",
        "spin,10,500,1",
        "spin",
        500,
        ["python", "-m", "bsp_planner.profiling.pod_measure", "--", "stress-ng"],
        timeout_s=60,
        startup_s=300,
    )
    validate(job)
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 361
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["requests"]["cpu"] == c["resources"]["limits"]["cpu"] == "500m"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert job["metadata"]["labels"] == spec["template"]["metadata"]["labels"]
    sel = dict(p.split("=") for p in M.profile_selector("prof-1").split(","))
    assert sel.items() <= job["metadata"]["labels"].items()
    assert job["metadata"]["annotations"][N.ANNOTATION_CELL] == "spin,10,500,1"
    assert N.is_dns_label(job["metadata"]["name"])


def test_a_process_profiling_job_runs_the_program_under_its_cpu_level_beside_a_collector():
    job = M.process_profile_job(
        SETTINGS,
        "prof-1",
        "0123456789",
        "p,process,500",
        "p",
        500,
        None,
        '{"format": 1}',
        "/scratch/plan.json",
        30,
        400,
    )
    validate(job)
    assert job["spec"]["activeDeadlineSeconds"] == 401 and job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-2:] == ["plan", "/scratch/plan.json"] and init["image"] == SETTINGS.image
    profiled, collector = pod["containers"]
    assert profiled["name"] == M.PROFILED_CONTAINER and "command" not in profiled  # the image as built
    assert profiled["resources"]["limits"]["cpu"] == profiled["resources"]["requests"]["cpu"] == "500m"
    assert collector["command"][-3:] == ["collect", "/scratch/plan.json", "30"]
    assert collector["resources"]["limits"]["cpu"] == "100m"
    assert all(
        c["volumeMounts"] == [{"name": "scratch", "mountPath": M.SCRATCH_DIR}] for c in (init, *pod["containers"])
    )


def test_an_image_worker_pod_without_a_command_leaves_command_and_args_unset():
    pod = M.worker_pod(SETTINGS, "run-1", "p", 500, [], command=None, image="me/app:1")
    validate(pod)
    c = pod["spec"]["containers"][0]
    assert "command" not in c and "args" not in c and c["image"] == "me/app:1"


def test_names_are_dns_labels_and_never_collide():
    tasks = ["a_b", "a-b", "A-B", "a.b", "x" * 90, "ambient_temperature_system_failure_3"]
    names = [N.pod_name("live-20261121-101500-ab12", t) for t in tasks]
    assert all(N.is_dns_label(n) for n in names)
    assert len(set(names)) == len(names)
    assert N.pod_name("r", "affinity") == "bsp-r-affinity"  # readable when nothing needed changing
    assert N.run_key("live-20261121-101500-ab12") == "live-20261121-101500-ab12"
    assert N.is_dns_label(N.run_key("My_Run_" + "z" * 60)) and len(N.run_key("My_Run_" + "z" * 60)) <= 30


@pytest.mark.parametrize("m, q", [(250, "250m"), (1000, "1"), (1500, "1500m"), (8000, "8")])
def test_cpu_quantities_round_trip(m, q):
    assert N.cpu_quantity(m) == q
    assert N.cpu_millicores(q) == m


def test_cpu_quantities_parse_what_servers_return():
    assert N.cpu_millicores("2500000n") == 2.5
    assert N.cpu_millicores("1.5") == 1500
    assert N.cpu_millicores("100u") == pytest.approx(0.1)
    assert N.cpu_millicores(None) == 0
    with pytest.raises(ValueError):
        N.cpu_millicores("lots")
    for bad in (0, -5, 250.5, float("nan")):
        with pytest.raises(InputError):
            N.cpu_quantity(bad)

"""End to end on a real cluster (marked `k8s`): the profiler's Jobs and a live run of the default job.

Runs against the cluster of $KUBECONFIG (or ~/.kube/config) once the kustomize base is applied there
(the namespace bsp-planner, ZooKeeper, the Secret bsp-planner-zk-auth) and the image is loaded; skipped,
saying which of these is missing, otherwise. docs/kubernetes.md walks through kind, k3d and minikube:

    pytest -m k8s tests/test_k8s_e2e.py -v

Settings: $BSP_PLANNER_IMAGE (default bsp-planner:dev), $BSP_PLANNER_K8S_NAMESPACE (bsp-planner),
$BSP_PLANNER_E2E_STEPS (6), $BSP_PLANNER_E2E_SET (extra experiment overrides, comma-separated KEY=VALUE,
e.g. cpu.budget_millicores=4000 for a small cluster).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bsp_planner.inputs.job import Job, SeriesRef, Task
from bsp_planner.inputs.shipped import data_dir
from bsp_planner.k8s import names as N

pytestmark = pytest.mark.k8s

DATA = data_dir()  # the shipped defaults (package data)
NS = os.environ.get("BSP_PLANNER_K8S_NAMESPACE", N.DEFAULT_NAMESPACE)
IMAGE = os.environ.get("BSP_PLANNER_IMAGE", "bsp-planner:dev")
SECRET = "bsp-planner-zk-auth"


def _kubeconfig() -> str:
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")


@pytest.fixture(scope="module")
def cluster():
    """The cluster, or a skip that says what is missing."""
    path = _kubeconfig()
    if not Path(path).is_file():
        pytest.skip(f"no Kubernetes cluster runs here: no kubeconfig at {path} (set KUBECONFIG)")
    from kubernetes import client

    from bsp_planner.k8s.cluster import Cluster
    from bsp_planner.k8s.config import connect

    try:
        conn = connect(NS, kubeconfig=path)
        version = client.VersionApi(conn.api_client).get_code(_request_timeout=5)
    except Exception as exc:  # unreachable, bad credentials, a kubeconfig of a deleted cluster...
        pytest.skip(f"no reachable Kubernetes cluster in {path}: {type(exc).__name__}: {str(exc)[:200]}")
    core = client.CoreV1Api(conn.api_client)
    try:
        core.read_namespace(NS, _request_timeout=5)
        secret = core.read_namespaced_secret(SECRET, NS, _request_timeout=5)
    except client.exceptions.ApiException as exc:
        pytest.skip(
            f"the cluster at {conn.host} lacks the base or its Secret ({exc.status} {exc.reason}): "
            f"kubectl apply -k jobs/k8s and create the Secret {SECRET} (docs/kubernetes.md)"
        )
    auth = base64.b64decode(secret.data["auth"]).decode()
    return {"conn": conn, "cluster": Cluster(conn), "version": version.git_version, "auth": auth, "kubeconfig": path}


#: a CPU limit is a ceiling: load only adds time, so each cell's fastest repeat is the closest to what the
#: limit allows; a quarter of a CPU must then take at least this many times as long as a whole one (4x when
#: nothing else runs; a limit not enforced gives about 1x)
LIMIT_RATIO_MIN = 1.8
PROFILE_REPEATS = 3


def limit_problems(rows: list[dict], ratio_min: float = LIMIT_RATIO_MIN) -> list[str]:
    """The cells where the CPU limits do not show: for each task and workload, the fastest repeat must get
    no faster as the CPU shrinks, by at least `ratio_min` from the largest CPU to the smallest. rows: the
    profile's rows (task, workload, cpu_millicores, duration_s, repeat)."""
    fastest: dict[tuple[str, float], dict[float, float]] = {}
    for r in rows:
        cell = fastest.setdefault((r["task"], float(r["workload"])), {})
        c = float(r["cpu_millicores"])
        cell[c] = min(cell.get(c, float("inf")), float(r["duration_s"]))
    problems = []
    for (task, w), by_cpu in sorted(fastest.items()):
        cpus = sorted(by_cpu)
        low, high = by_cpu[cpus[0]], by_cpu[cpus[-1]]
        if low < ratio_min * high:
            problems.append(
                f"{task} workload {w:g}: {cpus[0]:g}m took {low:.2f} s, {cpus[-1]:g}m {high:.2f} s (fastest of the "
                f"repeats): less than {ratio_min:g}x"
            )
    return problems


def test_the_profiler_measures_a_grid_as_jobs_under_real_cpu_limits(cluster, tmp_path):
    """Each cell measured PROFILE_REPEATS times: on a busy cluster one repeat of a whole CPU can be slower
    than a quarter (a limit is only a ceiling), the fastest of three is what the limit allows."""
    import csv

    from bsp_planner.profiling.kubernetes import KubernetesProfiler, default_profile_id, run_grid_kubernetes
    from bsp_planner.profiling.runner import Grid

    job = Job("e2e", (Task("spin", "cpu", 200.0, SeriesRef(Path("-"))),), path=Path("e2e.toml"))
    out = tmp_path / "profile.csv"
    profiler = KubernetesProfiler(
        cluster=cluster["cluster"], image=IMAGE, parallelism=2, poll_s=1.0, profile_id=default_profile_id(out)
    )
    grid = Grid((250, 1000), (5, 10), PROFILE_REPEATS)
    report = run_grid_kubernetes(job, out, grid, profiler, timeout_s=120, progress=False)
    assert report.failures == [] and report.measured == 4 * PROFILE_REPEATS
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert limit_problems(rows) == []  # a quarter of a CPU is slower than a whole one: the limit is enforced
    assert profiler.nodes  # the CPU model of the node(s) that ran the cells
    assert cluster["cluster"].list_jobs(f"{N.LABEL_PROFILE}={profiler.profile_id}") == []


def _port_forward(kubeconfig: str):
    """`kubectl port-forward` to the cluster's ZooKeeper, for a coordinator outside the cluster."""
    if shutil.which("kubectl") is None:
        pytest.skip(
            "kubectl is not installed (the coordinator outside the cluster reaches ZooKeeper through kubectl port-forward)"
        )
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", kubeconfig, "-n", NS, "port-forward", "svc/zookeeper", ":2181"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line or "")
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
    proc.kill()
    pytest.fail("kubectl port-forward svc/zookeeper did not start")


OWN_TASK = """
[[task]]
name = "{name}"
image = "{image}"
{what}
series = {{ file = "{data}/datasets/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""

OWN_PROGRAMS = {
    "command": 'command = ["python3", "-c", "import sys; sum(i * i for i in range(int(float(sys.argv[1]) * 2000)))", '
    '"{workload}"]',
    "process": 'process = ["{python}", "-m", "bsp_planner.testing.bsp_app", "--ranks", "3"]',
}


def _own_experiment(folder: Path, kind: str, steps: int) -> Path:
    """Three image tasks a, b, c running `kind` (OWN_PROGRAMS) in the run's image, and an experiment."""
    rows = ((0, 1998), (1999, 3997), (0, 1998))
    job = folder / "job.toml"
    job.write_text(
        'name = "own"\n'
        + "".join(
            OWN_TASK.format(name=n, image=IMAGE, what=OWN_PROGRAMS[kind], data=DATA, first=f, last=la)
            for n, (f, la) in zip("abc", rows, strict=True)
        )
    )
    from zk_fixtures import write_profile

    write_profile(folder / "profile.csv")  # a synthetic profile of tasks a, b, c: the plan only needs one
    experiment = folder / "exp.toml"
    experiment.write_text(
        f'job = "{job}"\nprofile = "{folder / "profile.csv"}"\nsteps = {steps}\npenalty_s = 0.5\n'
        'modes = ["perfect"]\nstrategies = ["static:1"]\noutput = "out"\n'
        "[cpu]\nbudget_millicores = 1500\nmin_millicores = 250\nstep_millicores = 50\nmax_millicores = 1000\n"
    )
    return experiment


# (the job, how the run reconfigures: None = in place where the server can, else by recreation)
LIVE_CASES = {
    "default-recreate": ("default", "recreate"),
    "default-in-place": ("default", "in-place"),
    "command": ("command", None),  # image tasks: a command run every step by our worker in the task's image
    "process": ("process", None),  # one long-running pod per task, resized in place (bsp_planner.testing.bsp_app)
}


@pytest.mark.parametrize("case", list(LIVE_CASES))
def test_a_job_runs_live_on_the_cluster(cluster, tmp_path, monkeypatch, case):
    """The default job by recreation and in place, and image tasks (command, process) of our own."""
    from bsp_planner.runtime.backends.kubernetes import KubernetesBackend
    from bsp_planner.runtime.coordinator import DEFAULT_EXPERIMENT, Coordinator, RunSettings

    kind, how = LIVE_CASES[case]
    in_place = cluster["cluster"].capabilities().in_place_resize
    if how == "in-place" and not in_place:
        pytest.skip(f"the server ({cluster['version']}) has no pods/resize subresource (Kubernetes 1.33+)")
    if kind == "process" and not in_place:
        pytest.skip(f"the server ({cluster['version']}) cannot resize pods in place: process tasks are never recreated")
    how = how or ("in-place" if in_place else "recreate")
    steps = int(os.environ.get("BSP_PLANNER_E2E_STEPS", "6"))
    extra = [o for o in os.environ.get("BSP_PLANNER_E2E_SET", "").split(",") if o]
    if kind == "default":
        experiment, overrides = DEFAULT_EXPERIMENT, [f"steps={steps}", *extra]
    else:
        experiment, overrides = _own_experiment(tmp_path, kind, steps), extra
    forward, port = _port_forward(cluster["kubeconfig"])
    monkeypatch.setenv("BSP_PLANNER_ZK_AUTH", cluster["auth"])
    run_id = f"e2e-{how if kind == 'default' else kind}-{int(time.time()) % 100000}"
    try:
        backend = KubernetesBackend(
            run_id,
            cluster=cluster["cluster"],
            image=IMAGE,
            reconfigure=how,
            zk_auth_secret=SECRET,
            log_dir=tmp_path / "logs" if kind == "default" else None,
            poll_s=0.5,
        )
        settings = RunSettings(
            experiment=str(experiment),
            planner="static:1",
            reconfigure=how,
            overrides=overrides,
            backend="kubernetes",
            zookeeper=f"127.0.0.1:{port}",
            zk_auth="env",
            worker_start_s=300.0,
            step_timeout_s=600.0,
            zk_wait_s=30.0,
        )
        result = Coordinator(settings, run_id, tmp_path / "runs", backend=backend).run()
    finally:
        forward.kill()
    assert result.status == "finished"
    records = result.records
    assert [r["step"] for r in records] == list(range(steps))
    assert all(t["measured_s"] > 0 for r in records for t in r["tasks"])
    if kind != "command":  # (a command task's worker may fall back to recreation)
        assert {e.mode for e in backend.events} <= {"start", how}
    assert cluster["cluster"].list_pods(N.run_selector(N.run_key(run_id))) == []
    if kind == "default":
        for r in records:
            if r["reconfigured"]:
                assert r["reconfig_s"] > 0
        summary = json.loads((tmp_path / "runs" / run_id / "summary.json").read_text())
        assert summary["steps_done"] == steps

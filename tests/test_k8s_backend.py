"""The kubernetes live backend's reconcile logic, against FakeApiServer.

FakeApiServer (bsp_planner/testing/fake_apiserver.py) is an in-process HTTP server on 127.0.0.1 that speaks
enough of the Kubernetes REST API for these calls; the real `kubernetes` client talks to it. It is used
here FOR LOGIC TESTS ONLY: it schedules, resizes and evicts by simple rules, and nothing here says the
backend works on a real cluster (that is tests/test_k8s_e2e.py, marked k8s). What it does check like a
server: request bodies against the client's models, patch content types, names, 404/409, and RBAC rules
taken from the Role in jobs/k8s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)
import yaml

pytest.importorskip("bsp_planner.runtime.backends", reason="the runtime backends package is not in this tree yet")

from bsp_planner.core.errors import InputError
from bsp_planner.k8s import names as N
from bsp_planner.k8s.cluster import ROLE_RULES
from bsp_planner.runtime.backends import WorkerLaunch, make_backend
from bsp_planner.runtime.backends.kubernetes import KubernetesBackend
from bsp_planner.runtime.backends.kubernetes.nodes import ConfigurationDoesNotFit
from bsp_planner.runtime.backends.kubernetes.pods import PodLost
from bsp_planner.testing.fake_apiserver import FakeApiServer
from bsp_planner.testing.fake_rbac import rules_from_manifests

from test_k8s_manifests import NODE_READER, load_all, render_base

NS = "bsp-planner"
ARGS = (
    "worker",
    "--zookeeper",
    "127.0.0.1:2181",
    "--root",
    "/bsp-planner/runs/r1",
    "--task",
    "{t}",
    "--incarnation",
    "0",
    "--stress-ng",
    "/usr/local/bin/stress-ng",
    "--session-timeout",
    "10",
)


def launch(task: str, incarnation: int = 0, env: dict | None = None) -> WorkerLaunch:
    args = tuple(a.format(t=task) for a in ARGS)
    return WorkerLaunch(
        task, args, env if env is not None else {"BSP_PLANNER_ZK_AUTH": "bsp-planner:s3cret"}, incarnation
    )


def backend(api: FakeApiServer, **kw) -> KubernetesBackend:
    kw.setdefault("image", "bsp-planner:dev")
    kw.setdefault("poll_s", 0.005)
    kw.setdefault("namespace", NS)
    return KubernetesBackend("r1", kubeconfig=api.kubeconfig, **kw)


@pytest.fixture
def api():
    with FakeApiServer(delete_delay_s=0.02) as fake:
        fake.add_node("node-a", "4")
        fake.add_node("node-b", "2")
        fake.add_foreign_pod("kube-system", "coredns", "node-a", "1")
        yield fake


def worker(api, b, task):
    return api.pod(NS, b._pod_name(task))


def cpu_of(pod) -> str:
    return pod["spec"]["containers"][0]["resources"]["limits"]["cpu"]


def test_start_creates_one_guaranteed_pod_per_task_labelled_for_the_run(api, tmp_path):
    b = backend(api, log_dir=tmp_path)
    for t, m in (("affinity", 1500), ("atomic", 500)):
        b.start_task(launch(t), m)
    assert b.wait_running() < 5
    pods = api.pods(NS)
    assert sorted(p["metadata"]["labels"][N.LABEL_TASK] for p in pods) == ["affinity", "atomic"]
    pod = worker(api, b, "affinity")
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"]["cpu"] == c["resources"]["limits"]["cpu"] == "1500m"
    assert pod["metadata"]["labels"][N.LABEL_RUN] == "r1"
    # the worker's arguments, with the in-cluster ZooKeeper and the image's stress-ng
    assert c["command"] == ["bsp-planner"]
    assert c["args"][c["args"].index("--zookeeper") + 1] == f"zookeeper.{NS}.svc:2181"
    assert c["args"][c["args"].index("--stress-ng") + 1] == "stress-ng"
    assert c["args"][c["args"].index("--task") + 1] == "affinity"
    env = {e["name"]: e for e in c["env"]}
    assert env["BSP_PLANNER_ZOOKEEPER"]["value"] == f"zookeeper.{NS}.svc:2181"
    assert b.poll_task("affinity").alive is True
    assert [(e.task, e.mode) for e in b.events] == [("affinity", "start"), ("atomic", "start")]
    b.close()
    assert api.pods(NS) == []


def test_credentials_come_from_a_secret_when_one_is_named(api):
    b = backend(api, zk_auth_secret="bsp-planner-zk-auth")
    b.start_task(launch("affinity"), 500)
    env = {e["name"]: e for e in worker(api, b, "affinity")["spec"]["containers"][0]["env"]}
    assert env["BSP_PLANNER_ZK_AUTH"] == {
        "name": "BSP_PLANNER_ZK_AUTH",
        "valueFrom": {"secretKeyRef": {"name": "bsp-planner-zk-auth", "key": "auth"}},
    }
    assert "s3cret" not in str(api.pods(NS))
    assert b.warnings == []


def test_a_local_credentials_file_is_passed_as_its_value_with_a_warning(api, tmp_path):
    auth = tmp_path / "zk-auth"
    auth.write_text("bsp-planner:from-file\n")
    auth.chmod(0o600)
    b = backend(api)
    b.start_task(launch("affinity", env={"BSP_PLANNER_ZK_AUTH_FILE": str(auth)}), 500)
    env = {e["name"]: e.get("value") for e in worker(api, b, "affinity")["spec"]["containers"][0]["env"]}
    assert env["BSP_PLANNER_ZK_AUTH"] == "bsp-planner:from-file" and "BSP_PLANNER_ZK_AUTH_FILE" not in env
    assert any("--zk-auth-secret" in w for w in b.warnings)


def test_in_place_resize_waits_until_the_kubelet_applied_the_new_limit(api):
    api.resize_delay_s = 0.05
    b = backend(api)
    assert b.capabilities().in_place and b.mode == "in-place"
    b.start_task(launch("affinity"), 1000)
    b.wait_running()
    uid = worker(api, b, "affinity")["metadata"]["uid"]
    b.resize_task("affinity", 2000)
    pod = worker(api, b, "affinity")
    assert pod["metadata"]["uid"] == uid  # the same pod: no restart
    assert cpu_of(pod) == "2"
    assert pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "2"
    ev = b.events[-1]
    assert (ev.task, ev.mode, ev.millicores) == ("affinity", "in-place", 2000) and ev.seconds >= 0.05
    assert ("", "pods/resize", "patch") in api.used_permissions()


def test_recreate_deletes_waits_for_the_old_pod_and_starts_a_new_one(api, tmp_path):
    api.delete_delay_s = 0.1
    b = backend(api, reconfigure="recreate", log_dir=tmp_path)
    assert not b.capabilities().in_place
    b.start_task(launch("affinity"), 1000)
    b.wait_running()
    old = worker(api, b, "affinity")["metadata"]["uid"]
    b.recreate_task(launch("affinity", incarnation=1), 500)
    pod = worker(api, b, "affinity")
    assert pod["metadata"]["uid"] != old and cpu_of(pod) == "500m"
    assert pod["metadata"]["annotations"]["bsp-planner.io/incarnation"] == "1"
    ev = b.events[-1]
    assert ev.mode == "recreate" and ev.seconds >= 0.1  # it waited for the old pod's termination
    assert "pod bsp-r1-affinity" in (tmp_path / "affinity.log").read_text()


def test_an_old_server_gets_recreation_and_forcing_in_place_is_refused():
    with FakeApiServer(version="v1.32.4") as old:
        old.add_node("n", "4")
        b = backend(old)
        assert b.mode == "recreate" and not b.capabilities().in_place
        b.start_task(launch("affinity"), 1000)
        b.wait_running()
        b.resize_task("affinity", 500)  # the coordinator asked for in-place anyway: it is recreated
        assert b.events[-1].mode == "recreate"
        forced = backend(old, reconfigure="in-place")
        with pytest.raises(InputError, match="v1.32.4"):
            forced.capabilities()


def test_a_configuration_that_does_not_fit_is_refused_before_any_pod_is_touched(api):
    b = backend(api)
    b.start_task(launch("affinity"), 1000)
    b.start_task(launch("atomic"), 1000)
    b.wait_running()
    calls = len(api.calls)
    # node-a: 4 CPUs, 1 for coredns, 2 for ours; node-b: 2 CPUs
    with pytest.raises(
        ConfigurationDoesNotFit, match=r"task 'affinity' asks for 3500m of CPU but no node has more than 2000m free"
    ):
        b.check_configuration({"affinity": 3500, "atomic": 2000})
    with pytest.raises(
        ConfigurationDoesNotFit,
        match=r"fit the free CPU in total \(5000m\) but cannot be split over the nodes \(node-a: .*node-b: ",
    ):
        b.check_configuration({"affinity": 2500, "atomic": 2500})
    later = api.calls[calls:]
    assert {(c.verb, c.resource) for c in later} <= {("list", "nodes"), ("list", "pods"), ("get", "pods")}
    assert [cpu_of(p) for p in api.pods(NS)] == ["1", "1"]


def test_an_increase_that_does_not_fit_its_node_is_recreated_elsewhere(api):
    b = backend(api)
    b.start_task(launch("affinity"), 1000)
    b.start_task(launch("atomic"), 1000)
    b.wait_running()
    assert {worker(api, b, t)["spec"]["nodeName"] for t in ("affinity", "atomic")} == {"node-a"}
    # node-a: 4 CPUs, coredns 1 + our 2: growing both to 1500 fits in place; atomic to 2000 does not
    # (3000 + 1500 > 4000... after affinity's 1000 -> 500) but node-b has 2000 free
    plan = b.check_configuration({"affinity": 2000, "atomic": 2000})
    assert sorted(plan.values()) == ["in-place", "recreate"]
    for t in sorted(plan, key=lambda t: plan[t] != "in-place"):
        b.resize_task(t, 2000)
    modes = {e.task: e.mode for e in b.events[-2:]}
    assert sorted(modes.values()) == ["in-place", "recreate"]
    moved = next(t for t, m in modes.items() if m == "recreate")
    b.wait_running([moved])
    assert worker(api, b, moved)["spec"]["nodeName"] == "node-b"


def test_a_resize_left_pending_falls_back_to_recreation(api):
    b = backend(api, fit_check=False, resize_timeout_s=0.2)
    b.start_task(launch("affinity"), 1000)
    b.wait_running()
    b.resize_task("affinity", 3500)  # node-a has 3000 for it: the kubelet defers the resize
    ev = b.events[-1]
    assert ev.mode == "recreate" and ev.seconds >= 0.2
    assert "not applied after 0.2 s (pending: Deferred" in ev.detail
    assert cpu_of(worker(api, b, "affinity")) == "3500m"


def test_an_infeasible_resize_is_recreated_with_a_warning(api):
    b = backend(api, fit_check=False, pending_timeout_s=0.2)
    b.start_task(launch("affinity"), 1000)
    b.wait_running()
    b.resize_task("affinity", 8000)  # more than any node has: the kubelet calls it Infeasible at once
    assert any("Node didn't have enough capacity" in w and "recreating" in w for w in b.warnings)
    assert b.events[-1].mode == "recreate" and "resize failed" in b.events[-1].detail
    # recreated, it cannot be placed either: it stays pending until the timeout stops the run
    time.sleep(0.25)
    with pytest.raises(PodLost, match="pending"):
        b.poll_task("affinity")


def test_a_pod_pending_past_the_timeout_stops_the_run_with_the_scheduler_message(api):
    b = backend(api, pending_timeout_s=0.2, fit_check=False)
    b.start_task(launch("huge"), 6000)
    st = b.poll_task("huge")
    assert st.alive is True and "Insufficient cpu" in st.detail
    time.sleep(0.25)
    with pytest.raises(
        PodLost,
        match=r"still pending after \d+ s \(unschedulable: 0/2 nodes are available: 2 Insufficient cpu.\).*resumed",
    ):
        b.poll_task("huge")


def test_an_evicted_pod_stops_the_run_and_an_exited_worker_is_reported(api, tmp_path):
    b = backend(api, log_dir=tmp_path)
    b.start_task(launch("affinity"), 500)
    b.start_task(launch("atomic"), 500)
    b.wait_running()
    api.evict(NS, b._pod_name("affinity"))
    with pytest.raises(PodLost, match="evicted: The node was low on resource: memory"):
        b.poll_task("affinity")
    assert "evicted" in (tmp_path / "affinity.log").read_text()
    # a worker that exits by itself is the coordinator's business (restart or fail): not a PodLost
    with api.lock:
        p = api.state.pods[(NS, b._pod_name("atomic"))]
        p["status"]["phase"] = "Failed"
        p["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 4, "message": "stress-ng failed"}}
    st = b.poll_task("atomic")
    assert st.alive is False and st.exit_code == 4
    assert b.log_tail("atomic") == "stress-ng failed"
    # restarting it replaces the failed pod
    b.start_task(launch("atomic", 1), 500)
    b.wait_running(["atomic"])
    assert b.poll_task("atomic").alive


def test_a_pod_deleted_by_someone_else_stops_the_run(api):
    b = backend(api)
    b.start_task(launch("affinity"), 500)
    b.wait_running()
    b.cluster.delete_pod(b._pod_name("affinity"), 0)
    with pytest.raises(PodLost, match="gone|being deleted"):
        b.poll_task("affinity")


def test_cleanup_removes_only_this_runs_leftover_pods(api):
    earlier = backend(api)
    earlier.start_task(launch("affinity"), 500)
    other = KubernetesBackend("r2", kubeconfig=api.kubeconfig, image="x", namespace=NS, poll_s=0.005)
    other.start_task(launch("affinity"), 500)
    resumed = backend(api)  # a new coordinator of run r1 after a crash
    assert resumed.cleanup_stale() == [N.pod_name("r1", "affinity")]
    assert [p["metadata"]["name"] for p in api.pods(NS)] == [N.pod_name("r2", "affinity")]


def test_the_image_defaults_to_the_coordinators_own(api, monkeypatch):
    monkeypatch.delenv("BSP_PLANNER_IMAGE", raising=False)
    b = backend(api)
    b.start_task(WorkerLaunch("coordinator-pod", ("worker",), {}), 100)  # stands in for the coordinator's pod
    monkeypatch.setenv("BSP_PLANNER_POD", b._pod_name("coordinator-pod"))
    fresh = backend(api, image=None)
    assert fresh.settings.image == "bsp-planner:dev"
    monkeypatch.delenv("BSP_PLANNER_POD")
    with pytest.raises(InputError, match="--image"):
        _ = backend(api, image=None).settings  # the property raises


def test_settings_come_from_the_environment_of_the_coordinator_job(api, monkeypatch):
    for k, v in {
        "NAMESPACE": "elsewhere",
        "RECONFIGURE": "recreate",
        "WORKER_ZOOKEEPER": "zookeeper:2181",
        "ZK_AUTH_SECRET": "s",
        "PENDING_TIMEOUT": "7",
        "NODE_SELECTOR": "pool=bsp",
    }.items():
        monkeypatch.setenv(f"BSP_PLANNER_K8S_{k}", v)
    b = KubernetesBackend("r1", kubeconfig=api.kubeconfig, image="i")
    assert (b.namespace, b.mode, b.worker_zk_hosts, b.zk_auth_secret, b.pending_timeout_s, b.node_selector) == (
        "elsewhere",
        "recreate",
        "zookeeper:2181",
        "s",
        7.0,
        {"pool": "bsp"},
    )
    monkeypatch.setenv("BSP_PLANNER_K8S_NODE_SELECTOR", "nonsense")
    with pytest.raises(InputError, match="key=value"):
        KubernetesBackend("r1", kubeconfig=api.kubeconfig, image="i")


def test_the_fit_check_is_skipped_with_a_warning_when_nodes_cannot_be_read():
    rules = rules_from_manifests(render_base(), NS, N.SERVICE_ACCOUNT)
    with FakeApiServer(rules=rules) as api:
        api.add_node("n", "2")
        b = backend(api)
        assert b.check_configuration({"a": 64000}) == {"a": "start"}  # not checked: the pending timeout guards
        assert any("node-reader" in w for w in b.warnings)
        assert any(c.status == 403 and c.resource == "nodes" for c in api.calls)
    with FakeApiServer(rules=rules + rules_from_manifests(load_all(NODE_READER), NS, N.SERVICE_ACCOUNT)) as api:
        api.add_node("n", "2")
        b = backend(api)
        with pytest.raises(ConfigurationDoesNotFit):
            b.check_configuration({"a": 64000})


def test_the_role_in_jobs_k8s_grants_every_call_the_backend_makes_and_nothing_it_does_not(api):
    """Under the Role's rules (parsed from the rendered base), a whole life cycle runs without a 403;
    together with the profiler's calls (tests/test_k8s_profiling.py) they use every rule."""
    rules = rules_from_manifests(render_base(), NS, N.SERVICE_ACCOUNT)
    with FakeApiServer(rules=rules, version="v1.33.0") as fake:
        fake.add_node("n", "8")
        b = backend(fake)
        b.check(_job(), 2000, 4000)
        b.cleanup_stale()
        b.start_task(launch("affinity"), 1000)
        b.start_task(launch("atomic"), 1000)
        b.wait_running()
        b.resize_task("affinity", 1500)
        b.recreate_task(launch("atomic", 1), 500)
        b.wait_running()
        b.stop_task("atomic")
        b.close()
        assert [c for c in fake.calls if c.status == 403 and c.namespace is not None] == []
        used = fake.used_permissions()
    granted = {(g, r, v) for (g, r), verbs in ROLE_RULES.items() for v in verbs}
    assert used <= granted
    the_profilers = {("batch", "jobs", v) for v in ("create", "delete", "list")}
    the_watchers = {(g, r, v) for (g, r), vs in ROLE_RULES.items() if r in ("events", "bspjobs/status") for v in vs}
    assert used >= granted - the_profilers - the_watchers  # the watchers': tests/test_operator.py


def test_make_backend_builds_it_from_a_kubeconfig(api, tmp_path, monkeypatch):
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": NS}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setenv("BSP_PLANNER_IMAGE", "bsp-planner:dev")
    b = make_backend(
        "kubernetes",
        run_id="live-20261121-101500-ab12",
        log_dir=tmp_path / "logs",
        stress_ng="stress-ng",
        cgroup_prefix="bsp-planner",
    )
    assert isinstance(b, KubernetesBackend) and b.namespace == NS
    assert "context fake" in b.info()["kubernetes"]["where"]
    b.start_task(launch("affinity"), 250)
    assert api.pod(NS, N.pod_name("live-20261121-101500-ab12", "affinity")) is not None
    b.close()


def test_no_kubeconfig_and_no_cluster_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InputError, match="no Kubernetes configuration"):
        KubernetesBackend("r1")


def _job():
    from bsp_planner.inputs.job import Job, SeriesRef, Task

    return Job("j", tuple(Task(t, "cpu", 1.0, SeriesRef(Path("-"))) for t in ("affinity", "atomic")))


# -- an unreachable cluster ----------------------------------------------------------------------------
def _unreachable_kubeconfig(tmp_path) -> tuple[str, Path]:
    """A kubeconfig whose server is a closed loopback port (nothing listens: connection refused)."""
    from bsp_planner.runtime.zkserver import free_port

    url = f"http://127.0.0.1:{free_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "gone",
                "clusters": [{"name": "gone", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
            }
        )
    )
    return url, kubeconfig


def test_an_unreachable_api_server_names_the_server_and_how_to_point_at_another(tmp_path):
    from bsp_planner.k8s.cluster import Cluster, KubernetesError
    from bsp_planner.k8s.config import connect

    url, kubeconfig = _unreachable_kubeconfig(tmp_path)
    cluster = Cluster(connect(NS, kubeconfig=str(kubeconfig)), request_timeout_s=5)
    with pytest.raises(KubernetesError) as info:
        cluster.capabilities()
    text = str(info.value)
    assert f"cannot reach the Kubernetes API server at {url} (kubeconfig {kubeconfig} context gone)" in text
    assert "--kubeconfig" in text and "--context" in text and "KUBECONFIG" in text
    with pytest.raises(KubernetesError, match="cannot reach the Kubernetes API server"):
        cluster.list_nodes()  # the optional reads too


def test_run_on_an_unreachable_cluster_is_a_clear_error_and_leaves_no_run(tmp_path):
    import subprocess
    import sys

    from zk_fixtures import tiny_experiment

    url, kubeconfig = _unreachable_kubeconfig(tmp_path)
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bsp_planner.cli",
            "run",
            "--backend",
            "kubernetes",
            "-e",
            str(exp),
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            NS,
            "--image",
            "bsp-planner:dev",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--run-id",
            "nocluster",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"cannot reach the Kubernetes API server at {url} (kubeconfig {kubeconfig} context gone)" in err
    assert "--kubeconfig" in err and "Traceback" not in out.stderr
    assert not (tmp_path / "runs" / "nocluster").exists()

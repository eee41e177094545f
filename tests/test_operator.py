"""The BspJob resource and its operator, against FakeApiServer (FOR LOGIC TESTS ONLY: its Job "runs" by the
outcome a test gives, and a pod dies when a test says so). What a user relies on: applying a BspJob makes
its coordinator Job, the status follows the run to Succeeded with the totals the coordinator reported, a
coordinator that dies is resumed (and one that refused its inputs is not), a malformed spec is one line in
status, and each side's calls are exactly what its Role grants."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)
import yaml
from k8s_fixtures import NS

from bsp_planner.k8s import bspjob as B
from bsp_planner.k8s.cluster import ROLE_RULES
from bsp_planner.k8s.config import connect
from bsp_planner.k8s.objects import OPERATOR_RULES, ReportingCluster
from bsp_planner.k8s.operator import reconcile
from bsp_planner.runtime.backends.kubernetes.events import KubernetesEvents
from bsp_planner.runtime.backends.kubernetes.job_status import BspJobStatus
from bsp_planner.runtime.watchers import Watchers
from bsp_planner.testing.fake_apiserver import FakeApiServer
from bsp_planner.testing.fake_cluster import JobOutcome
from bsp_planner.testing.fake_rbac import rules_from_manifests

from cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "jobs" / "k8s"
OPERATOR_YAML = K8S / "components" / "operator" / "operator.yaml"
IMAGE = "bsp-planner:dev"


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd() -> dict:
    return load_all(K8S / "bspjob-crd.yaml")[0]


def bspjob(name: str, **spec) -> dict:
    return {"apiVersion": B.API_VERSION, "kind": B.KIND, "metadata": {"name": name}, "spec": spec}


def apply(c: Cluster, obj: dict) -> dict:
    """`kubectl apply` of a new BspJob, by the cluster's user (not one of the two accounts): a create."""
    c.fake.rules = None
    fn = c.api.custom.create_namespaced_custom_object
    return fn(B.GROUP, B.VERSION, c.api.namespace, B.PLURAL, obj)


def until(what: str, check, timeout_s: float = 20.0):
    """`check()`'s first true value (each call moves the fake on), or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


class Cluster:
    """A fake cluster with the CRD applied, as the operator's and the coordinator's accounts see it."""

    def __init__(self, api: FakeApiServer) -> None:
        self.fake = api
        self.api = ReportingCluster(connect(NS, kubeconfig=api.kubeconfig))
        api.resources.add_crd(crd())
        api.add_node("node-a", "4")
        docs = load_all(K8S / "rbac.yaml") + load_all(OPERATOR_YAML)
        self.operator_rules = rules_from_manifests(docs, NS, "bsp-planner-operator")
        self.coordinator_rules = rules_from_manifests(docs, NS, "bsp-planner-coordinator")
        api.rules = self.operator_rules

    def look(self, name: str) -> dict:
        """One operator look at the BspJob; its status after."""
        self.fake.rules = self.operator_rules
        obj = self.api.get_bspjob(name)
        assert obj is not None
        reconcile(self.api, obj, lambda: IMAGE)
        return (self.api.get_bspjob(name) or {}).get("status") or {}

    def phase(self, name: str, phase: str, timeout_s: float = 20.0) -> dict:
        return until(f"phase {phase}", lambda: (st := self.look(name)).get("phase") == phase and st, timeout_s)


#: a coordinator Job that runs until the test ends it (:func:`end_the_job`): its Running is seen however slow
#: the machine, where a Job of a fixed short length may be over before the operator's next look
RUNS_UNTIL_ENDED = JobOutcome(0, delay_s=3600)


def end_the_job(fake: FakeApiServer, job_name: str) -> None:
    """The pod of `job_name` (started, RUNS_UNTIL_ENDED) exits now with its outcome, as its coordinator ends."""
    with fake.lock:
        for key, (_, outcome) in list(fake._job_done_at.items()):
            if fake.state.pods[key]["metadata"]["labels"]["job-name"] == job_name:
                fake._job_done_at[key] = (0.0, outcome)
                return
    pytest.fail(f"no started pod of Job {job_name}")


def play_the_coordinator(c: Cluster, name: str, pod: str, steps: int = 4) -> dict:
    """What the coordinator's watchers write during a run (as its account may): every step, two of them
    reconfigured, and its end; returns the summary it ended with."""
    c.fake.rules = c.coordinator_rules
    w = Watchers([KubernetesEvents(c.api, pod), BspJobStatus(c.api, name)], (said := []).append)
    w.run_started(name, ["a", "b"], steps)
    for t in range(steps):
        rec = {
            "step": t,
            "step_s": 1.0 + t,
            "reconfigured": t in (0, 2),
            "reconfig_s": 0.5 if t in (0, 2) else 0.0,
            "reconfig_method": "in-place" if t else "start",
            "restarts": 0,
            "tasks": [{"task": "a", "cpu_millicores": 500.0}, {"task": "b", "cpu_millicores": 750.0}],
        }
        w.step_logged(rec)
    summary = {
        "steps_done": steps,
        "steps": steps,
        "live_total_s": 11.0,
        "simulated_total_s": 9.5,
        "reconfigurations": 2,
    }
    w.run_ended("finished", "", summary)
    assert said == []  # no watcher failed (a 403 would drop it with one line)
    return summary


# -- the resource and its Job -----------------------------------------------------------------------------
def test_applying_a_bspjob_runs_its_coordinator_job_and_the_status_reaches_succeeded_with_the_totals():
    with FakeApiServer(job_runner=lambda job: RUNS_UNTIL_ENDED) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc-inplace", experiment="live-inplace", planner="mpc", reconfigure="in-place", steps=4))
        st = c.look("mpc-inplace")
        assert st["phase"] == "Pending" and st["attempt"] == 1 and st["job"] == "mpc-inplace-1"
        (job,) = fake.jobs(NS)
        assert job["metadata"]["name"] == "mpc-inplace-1"
        assert job["metadata"]["ownerReferences"][0]["kind"] == B.KIND  # deleting the BspJob deletes its Job
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--experiment") + 1] == "live-inplace" and args[args.index("--steps") + 1] == "4"
        assert args[args.index("--reconfigure") + 1] == "in-place"
        st = c.phase("mpc-inplace", "Running")
        (pod,) = fake.pods(NS)
        summary = play_the_coordinator(c, "mpc-inplace", pod["metadata"]["name"])
        end_the_job(fake, "mpc-inplace-1")
        st = c.phase("mpc-inplace", "Succeeded")
    assert st["runStatus"] == "finished" and st["progress"] == "4/4" and st["step"] == 4
    assert (
        st["liveTotalSeconds"] == summary["live_total_s"]
        and st["simulatedTotalSeconds"] == summary["simulated_total_s"]
    )
    assert st["reconfigurations"] == 2 and st["resumes"] == 0
    assert "finished" in st["message"]


def test_the_crd_refuses_what_its_schema_forbids_and_a_spec_cannot_change():
    with FakeApiServer() as fake:
        c = Cluster(fake)
        from kubernetes.client.exceptions import ApiException

        for bad, where in [({"steps": 0}, "spec.steps"), ({"mode": "fast"}, "spec.mode"), ({"stepz": 3}, "stepz")]:
            with pytest.raises(Exception, match=where):
                apply(c, bspjob("bad", **bad))
        apply(c, bspjob("ok", steps=3))
        with pytest.raises(ApiException, match="cannot change"):
            c.api.custom.patch_namespaced_custom_object(
                B.GROUP,
                B.VERSION,
                NS,
                B.PLURAL,
                "ok",
                {"spec": {"steps": 5}},
                _content_type="application/merge-patch+json",
            )


@pytest.mark.parametrize(
    "name, spec, field",
    [
        ("a.b", {}, "metadata.name"),
        ("p", {"planner": "mpc ahead"}, "spec.planner"),
        ("p", {"set": ["cpu.budget_millicores"]}, "spec.set[0]"),
        ("p", {"plannerSettings": {"horizon": [1, 2]}}, "spec.plannerSettings.horizon"),
        ("p", {"maxResumes": -1}, "spec.maxResumes"),
    ],
)
def test_a_malformed_spec_fails_the_bspjob_with_one_line_and_starts_nothing(name, spec, field):
    with FakeApiServer() as fake:
        c = Cluster(fake)
        body = bspjob(name, **spec)
        fake.resources.objects[(B.GROUP, B.PLURAL, NS, name)] = {  # past the schema, as an older CRD would let it
            **body,
            "metadata": {"name": name, "namespace": NS, "uid": "u1", "resourceVersion": "1", "generation": 1},
        }
        st = c.look(name)
        assert st["phase"] == "Failed" and f"field '{field}'" in st["message"] and "\n" not in st["message"]
        assert fake.jobs(NS) == []
        assert c.look(name) == st  # a failed BspJob is left alone


# -- resuming -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["evicted", "deleted", "stopped"])
def test_a_dead_coordinator_is_resumed_by_a_new_job_and_the_run_then_succeeds(how):
    outcomes = {
        "mpc-1": JobOutcome(
            3, "stopped: ZooKeeper lost; bsp-planner run --resume mpc", delay_s=0.0 if how == "stopped" else 60
        ),
        "mpc-2": JobOutcome(0, delay_s=0.2),
    }
    with FakeApiServer(job_runner=lambda job: outcomes[job["metadata"]["name"]]) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc", steps=3))
        c.look("mpc")
        if how != "stopped":
            c.phase("mpc", "Running")
            (pod,) = fake.pods(NS)
            if how == "evicted":
                fake.evict(NS, pod["metadata"]["name"])
            else:  # `kubectl delete pod`, by the cluster's user
                fake.rules = None
                c.api.delete_pod(pod["metadata"]["name"])
        st = c.phase("mpc", "Resuming")
        assert st["attempt"] == 2 and st["resumes"] == 1 and st["job"] == "mpc-2"
        assert {"evicted": "evicted", "deleted": "gone", "stopped": "code 3"}[how] in st["message"]
        first, second = sorted(fake.jobs(NS), key=lambda j: j["metadata"]["name"])
        same = lambda j: j["spec"]["template"]["spec"]["containers"][0]  # noqa: E731
        assert same(first)["args"] == same(second)["args"] and same(first)["command"] == same(second)["command"]
        st = c.phase("mpc", "Succeeded")
        assert st["resumes"] == 1
        told = [(e["reason"], e["type"]) for e in fake.resources.events_of(NS, B.KIND, "mpc")]
    assert told == [("Resuming", "Warning"), ("Succeeded", "Normal")]  # `kubectl describe bspjob mpc`


def test_a_coordinator_that_refused_its_inputs_is_not_resumed_and_its_line_is_the_message():
    line = "error: field '--planner': unknown planner 'mcp'; known: dp, even, exppo, mpc, static:K"
    with FakeApiServer(job_runner=lambda job: JobOutcome(2, f"run mpc: ...\n{line}\n")) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc", planner="mcp"))
        c.look("mpc")
        st = c.phase("mpc", "Failed")
    assert st["message"].endswith(line) and "refused its inputs" in st["message"]
    assert st["attempt"] == 1 and len(fake.jobs(NS)) == 1


def test_resumes_stop_at_max_resumes():
    with FakeApiServer(job_runner=lambda job: JobOutcome(3, "stopped: a pod was evicted")) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc", maxResumes=1))
        st = c.phase("mpc", "Failed")
    assert st["attempt"] == 2 and "not resumed after 1 resume(s)" in st["message"]


def test_the_coordinators_script_resumes_a_run_whose_folder_exists(tmp_path):
    """The Job's own command, run by sh with a `bsp-planner` that prints its arguments: a new run the first
    time, `--resume` once the run's folder holds run.json (what an earlier pod of the BspJob left)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "bsp-planner"
    stub.write_text('#!/bin/sh\necho "$@"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    spec = B.read_spec("mpc", {"steps": 3, "set": ["cpu.budget_millicores=4000"]})
    c = B.coordinator_job({"metadata": {"name": "mpc", "uid": "u"}}, spec, 2, IMAGE)["spec"]["template"]["spec"]
    container = c["containers"][0]
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RUNS_DIR": str(tmp_path / "runs"),
        **{e["name"]: e["value"] for e in container["env"] if "value" in e},
    }

    def run() -> str:
        out = subprocess.run(container["command"] + container["args"], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run().startswith("run --backend kubernetes --run-id mpc") and "--set cpu.budget_millicores=4000" in run()
    (tmp_path / "runs" / "mpc").mkdir(parents=True)
    (tmp_path / "runs" / "mpc" / "run.json").write_text("{}")
    assert run() == f"run --resume mpc --runs-dir {tmp_path / 'runs'} --zookeeper zookeeper:2181"


# -- waiting for ZooKeeper -----------------------------------------------------------------------------------
def _wait_script_env(where: str, wait_s: str) -> dict[str, str]:
    return {**os.environ, "BSP_PLANNER_ZOOKEEPER": where, "BSP_PLANNER_ZK_WAIT_S": wait_s}


def _init_container(where: str = "r1") -> dict:
    spec = B.read_spec(where, {})
    (init,) = B.coordinator_job({"metadata": {"name": where, "uid": "u"}}, spec, 1, IMAGE)["spec"]["template"]["spec"][
        "initContainers"
    ]
    return init


def test_the_coordinator_starts_once_zookeeper_answers_and_a_zookeeper_that_never_does_is_one_line(zk_server):
    """The operator's Job's init container, run here as the image runs it: through at once against a real
    ZooKeeper; waiting (saying so once) for a server that is not up yet, through once it listens; and a
    server that never answers ends it with one line naming the address, which the pod's termination
    message carries (FallbackToLogsOnError)."""
    import socket
    import sys

    init = _init_container()
    assert init["name"] == B.WAIT_CONTAINER and init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env == {"BSP_PLANNER_ZOOKEEPER": "zookeeper:2181", "BSP_PLANNER_ZK_WAIT_S": str(B.ZOOKEEPER_WAIT_S)}
    argv = [sys.executable, *init["command"][1:]]  # `python -c SCRIPT`
    assert init["command"][0] == "python"

    up = subprocess.run(argv, env=_wait_script_env(zk_server.hosts, "30"), capture_output=True, text=True, timeout=60)
    assert up.returncode == 0 and up.stdout == "", up.stderr

    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]  # bound, not listening: connections are refused until listen()
    where = f"127.0.0.1:{port}"
    proc = subprocess.Popen(argv, env=_wait_script_env(where, "60"), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"waiting for ZooKeeper ({where}), up to 60 s"
        spare.listen()  # the server is up now
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        spare.close()

    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    where = f"127.0.0.1:{spare.getsockname()[1]}"
    try:
        out = subprocess.run(argv, env=_wait_script_env(where, "1"), capture_output=True, text=True, timeout=60)
    finally:
        spare.close()
    assert out.returncode == 1 and out.stderr.strip() == f"ZooKeeper ({where}) did not answer within 1 s"


@pytest.mark.parametrize(
    "where, wait_s, field",
    [
        ("zookeeper:abc", "600", "BSP_PLANNER_ZOOKEEPER"),
        (":2181", "600", "BSP_PLANNER_ZOOKEEPER"),
        ("zookeeper:2181", "soon", "BSP_PLANNER_ZK_WAIT_S"),
        ("zookeeper:2181", "-1", "BSP_PLANNER_ZK_WAIT_S"),
        ("zookeeper:2181", "nan", "BSP_PLANNER_ZK_WAIT_S"),
    ],
)
def test_the_zookeeper_waits_bad_settings_are_refused_with_one_line(where, wait_s, field):
    """A kustomize patch that breaks the wait's address or time: one line naming the variable, exit 2, at once."""
    import sys

    argv = [sys.executable, *_init_container()["command"][1:]]
    out = subprocess.run(argv, env=_wait_script_env(where, wait_s), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: {field}: expected ")


def _set_pod_status(fake: FakeApiServer, **status) -> None:
    """The coordinator Job's one pod, as the kubelet reports it (the fake keeps a pod it has not started as is)."""
    with fake.lock:
        (key,) = [k for k in fake.state.pods if k[0] == NS]
        fake.state.pods[key]["status"].update(status)


def test_the_bspjob_says_it_waits_for_zookeeper_and_a_zookeeper_that_never_answered_is_the_resumes_reason():
    """While the coordinator's pod waits for ZooKeeper, the BspJob stays Pending and its message says so
    (`kubectl get bspjobs -o wide`); once the coordinator runs, the message no longer does. A pod whose wait
    ran out never started the coordinator: the next attempt is made, the message naming ZooKeeper's line."""

    def container(name: str, state: dict) -> dict:  # a container's status, as the kubelet writes it
        return {"name": name, "state": state, "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0}

    waiting = container(B.WAIT_CONTAINER, {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    line = "ZooKeeper (zookeeper:2181) did not answer within 600 s"
    gave_up = container(B.WAIT_CONTAINER, {"terminated": {"exitCode": 1, "reason": "Error", "message": line}})
    coordinator_waits = container("coordinator", {"waiting": {"reason": "PodInitializing"}})
    with FakeApiServer(job_runner=lambda job: JobOutcome(0, delay_s=3600), start_delay_s=3600) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc", steps=3))
        assert c.look("mpc")["phase"] == "Pending"
        _set_pod_status(fake, initContainerStatuses=[waiting], containerStatuses=[coordinator_waits])
        st = c.look("mpc")
        assert (
            st["phase"] == "Pending"
            and st["message"] == "waiting for ZooKeeper (zookeeper:2181) before the coordinator starts"
        )
        _set_pod_status(
            fake,
            phase="Running",
            initContainerStatuses=[container(B.WAIT_CONTAINER, {"terminated": {"exitCode": 0, "reason": "Completed"}})],
            containerStatuses=[container("coordinator", {"running": {"startedAt": "2026-01-01T00:00:09Z"}})],
        )
        st = c.look("mpc")
        assert st["phase"] == "Running" and st["message"] == "ZooKeeper answered; the coordinator runs"

    with FakeApiServer(job_runner=lambda job: JobOutcome(0, delay_s=3600), start_delay_s=3600) as fake:
        c = Cluster(fake)
        apply(c, bspjob("mpc", steps=3))
        c.look("mpc")
        _set_pod_status(fake, phase="Failed", initContainerStatuses=[gave_up], containerStatuses=[coordinator_waits])
        st = c.phase("mpc", "Resuming")
    assert (
        st["attempt"] == 2 and st["message"] == f"the coordinator never started: {line}; resuming the run (attempt 2)"
    )


# -- the manifests ------------------------------------------------------------------------------------------
def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def test_the_coordinator_job_runs_as_the_bases_coordinator_job_does():
    from kubernetes import client

    base = next(d for d in load_all(K8S / "coordinator.yaml") if d["kind"] == "Job")["spec"]["template"]["spec"]
    spec = B.read_spec("r1", {"plannerSettings": {"horizon": 5}, "online": True})
    job = B.coordinator_job({"metadata": {"name": "r1", "uid": "u"}}, spec, 1, IMAGE)
    client.V1Job.model_validate(job)
    mine = job["spec"]["template"]["spec"]
    for key in ("serviceAccountName", "restartPolicy", "securityContext", "volumes"):
        assert mine[key] == base[key], key
    (c,) = mine["containers"]
    bc = next(x for x in base["containers"] if x["name"] == "coordinator")
    assert c["securityContext"] == bc["securityContext"] and c["volumeMounts"] == bc["volumeMounts"]
    assert c["ports"] == bc["ports"]  # its metrics, scraped as the base's coordinator's are
    # both wait for ZooKeeper the same way (the operator's pod longer: its Job is not retried by Kubernetes)
    (init,), (base_init,) = mine["initContainers"], base["initContainers"]
    assert (
        init["env"][0]
        == base_init["env"][0]
        == {"name": "BSP_PLANNER_ZOOKEEPER", "value": env_of(bc)["BSP_PLANNER_ZOOKEEPER"]["value"]}
    )
    assert {k: v for k, v in init.items() if k not in ("env", "image")} == {
        k: v for k, v in base_init.items() if k not in ("env", "image")
    }
    base_annotations = next(d for d in load_all(K8S / "coordinator.yaml") if d["kind"] == "Job")["spec"]["template"]
    assert job["spec"]["template"]["metadata"]["annotations"] == base_annotations["metadata"]["annotations"]
    env = {e["name"]: e for e in c["env"]}
    for e in bc["env"]:
        if e["name"] not in ("EXPERIMENT", "PLANNER", "RECONFIGURE", "STEPS", "EXTRA_ARGS", "RUN_ID"):
            assert env[e["name"]] == e, e["name"]
    assert env[B.BSPJOB_ENV]["value"] == "r1" and env["RUN_ID"]["value"] == "r1"
    assert "--online" in c["args"] and c["args"][c["args"].index("--set") + 1] == "planner.horizon=5"


def test_the_operators_role_grants_exactly_its_rules_and_nothing_cluster_wide():
    docs = load_all(OPERATOR_YAML)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {
        (g, r): tuple(sorted(rule["verbs"]))
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert granted == {k: tuple(sorted(v)) for k, v in OPERATOR_RULES.items()}
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    from kubernetes import client

    client.V1Deployment.model_validate(deploy)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == role["metadata"]["name"]
    assert pod["containers"][0]["args"] == ["k8s", "operator"]
    kust = yaml.safe_load((OPERATOR_YAML.parent / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component" and kust["resources"] == [OPERATOR_YAML.name]


def test_each_side_calls_only_what_its_role_grants():
    """The operator's calls and the coordinator's watchers' calls, each under its own Role (a call outside it
    would be a 403 and fail the flow above), and each Role no wider than what they call."""
    with FakeApiServer(job_runner=lambda job: RUNS_UNTIL_ENDED) as fake:
        c = Cluster(fake)
        apply(c, bspjob("r", steps=2))
        c.phase("r", "Running")
        n = len(fake.calls)
        operator_calls = {
            (x.group, x.resource, x.verb) for x in fake.calls[:n] if x.verb != "create" or x.resource != B.PLURAL
        }
        (pod,) = fake.pods(NS)
        play_the_coordinator(c, "r", pod["metadata"]["name"], steps=4)  # two reconfigurations: one Event counted twice
        coordinator_calls = {(x.group, x.resource, x.verb) for x in fake.calls[n:]}
        end_the_job(fake, "r-1")
        c.phase("r", "Succeeded")
    assert all(x.status != 403 for x in fake.calls)
    assert {(g, r) for g, r, _ in operator_calls} <= set(OPERATOR_RULES)
    assert coordinator_calls == {
        ("", "pods", "get"),
        ("", "events", "create"),
        ("", "events", "patch"),
        (B.GROUP, "bspjobs/status", "get"),
        (B.GROUP, "bspjobs/status", "patch"),
    }
    assert {(g, r, v) for (g, r), vs in ROLE_RULES.items() if r in ("events", "bspjobs/status") for v in vs} == {
        x for x in coordinator_calls if x[1] != "pods"
    }


# -- the command ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, field",
    [
        (["--interval", "0"], "--interval"),
        (["--interval", "nan"], "--interval"),
        (["--namespace", "Bad_NS"], "--namespace"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
    ],
)
def test_bad_operator_options_are_refused_with_one_line(args, field, monkeypatch, capsys):
    code, out, err = run_cli(["k8s", "operator", *args], monkeypatch, capsys)
    assert code == 2 and f"field '{field}'" in err and "Traceback" not in err


# -- with kubectl ------------------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_apply_of_the_example_bspjob_runs_it_and_kubectl_shows_its_phase_progress_and_events():
    example = K8S / "components" / "operator" / "example-bspjob.yaml"
    with FakeApiServer(job_runner=lambda job: RUNS_UNTIL_ENDED) as fake:
        fake.add_node("node-a", "4")

        def kubectl(*args: str) -> str:
            fake.rules = None  # the cluster's user
            out = subprocess.run(
                ["kubectl", "--kubeconfig", fake.kubeconfig, "-n", NS, *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            return out.stdout

        assert "created" in kubectl("apply", "--validate=false", "-f", str(K8S / "bspjob-crd.yaml"))
        assert "bspjob.bsp-planner.io/mpc-inplace created" in kubectl("apply", "--validate=false", "-f", str(example))
        c = Cluster(fake)
        c.phase("mpc-inplace", "Running")
        assert " Running " in kubectl("get", "bspjobs")
        (pod,) = fake.pods(NS)
        play_the_coordinator(c, "mpc-inplace", pod["metadata"]["name"], steps=4)
        end_the_job(fake, "mpc-inplace-1")
        c.phase("mpc-inplace", "Succeeded")
        table = kubectl("get", "bspjobs").splitlines()
        described = kubectl("describe", "job", "mpc-inplace-1")
        events = kubectl("get", "events")
    assert table[0].split() == ["NAME", "PHASE", "PROGRESS", "RECONFIGS", "LIVE-S", "SIMULATED-S", "AGE"]
    assert table[1].split()[:6] == ["mpc-inplace", "Succeeded", "4/4", "2", "11", "9.5"]
    assert "Reconfigured" in described and "(x2 over" in described and "RunFinished" in described
    assert "job/mpc-inplace-1" in events and "ResizeDeferred" not in events


def test_the_operator_under_kopf_takes_an_applied_bspjob_to_succeeded_within_its_role():
    """`bsp-planner k8s operator` as its Deployment runs it (kopf: login, list and watch, the create handler and
    the timer), against the fake with the operator's Role only."""
    import threading

    from bsp_planner.k8s import operator

    with FakeApiServer(job_runner=lambda job: JobOutcome(0, delay_s=1.0)) as fake:
        c = Cluster(fake)
        apply(c, bspjob("kopf-run", steps=2))
        fake.rules = c.operator_rules
        stop = threading.Event()
        kw = dict(kubeconfig=fake.kubeconfig, interval_s=1.0, image=IMAGE, stop_flag=stop)
        thread = threading.Thread(target=operator.run, args=(NS,), kwargs=kw, daemon=True)
        thread.start()
        try:
            seen: list[str] = []

            def phase() -> str | None:
                st = (c.api.get_bspjob("kopf-run") or {}).get("status") or {}
                if st.get("phase") and st["phase"] not in seen:
                    seen.append(st["phase"])
                return st.get("phase") if st.get("phase") in B.FINAL_PHASES else None

            assert until("the operator to finish the BspJob", phase, timeout_s=60) == "Succeeded"
        finally:
            stop.set()
            thread.join(timeout=30)
        assert not thread.is_alive()
    assert seen[-1] == "Succeeded"
    assert [j["metadata"]["name"] for j in fake.jobs(NS)] == ["kopf-run-1"]
    assert not [x for x in fake.calls if x.status == 403], [x for x in fake.calls if x.status == 403]

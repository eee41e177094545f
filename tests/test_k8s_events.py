"""A run's Kubernetes Events, on its coordinator Job, against FakeApiServer (FOR LOGIC TESTS ONLY) under the
coordinator's Role from jobs/k8s/rbac.yaml: what `kubectl describe job` and `kubectl get events` show of a
run (reason, type, message with its counts), repeats of one reason counted on one Event, and a live run
through the kubernetes backend telling them as it goes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)
import yaml
from k8s_fixtures import NS, SECRET, fake_cluster_backend, kubelet

from bsp_planner.core.errors import InputError
from bsp_planner.k8s import bspjob as B
from bsp_planner.k8s import names as N
from bsp_planner.k8s.config import connect
from bsp_planner.k8s.objects import ReportingCluster
from bsp_planner.runtime.backends.kubernetes.events import KubernetesEvents
from bsp_planner.runtime.backends.kubernetes.job_status import BspJobStatus, cluster_watchers
from bsp_planner.runtime.run_settings import RunSettings
from bsp_planner.runtime.watchers import Watchers
from bsp_planner.testing.fake_apiserver import FakeApiServer
from bsp_planner.testing.fake_cluster import JobOutcome
from bsp_planner.testing.fake_rbac import rules_from_manifests

K8S = Path(__file__).resolve().parent.parent / "jobs" / "k8s"


def coordinator_rules():
    docs = [d for d in yaml.safe_load_all((K8S / "rbac.yaml").read_text()) if d]
    return rules_from_manifests(docs, NS, N.SERVICE_ACCOUNT)


def coordinator_pod(fake: FakeApiServer, api: ReportingCluster, job: str = "bsp-planner-coordinator") -> str:
    """A coordinator Job (made by the cluster's user, running until the test ends); its pod's name."""
    fake.rules = None
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "coordinator", "image": "i"}]}}
        },
    }
    api.create_job(body)
    fake.rules = coordinator_rules()
    (pod,) = fake.pods(NS)
    return pod["metadata"]["name"]


def record(t: int, reconfigured: bool, restarts: int = 0) -> dict:
    return {
        "step": t,
        "step_s": 1.0,
        "reconfigured": reconfigured,
        "reconfig_s": 0.53 if reconfigured else 0.0,
        "reconfig_method": "in-place",
        "restarts": restarts,
        "tasks": [{"task": "a", "cpu_millicores": 500.0}, {"task": "b", "cpu_millicores": 1250.0}],
    }


@pytest.fixture
def fake():
    with FakeApiServer(job_runner=lambda job: JobOutcome(0, delay_s=3600)) as api:
        api.add_node("node-a", "4")
        yield api


def test_a_runs_news_are_events_on_its_coordinator_job_and_repeats_are_counted(fake):
    api = ReportingCluster(connect(NS, kubeconfig=fake.kubeconfig))
    pod = coordinator_pod(fake, api)
    w = Watchers([KubernetesEvents(api, pod)], (said := []).append)
    w.run_started("r1", ["a", "b"], 6)
    for t in range(6):
        w.step_logged(record(t, reconfigured=t in (0, 2, 5), restarts=int(t == 3)))
        if t == 3:
            w.noticed("deferred", "node-a has no room for task b's 1250m now", tasks=1, free_millicores=900)
            w.noticed("replanned", "planned again on what node-a has free", step=4)
        if t == 4:
            w.noticed("deferred", "node-a has no room for task a's 500m now", tasks=1, free_millicores=300)
            w.noticed("restarted", "told by the step record instead")
            w.noticed("task_failed", "task b's worker exited with code 1 in step 4", step=4, exit_code=1, failures=1)
    summary = {"steps_done": 6, "live_total_s": 8.2, "simulated_total_s": 7.9, "reconfigurations": 3}
    w.run_ended("finished", "", summary)
    assert said == [] and all(c.status != 403 for c in fake.calls)

    events = {e["reason"]: e for e in fake.resources.events_of(NS, "Job", "bsp-planner-coordinator")}
    assert set(events) == {
        "RunStarted",
        "Reconfigured",
        "WorkerRestarted",
        "ResizeDeferred",
        "Replanned",
        "TaskFailed",
        "RunFinished",
    }
    assert fake.resources.events_of(NS, "Pod") == []  # on the Job, where `kubectl describe job` shows them
    counts = {r: e["count"] for r, e in events.items()}
    assert counts == {
        "RunStarted": 1,
        "Reconfigured": 3,
        "WorkerRestarted": 1,
        "ResizeDeferred": 2,
        "Replanned": 1,
        "TaskFailed": 1,
        "RunFinished": 1,
    }
    types = {r: e["type"] for r, e in events.items()}
    assert types["ResizeDeferred"] == types["WorkerRestarted"] == types["TaskFailed"] == "Warning"
    assert types["Reconfigured"] == "Normal"
    assert (
        events["TaskFailed"]["message"]
        == "task b's worker exited with code 1 in step 4 (exit_code=1, failures=1, step=4)"
    )
    # the latest repeat's message, with its counts
    assert (
        events["ResizeDeferred"]["message"] == "node-a has no room for task a's 500m now (free_millicores=300, tasks=1)"
    )
    assert events["Reconfigured"]["message"] == "step 5: in-place in 0.53 s; CPU now a=500m, b=1250m"
    assert "live 8.20 s, simulated 7.90 s, 3 reconfiguration(s)" in events["RunFinished"]["message"]
    fake.rules = None  # the cluster's user, with kubectl
    job = api.get_job("bsp-planner-coordinator") or {}
    assert {e["involvedObject"]["uid"] for e in events.values()} == {job["metadata"]["uid"]}
    # what `kubectl get events` lists: one object per reason, not one per occurrence
    listed = api.core.list_namespaced_event(NS).items
    assert len(listed) == 7


def test_the_end_of_a_stopped_or_failed_run_is_a_warning_with_its_first_line(fake):
    api = ReportingCluster(connect(NS, kubeconfig=fake.kubeconfig))
    pod = coordinator_pod(fake, api)
    ev = KubernetesEvents(api, pod)
    ev.run_started("r1", ["a"], 3)
    ev.run_ended(
        "interrupted", "ZooKeeper lost for 30 s; the run stopped after step 1; bsp-planner run --resume r1\nmore", {}
    )
    ev.run_ended("failed", "task a's worker died 3 times in step 2", {})
    events = {e["reason"]: e for e in fake.resources.events_of(NS)}
    assert events["RunInterrupted"]["type"] == events["RunFailed"]["type"] == "Warning"
    assert events["RunInterrupted"]["message"].endswith("bsp-planner run --resume r1")
    assert "task a's worker died 3 times" in events["RunFailed"]["message"]


def test_a_coordinator_without_the_events_rule_runs_on_with_one_line(fake):
    api = ReportingCluster(connect(NS, kubeconfig=fake.kubeconfig))
    pod = coordinator_pod(fake, api)
    fake.rules = [r for r in coordinator_rules() if "events" not in r.resources]
    w = Watchers([KubernetesEvents(api, pod)], (said := []).append)
    w.run_started("r1", ["a"], 3)
    w.step_logged(record(0, True))
    assert (
        len(said) == 1 and said[0].startswith("KubernetesEvents stopped: KubernetesError:") and "forbidden" in said[0]
    )


def test_an_in_cluster_kubernetes_coordinator_gets_the_watchers_its_environment_names(fake, monkeypatch, tmp_path):
    k8s = {"namespace": NS, "kubeconfig": fake.kubeconfig}
    local = RunSettings(experiment="x", backend="local")
    on_k8s = RunSettings(experiment="x", backend="kubernetes", kubernetes=k8s)
    monkeypatch.delenv("BSP_PLANNER_POD", raising=False)
    monkeypatch.delenv(B.BSPJOB_ENV, raising=False)
    assert cluster_watchers(on_k8s) == []  # outside a cluster: nothing to post to
    monkeypatch.setenv("BSP_PLANNER_POD", "coord-abc")
    assert cluster_watchers(local) == []
    assert [type(w) for w in cluster_watchers(on_k8s)] == [KubernetesEvents]
    monkeypatch.setenv(B.BSPJOB_ENV, "mpc")
    watchers = cluster_watchers(on_k8s)
    assert [type(w) for w in watchers] == [KubernetesEvents, BspJobStatus]
    assert watchers[1].name == "mpc" and watchers[0].api.namespace == NS
    monkeypatch.setenv(B.BSPJOB_ENV, "Not A Name")
    with pytest.raises(InputError, match=r"BSP_PLANNER_BSPJOB.*expected a BspJob's name"):
        cluster_watchers(on_k8s)


# -- a live run ---------------------------------------------------------------------------------------------
def _live_problem() -> str | None:
    from zk_fixtures import zk_problem

    return zk_problem() or (
        None if shutil.which("stress-ng") else "stress-ng is not installed (apt-get install stress-ng)"
    )


@pytest.mark.slow
@pytest.mark.skipif(_live_problem() is not None, reason=_live_problem() or "")
def test_a_live_kubernetes_run_posts_its_events_and_fills_its_bspjobs_status(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.coordinator import Coordinator

    from zk_fixtures import settings, tiny_experiment

    exp = tiny_experiment(tmp_path / "exp", steps=4)
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    with FakeApiServer(
        pod_runner=kubelet(tmp_path, secrets, workers_only=True),
        job_runner=lambda job: JobOutcome(0, delay_s=3600),
        delete_delay_s=5.0,
    ) as fake:
        fake.add_node("node-a", "4")
        fake.resources.add_crd(next(yaml.safe_load_all((K8S / "bspjob-crd.yaml").read_text())))
        api = ReportingCluster(connect(NS, kubeconfig=fake.kubeconfig))
        api.custom.create_namespaced_custom_object(
            B.GROUP,
            B.VERSION,
            NS,
            B.PLURAL,
            {"apiVersion": B.API_VERSION, "kind": B.KIND, "metadata": {"name": "k8s-ev"}, "spec": {}},
        )
        pod = coordinator_pod(fake, api)
        fake.rules = None  # the workers' pods are the backend's (its Role: tests/test_k8s_backend.py)
        backend = fake_cluster_backend("k8s-ev", fake, zk_server, tmp_path)
        coord = Coordinator(
            settings(exp, zk_server, creds_file, planner="static:1", reconfigure="in-place"),
            "k8s-ev",
            tmp_path / "runs",
            backend=backend,
            say=(said := []).append,
            watchers=[KubernetesEvents(api, pod), BspJobStatus(api, "k8s-ev")],
        )
        result = coord.run()
        assert result.status == "finished", said
        events = {e["reason"]: e for e in fake.resources.events_of(NS, "Job", "bsp-planner-coordinator")}
        status = (api.get_bspjob("k8s-ev") or {}).get("status") or {}
    assert not [s for s in said if "stopped:" in s], said  # no watcher was dropped
    records = [json.loads(x) for x in (tmp_path / "runs" / "k8s-ev" / "steps.jsonl").read_text().splitlines()]
    reconfigured = sum(r["reconfigured"] for r in records)
    assert reconfigured >= 1 and events["Reconfigured"]["count"] == reconfigured
    assert events["RunStarted"]["count"] == events["RunFinished"]["count"] == 1
    sm = result.summary
    assert f"live {sm['live_total_s']:.2f} s" in events["RunFinished"]["message"]
    assert status["runStatus"] == "finished" and status["progress"] == f"{len(records)}/{len(records)}"
    assert (
        status["liveTotalSeconds"] == sm["live_total_s"] and status["simulatedTotalSeconds"] == sm["simulated_total_s"]
    )
    assert status["reconfigurations"] == sm["reconfigurations"] == reconfigured


@pytest.mark.slow
@pytest.mark.skipif(_live_problem() is not None, reason=_live_problem() or "")
def test_a_task_killed_mid_run_is_a_task_failed_event_naming_it_its_signal_and_step(tmp_path, zk_server, creds_file):
    """Task b's worker is killed (SIGKILL, as the OOM killer does) between steps 1 and 2: the run restarts it
    from its checkpoint and finishes, and `kubectl get events` shows TaskFailed on the coordinator's Job
    with the task, how it ended, the step and the counts, beside the WorkerRestarted of the step's record."""
    import signal

    from bsp_planner.runtime.coordinator import Coordinator

    from zk_fixtures import settings, tiny_experiment

    exp = tiny_experiment(tmp_path / "exp", steps=4)
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    run_pod = kubelet(tmp_path, secrets, workers_only=True)
    containers: dict[str, list] = {}  # task -> its pods' processes, in the order they started

    def run_and_keep(pod: dict):
        proc = run_pod(pod)
        task = (pod["metadata"].get("labels") or {}).get(N.LABEL_TASK)
        containers.setdefault(task or "", []).append(proc)
        return proc

    with FakeApiServer(pod_runner=run_and_keep, job_runner=lambda job: JobOutcome(0, delay_s=3600)) as fake:
        fake.add_node("node-a", "4")
        api = ReportingCluster(connect(NS, kubeconfig=fake.kubeconfig))
        pod = coordinator_pod(fake, api)
        fake.rules = None  # the workers' pods are the backend's (its Role: tests/test_k8s_backend.py)
        events = KubernetesEvents(api, pod)

        class KillAfterStep1:
            def run_started(self, run_id, tasks, steps): ...
            def noticed(self, kind, message, **counts): ...
            def run_ended(self, status, message, summary): ...

            def step_logged(self, rec):
                if rec["step"] == 1:  # before step 2 is published: the worker is gone when it starts
                    containers["b"][-1].send_signal(signal.SIGKILL)

        coord = Coordinator(
            settings(exp, zk_server, creds_file, planner="even", reconfigure="in-place"),
            "k8s-kill",
            tmp_path / "runs",
            backend=fake_cluster_backend("k8s-kill", fake, zk_server, tmp_path),
            say=(said := []).append,
            watchers=[events, KillAfterStep1()],
        )
        result = coord.run()
        posted = {e["reason"]: e for e in fake.resources.events_of(NS, "Job", "bsp-planner-coordinator")}
    assert result.status == "finished", said
    assert len(containers["b"]) == 2  # restarted once, from its checkpoint
    failed = posted["TaskFailed"]
    assert failed["type"] == "Warning" and failed["count"] == 1
    assert failed["message"] == (
        "task b's worker was killed by SIGKILL (signal 9) in step 2: restarting it from its checkpoint "
        "(failures=1, signal=9, step=2)"
    )
    assert posted["WorkerRestarted"]["message"].startswith("step 2: 1 worker restart(s)")

"""A live local run serves /metrics while it runs: what Prometheus scrapes from it (read back with the
client's own exposition parsers) is what the run log records, step by step; the endpoint ends with the run.

Each scrape is made the moment a step is logged (a watcher after the metrics one), so it lands within the
run however busy the machine is, and compares with the records logged so far.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

pytest.importorskip("prometheus_client", reason="prometheus-client is not installed (pip install 'bsp-planner[live]')")
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.metrics import METRICS, RunMetrics

from zk_fixtures import assert_nothing_left, needs_tasks, settings, tiny_experiment

pytestmark = [needs_tasks, pytest.mark.usefixtures("reap_runs"), pytest.mark.slow]  # live runs


def scrape(port: int, openmetrics: bool = False) -> dict[str, float]:
    """{sample name{labels}: value} of one GET /metrics, as Prometheus would ask for it."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    out: dict[str, float] = {}
    for family in parse(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class Scraper:
    """A watcher after the metrics one: scrapes the endpoint as each step is logged."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.records: list[dict] = []
        self.seen: list[dict[str, float]] = []

    def run_started(self, run_id, tasks, steps):
        pass

    def step_logged(self, rec):
        self.records.append(rec)
        self.seen.append(scrape(self.port, openmetrics=len(self.records) % 2 == 0))

    def noticed(self, kind, message, **counts):
        pass

    def run_ended(self, status, message, summary):
        pass


def test_a_live_run_serves_metrics_that_match_its_run_log(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=5, penalty=0.0)
    metrics = RunMetrics(tmp_path / "runs")
    port = metrics.serve("127.0.0.1", 0)
    assert scrape(port)["bsp_planner_run_phase{bsp_planner_run_phase=starting}"] == 1
    scraper = Scraper(port)
    s = settings(exp, zk_server, creds_file, planner="static:1", reconfigure="in-place")
    coord = Coordinator(s, "metrics", tmp_path / "runs", watchers=[metrics, scraper])
    try:
        assert coord.run().status == "finished"
        after = scrape(port)
    finally:
        metrics.close()
    run_dir = tmp_path / "runs" / "metrics"
    logged = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert scraper.records == logged and len(logged) == 5
    assert any(r["reconfigured"] for r in logged[1:]), "the plan should reconfigure with no penalty"
    planned = json.loads((run_dir / "run.json").read_text())["reconfigure_cost"]["planned_s"]
    for k, seen in enumerate(scraper.seen):  # during the run, after step k was logged
        so_far = logged[: k + 1]
        assert seen["bsp_planner_run_phase{bsp_planner_run_phase=running}"] == 1
        assert seen["bsp_planner_run_steps"] == 5
        assert seen["bsp_planner_steps_completed_total"] == k + 1
        assert seen["bsp_planner_step_duration_seconds_count"] == k + 1
        assert seen["bsp_planner_step_duration_seconds_sum"] == pytest.approx(sum(r["step_s"] for r in so_far))
        assert seen["bsp_planner_step_critical_path_seconds_sum"] == pytest.approx(
            sum(r["critical_path_s"] for r in so_far)
        )
        assert seen["bsp_planner_barrier_wait_seconds_sum"] == pytest.approx(sum(r["barrier_s"] for r in so_far))
        assert seen["bsp_planner_decision_duration_seconds_sum"] == pytest.approx(
            sum(r["decision_ms"] for r in so_far) / 1e3
        )
        for method in {r["reconfig_method"] for r in so_far if r["reconfigured"]}:
            done = [r for r in so_far if r["reconfigured"] and r["reconfig_method"] == method]
            assert seen[f"bsp_planner_reconfigurations_total{{method={method}}}"] == len(done)
            assert seen[f"bsp_planner_reconfiguration_seconds_total{{method={method}}}"] == pytest.approx(
                sum(r["reconfig_s"] for r in done)
            )
            assert seen[f"bsp_planner_reconfiguration_planned_seconds_total{{method={method}}}"] == pytest.approx(
                planned * len(done)
            )
        for x in logged[k]["tasks"]:
            assert seen[f"bsp_planner_task_cpu_millicores{{task={x['task']}}}"] == x["cpu_millicores"]
            assert seen[f"bsp_planner_task_assigned_workload{{task={x['task']}}}"] == pytest.approx(x["workload"])
            assert seen[f"bsp_planner_task_step_seconds{{task={x['task']}}}"] == pytest.approx(x["measured_s"])
            assert seen[f"bsp_planner_task_forecast_error_ratio{{task={x['task']}}}"] == pytest.approx(
                x["measured_s"] / x["forecast_s"] - 1
            )
    info = [k for k in scraper.seen[0] if k.startswith("bsp_planner_run_info")]
    assert info == [
        "bsp_planner_run_info{backend=local,mode=perfect,planner=static:1,reconfigure=in-place,run_id=metrics}"
    ]
    # every declared metric is served under its declared name (labelled ones once they have a value)
    families = {name.split("{")[0] for name in after}
    unfilled = {"bsp_planner_task_reported_workload", "bsp_planner_run_events_total"}  # stressors report none
    assert {m.exposed for m in METRICS} - unfilled <= {
        f.removesuffix("_sum").removesuffix("_count").removesuffix("_bucket") for f in families
    }
    assert after["bsp_planner_run_phase{bsp_planner_run_phase=finished}"] == 1
    with pytest.raises(OSError):  # the endpoint ended with the run
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert_nothing_left("metrics")


def test_the_kubernetes_coordinator_serves_the_same_metrics(tmp_path, zk_server, creds_file):
    """The in-cluster coordinator's backend, on the fake API server (its "kubelet" runs each pod as a local
    process): reconfigurations by the method that really ran, against the cost the backend measured and
    the plan charged."""
    pytest.importorskip("kubernetes", reason="the official kubernetes client is not installed")
    from k8s_fixtures import SECRET, fake_cluster_backend, kubelet

    from bsp_planner.testing.fake_apiserver import FakeApiServer

    exp = tiny_experiment(tmp_path / "exp", steps=3)
    metrics = RunMetrics(tmp_path / "runs")
    port = metrics.serve("127.0.0.1", 0)
    scraper = Scraper(port)
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    try:
        with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True), delete_delay_s=5.0) as api:
            api.add_node("node-a", "4")
            backend = fake_cluster_backend("k8s-metrics", api, zk_server, tmp_path)
            s = settings(exp, zk_server, creds_file, planner="static:1", reconfigure="in-place")
            coord = Coordinator(s, "k8s-metrics", tmp_path / "runs", backend=backend, watchers=[metrics, scraper])
            assert coord.run().status == "finished"
    finally:
        metrics.close()
    run_dir = tmp_path / "runs" / "k8s-metrics"
    logged = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert scraper.records == logged and len(logged) == 3
    cost = json.loads((run_dir / "run.json").read_text())["reconfigure_cost"]
    assert cost["source"] == "measured by the kubernetes backend" and cost["planned_s"] > 0
    last = scraper.seen[-1]
    info = [k for k in last if k.startswith("bsp_planner_run_info")]
    assert info == [
        "bsp_planner_run_info{backend=kubernetes,mode=perfect,planner=static:1,reconfigure=in-place,run_id=k8s-metrics}"
    ]
    changed = [r for r in logged if r["reconfigured"] and r["step"] > 0]
    assert changed, "the plan should reconfigure mid-run"
    for method in {r["reconfig_method"] for r in changed}:
        done = [r for r in changed if r["reconfig_method"] == method]
        assert last[f"bsp_planner_reconfigurations_total{{method={method}}}"] == len(done)
        assert last[f"bsp_planner_reconfiguration_seconds_total{{method={method}}}"] == pytest.approx(
            sum(r["reconfig_s"] for r in done)
        )
        assert last[f"bsp_planner_reconfiguration_planned_seconds_total{{method={method}}}"] == pytest.approx(
            cost["planned_s"] * len(done)
        )
    for x in logged[-1]["tasks"]:
        assert last[f"bsp_planner_task_cpu_millicores{{task={x['task']}}}"] == x["cpu_millicores"]

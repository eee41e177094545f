"""Live runs through the kubernetes backend against FakeApiServer: what a reconfiguration is planned to cost
against what it costs (its resizes in two batches), and a node that loses its free CPU mid-run (someone
else's pod lands as the run's resizes arrive: the kubelet defers them, the run re-plans on what is free).

FOR LOGIC TESTS ONLY: the fake "kubelet" runs each pod's container here without a CPU limit and applies a
resize `resize_delay_s` after its patch. The workers, ZooKeeper and stress-ng are real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)

from k8s_fixtures import SECRET, fake_cluster_backend, kubelet

from bsp_planner.k8s.binpack import pod_cpu_request
from bsp_planner.k8s.names import cpu_millicores
from bsp_planner.runtime.coordinator import Coordinator, RunInterrupted
from bsp_planner.testing.fake_apiserver import FakeApiServer

from zk_fixtures import DATA, EXPERIMENT, JOB, settings, write_profile, zk_problem

_problem = zk_problem() or (
    None if shutil.which("stress-ng") else "stress-ng is not installed (apt-get install stress-ng)"
)
pytestmark = [pytest.mark.skipif(_problem is not None, reason=_problem or ""), pytest.mark.slow]  # live runs

TASK_D = """
[[task]]
name = "d"
stressor = "zero"
ops_per_unit = 10
series = {{ file = "{data}/ambient_temperature_system_failure.csv", first_row = 2001, last_row = 4000 }}
"""


def experiment(folder: Path, tasks: int, steps: int) -> Path:
    """The tiny job of zk_fixtures (3 tasks; a fourth with `tasks=4`), 500m of budget per task."""
    folder.mkdir(parents=True, exist_ok=True)
    job = JOB.format(data=DATA / "datasets", ops_a=20) + (TASK_D.format(data=DATA / "datasets") if tasks == 4 else "")
    (folder / "job.toml").write_text(job)
    write_profile(folder / "profile.csv", tasks=("a", "b", "c", "d")[:tasks])
    text = EXPERIMENT.format(steps=steps, penalty=0.3)
    (folder / "exp.toml").write_text(text.replace("budget_millicores = 1500", f"budget_millicores = {500 * tasks}"))
    return folder / "exp.toml"


class Noticed:
    """A RunWatcher that keeps what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict]] = []
        self.steps: list[dict] = []
        self.on_step = lambda rec: None

    def run_started(self, run_id, tasks, steps) -> None:
        pass

    def step_logged(self, rec) -> None:
        self.steps.append(rec)
        self.on_step(rec)

    def noticed(self, kind, message, **counts) -> None:
        self.seen.append((kind, message, counts))

    def run_ended(self, status, message, summary) -> None:
        pass


#: how a run's predictions are made: precomputed (perfect knowledge), or step by step (`--online`: a forecast
#: from the history observed so far; `--learn`: a performance model learning from every step)
PREDICTIONS = {
    "precomputed": {},
    "online": {"mode": "forecast", "overrides": ["online=true", "forecast.source=persistence"]},
    # the fake kubelet sets no CPU limit, and a busy machine slows a step tenfold: neither is absurd here
    "learn": {"overrides": ["learn=true", "learning.max_ratio=1000"]},
}


def coordinator(
    tmp_path,
    zk_server,
    creds_file,
    api: FakeApiServer,
    run_id: str,
    exp: Path,
    watcher=None,
    predictions="precomputed",
    **kw,
):
    backend = fake_cluster_backend(run_id, api, zk_server, tmp_path, reconfigure="in-place")
    said: list[str] = []
    coord = Coordinator(
        settings(exp, zk_server, creds_file, planner="static:1", reconfigure="in-place", **PREDICTIONS[predictions]),
        run_id,
        tmp_path / "runs",
        backend=backend,
        say=said.append,
        watchers=[watcher] if watcher else None,
        **kw,
    )
    return coord, said


def outputs(folder: Path) -> tuple[list[dict], dict]:
    records = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    return records, json.loads((folder / "summary.json").read_text())


def run(tmp_path, zk_server, creds_file, api: FakeApiServer, run_id: str, exp: Path, watcher=None):
    coord, said = coordinator(tmp_path, zk_server, creds_file, api, run_id, exp, watcher)
    result = coord.run()
    folder = tmp_path / "runs" / run_id
    return (result, *outputs(folder), said, folder)


def test_a_four_task_reconfiguration_costs_two_round_trips_and_is_planned_at_that(tmp_path, zk_server, creds_file):
    """With a 1 s resize, every reconfiguration of a 4-task step takes at most two batches (~2 s; one pod
    after another it took up to 4 s), and the plan charged what they cost: planned within 20% of measured."""
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    exp = experiment(tmp_path / "exp", tasks=4, steps=4)
    with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True), resize_delay_s=1.0) as api:
        api.add_node("node-a", "4")
        result, records, summary, said, folder = run(tmp_path, zk_server, creds_file, api, "k8s-batches", exp)
    assert result.status == "finished"
    changes = [r for r in records if r["reconfigured"] and r["reconfig_method"] == "in-place"]
    assert len(changes) >= 2, [r["levels"] for r in records]

    def cpu(rec: dict) -> list[float]:
        return [t["cpu_millicores"] for t in rec["tasks"]]

    for r in changes:
        batches = r["resize_batches"]
        assert [b["direction"] for b in batches] == ["shrink", "grow"]  # a change under the budget: both ways
        # each batch one round trip of the 1 s resize: its pods together, less than one after another would take
        # (k pods: k s and more); on a busy machine a batch's patches and reads add up to a second or so
        assert all(1.0 <= b["seconds"] < max(2, b["tasks"]) * 1.0 for b in batches), batches
        assert r["reconfig_s"] < sum(b["seconds"] for b in batches) + 1.0  # and little else (the fit check's reads)
        changed = sum(a != b for a, b in zip(cpu(r), cpu(records[r["step"] - 1]), strict=True))
        assert sum(b["tasks"] for b in batches) == changed
    assert max(sum(b["tasks"] for b in r["resize_batches"]) for r in changes) >= 3  # more pods than round trips
    cost = json.loads((folder / "run.json").read_text())["reconfigure_cost"]
    assert cost["source"] == "measured by the kubernetes backend" and cost["probe_pods"] == 4
    assert cost["planned_s"] == pytest.approx(2 * cost["batch_s"], abs=1e-3)
    assert 1.0 <= cost["batch_s"] < cost["probe_pods"] * 1.0  # the probe's pods resized together, as a run's are
    compared = summary["reconfigure_planned_vs_measured"]
    assert compared["count"] == len(changes) and compared["planned_s"] == pytest.approx(cost["planned_s"], abs=1e-3)
    assert 0.8 <= compared["ratio"] <= 1.2, compared
    text = (folder / "summary.md").read_text()
    assert "planned against measured cost per reconfiguration" in text


@pytest.mark.parametrize("other_pod_stays", [False, True])
def test_a_node_that_loses_its_free_cpu_mid_run_is_replanned_within_the_step(
    tmp_path, zk_server, creds_file, other_pod_stays
):
    """As the first step's grows arrive, someone else's pod takes every CPU the node has free: the kubelet
    defers the grows; the run takes them back, re-reads the nodes, re-plans that very step on what is free,
    goes on without a stop, and says so (step log, summary, watchers, its output). Stopped after that step
    and resumed, it makes the same decisions again (through the re-plan) and finishes: once the other pod
    left, and while it still holds the node (the resumed run spends what its last re-plan had)."""
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    exp = experiment(tmp_path / "exp", tasks=3, steps=5)
    landed: list[float] = []
    folder = tmp_path / "runs" / "k8s-deferred"
    with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True), resize_delay_s=0.05) as api:
        api.add_node("node-a", "2")

        def land(ns: str, name: str) -> None:  # the first grow of one of the run's tasks
            pod = api.state.pods[(ns, name)]
            applied = cpu_millicores(pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"])
            grows = pod_cpu_request(pod) > applied
            if landed or "probe" in name or not grows:
                return
            free = api._node_free("node-a") + pod_cpu_request(pod) - applied  # before this grow: what is free
            api.add_foreign_pod("other-team", "batch-job", "node-a", f"{free:.0f}m")
            landed.append(free)

        api.before_resize = land
        watcher = Noticed()
        coord, said = coordinator(tmp_path, zk_server, creds_file, api, "k8s-deferred", exp, watcher)
        watcher.on_step = lambda rec: coord.request_stop() if "replanned" in rec else None
        with pytest.raises(RunInterrupted):
            coord.run()
        assert landed, "no grow happened: the test's plan did not change"
        first, _ = outputs(folder)
        foreign = api.pod("other-team", "batch-job")
        room = 2000 - pod_cpu_request(foreign)
        # the other team's job ended: the budget fits the node again, and the resume plans as the run did
        if not other_pod_stays:
            with api.lock:
                del api.state.pods[("other-team", "batch-job")]
        resumed, said_after = coordinator(tmp_path, zk_server, creds_file, api, "k8s-deferred", exp, resume=True)
        result = resumed.run()
    records, summary = outputs(folder)
    assert result.status == "finished" and [r["step"] for r in records] == [0, 1, 2, 3, 4]
    replanned = [r for r in records if "replanned" in r]
    assert len(replanned) == 1 and replanned[0] == first[-1]  # the re-planned step, where the run stopped
    rec = replanned[0]
    assert rec["replanned"]["kind"] == "deferred"
    assert {x["reason"] for x in rec["replanned"]["refused"].values()} == {"Deferred"}
    assert all(x["node"] == "node-a" for x in rec["replanned"]["refused"].values())
    # from the re-planned step on, the run holds no more than the node had left it (also once resumed)
    assert all(sum(t["cpu_millicores"] for t in r["tasks"]) <= room + 1e-6 for r in records[rec["step"] :])
    assert [k for k, _, _ in watcher.seen] == ["deferred", "replanned"]
    assert all(counts["step"] == rec["step"] for _, _, counts in watcher.seen)
    assert "Deferred" in watcher.seen[0][1] and "node-a" in watcher.seen[1][1]
    assert summary["replans"] and summary["replans"][0]["step"] == rec["step"]
    assert "re-planned on the nodes' free CPU (deferred" in (folder / "summary.md").read_text()
    assert any("re-planned on the nodes' free CPU" in line for line in said)
    meta = json.loads((folder / "run.json").read_text())
    assert meta["replans"][0]["step"] == rec["step"] and meta["replans"][0]["nodes"]["node-a"] == pytest.approx(room)


def land_on_first_grow(api: FakeApiServer, landed: list[float]):
    """A before_resize hook: as the first grow of one of the run's tasks arrives, someone else's pod takes
    every CPU node-a has free (what it had before this grow); `landed` gets that figure."""

    def land(ns: str, name: str) -> None:
        pod = api.state.pods[(ns, name)]
        applied = cpu_millicores(pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"])
        if landed or "probe" in name or pod_cpu_request(pod) <= applied:
            return
        free = api._node_free("node-a") + pod_cpu_request(pod) - applied
        api.add_foreign_pod("other-team", "batch-job", "node-a", f"{free:.0f}m")
        landed.append(free)

    return land


@pytest.mark.parametrize(
    ("predictions", "stop"),
    [("online", False), ("learn", False), ("online", True)],
    ids=["online", "learn", "online-resumed"],
)
def test_a_run_predicting_step_by_step_is_replanned_too_and_keeps_what_it_learned(
    tmp_path, zk_server, creds_file, predictions, stop
):
    """An online run (forecasts from the history so far) and a learning run (a model corrected by every step)
    lose node-a's free CPU as their first grows arrive: each re-plans that very step on what is free, as a run
    of precomputed predictions does, and finishes without a stop, saying so (step log, summary, run.json,
    watchers). Its predictions go on where they were: the forecaster's history and the learned model hold
    every step, not only those after the re-plan. Stopped after the re-planned step and resumed (online), it
    makes the same decisions again through the re-plan and finishes, spending no more than the node had left."""
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    exp = experiment(tmp_path / "exp", tasks=3, steps=5)
    landed: list[float] = []
    run_id = f"k8s-deferred-{predictions}"
    folder = tmp_path / "runs" / run_id
    with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True), resize_delay_s=0.05) as api:
        api.add_node("node-a", "2")
        api.before_resize = land_on_first_grow(api, landed)
        watcher = Noticed()
        coord, said = coordinator(tmp_path, zk_server, creds_file, api, run_id, exp, watcher, predictions)
        if stop:
            watcher.on_step = lambda rec: coord.request_stop() if "replanned" in rec else None
            with pytest.raises(RunInterrupted):
                coord.run()
            first, _ = outputs(folder)
            assert "replanned" in first[-1] and len(first) < 5
            coord, said = coordinator(tmp_path, zk_server, creds_file, api, run_id, exp, None, predictions, resume=True)
        result = coord.run()
        assert landed, "no grow happened: the test's plan did not change"
        room = 2000 - pod_cpu_request(api.pod("other-team", "batch-job"))
    records, summary = outputs(folder)
    assert result.status == "finished" and [r["step"] for r in records] == [0, 1, 2, 3, 4]
    replanned = [r for r in records if "replanned" in r]
    assert len(replanned) == 1 and replanned[0]["replanned"]["kind"] == "deferred"
    rec = replanned[0]
    assert {x["reason"] for x in rec["replanned"]["refused"].values()} == {"Deferred"}
    assert all(sum(t["cpu_millicores"] for t in r["tasks"]) <= room + 1e-6 for r in records[rec["step"] :])
    assert [k for k, _, _ in watcher.seen] == ["deferred", "replanned"]
    assert summary["replans"] and summary["replans"][0]["step"] == rec["step"]
    assert "re-planned on the nodes' free CPU (deferred" in (folder / "summary.md").read_text()
    assert not any("cannot re-plan" in line for line in said)
    meta = json.loads((folder / "run.json").read_text())
    assert [r["step"] for r in meta["replans"]] == [rec["step"]]
    assert meta["replans"][0]["nodes"]["node-a"] == pytest.approx(room)
    # the same predictions went on in the re-planned context: they learned from every step of the run
    made = coord.predictions
    assert made is not None and made.table is coord.ctx.configs and coord.ctx.configs.known == 5
    if predictions == "learn":
        assert made.model.correction.measurements == 5 and all("learning" in r for r in records)
    else:
        assert made.source._observed == 5  # the forecaster's history: every step's workloads

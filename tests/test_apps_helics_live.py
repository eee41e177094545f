"""The shipped HELICS federation (jobs/helics-4.toml) under the planner, as a user runs it: `bsp-planner run
--experiment ... --planner mpc --online --reconfigure in-place` for a few steps, against a real ZooKeeper,
with real cgroup quotas, the real helics broker started as the run's service and four real federates in
observe mode. The run must finish with every step recorded once, the workloads the federates reported
(deterministic: the model's), the quotas within the budget, the broker's log kept, and no process or
cgroup left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bsp_planner.apps.helics.broker import find_broker
from bsp_planner.apps.helics.model import Ring, serial_workloads
from bsp_planner.inputs.shipped import data_dir

from cli_run import run_cli
from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks

STEPS = 5
pytestmark = pytest.mark.skipif(find_broker() is None, reason="the helics wheel is not installed (bsp-planner[cosim])")


def helics_experiment(folder: Path) -> Path:
    """The shipped job, profile and experiment, copied as they are; STEPS steps."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(data_dir() / "jobs" / "helics-4.toml", folder / "job.toml")
    shutil.copytree(data_dir() / "profiles" / "helics-4", folder / "profile")
    exp = (data_dir() / "experiments" / "helics-4.toml").read_text()
    exp = exp.replace('job = "../jobs/helics-4.toml"', 'job = "job.toml"')
    exp = exp.replace('profile = "../profiles/helics-4/profile.csv"', 'profile = "profile/profile.csv"')
    assert 'job = "job.toml"' in exp and 'profile = "profile/profile.csv"' in exp and "online = true" in exp
    (folder / "exp.toml").write_text(exp)
    return folder / "exp.toml"


def helics_processes(run_dir: Path, broker_port: int) -> list[str]:
    """Live processes of this run's federation: federates (their --timings name the run folder) and the
    broker (its wrapper and helics_broker, by the broker's port)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmd or ("helics" in cmd and f"--port {broker_port}" in cmd):
            out.append(f"{p.name}: {cmd}")
    return out


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_the_helics_federation_runs_under_the_planner_with_its_broker_as_a_service(
    tmp_path, zk_server, creds_file, monkeypatch, capsys
):
    exp = helics_experiment(tmp_path / "exp")
    run_id = "helics-live"
    code, out, err = run_cli(
        [
            "run", "--experiment", exp, "--planner", "mpc", "--online", "--reconfigure", "in-place",
            "--steps", STEPS, "--zookeeper", zk_server.hosts, "--zk-auth-file", creds_file,
            "--runs-dir", tmp_path / "runs", "--run-id", run_id, "--cgroup-prefix", PREFIX,
            "--step-timeout", 120, "--quiet",
        ],
        monkeypatch,
        capsys,
    )  # fmt: skip
    assert code == 0, (out, err)
    run_dir = tmp_path / "runs" / run_id
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))  # every step once, in order
    expected = serial_workloads(Ring(federates=4), STEPS)
    for r in records:
        tasks = {t["task"]: t for t in r["tasks"]}
        assert sorted(tasks) == ["f0", "f1", "f2", "f3"]
        # the workloads recorded are the ones the federates computed from their cells and reported
        assert {n: t["observed_workload"] for n, t in tasks.items()} == {
            f"f{i}": expected[r["step"], i] for i in range(4)
        }
        assert sum(t["cpu_millicores"] for t in r["tasks"]) <= 1600
        assert all(t["measured_s"] > 0 for t in r["tasks"])
    # the planner follows the reports: from step 2 on, planned on step 0's (observe mode decides each step
    # while the one before runs: planner.decide_ahead), the hot federate 0 has the most CPU
    first = {t["task"]: t["cpu_millicores"] for t in records[2]["tasks"]}
    assert first["f0"] == max(first.values()) > 400
    # each federate's own timings: every step once
    for i in range(4):
        timings = [json.loads(line) for line in (run_dir / f"timings-f{i}.jsonl").read_text().splitlines()]
        assert [t["step"] for t in timings] == list(range(STEPS))
    log = (run_dir / "logs" / "broker.log").read_text()
    port = int(log.split("broker ready on port ")[1].split()[0])
    assert "the federation has finished" in log
    assert helics_processes(run_dir, port) == []
    assert_nothing_left(run_id)

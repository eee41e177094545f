"""The shipped HELICS federations (jobs/helics-4.toml, the ring; jobs/helics-star-5.toml, the star) under the
planner, as a user runs them: `bsp-planner run --experiment ... --planner mpc --online --reconfigure
in-place` for a few steps, against a real ZooKeeper, with real cgroup quotas, the real helics broker
started as the run's service and the real federates in observe mode. The run must finish with every step
recorded once, the workloads the federates reported (deterministic: the model's), the quotas within the
budget, the broker's log kept, and no process or cgroup left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bsp_planner.apps.helics.broker import find_broker
from bsp_planner.apps.helics.model import Ring, serial_workloads
from bsp_planner.apps.helics.star_model import Star, federate_names, star_workloads
from bsp_planner.inputs.shipped import data_dir

from cli_run import run_cli
from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks

STEPS = 5
pytestmark = [
    pytest.mark.skipif(find_broker() is None, reason="the helics wheel is not installed (bsp-planner[cosim])"),
    pytest.mark.slow,
    pytest.mark.usefixtures("reap_runs"),
    needs_tasks,
]


def helics_experiment(folder: Path, name: str = "helics-4") -> Path:
    """The shipped job, profile and experiment `name`, copied as they are; STEPS steps."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(data_dir() / "jobs" / f"{name}.toml", folder / "job.toml")
    shutil.copytree(data_dir() / "profiles" / name, folder / "profile")
    exp = (data_dir() / "experiments" / f"{name}.toml").read_text()
    exp = exp.replace(f'job = "../jobs/{name}.toml"', 'job = "job.toml"')
    exp = exp.replace(f'profile = "../profiles/{name}/profile.csv"', 'profile = "profile/profile.csv"')
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


def run_mpc_live(name: str, tmp_path, zk_server, creds_file, monkeypatch, capsys) -> tuple[Path, list[dict]]:
    """`bsp-planner run` of the shipped experiment `name` with online mpc for STEPS steps, as run `<name>-live`:
    its folder and records."""
    exp = helics_experiment(tmp_path / "exp", name)
    run_id = f"{name}-live"
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
    return run_dir, records


def assert_the_federation_ended(run_dir: Path) -> None:
    """The broker saw its federation finish, and no federate, broker, process or cgroup is left."""
    log = (run_dir / "logs" / "broker.log").read_text()
    port = int(log.split("broker ready on port ")[1].split()[0])
    assert "the federation has finished" in log
    assert helics_processes(run_dir, port) == []
    assert_nothing_left(run_dir.name)


def test_the_helics_federation_runs_under_the_planner_with_its_broker_as_a_service(
    tmp_path, zk_server, creds_file, monkeypatch, capsys
):
    run_dir, records = run_mpc_live("helics-4", tmp_path, zk_server, creds_file, monkeypatch, capsys)
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
    # the planner follows the reports: from step 1 on, planned on step 0's, the hot federate 0 has the most CPU
    first = {t["task"]: t["cpu_millicores"] for t in records[1]["tasks"]}
    assert first["f0"] == max(first.values()) > 400
    # each federate's own timings: every step once
    for i in range(4):
        timings = [json.loads(line) for line in (run_dir / f"timings-f{i}.jsonl").read_text().splitlines()]
        assert [t["step"] for t in timings] == list(range(STEPS))
    # federates that run ahead of the hot one are not taken for ones it waits for: no wait is claimed
    assert json.loads((run_dir / "summary.json").read_text())["structure"]["learned"] == {}
    assert_the_federation_ended(run_dir)


def test_the_helics_star_runs_under_the_planner_with_its_hub_after_its_leaves(
    tmp_path, zk_server, creds_file, monkeypatch, capsys
):
    run_dir, records = run_mpc_live("helics-star-5", tmp_path, zk_server, creds_file, monkeypatch, capsys)
    expected = star_workloads(Star(), STEPS)
    names = federate_names(4)
    for r in records:
        tasks = {t["task"]: t for t in r["tasks"]}
        assert {n: t["observed_workload"] for n, t in tasks.items()} == {
            name: expected[r["step"], i] for i, name in enumerate(names)
        }
        assert sum(t["cpu_millicores"] for t in r["tasks"]) <= 1600
        # its compute through the hub's wait: the slowest leaf's plus the hub's
        leaves = max(tasks[n]["measured_s"] for n in names[:4])
        assert r["critical_path_s"] == pytest.approx(leaves + tasks["hub"]["measured_s"])
    timings = {n: [json.loads(x) for x in (run_dir / f"timings-{n}.jsonl").read_text().splitlines()] for n in names}
    for step in range(STEPS):  # under the planner too, the hub computes after every leaf, in every step
        assert timings["hub"][step]["start"] >= max(timings[n][step]["end"] for n in names[:4])
    summary = json.loads((run_dir / "summary.json").read_text())
    # the waits the federates' own clocks show are the ones the job declares
    assert summary["structure"]["learned"] == {"hub": names[:4]} and summary["structure"]["agrees"]
    # a step is timed from the federates' own clocks: the steps add up to the federation's wall time,
    # the slowest leaf plus the hub in each
    rows = [t for per in timings.values() for t in per]
    wall = max(t["end"] for t in rows) - min(t["start"] for t in rows)
    assert summary["live_total_s"] == pytest.approx(wall, rel=0.03)
    assert_the_federation_ended(run_dir)

"""The shipped example programs run live. The particles application (particles-3, a few steps) against a real
ZooKeeper with real cgroup quotas: each rank one long-running process joined through bsp_planner.task, under
our barrier and in observe mode (its own synchronisation only). The workloads the run records are the
particle counts the ranks report, which are deterministic: they must be exactly the serial run's. The kernel
command tasks (kernel-3) report the workload they ran. The particles job has no series: the run plans online
(`--online`), from what the ranks have reported."""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("bsp_planner.task", reason="the task library (bsp_planner.task) is not on this branch yet")

from bsp_planner.apps.particles.serial import run_serial
from bsp_planner.inputs.shipped import data_dir
from bsp_planner.runtime.coordinator import Coordinator

from zk_fixtures import (
    assert_nothing_left,
    needs_tasks,
    settings,
)

PARTICLES = 9000
STEPS = 4


def particles_experiment(folder: Path, sync: str) -> Path:
    """The shipped particles-3 job (no series: its workloads are observed) with `sync`, and the shipped
    experiment planning online, for STEPS steps."""
    folder.mkdir(parents=True, exist_ok=True)
    job = (data_dir() / "jobs" / "particles-3.toml").read_text()
    assert f'"--particles", "{PARTICLES}"' in job and 'sync = "barrier"' in job
    (folder / "job.toml").write_text(job.replace('sync = "barrier"', f'sync = "{sync}"'))
    shutil.copy(data_dir() / "profiles" / "particles-3" / "profile.csv", folder / "profile.csv")
    exp = (data_dir() / "experiments" / "particles-3.toml").read_text()
    exp = exp.replace('job = "../jobs/particles-3.toml"', 'job = "job.toml"')
    exp = exp.replace('profile = "../profiles/particles-3/profile.csv"', 'profile = "profile.csv"')
    exp = exp.replace("steps = 10\n", f"steps = {STEPS}\n")
    assert "online = true" in exp and f"steps = {STEPS}" in exp
    (folder / "exp.toml").write_text(exp)
    return folder / "exp.toml"


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize("sync", ["barrier", "observe"])
def test_particles_3_runs_live_with_its_reported_counts_recorded(tmp_path, zk_server, creds_file, sync):
    exp = particles_experiment(tmp_path / "exp", sync)
    run_id = f"particles-{sync}"
    run_settings = settings(exp, zk_server, creds_file, reconfigure="in-place", planner="mpc", mode="forecast")
    coord = Coordinator(run_settings, run_id, tmp_path / "runs")
    result = coord.run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))
    expected, _ = run_serial(ranks=3, particles=PARTICLES, seed=1, steps=STEPS)
    for r in records:
        observed = {t["task"]: t["observed_workload"] for t in r["tasks"]}
        assert observed == {f"p{i}": float(expected[r["step"], i]) for i in range(3)}
        assert sum(observed.values()) == PARTICLES
        assert sum(t["cpu_millicores"] for t in r["tasks"]) <= 1500
        assert all(t["measured_s"] > 0 for t in r["tasks"])
    # the ranks exchanged through the run's folder, and every boundary file was consumed
    exchange = result.run_dir / "particles"
    assert sorted(p.name for p in exchange.iterdir() if p.suffix == ".npz") == []
    assert_nothing_left(run_id)


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_the_kernel_3_command_tasks_run_live_and_report_the_workload_they_ran(tmp_path, zk_server, creds_file):
    """The shipped command-task example (jobs/kernel-3.toml, profiles/kernel-3/), a few steps live."""
    folder = tmp_path / "exp"
    folder.mkdir()
    shipped = data_dir() / "jobs" / "kernel-3.toml"
    job = tomllib.loads(shipped.read_text())
    lines = ['name = "kernel-3"']
    for t in job["task"]:
        argv = [sys.executable, *t["command"][1:]]  # this test's Python, whatever is first on PATH
        series = data_dir() / "jobs" / t["series"]["file"]
        rows = ", ".join(f"{k} = {v}" for k, v in t["series"].items() if k != "file")
        lines += [
            "",
            "[[task]]",
            f'name = "{t["name"]}"',
            f"command = {json.dumps(argv)}",
            f'series = {{ file = "{series.resolve()}", {rows} }}',
        ]
    (folder / "job.toml").write_text("\n".join(lines) + "\n")
    shutil.copy(data_dir() / "profiles" / "kernel-3" / "profile.csv", folder / "profile.csv")
    exp = tomllib.loads((data_dir() / "experiments" / "kernel-3.toml").read_text())
    c = exp["cpu"]
    (folder / "exp.toml").write_text(
        'job = "job.toml"\nprofile = "profile.csv"\ninterpolation = "linear"\nworkload_range = [10, 50]\n'
        f'steps = 3\npenalty_s = {exp["penalty_s"]}\nmodes = ["perfect"]\nstrategies = ["mpc"]\noutput = "out"\n\n'
        f"[cpu]\nbudget_millicores = {c['budget_millicores']}\nmin_millicores = {c['min_millicores']}\n"
        f"step_millicores = {c['step_millicores']}\nmax_millicores = {c['max_millicores']}\n\n"
        "[planner]\nhorizon = 3\ndp_max_segment = 3\n\n[forecast]\nhorizon = 3\n"
    )
    coord = Coordinator(
        settings(folder / "exp.toml", zk_server, creds_file, reconfigure="in-place", planner="mpc"),
        "kernel3",
        tmp_path / "runs",
    )
    result = coord.run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records:
        assert sum(t["cpu_millicores"] for t in r["tasks"]) <= c["budget_millicores"]
        for t in r["tasks"]:
            # the kernel prints the workload it ran: the one the run assigned (as an argument, rounded)
            assert t["observed_workload"] == pytest.approx(t["workload"], rel=1e-5)
            assert t["measured_s"] > 0
    assert_nothing_left("kernel3")

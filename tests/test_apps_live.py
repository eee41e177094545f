"""The particles application run live (particles-3, a few steps) against a real ZooKeeper with real cgroup
quotas: each rank one long-running process joined through bsp_planner.task, under our barrier and in
observe mode (its own synchronisation only). The workloads the run records are the particle counts the
ranks report, which are deterministic: they must be exactly the serial run's.

Until the live coordinator plans from observed workloads (`run --online` for jobs without series), the
run plans from a series added to the job; the ranks ignore the workload it assigns and report their own.
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

task = pytest.importorskip("bsp_planner.task", reason="the task library (bsp_planner.task) is not on this branch yet")

from bsp_planner.apps.particles.serial import run_serial  # noqa: E402
from bsp_planner.runtime.coordinator import Coordinator  # noqa: E402
from bsp_planner.shipped import data_dir  # noqa: E402
from zk_fixtures import (  # noqa: E402,F401  (fixtures)
    DATA,
    assert_nothing_left,
    creds_file,
    needs_tasks,
    reap_runs,
    settings,
    zk_server,
)

PARTICLES = 9000
STEPS = 4
EXPERIMENT = """job = "job.toml"
profile = "{profile}"
interpolation = "linear"
out_of_grid = "clamp"
workload_range = [500, 10000]
steps = {steps}
penalty_s = 0.0002
modes = ["perfect"]
strategies = ["mpc"]
output = "out"

[cpu]
budget_millicores = 1500
min_millicores = 250
step_millicores = 50
max_millicores = 1000

[planner]
horizon = 3
dp_max_segment = 4

[forecast]
horizon = 4
"""


def particles_experiment(folder: Path, sync: str) -> Path:
    """The shipped particles-3 job with `sync` and a planning series per rank (see the module doc)."""
    folder.mkdir(parents=True, exist_ok=True)
    shipped = data_dir() / "jobs" / "particles-3.toml"
    job = tomllib.loads(shipped.read_text())
    lines = [f'name = "particles-3"', f'sync = "{sync}"']
    for i, t in enumerate(job["task"]):
        argv = [sys.executable, *t["process"][1:]]  # this test's Python, whatever is first on PATH
        assert "--particles" in argv and argv[argv.index("--particles") + 1] == str(PARTICLES)
        lines += [
            "", "[[task]]", f'name = "{t["name"]}"', f"process = {json.dumps(argv)}",
            f'series = {{ file = "{DATA / "datasets" / "nyc_taxi.csv"}", first_row = {i * 2000}, last_row = {i * 2000 + 1998} }}',
        ]
    (folder / "job.toml").write_text("\n".join(lines) + "\n")
    # the shipped profile's rows, without its metadata: that names the tasks by the shipped argument list (`python3`), not this test's
    shutil.copy(data_dir() / "profiles" / "particles-3" / "profile.csv", folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(profile="profile.csv", steps=STEPS))
    return exp


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize("sync", ["barrier", "observe"])
def test_particles_3_runs_live_with_its_reported_counts_recorded(tmp_path, zk_server, creds_file, sync):
    exp = particles_experiment(tmp_path / "exp", sync)
    run_id = f"particles-{sync}"
    coord = Coordinator(settings(exp, zk_server, creds_file, reconfigure="in-place", planner="mpc"), run_id, tmp_path / "runs")
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

"""The particles application (bsp_planner/apps/particles): its physics, and its ranks running standalone
as separate processes that synchronise among themselves through the boundary exchange."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from bsp_planner.apps.particles.model import (
    Physics,
    initial_particles,
    owner,
    slice_bounds,
)
from bsp_planner.apps.particles.serial import run_serial
from bsp_planner.inputs.shipped import data_dir

REPO = Path(__file__).resolve().parent.parent


def test_particle_count_is_conserved_and_every_particle_is_in_its_ranks_slice():
    total = 3000
    counts, states = run_serial(ranks=3, particles=total, seed=4, steps=12)
    assert (counts.sum(axis=1) == total).all()
    for r, s in enumerate(states):
        lo, hi = slice_bounds(r, 3)
        assert ((s.x >= lo) & (s.x < hi)).all()
        assert np.isfinite(s.v).all()


def test_a_particle_crossing_several_slices_in_one_step_is_forwarded_not_lost():
    # 8 ranks, crowds fast enough to cross more than one slice per superstep
    fast = Physics(crowd_speed=30.0, substeps=20)
    assert fast.crowd_speed * fast.dt * fast.substeps > 2 / 8  # domain lengths the crowd moves per superstep
    counts, states = run_serial(ranks=8, particles=2000, seed=2, steps=6, physics=fast)
    assert (counts.sum(axis=1) == 2000).all()
    # some particles are still on their way (held by a rank that does not own their position, to be
    # forwarded next superstep): the multi-slice case was exercised, and none was dropped or duplicated
    in_transit = sum(int((owner(s.x, 8) != r).sum()) for r, s in enumerate(states))
    assert in_transit > 0


def test_the_load_drifts_between_ranks_over_the_steps():
    counts, _ = run_serial(ranks=8, particles=8000, seed=1, steps=30)
    busiest = counts[:-1].argmax(axis=1)
    # the busy rank moves: at least three different ranks are the busiest at some step
    assert len(set(busiest.tolist())) >= 3
    # and every rank's load changes: the busiest and the quietest step of most ranks differ by half the mean
    mean = counts.mean()
    swings = (counts.max(axis=0) - counts.min(axis=0)) / mean
    assert (swings > 0.5).sum() >= 5
    # the job is imbalanced at every step (the reason to split the CPU unevenly)
    assert (counts.max(axis=1) > 1.5 * mean).all()


def test_runs_are_deterministic_given_the_seed():
    a, sa = run_serial(ranks=3, particles=1500, seed=7, steps=8)
    b, sb = run_serial(ranks=3, particles=1500, seed=7, steps=8)
    c, _ = run_serial(ranks=3, particles=1500, seed=8, steps=8)
    assert (a == b).all()
    for x, y in zip(sa, sb, strict=True):
        assert np.array_equal(x.x, y.x) and np.array_equal(x.v, y.v)
    assert not (a == c).all()
    assert np.array_equal(initial_particles(100, 3, Physics()).x, initial_particles(100, 3, Physics()).x)


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start_rank(rank, ranks, folder, reports, *, particles=3000, steps=6, extra=()):
    args = [
        sys.executable,
        "-m",
        "bsp_planner.apps.particles",
        "--rank",
        str(rank),
        "--ranks",
        str(ranks),
        "--particles",
        str(particles),
        "--steps",
        str(steps),
        "--seed",
        "5",
        "--exchange-dir",
        str(folder),
        "--reports",
        str(reports),
        *extra,
    ]
    return subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _reports(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_three_rank_processes_run_standalone_and_match_the_serial_run(tmp_path):
    folder = tmp_path / "exchange"
    procs = [
        _start_rank(r, 3, folder, tmp_path / f"r{r}.jsonl", extra=("--timings", str(tmp_path / f"t{r}.jsonl")))
        for r in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    expected, _ = run_serial(ranks=3, particles=3000, seed=5, steps=6)
    for r in range(3):
        timings = _reports(tmp_path / f"t{r}.jsonl")
        assert [x["step"] for x in timings] == list(range(6))
        assert all(
            x["compute_s"] > 0 and x["enter_s"] >= 0 and x["leave_s"] >= 0 and x["exchange_s"] >= 0 for x in timings
        )
    for r in range(3):
        reports = _reports(tmp_path / f"r{r}.jsonl")
        assert [x["step"] for x in reports] == list(range(6))
        assert [x["workload"] for x in reports] == expected[:6, r].tolist()
        assert all(x["wall_s"] > 0 and x["cpu_s"] >= 0 and x["task"] == f"p{r}" for x in reports)
    # every boundary file was read (and removed) by its one reader; only the end markers remain
    assert sorted(p.name for p in folder.iterdir()) == ["end-r0", "end-r1", "end-r2"]


def test_a_rank_stops_cleanly_when_its_neighbour_has_stopped(tmp_path):
    folder = tmp_path / "exchange"
    folder.mkdir()
    (folder / "end-r2").touch()  # rank 2 stopped before sending anything
    procs = [_start_rank(r, 3, folder, tmp_path / f"r{r}.jsonl") for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "rank 2 stopped before sending its particles of step 0" in err


def test_a_missing_neighbour_is_a_timeout_naming_the_rank_and_step(tmp_path):
    p = _start_rank(0, 3, tmp_path / "x", tmp_path / "r0.jsonl", extra=("--timeout-s", "1"))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1
    assert "rank 0: no particles from rank 2 for step 0" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rank", "3", "--ranks", "3", "--steps", "1", "--exchange-dir", "x"], "--rank: expected 0..2, got 3"),
        (["--rank", "0", "--ranks", "3", "--exchange-dir", "x"], "--steps: required"),
        (["--rank", "0", "--ranks", "3", "--steps", "1"], "--exchange-dir: required when BSP_RUN_DIR is not set"),
        (["--rank", "0", "--ranks", "2", "--steps", "1", "--exchange-dir", "x", "--particles", "-5"], "--particles"),
    ],
)
def test_bad_arguments_exit_2_with_the_option_named(args, message, tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "bsp_planner.apps.particles", *args],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("n", [3, 8])
def test_shipped_particles_jobs_start_one_rank_of_n_per_task_sharing_one_exchange_folder(n):
    path = data_dir() / "jobs" / f"particles-{n}.toml"
    job = tomllib.loads(path.read_text())
    tasks = job["task"]
    assert len(tasks) == n
    ranks = []
    for t in tasks:
        argv = t["process"]
        assert argv[argv.index("--ranks") + 1] == str(n)
        assert argv[argv.index("--exchange-dir") + 1] == "{run_dir}/particles"
        ranks.append(int(argv[argv.index("--rank") + 1]))
    assert sorted(ranks) == list(range(n))


@pytest.mark.parametrize("n", [3, 8])
def test_shipped_particles_profiles_cover_every_task_of_their_job(n):
    from bsp_planner.inputs.profiles import load_profile

    job = tomllib.loads((data_dir() / "jobs" / f"particles-{n}.toml").read_text())
    profile = load_profile(data_dir() / "profiles" / f"particles-{n}" / "profile.csv")
    profile.check_job([t["name"] for t in job["task"]])
    for p in profile.tasks.values():
        # more CPU never makes a rank's superstep much slower; more particles never much faster
        d = p.duration_s
        assert (d[:, 1:] <= d[:, :-1] * 1.25 + 0.02).all()
        assert (d[1:, :] >= d[:-1, :] * 0.8 - 0.02).all()

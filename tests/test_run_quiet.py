"""`bsp-planner run -q`: no per-step lines, but what a user needs is kept: the reconfiguration cost the run
plans with and the totals (a live run against a real ZooKeeper, stress-ng and cgroups)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks, tiny_experiment

pytestmark = [needs_tasks, pytest.mark.usefixtures("reap_runs"), pytest.mark.slow]  # a live run


def run_cli(tmp_path, zk, creds_file, *flags: str) -> subprocess.CompletedProcess:
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    args = [sys.executable, "-m", "bsp_planner.cli", "run", "-e", str(exp), "--runs-dir", str(tmp_path / "runs")]
    args += ["--zookeeper", zk.hosts, "--zk-auth-file", str(creds_file), "--cgroup-prefix", PREFIX, *flags]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_quiet_keeps_the_planned_cost_and_the_totals_and_drops_the_step_lines(tmp_path, zk_server, creds_file):
    out = run_cli(tmp_path, zk_server, creds_file, "-q", "--run-id", "quiet")
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())  # rich wraps at the terminal's width
    assert re.search(r"planning with an? [a-z-]+ reconfiguration cost of [0-9.e-]+ s \(", text), out.stdout
    assert "total: live " in text and "simulated " in text
    assert not re.search(r"step +\d+: [0-9.]+ s \(predicted", out.stdout), out.stdout  # the per-step lines
    assert_nothing_left("quiet")

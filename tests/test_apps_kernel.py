"""The command-task kernel (bsp_planner/apps/kernel.py) and the shipped job that runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bsp_planner.apps.kernel import kernel
from bsp_planner.inputs.shipped import data_dir

REPO = Path(__file__).resolve().parent.parent


def _run(args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "bsp_planner.apps.kernel", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_prints_the_workload_it_ran_as_one_json_line():
    p = _run(["--size", "2.5"])
    assert p.returncode == 0, p.stderr
    assert [json.loads(line) for line in p.stdout.splitlines()] == [{"workload": 2.5}]


def test_reads_the_workload_from_the_environment_the_worker_sets():
    p = _run([], BSP_WORKLOAD="3", BSP_STEP="7")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"workload": 3.0}


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--size", "-1"], {}, "--size: expected a finite non-negative workload"),
        (["--size", "nan"], {}, "--size: expected a finite non-negative workload"),
        ([], {}, "--size: required when BSP_WORKLOAD is not set"),
        ([], {"BSP_WORKLOAD": "lots"}, "BSP_WORKLOAD: expected a number, got 'lots'"),
    ],
)
def test_bad_workloads_exit_2_naming_what_was_wrong(args, env, message):
    p = _run(args, **env)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr


def test_work_grows_linearly_with_the_workload():
    # CPU time of the process (not wall time) so a busy host does not matter; generous bounds
    def cpu_s(n):
        t = time.process_time()
        kernel(n)
        return time.process_time() - t

    # interleaved, best of five each: on a shared VM the CPU seconds of the same work drift with the host's
    # load (BENCHMARKS.md "Live per-step noise": 14-26%), so both sizes are timed through the same minutes
    small, large = [], []
    for _ in range(5):
        small.append(cpu_s(200_000))
        large.append(cpu_s(1_000_000))
    assert 2.5 < min(large) / min(small) < 10  # 5x the work: 5x the CPU seconds, within what the host drifts
    assert kernel(1000) == kernel(1000)


def test_shipped_kernel_job_runs_the_kernel_with_the_workload_substituted():
    job = tomllib.loads((data_dir() / "jobs" / "kernel-3.toml").read_text())
    assert len(job["task"]) == 3
    for t in job["task"]:
        assert t["command"] == ["{python}", "-m", "bsp_planner.apps.kernel", "--size", "{workload}"]
        series = data_dir() / "jobs" / t["series"]["file"]
        assert series.is_file()


def test_process_mode_by_hand_runs_its_steps_and_reports_each(tmp_path):
    reports = tmp_path / "r.jsonl"
    p = _run(["--process", "--size", "0.5", "--steps", "3", "--reports", str(reports)])
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in reports.read_text().splitlines()]
    assert [r["step"] for r in got] == [0, 1, 2] and {r["workload"] for r in got} == {0.5}
    assert all(r["wall_s"] > 0 for r in got)


def test_process_mode_by_hand_needs_steps_and_size():
    p = _run(["--process"])
    assert p.returncode == 2 and "--steps and --size are required" in p.stderr and "Traceback" not in p.stderr


def test_shipped_process_job_runs_the_kernel_as_process_tasks():
    job = tomllib.loads((data_dir() / "jobs" / "kernel-3p.toml").read_text())
    assert [t["process"] for t in job["task"]] == [["{python}", "-m", "bsp_planner.apps.kernel", "--process"]] * 3
    assert all("series" in t for t in job["task"])

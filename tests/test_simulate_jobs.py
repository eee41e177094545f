"""`simulate --jobs N` runs strategies and modes in parallel processes with the same results as one."""

import csv

import numpy as np
import pytest

from bsp_planner.experiment import load_experiment
from bsp_planner.parallel_runs import run_pairs
from bsp_planner.scenario import build_scenario

from cli_run import run_cli
from synthetic import write_experiment

TIMING_COLUMNS = {"mean_decision_ms", "decision_ms", "prepare_ms"}


def test_parallel_results_equal_serial_results(tmp_path, synthetic_profile):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile))
    scen = build_scenario(exp)
    pairs = [(m, s) for m in exp.modes for s in exp.strategies]
    serial = run_pairs(scen, pairs, 1)
    parallel = run_pairs(build_scenario(exp), pairs, 3)
    assert [(r.mode, r.strategy) for r in parallel] == [(r.mode, r.strategy) for r in serial]
    for a, b in zip(serial, parallel, strict=True):
        for field in ("levels", "step_s", "reconfigured", "actions"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (a.mode, a.strategy, field)
        assert a.total_s == b.total_s


def _rows_without_timings(path):
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)]


def test_cli_jobs_writes_the_same_comparison(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile)
    for jobs, out in (("1", "one"), ("2", "two")):
        code, _, err = run_cli(
            ["simulate", str(exp), "-q", "--jobs", jobs, "--out", str(tmp_path / out)], monkeypatch, capsys
        )
        assert code == 0, err
    for name in ("comparison.csv", "steps.csv"):
        one, two = _rows_without_timings(tmp_path / "one" / name), _rows_without_timings(tmp_path / "two" / name)
        assert one and one == two


@pytest.mark.parametrize("value", ["0", "-3"])
def test_jobs_below_one_is_refused(tmp_path, synthetic_profile, monkeypatch, capsys, value):
    exp = write_experiment(tmp_path, synthetic_profile)
    code, out, err = run_cli(["simulate", str(exp), "-q", "--jobs", value], monkeypatch, capsys)
    assert code == 2
    assert "--jobs" in out + err and ">= 1" in out + err
    assert not (tmp_path / "out").exists()

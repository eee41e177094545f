"""`simulate --jobs N` runs strategies and modes in parallel processes with the same results as one."""

import csv
import os

import numpy as np
import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.simulate.parallel_runs import _units, run_pairs
from bsp_planner.simulate.scenario import build_scenario

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


def test_simulate_uses_every_cpu_it_may_unless_told(tmp_path, synthetic_profile, monkeypatch, capsys):
    """Without --jobs, the runs spread over the CPUs this process may use (the default command's time)."""
    from bsp_planner.simulate import parallel_runs

    seen = []
    real = parallel_runs.run_pairs

    def spy(scen, pairs, jobs=1, **kw):
        seen.append(jobs)
        return real(scen, pairs, 1, **kw)

    monkeypatch.setattr(parallel_runs, "run_pairs", spy)
    exp = write_experiment(tmp_path, synthetic_profile, steps=5)
    for extra in ([], ["--jobs", "1"]):
        code, _, err = run_cli(["simulate", str(exp), "-q", *extra], monkeypatch, capsys)
        assert code == 0, err
    assert seen == [len(os.sched_getaffinity(0)), 1]


def test_every_mode_of_optimum_runs_in_one_process():
    """`optimum` is the same plan in every mode: its modes go to one worker, one after another, where
    the first mode's plan serves the next instead of being made again in parallel."""
    pairs = [(m, s) for m in ("perfect", "forecast") for s in ("mpc", "optimum", "floor")]
    units = _units(pairs)
    assert sorted(i for u in units for i in u) == list(range(len(pairs)))
    assert [pairs[i] for i in next(u for u in units if len(u) > 1)] == [("perfect", "optimum"), ("forecast", "optimum")]
    assert all(len(u) == 1 for u in units if pairs[u[0]][1] != "optimum")

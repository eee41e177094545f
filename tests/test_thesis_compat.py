"""compat = "thesis" (docs/thesis.md), on the project's own data: the raw spline's durations in planning and
in the simulated truth, the last static window planned over its full K, and the combinations refused."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from bsp_planner.allocation.base import CpuLevels
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner
from bsp_planner.simulate.runs import run_strategy
from bsp_planner.simulate.scenario import build_scenario
from bsp_planner.simulate.simulation import simulate

from cli_run import run_cli
from synthetic import DATA, write_experiment

DEFAULT = DATA / "experiments" / "default.toml"
THESIS = ["compat=thesis", "steps=10", "modes=perfect", "strategies=static:3"]


def scenario(*overrides: str):
    return build_scenario(load_experiment(DEFAULT, list(overrides)))


def test_thesis_compat_simulates_and_plans_with_the_raw_spline():
    ours, thesis = scenario(*THESIS[1:]), scenario(*THESIS)
    # The shipped profile's spline wiggles: somewhere more CPU costs more time, in the thesis's truth only.
    assert (np.diff(thesis.actual, axis=1) > 0).any()
    assert not (np.diff(ours.actual, axis=1) > 0).any()
    np.testing.assert_array_equal(ours.actual, np.minimum.accumulate(thesis.actual, axis=1))
    # What the planner is told in perfect mode is that same raw truth.
    predicted = thesis.contexts["perfect"].configs.predicted
    np.testing.assert_array_equal(predicted[:, :, :, 0].transpose(1, 2, 0), thesis.actual)


def test_a_plan_under_thesis_compat_is_charged_the_raw_durations():
    scen = scenario(*THESIS)
    result = run_strategy(scen, "static:3", "perfect")
    charged = scen.actual[np.arange(scen.actual.shape[0])[None, :], result.levels, np.arange(10)[:, None]]
    np.testing.assert_allclose(result.step_s, charged.max(axis=1))


def context_beyond_the_end(steps: int, full: bool) -> tuple[PlanningContext, np.ndarray]:
    """Two tasks (6 levels: work / (level + 1)); predictions reach 3 steps past the job's last step, where
    task 1 turns heavy (as the thesis's forecasts reach past the steps simulated)."""
    work = np.ones((2, steps + 3))
    work[1, steps:] = 9.0
    durations = work[:, None, :] / np.arange(1, 7)[None, :, None]
    predicted = sliding_window_view(durations, 4, axis=2).transpose(2, 0, 1, 3)[:steps]
    max_level = np.full(2, 5)
    ctx = PlanningContext(
        steps=steps,
        cpu=CpuLevels(100, 100, 600, 600),
        max_level=max_level,
        penalty_s=0.0,
        configs=ConfigTable(predicted, GreedyAllocator(), max_level, 4, 0.95),
        last_window_full=full,
    )
    return ctx, durations[:, :, :steps]


def test_the_last_static_window_plans_over_its_full_k_under_thesis_compat():
    steps, k = 10, 3  # the last window starts at step 9 with one step left
    results = {}
    for full in (False, True):
        ctx, actual = context_beyond_the_end(steps, full)
        results[full] = simulate(make_planner(f"static:{k}"), ctx, actual)
        assert results[full].actions[9] == (k if full else 1)
        np.testing.assert_array_equal(results[full].levels[9], ctx.configs.levels(9, k if full else 1))
    # Only the last window differs: planned for steps past the end, it gives task 1 more than the last step needs.
    np.testing.assert_array_equal(results[True].levels[:9], results[False].levels[:9])
    assert results[True].levels[9, 1] > results[False].levels[9, 1]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--set", "compat=thesis", "--allocator", "exact"], ["--allocator", "planner.allocator", "greedy"]),
        (["--set", "compat=thesis", "--allocator", "threshold"], ["--allocator", "planner.allocator", "greedy"]),
        (["--set", "compat=thesis", "--strategies", "mpc,floor"], ["--strategies", "strategies", "floor"]),
        (["--set", "compat=thesis", "--strategies", "optimum,mpc"], ["--strategies", "strategies", "optimum"]),
        (["--set", "compat=thesis", "--strategies", "mpc", "--learn"], ["--learn", "learn"]),
        (["--set", "compat=thesys"], ["--set", "compat", "thesis"]),
    ],
)
def test_thesis_compat_with_what_assumes_monotone_durations_is_refused_before_any_work(
    args, needles, tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc"], modes=["perfect"], steps=5)
    code, _, err = run_cli(["simulate", exp, "-q", *args], monkeypatch, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for n in needles:
        assert n in err, err
    assert not (tmp_path / "out").exists()


def test_thesis_compat_on_nodes_is_refused(monkeypatch, capsys, tmp_path):
    args = [
        "simulate",
        "thesis-testbed",
        "-q",
        "--set",
        "compat=thesis",
        "--strategies",
        "mpc",
        "--out",
        tmp_path / "o",
    ]
    code, _, err = run_cli(args, monkeypatch, capsys)
    assert code == 2 and "thesis-testbed.toml" in err and "node" in err and "one pool" in err, err
    assert not (tmp_path / "o").exists()


def test_compat_in_the_file_refuses_a_bound_naming_the_file(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc", "floor"], modes=["perfect"], steps=5)
    exp.write_text('compat = "thesis"\n' + exp.read_text())
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "exp.toml" in err and "strategies" in err and "floor" in err, err
    assert not (tmp_path / "out").exists()


def test_set_compat_thesis_runs_and_records_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["simulate", "default", "-q", "--set", "compat=thesis", "--steps", "6", "--mode", "perfect"]
    code, _, err = run_cli([*args, "--strategies", "exppo,static:4,mpc", "--out", out], monkeypatch, capsys)
    assert code == 0, err
    assert '"compat": "thesis"' in (out / "comparison.json").read_text()

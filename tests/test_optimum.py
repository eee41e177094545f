"""`optimum`: brute force over every plan on tiny jobs, the bracket floor <= optimum <= every strategy
with perfect knowledge, real per-step levels and checkpoints, the simulate row, and bad inputs."""

import itertools
import json

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from bsp_planner.allocation import make_allocator
from bsp_planner.allocation.base import CpuLevels
from bsp_planner.allocation.exact_frame import solve_frame
from bsp_planner.core.errors import InputError
from bsp_planner.core.steps import step_times
from bsp_planner.inputs.experiment import PlannerSettings
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner
from bsp_planner.planners.floor import floor_result
from bsp_planner.planners.optimum import optimum_plan, optimum_result
from bsp_planner.simulate.simulation import simulate


def durations_from_work(work, levels):
    return work[:, None, :] / np.arange(1, levels + 1)[None, :, None]


def plan_cost(actual, levels, penalty):
    changes = np.any(levels[1:] != levels[:-1], axis=1).sum()
    return float(step_times(actual, levels).sum() + penalty * changes)


def brute_force_over_all_plans(actual, max_level, budget, penalty):
    """Every plan (any configuration at every step), by DP over (step, configuration): exact."""
    n, _, m = actual.shape
    configs = [np.array(c) for c in itertools.product(*[range(x + 1) for x in max_level]) if sum(c) <= budget]
    step = np.array([actual[np.arange(n), c, :].max(axis=0) for c in configs])  # (P, m)
    value = step[:, 0].copy()
    for t in range(1, m):
        value = np.minimum(value, value.min() + penalty) + step[:, t]
    return float(value.min())


def test_optimum_equals_brute_force_over_every_plan():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n, levels, m = int(rng.integers(2, 4)), int(rng.integers(2, 5)), int(rng.integers(1, 9))
        actual = durations_from_work(rng.uniform(1, 10, (n, m)), levels)
        if trial % 3 == 0:
            actual = np.round(actual, 1)  # ties
        max_level = rng.integers(0, levels, n)
        budget = int(rng.integers(0, max_level.sum() + 2))
        penalty = float(rng.choice([0.0, 0.3, 1.0, 5.0, 100.0]))
        cap = int(rng.choice([m, 2, 3]))
        plan = optimum_plan(actual, max_level, budget, penalty, cap, rel_gap=1e-9)
        lv = plan.levels(m, n)
        assert np.all(lv <= max_level) and np.all(lv.sum(axis=1) <= budget)
        best = brute_force_over_all_plans(actual, max_level, budget, penalty)
        cost = plan_cost(actual, lv, penalty)
        assert cost >= best - 1e-9 * max(1.0, best)
        if plan.certified:  # no capped run could have helped: the optimum over all plans
            assert cost == pytest.approx(best, rel=1e-9, abs=1e-12)
        if cap >= m:
            assert plan.certified
        if cost == pytest.approx(plan.value):
            continue
        assert cost < plan.value  # only a free merge of capped segments can make the plan cheaper


def test_known_answers_for_zero_and_huge_penalties():
    rng = np.random.default_rng(1)
    n, levels, m, budget = 4, 6, 15, 8
    actual = durations_from_work(rng.uniform(1, 10, (n, m)), levels)
    max_level = np.full(n, levels - 1)
    # Free reconfiguration: every step at its own min-max, i.e. the floor.
    from bsp_planner.allocation.floor import floor_levels

    free = optimum_plan(actual, max_level, budget, 0.0, 40, rel_gap=1e-9)
    assert free.value == pytest.approx(floor_levels(actual, max_level, budget)[1].sum())
    # Prohibitive penalty: one configuration for the whole job, the exact frame optimum over all steps.
    one = optimum_plan(actual, max_level, budget, 1e6, 40, rel_gap=1e-9)
    whole = solve_frame(actual, np.ones(m), max_level, budget, rel_gap=1e-9)
    assert len(one.segments) == 1 and one.value == pytest.approx(whole.value)


def perfect_context(actual, penalty, budget_steps, allocator="greedy"):
    n, levels, m = actual.shape
    padded = np.concatenate([actual, np.repeat(actual[:, :, -1:], m - 1, axis=2)], axis=2)
    predicted = sliding_window_view(padded, m, axis=2).transpose(2, 0, 1, 3)
    max_level = np.full(n, levels - 1)
    return PlanningContext(
        steps=m,
        cpu=CpuLevels(100, 100, 100 * levels, 100 * (n + budget_steps)),
        max_level=max_level,
        penalty_s=penalty,
        configs=ConfigTable(predicted, make_allocator(allocator), max_level, budget_steps, 0.95),
        mid_durations=actual.mean(axis=2),
    )


@pytest.mark.parametrize("seed", range(2))
def test_optimum_brackets_every_perfect_strategy(seed):
    rng = np.random.default_rng(seed)
    work = rng.uniform(1, 10, (4, 24)) * (1 + np.sin(np.arange(24) / 3.0 + np.arange(4)[:, None]) / 2)
    actual = durations_from_work(work, 10)
    for allocator in ("greedy", "exact"):
        ctx = perfect_context(actual, 0.8, 14, allocator)
        settings = PlannerSettings(dp_max_segment=8, horizon=6, optimum_max_segment=24)
        floor = floor_result(ctx, actual, "perfect")
        opt = optimum_result(ctx, actual, "perfect", settings)
        assert floor.total_s <= opt.total_s + 1e-9
        assert opt.notes["certified_optimal"]
        for s in ["exppo", "static:1", "static:3", "dp", "mpc"]:
            r = simulate(make_planner(s, settings), ctx, actual, "perfect")
            assert opt.total_s <= r.total_s + 1e-9, (allocator, s, opt.total_s, r.total_s)


def test_plan_is_real_levels_and_checkpoints():
    rng = np.random.default_rng(3)
    actual = durations_from_work(rng.uniform(1, 10, (3, 20)), 6)
    ctx = perfect_context(actual, 0.5, 7)
    r = optimum_result(ctx, actual, "perfect", PlannerSettings(optimum_max_segment=20))
    assert r.levels.shape == (20, 3) and np.all(r.levels.sum(axis=1) <= 7)
    assert np.array_equal(r.reconfigured[1:], np.any(r.levels[1:] != r.levels[:-1], axis=1)) and not r.reconfigured[0]
    assert np.allclose(r.step_s, step_times(actual, r.levels))
    # The DP's value is what the simulator's accounting gives for the plan.
    assert r.total_s == pytest.approx(r.notes["dp_value_s"]) == pytest.approx(plan_cost(actual, r.levels, 0.5))
    assert r.actions[0] > 0 and set(np.nonzero(r.actions)[0]) >= set(np.nonzero(r.reconfigured)[0])


def test_bad_inputs():
    actual = durations_from_work(np.ones((2, 5)), 3)
    with pytest.raises(InputError, match="optimum_max_segment"):
        optimum_plan(actual, np.full(2, 2), 2, 1.0, 0)
    with pytest.raises(InputError, match="no feasible configuration"):
        optimum_plan(actual, np.full(2, 2), -1, 1.0, 5)


@pytest.mark.slow
def test_simulate_shows_optimum_and_runs_exact(tmp_path, synthetic_profile, monkeypatch, capsys):
    from cli_run import run_cli
    from synthetic import write_experiment

    exp = write_experiment(tmp_path, synthetic_profile, steps=16, planner__dp_max_segment=6)
    args = ["simulate", exp, "-q", "--allocator", "exact", "--strategies", "exppo,static:3,dp,mpc,floor,optimum"]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    assert "optimum" in out
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert data["meta"]["settings"]["planner"]["allocator"] == "exact"
    rows = {(r["strategy"], r["mode"]): r for r in data["results"]}
    for mode in ("perfect", "forecast"):
        opt, floor = rows[("optimum", mode)]["total_s"], rows[("floor", mode)]["total_s"]
        assert floor <= opt + 1e-6
    for s in ("exppo", "static:3", "dp", "mpc"):
        assert rows[("optimum", "perfect")]["total_s"] <= rows[(s, "perfect")]["total_s"] + 1e-6

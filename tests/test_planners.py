import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from bsp_planner.allocation.base import CpuLevels, frame_time
from bsp_planner.allocation.floor import floor_levels
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.inputs.experiment import PlannerSettings
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner
from bsp_planner.planners.dp import segment_dp
from bsp_planner.planners.floor import floor_result
from bsp_planner.simulate.simulation import simulate

N_LEVELS = 6


def durations_from_work(work: np.ndarray) -> np.ndarray:
    """work (tasks, steps) -> durations (tasks, levels, steps) = work / (level + 1)."""
    return work[:, None, :] / np.arange(1, N_LEVELS + 1)[None, :, None]


def perfect_context(actual: np.ndarray, penalty: float, budget_steps: int) -> PlanningContext:
    n, _, m = actual.shape
    padded = np.concatenate([actual, np.repeat(actual[:, :, -1:], m - 1, axis=2)], axis=2)
    predicted = sliding_window_view(padded, m, axis=2).transpose(2, 0, 1, 3)
    max_level = np.full(n, N_LEVELS - 1)
    return PlanningContext(
        steps=m,
        cpu=CpuLevels(100, 100, 100 * N_LEVELS, 100 * (n + budget_steps)),
        max_level=max_level,
        penalty_s=penalty,
        configs=ConfigTable(predicted, GreedyAllocator(), max_level, budget_steps, 0.95),
        mid_durations=actual.mean(axis=2),
    )


def compositions(m: int, cap: int):
    """Every way to cut m steps into consecutive segments of at most cap steps."""
    if m == 0:
        yield []
        return
    for j in range(1, min(cap, m) + 1):
        for rest in compositions(m - j, cap):
            yield [j] + rest


@pytest.mark.parametrize("seed", range(5))
def test_dp_equals_brute_force_over_all_plans(seed):
    rng = np.random.default_rng(seed)
    m, cap, penalty = 7, 4, float(rng.uniform(0.5, 4))
    actual = durations_from_work(rng.uniform(1, 10, (3, m)))
    ctx = perfect_context(actual, penalty, budget_steps=5)
    ctx.configs.ensure_all(cap)
    best = np.inf
    for plan in compositions(m, cap):
        starts = np.cumsum([0] + plan[:-1])
        cost = sum(ctx.configs.window_times(cap)[s, j - 1] for s, j in zip(starts, plan, strict=True)) + penalty * (
            len(plan) - 1
        )
        best = min(best, cost)
    total, segments = segment_dp(ctx.configs.window_times(cap), penalty, m)
    assert total == pytest.approx(best)
    assert sum(j for _, j in segments) == m
    # The simulated plan never costs more than DP predicted (an unchanged configuration is free).
    result = simulate(make_planner("dp", PlannerSettings(dp_max_segment=cap)), ctx, actual)
    assert result.total_s <= total + 1e-9


def two_phase_job(n_steps=12, switch=4):
    """Task 0 is heavy before `switch`, task 1 after: a configuration for phase 1 is wrong for phase 2."""
    work = np.ones((2, n_steps))
    work[0, :switch] = 8.0
    work[1, switch:] = 8.0
    return durations_from_work(work)


def test_mpc_keeps_when_penalty_outweighs_the_gain():
    actual = two_phase_job()
    ctx = perfect_context(actual, penalty=1000.0, budget_steps=4)
    result = simulate(make_planner("mpc", PlannerSettings(horizon=6)), ctx, actual)
    assert result.checkpoints == 0
    assert np.all(result.actions[1:] == 0)


def test_mpc_reconfigures_when_the_gain_outweighs_the_penalty():
    actual = two_phase_job()
    ctx = perfect_context(actual, penalty=0.5, budget_steps=4)
    result = simulate(make_planner("mpc", PlannerSettings(horizon=6)), ctx, actual)
    assert result.checkpoints == 1
    assert result.reconfigured[4]  # exactly when the heavy task changes
    # The first phase favours task 0, the second task 1.
    assert result.levels[0, 0] > result.levels[0, 1] and result.levels[4, 1] > result.levels[4, 0]
    keep_all = simulate(make_planner("mpc", PlannerSettings(horizon=6)), perfect_context(actual, 1000.0, 4), actual)
    assert result.total_s < keep_all.total_s


def test_mpc_waits_for_the_change_instead_of_reconfiguring_early():
    # With a horizon that sees the switch coming, MPC does not reconfigure before it.
    actual = two_phase_job(n_steps=14, switch=7)
    ctx = perfect_context(actual, penalty=0.5, budget_steps=4)
    result = simulate(make_planner("mpc", PlannerSettings(horizon=10)), ctx, actual)
    assert not result.reconfigured[:7].any()


def test_static_window_reconfigures_on_its_period_only():
    rng = np.random.default_rng(2)
    actual = durations_from_work(rng.uniform(1, 10, (4, 20)))
    ctx = perfect_context(actual, penalty=1.0, budget_steps=8)
    result = simulate(make_planner("static:5"), ctx, actual)
    changed = np.nonzero(result.reconfigured)[0]
    assert set(changed) <= {5, 10, 15}
    assert result.actions[0] == 5 and result.actions[5] == 5 and result.actions[6] == 0


def test_floor_is_the_exact_per_step_min_max():
    rng = np.random.default_rng(4)
    actual = durations_from_work(rng.uniform(1, 10, (3, 5)))
    budget = 6
    levels, times = floor_levels(actual, np.full(3, N_LEVELS - 1), budget)
    for t in range(5):
        best = min(
            actual[np.arange(3), list(c), t].max()
            for c in itertools.product(range(N_LEVELS), repeat=3)
            if sum(c) <= budget
        )
        assert times[t] == pytest.approx(best)
        assert levels[t].sum() <= budget


@pytest.mark.parametrize("seed", range(3))
def test_floor_is_below_every_strategy(seed):
    rng = np.random.default_rng(seed)
    actual = durations_from_work(rng.uniform(1, 10, (4, 30)))
    ctx = perfect_context(actual, penalty=0.7, budget_steps=10)
    floor = floor_result(ctx, actual, "perfect").total_s
    for s in ["exppo", "static:1", "static:3", "dp", "mpc"]:
        assert simulate(make_planner(s), ctx, actual).total_s >= floor - 1e-9
    # static:1 with perfect knowledge reaches the floor's compute time (one step frames are min-max).
    assert simulate(make_planner("static:1"), ctx, actual).compute_s == pytest.approx(floor)


def test_unknown_strategy_and_bad_arguments():
    from bsp_planner.core.errors import InputError

    with pytest.raises(InputError, match="unknown strategy"):
        make_planner("nope")
    with pytest.raises(InputError, match="static:K"):
        make_planner("static:x")
    with pytest.raises(InputError, match="takes no"):
        make_planner("mpc:3")


def test_frame_time_of_configuration():
    actual = durations_from_work(np.array([[2.0, 4.0], [6.0, 1.0]]))
    assert frame_time(actual, np.array([0, 1])) == pytest.approx(3.0 + 4.0)


def test_even_splits_the_budget_equally_and_never_reconfigures():
    rng = np.random.default_rng(4)
    actual = durations_from_work(rng.uniform(1, 10, (3, 12)))
    ctx = perfect_context(actual, penalty=0.5, budget_steps=10)  # 10 steps above the minimum over 3 tasks
    result = simulate(make_planner("even"), ctx, actual)
    assert (result.levels == 3).all()  # 10 // 3 each, the same for every task and step
    assert result.checkpoints == 0
    capped = perfect_context(actual, penalty=0.5, budget_steps=30)  # more than the levels hold: each at its max
    assert (simulate(make_planner("even"), capped, actual).levels == N_LEVELS - 1).all()
    with pytest.raises(Exception, match="takes no"):
        make_planner("even:2")

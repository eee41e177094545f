"""The exact (MILP) allocator: brute force on small frames, never worse than greedy, the allocator
interface, and the bad inputs it must refuse with a clear error (never a silent greedy answer)."""

import itertools

import numpy as np
import pytest

from bsp_planner.allocation import ALLOCATORS, make_allocator
from bsp_planner.allocation.base import discount_weights, frame_time
from bsp_planner.allocation.exact import ExactAllocator
from bsp_planner.allocation.exact_bounds import floors_without_each_task, local_search
from bsp_planner.allocation.exact_frame import ExactSolverError, solve_frame
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.core.errors import InputError
from bsp_planner.planners.base import ConfigTable


def random_table(rng, n, levels, k, ties=False):
    """Durations non-increasing in level: (n, levels, k)."""
    d = np.sort(rng.uniform(0.5, 10.0, (n, levels, k)), axis=1)[:, ::-1, :]
    return np.round(d) if ties else d


def brute_force(d, w, max_level, budget):
    best = np.inf
    for c in itertools.product(*[range(m + 1) for m in max_level]):
        if sum(c) <= budget:
            best = min(best, float(frame_time(d, np.array(c), w)))
    return best


@pytest.mark.parametrize("formulation", ["threshold", "assignment"])
def test_milp_equals_brute_force_on_small_frames(formulation):
    rng = np.random.default_rng(0)
    for trial in range(60):
        n, levels, k = int(rng.integers(2, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 5))
        d = random_table(rng, n, levels, k, ties=trial % 4 == 0)
        max_level = rng.integers(0, levels, n)
        budget = int(rng.integers(0, n * (levels - 1) + 1))
        w = discount_weights(k, 0.9 if trial % 2 else 1.0)
        if trial % 5 == 0 and k > 1:
            w[rng.integers(0, k)] = 0.0  # a padded step outside the frame
        # No incumbent half the time, so the MILP (not the bounds) has to find the answer.
        inc = GreedyAllocator().allocate(d, w, max_level, budget)[None] if trial % 2 else None
        sol = solve_frame(d, w, max_level, budget, incumbents=inc, formulation=formulation, rel_gap=1e-9)
        assert np.all(sol.levels <= max_level) and np.all(sol.levels >= 0) and sol.levels.sum() <= budget
        assert sol.optimal
        assert sol.value == pytest.approx(brute_force(d, w, max_level, budget), rel=1e-9, abs=1e-12)
        assert sol.value == pytest.approx(float(frame_time(d, sol.levels, w)), rel=1e-12)


def test_lp_screen_answers_exactly_or_with_a_true_bound():
    """With `screen` (what `optimum` does), the LP relaxation answers first: an exact answer must be
    the optimum, and any bound (from the LP, or a MILP asked only about the screen) must lie between
    the screen and the optimum: on small frames against brute force, with the search off as `optimum`
    calls it."""
    rng = np.random.default_rng(3)
    methods = set()
    for trial in range(80):
        n, levels, k = int(rng.integers(2, 5)), int(rng.integers(3, 6)), int(rng.integers(2, 5))
        d = random_table(rng, n, levels, k, ties=trial % 4 == 0)
        max_level = np.full(n, levels - 1)
        budget = int(rng.integers(1, n * (levels - 1)))
        w = np.ones(k)
        best = brute_force(d, w, max_level, budget)
        inc = np.zeros((1, n), dtype=np.int64)  # a poor start: the LP and MILP have work to do
        screen = best * float(rng.uniform(0.9, 1.1))
        cutoff = screen + float(rng.uniform(0.0, 0.3)) * best
        sol = solve_frame(
            d, w, max_level, budget, incumbents=inc, cutoff=cutoff, screen=screen, search=False, fill=False
        )
        methods.add(sol.method)
        if sol.optimal:
            assert sol.value == pytest.approx(best, rel=1e-9)
        else:
            assert sol.bound <= best * (1 + 1e-9)  # a bound never above the optimum
            assert sol.bound >= min(screen, cutoff) - 1e-9 * best  # and enough to tell the caller
    assert "lp-bound" in methods  # the screen answered some frames without a MILP


def test_milp_alone_finds_the_optimum_without_level_fixing():
    # The model itself (not the bounds that shrink it) must be exact: no shrinking, no incumbent.
    rng = np.random.default_rng(1)
    for _ in range(25):
        n, levels, k = 3, 5, 3
        d = random_table(rng, n, levels, k)
        budget = int(rng.integers(1, 10))
        w = discount_weights(k, 0.95)
        sol = solve_frame(d, w, np.full(n, levels - 1), budget, shrink_rounds=0, rel_gap=1e-9)
        assert sol.method == "milp"
        assert sol.value == pytest.approx(brute_force(d, w, np.full(n, levels - 1), budget), rel=1e-9)


def test_exact_is_never_worse_than_greedy():
    rng = np.random.default_rng(2)
    greedy, exact = GreedyAllocator(), ExactAllocator(threads=1)
    better = 0
    for trial in range(25):
        n, levels, k = 8, int(rng.integers(8, 25)), int(rng.integers(2, 8))
        d = random_table(rng, n, levels, k, ties=trial % 5 == 0)
        w = discount_weights(k, 0.95)
        budget = int(rng.integers(n, n * (levels - 1) // 2))
        max_level = np.full(n, levels - 1)
        g = frame_time(d, greedy.allocate(d, w, max_level, budget), w)
        lv = exact.allocate(d, w, max_level, budget)
        assert lv.sum() <= budget and np.all(lv <= max_level)
        e = frame_time(d, lv, w)
        assert e <= g + 1e-12 * g
        better += e < g - 1e-9
    assert better > 0  # greedy is not optimal on these, so the comparison means something


def test_unused_budget_is_handed_out_without_lengthening_the_frame():
    # Task 1 is never the slowest; the optimum needs few levels, the rest are handed out.
    d = np.stack([np.outer([8.0, 4.0, 2.0, 1.0], [1.0, 1.0]), np.full((4, 2), 0.1)])
    sol = solve_frame(d, np.ones(2), np.array([3, 3]), 5)
    assert sol.levels.tolist() == [3, 2] and sol.value == pytest.approx(2.0)


def test_floors_without_each_task_match_enumeration():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, levels, k = 3, 4, 2
        d = random_table(rng, n, levels, k, ties=True)
        lo = rng.integers(0, 2, n)
        hi = np.maximum(lo, rng.integers(0, levels, n))
        budget = int(rng.integers(0, 8))
        fm, _ = floors_without_each_task(d, lo, hi, budget)
        for i in range(n):
            others = [j for j in range(n) if j != i]
            for b in range(budget + 1):
                for kk in range(k):
                    vals = [
                        max(d[j, c[x], kk] for x, j in enumerate(others))
                        for c in itertools.product(*[range(lo[j], hi[j] + 1) for j in others])
                        if sum(c) <= b
                    ]
                    assert fm[i, b, kk] == (min(vals) if vals else np.inf)


def test_local_search_only_improves_and_stays_feasible():
    rng = np.random.default_rng(4)
    d = random_table(rng, 6, 12, 5)
    w = discount_weights(5, 0.95)
    start = np.zeros(6, dtype=np.int64)
    lv, v = local_search(d, w, start, np.full(6, 11), 20)
    assert v <= frame_time(d, start, w) and lv.sum() <= 20 and np.all(lv <= 11)
    assert v == pytest.approx(float(frame_time(d, lv, w)))


def test_allocator_is_registered_batched_cached_and_deterministic():
    assert make_allocator("exact").name == "exact" and "exact" in ALLOCATORS
    rng = np.random.default_rng(5)
    d = np.stack([random_table(rng, 5, 10, 4) for _ in range(6)])
    w = np.tile(discount_weights(4, 0.95), (6, 1))
    w[2, 3:] = 0.0  # a padded frame
    one = ExactAllocator(threads=1)
    batch = one.allocate_batch(d, w, np.full(5, 9), 15)
    single = np.array([ExactAllocator(threads=1).allocate(d[b], w[b], np.full(5, 9), 15) for b in range(6)])
    two = ExactAllocator(threads=2).allocate_batch(d, w, np.full(5, 9), 15)
    for b in range(6):  # ties may pick different configurations; the frame times must agree
        for other in (single, two):
            assert frame_time(d[b], other[b], w[b]) == pytest.approx(frame_time(d[b], batch[b], w[b]), rel=1e-9)
    assert np.array_equal(two, ExactAllocator(threads=2).allocate_batch(d, w, np.full(5, 9), 15))
    again = one.allocate_batch(d, w, np.full(5, 9), 15)
    assert np.array_equal(again, batch) and one.stats.cache_hits == 6


def test_config_table_and_planner_frames_with_exact():
    # The exact allocator through the ConfigTable (as dp, static, RL use it) never loses to greedy.
    rng = np.random.default_rng(6)
    m, h, n = 12, 6, 4
    actual = random_table(rng, n, 8, m + h)
    predicted = np.stack([actual[:, :, t : t + h] for t in range(m)])
    tables = {
        name: ConfigTable(predicted, make_allocator(name), np.full(n, 7), 10, 0.95) for name in ("greedy", "exact")
    }
    for t in tables.values():
        t.ensure_all(h)
    for t in range(m):
        for j in range(1, h + 1):
            w = discount_weights(j, 0.95)
            ge = frame_time(predicted[t, :, :, :j], tables["greedy"].levels(t, j), w)
            ex = frame_time(predicted[t, :, :, :j], tables["exact"].levels(t, j), w)
            assert ex <= ge + 1e-12 * ge


# ---------------------------------------------------------------------------------------------------
# Bad inputs


def test_budget_that_leaves_no_configuration_is_refused():
    d = random_table(np.random.default_rng(7), 3, 4, 2)
    with pytest.raises(InputError, match="no feasible configuration"):
        solve_frame(d, np.ones(2), np.full(3, 3), -1)
    with pytest.raises(InputError, match="no feasible configuration"):
        ExactAllocator().allocate(d, np.ones(2), np.array([3, -1, 3]), 4)


def test_budget_below_the_minimum_is_refused_in_an_experiment(tmp_path, synthetic_profile):
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.simulate.scenario import build_scenario

    from synthetic import write_experiment

    exp = load_experiment(
        write_experiment(tmp_path, synthetic_profile, cpu__budget_millicores=1000, planner__allocator="exact")
    )
    with pytest.raises(InputError, match="below 8 tasks x min"):
        build_scenario(exp)


def test_frames_beyond_the_forecast_horizon_are_refused():
    d = random_table(np.random.default_rng(8), 3, 4, 3)
    with pytest.raises(InputError, match="beyond the forecast horizon"):
        solve_frame(d, np.ones(5), np.full(3, 3), 4)
    with pytest.raises(InputError, match="beyond the forecast horizon"):
        ExactAllocator().allocate_batch(d[None], np.ones((1, 4)), np.full(3, 3), 4)
    table = ConfigTable(d[None], ExactAllocator(), np.full(3, 3), 4, 0.95)
    with pytest.raises(InputError, match="beyond the forecast horizon"):
        table.ensure_all(4)


def test_non_finite_durations_are_refused():
    d = random_table(np.random.default_rng(9), 3, 4, 2)
    d[1, 2, 0] = np.nan
    with pytest.raises(InputError, match="finite"):
        solve_frame(d, np.ones(2), np.full(3, 3), 4)


def hard_frame():
    rng = np.random.default_rng(10)
    n, levels, k = 8, 40, 12
    d = random_table(rng, n, levels, k)
    return d, discount_weights(k, 0.95), np.full(n, levels - 1), 140


def test_time_limit_raises_with_bound_and_gap_not_greedy():
    d, w, max_level, budget = hard_frame()
    g = GreedyAllocator().allocate(d, w, max_level, budget)
    with pytest.raises(ExactSolverError, match=r"best bound .* gap") as info:
        solve_frame(d, w, max_level, budget, incumbents=g[None], shrink_rounds=0, time_limit=1e-6)
    err = info.value
    assert np.isfinite(err.bound) and err.bound <= err.incumbent + 1e-9
    assert err.incumbent <= frame_time(d, g, w) + 1e-9
    assert "time limit" in str(err).lower()


def test_solver_failure_raises(monkeypatch):
    from scipy.optimize import OptimizeResult

    import bsp_planner.allocation.exact_highs as exact

    def broken(*args, **kwargs):
        return OptimizeResult(
            status=4,
            message="HiGHS reported an error",
            x=None,
            fun=None,
            mip_node_count=0,
            mip_dual_bound=None,
            mip_gap=None,
        )

    monkeypatch.setattr(exact, "milp", broken)
    d, w, max_level, budget = hard_frame()
    with pytest.raises(ExactSolverError, match="HiGHS reported an error"):
        solve_frame(d, w, max_level, budget, shrink_rounds=0)

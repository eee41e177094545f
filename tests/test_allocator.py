import itertools

import numpy as np
import pytest

from bsp_planner.allocation.base import CpuLevels, discount_weights, frame_time
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.core.errors import InputError


def inverse_table(work: np.ndarray, n_levels: int) -> np.ndarray:
    """durations[i, l, k] = work[i, k] / (l + 1): task i at CPU (l+1) units."""
    return work[:, None, :] / np.arange(1, n_levels + 1)[None, :, None]


def test_hand_checked_two_tasks():
    # Task 0 needs 4 units at both steps, task 1 needs 2 then 6. At one CPU each, task 0 is slowest at
    # step 0 (4 vs 2) and task 1 at step 1 (6 vs 4). One more CPU saves task 0: 4-2 = 2 at step 0 (weight
    # 1); task 1: 6-3 = 3 at step 1 (weight 0.95) = 2.85 -> the first step goes to task 1.
    d = inverse_table(np.array([[4.0, 4.0], [2.0, 6.0]]), 4)
    alloc = GreedyAllocator()
    w = discount_weights(2, 0.95)
    assert alloc.allocate(d, w, np.array([3, 3]), 0).tolist() == [0, 0]
    assert alloc.allocate(d, w, np.array([3, 3]), 1).tolist() == [0, 1]
    # Then task 0 is slowest at both steps (4, 4 vs 2, 3): it gets the next step.
    assert alloc.allocate(d, w, np.array([3, 3]), 2).tolist() == [1, 1]
    assert frame_time(d, np.array([1, 1])) == pytest.approx(2.0 + 3.0)


def test_discount_changes_the_choice():
    # Task 0 is slowest at step 0 (saves 3) and, by the tie rule, at step 1 (saves 0.5); task 1 is
    # slowest at step 2 (saves 4). Discounted by 0.9: 3 + 0.45 = 3.45 > 0.81 * 4 = 3.24 -> task 0.
    # Undiscounted: 3.5 < 4 -> task 1. The later, larger gain wins only when the discount allows it.
    d = inverse_table(np.array([[6.0, 1.0, 1.0], [1.0, 1.0, 8.0]]), 3)
    assert GreedyAllocator().allocate(d, discount_weights(3, 0.9), np.array([2, 2]), 1).tolist() == [1, 0]
    assert GreedyAllocator().allocate(d, discount_weights(3, 1.0), np.array([2, 2]), 1).tolist() == [0, 1]


def test_respects_per_task_maximum_and_budget():
    rng = np.random.default_rng(3)
    d = inverse_table(rng.uniform(1, 10, (5, 7)), 10)
    max_level = np.array([2, 9, 9, 0, 9])
    for budget in range(0, 40):
        lv = GreedyAllocator().allocate(d, discount_weights(7, 0.95), max_level, budget)
        assert np.all(lv <= max_level)
        assert lv.sum() == min(budget, max_level.sum())  # never idle while someone could grow


def test_frame_time_never_rises_as_steps_are_added():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n, k, levels = rng.integers(2, 7), rng.integers(1, 8), rng.integers(3, 12)
        d = np.sort(rng.uniform(0.5, 20, (n, levels, k)), axis=1)[:, ::-1, :]
        w = discount_weights(k, 0.95)
        times = [
            frame_time(d, GreedyAllocator().allocate(d, w, np.full(n, levels - 1), b), w) for b in range(n * levels)
        ]
        assert np.all(np.diff(times) <= 1e-12)


def test_batch_equals_one_by_one_and_ties_are_deterministic():
    rng = np.random.default_rng(11)
    d = np.sort(rng.integers(1, 5, (6, 4, 5, 3)).astype(float), axis=2)[:, :, ::-1, :]  # many ties
    w = np.tile(discount_weights(3, 0.95), (6, 1))
    batch = GreedyAllocator().allocate_batch(d, w, np.full(4, 4), 7)
    single = np.array([GreedyAllocator().allocate(d[b], w[b], np.full(4, 4), 7) for b in range(6)])
    assert np.array_equal(batch, single)
    assert np.array_equal(batch, GreedyAllocator().allocate_batch(d, w, np.full(4, 4), 7))


def test_single_step_greedy_is_the_exact_min_max():
    # With one step and durations non-increasing in CPU, giving steps to the slowest is optimal.
    rng = np.random.default_rng(5)
    for _ in range(20):
        n, levels = 3, 5
        d = np.sort(rng.uniform(1, 10, (n, levels, 1)), axis=1)[:, ::-1, :]
        budget = int(rng.integers(0, n * (levels - 1)))
        greedy = frame_time(d, GreedyAllocator().allocate(d, np.ones(1), np.full(n, levels - 1), budget))
        best = min(frame_time(d, np.array(c)) for c in itertools.product(range(levels), repeat=n) if sum(c) <= budget)
        assert greedy == pytest.approx(best)


def test_cpu_levels_and_budget_errors():
    cpu = CpuLevels(250, 50, 2000, 8000)
    assert cpu.n_levels == 36 and cpu.millicores[-1] == 2000
    assert cpu.budget_steps(8) == (8000 - 8 * 250) // 50
    with pytest.raises(InputError, match="below 8 tasks x min"):
        CpuLevels(1000, 100, 8000, 7000).budget_steps(8)

"""The fast greedy allocator gives exactly (bit for bit) what the original, straightforward one gave.

`reference_allocate` is the implementation the fast one replaced, copied verbatim: it recomputes every
straggler and every gain from scratch at each of the budget's steps.
"""

import numpy as np
import pytest

from bsp_planner.allocation.base import discount_weights
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.planners.mpc import horizon_frames


def _straggler_gains(cur, nxt, weights):
    b, n, k = cur.shape
    strag = cur.argmax(axis=1)
    bi = np.arange(b)[:, None]
    ki = np.arange(k)[None, :]
    saved = (cur[bi, strag, ki] - nxt[bi, strag, ki]) * weights
    flat = (bi * n + strag).ravel()
    gain = np.bincount(flat, weights=saved.ravel(), minlength=b * n).reshape(b, n)
    count = np.bincount(flat, weights=(weights > 0).ravel(), minlength=b * n).reshape(b, n)
    return gain, count > 0


def reference_allocate(durations, weights, max_level, budget_steps):
    durations = np.asarray(durations, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    b, n, n_levels, k = durations.shape
    max_level = np.minimum(np.asarray(max_level, dtype=np.int64), n_levels - 1)
    lvl = np.zeros((b, n), dtype=np.int64)
    cur = durations[:, :, 0, :].copy()
    nxt = durations[:, :, min(1, n_levels - 1), :].copy()
    rows = np.arange(b)
    for _ in range(budget_steps):
        can = lvl < max_level[None, :]
        if not can.any():
            break
        gain, straggles = _straggler_gains(cur, nxt, weights)
        candidates = straggles & can
        stuck = ~candidates.any(axis=1) & can.any(axis=1)
        if stuck.any():
            masked = np.where(can[stuck][:, :, None], cur[stuck], -np.inf)
            g2, s2 = _straggler_gains(masked, np.where(can[stuck][:, :, None], nxt[stuck], -np.inf), weights[stuck])
            gain[stuck] = np.nan_to_num(g2, nan=0.0, neginf=0.0, posinf=0.0)
            candidates[stuck] = s2 & can[stuck]
        score = np.where(candidates, gain, -np.inf)
        choice = score.argmax(axis=1)
        ok = candidates[rows, choice]
        r, c = rows[ok], choice[ok]
        lvl[r, c] += 1
        cur[r, c] = durations[r, c, lvl[r, c]]
        nxt[r, c] = durations[r, c, np.minimum(lvl[r, c] + 1, n_levels - 1)]
    return lvl


def random_instance(rng):
    b = int(rng.integers(1, 9))
    n = int(rng.choice([1, 2, 3, 5, 8, 13, 31, 33, 40, 70]))
    n_levels = int(rng.integers(1, 9))
    k = int(rng.integers(1, 12))
    kind = rng.integers(0, 4)
    if kind == 0:  # small integers: many ties, non-increasing in level
        d = np.sort(rng.integers(1, 4, (b, n, n_levels, k)).astype(float), axis=2)[:, :, ::-1, :]
    elif kind == 1:  # small integers, not monotone in level (a step may make a task slower)
        d = rng.integers(0, 3, (b, n, n_levels, k)).astype(float)
    elif kind == 2:  # work / CPU, identical tasks repeated: ties between whole tasks
        work = rng.integers(1, 5, (b, max(1, n // 3), k)).astype(float)
        work = work[:, np.arange(n) % work.shape[1], :]
        d = work[:, :, None, :] / np.arange(1, n_levels + 1)[None, None, :, None]
    else:  # continuous
        d = np.sort(rng.uniform(0.1, 10, (b, n, n_levels, k)), axis=2)[:, :, ::-1, :]
    wkind = rng.integers(0, 4)
    if wkind == 0:
        w = np.tile(discount_weights(k, 0.95), (b, 1))
    elif wkind == 1:  # padded windows: zero weights outside [s, s+j)
        s = rng.integers(0, k, b)
        j = rng.integers(1, k + 1, b)
        kk = np.arange(k)
        w = np.where((kk >= s[:, None]) & (kk < (s + j)[:, None]), 0.9 ** np.clip(kk - s[:, None], 0, None), 0.0)
    elif wkind == 2:  # some frames with no weight at all, some negative
        w = rng.choice([0.0, 0.0, 1.0, 0.5, -0.25], (b, k))
    else:
        w = rng.integers(0, 3, (b, k)).astype(float)
    max_level = rng.integers(-1, n_levels + 2, n)
    if rng.random() < 0.3:
        max_level[:] = n_levels - 1
    budget = int(rng.integers(0, n * n_levels + 3))
    return d, w, max_level, budget


@pytest.mark.parametrize("seed", range(40))
def test_fast_greedy_equals_reference(seed):
    rng = np.random.default_rng(seed)
    alloc = GreedyAllocator()
    for _ in range(25):
        d, w, max_level, budget = random_instance(rng)
        expected = reference_allocate(d, w, max_level, budget)
        got = alloc.allocate_batch(d, w, max_level, budget)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected), (d.shape, budget, max_level)


@pytest.mark.parametrize("seed", range(4))
def test_fast_greedy_equals_reference_on_mpc_batches(seed):
    # MPC's shape: one forecast broadcast over every window of the horizon, zero weight outside each.
    rng = np.random.default_rng(100 + seed)
    n, n_levels, h = [(8, 36, 10), (40, 12, 6), (3, 5, 10), (70, 8, 4)][seed]
    work = rng.integers(10, 50, (n, h)).astype(float)
    pred = work[:, None, :] / (1 + 0.2 * np.arange(n_levels))[None, :, None]
    starts, lengths = horizon_frames(h)
    kk = np.arange(h)
    inside = (kk >= starts[:, None]) & (kk < (starts + lengths)[:, None])
    w = np.where(inside, discount_weights(h, 0.95)[np.clip(kk - starts[:, None], 0, h - 1)], 0.0)
    d = np.broadcast_to(pred, (starts.size,) + pred.shape)
    max_level = np.full(n, n_levels - 1)
    max_level[::5] = n_levels // 3
    for budget in (0, 1, n, 15 * n, n * n_levels):
        assert np.array_equal(
            GreedyAllocator().allocate_batch(d, w, max_level, budget), reference_allocate(d, w, max_level, budget)
        )


def test_non_finite_inputs_match_too():
    rng = np.random.default_rng(9)
    d = np.sort(rng.integers(1, 4, (3, 6, 5, 4)).astype(float), axis=2)[:, :, ::-1, :].copy()
    d[0, 2, 0, 1] = np.inf
    d[1, 3, :, 2] = np.nan
    w = np.tile(discount_weights(4, 0.9), (3, 1))
    for budget in (0, 3, 12, 40):
        assert np.array_equal(
            GreedyAllocator().allocate_batch(d, w, np.full(6, 4), budget),
            reference_allocate(d, w, np.full(6, 4), budget),
        )


def test_fast_greedy_equals_reference_on_config_table_views():
    # ConfigTable's shape: frames cut from a sliding window view (not contiguous), every weight positive.
    from numpy.lib.stride_tricks import sliding_window_view

    rng = np.random.default_rng(21)
    n, n_levels, m, h = 5, 9, 30, 6
    actual = np.sort(rng.integers(1, 6, (n, n_levels, m + h)).astype(float), axis=1)[:, ::-1, :]
    predicted = sliding_window_view(actual, h, axis=2).transpose(2, 0, 1, 3)
    max_level = np.array([8, 2, 8, 5, 0])
    for j in (1, 3, h):
        d = predicted[:, :, :, :j]
        w = np.broadcast_to(discount_weights(j, 0.95), (d.shape[0], j))
        for budget in (4, 12, 40):
            assert np.array_equal(
                GreedyAllocator().allocate_batch(d, w, max_level, budget), reference_allocate(d, w, max_level, budget)
            )

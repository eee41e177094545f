"""The `threshold` allocator: the greedy allocator's min-max idea without its one-step-per-round loop.

The greedy allocator (thesis Algorithm 1) hands out one CPU step per round, so a frame of n tasks with a
budget of ~15 n steps costs ~15 n rounds of O(n k) work: O(n^2 k). This allocator reaches a
configuration of about the same quality (tests/test_threshold_allocator.py; measured in
benchmarks/bench_allocators.py) with no loop over the budget:

1. Per-step floors f_k: for every step k of the frame alone, the smallest slowest-task time any
   configuration within the budget reaches (the `floor` bound). Durations are non-increasing in CPU,
   so reaching a time T needs need_i(T) = #{l : d[i, l, k] > T} levels of task i, and the floor is the
   smallest T with sum_i need_i(T) <= budget and need_i(T) <= max_i: the (budget+1)-th largest
   duration among the levels a task may still leave, or the slowest task at its maximum if larger.
   One np.partition per step, no search.
2. One threshold for the frame: every weighted step aims at the same multiple a of its own floor
   (T_k = a f_k). Task i at level l meets that at every step iff R[i, l] = max_k d[i, l, k] / f_k <= a,
   and R is non-increasing in l, so the levels needed are #{l : R[i, l] > a}. The smallest feasible a
   is the (budget+1)-th largest entry of R (levels at a task's maximum excluded): one np.partition.
   Every step of the budget is spent: entries tied at a go by the larger weighted frame time, then
   the lower task index.
3. Polish: the same threshold for budget - r (r = 8), then the greedy rule spends the last r steps,
   one per round, on the few tasks that can matter (each step's r+1 slowest); the better of the two
   configurations (weighted frame time) is returned. Greedy's marginal view fixes most frames where
   one common multiple of the floors is a poor fit.

Cost per frame: O(n L k) for the ratios and O(n L) for the selection, whatever the budget; the polish
is O(r k (r + n)). For MPC, whose windows all read one duration table (a broadcast, stride-0 batch),
the floors are computed once and every window's R is the maximum of two range maxima from a sparse
table over the horizon, so a decision costs O(n L h log h + windows x n L) instead of windows x n L h;
R is float32 (half the memory traffic; the ties it may add are broken like any others).

Not the thesis's algorithm: plans differ from greedy's (quality against greedy and the exact
allocator: BENCHMARKS.md). `greedy` stays the default and is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .base import Allocator, batch_inputs
from .greedy import greedy_rounds

#: tiebreak(frame, flat entries i * L + l) -> each entry's weighted frame time (see levels_for_ratios)
TieBreak = Callable[[int | np.integer[Any], np.ndarray], np.ndarray]


def _kth_largest(values: np.ndarray, k: int, axis: int) -> np.ndarray:
    """The k-th largest (k from 1) along an axis; -inf where the axis has fewer than k entries."""
    size = values.shape[axis]
    if k > size:
        shape = list(values.shape)
        del shape[axis]
        return np.full(shape, -np.inf)
    kth: np.ndarray = np.take(np.partition(values, size - k, axis=axis), size - k, axis=axis)
    return kth


def step_floors(d: np.ndarray, max_level: np.ndarray, budget_steps: int) -> np.ndarray:
    """Per-step min-max floors. d (..., n, L, k) seconds, non-increasing along L -> (..., k) seconds."""
    n, L = d.shape[-3], d.shape[-2]
    below_max = np.arange(L)[None, :] < max_level[:, None]  # (n, L): levels a task may still leave
    at_max = np.take_along_axis(
        d, np.broadcast_to(max_level[:, None, None], d.shape[:-3] + (n, 1, d.shape[-1])), axis=-2
    )
    slowest_at_max = at_max[..., 0, :].max(axis=-2)  # (..., k)
    leavable = np.where(below_max[:, :, None], d, -np.inf).reshape(d.shape[:-3] + (n * L, d.shape[-1]))
    floors: np.ndarray = np.maximum(slowest_at_max, _kth_largest(leavable, budget_steps + 1, axis=-2))
    return floors


def levels_for_ratios(ratio: np.ndarray, tiebreak: TieBreak, budgets: list[int]) -> list[np.ndarray]:
    """Step 2 of the module docstring: for every budget b, the levels (F, n) that give the b steps to
    the entries (i, l) with the largest ratios (task i moves past level l), ties broken by the larger
    tiebreak, then the lower task index. ratio (F, n, L) as `frame_ratios` gives it; tiebreak orders
    entries of equal ratio (called only where there are ties)."""
    f, n, L = ratio.shape
    flat = ratio.reshape(f, n * L)
    size = n * L
    # A frame with no more than b entries a task may leave has threshold -inf for budget b (every such
    # entry is taken). Only the other frames are partitioned, with their -inf entries (levels no task
    # may leave, or a full node's) made distinct values below every ratio (ratios are >= 0): np.partition
    # slows tenfold on an array half made of one repeated value, and the k-th largest, a leavable
    # entry, is the same.
    leavable = (flat > -np.inf).sum(axis=1)
    rows = np.nonzero(leavable > min(budgets, default=size))[0]
    kth = sorted({size - b - 1 for b in budgets if b + 1 <= size})
    sub = flat[rows]
    if kth and rows.size:
        part = np.partition(np.where(sub > -np.inf, sub, -1.0 - np.arange(size, dtype=sub.dtype)), kth, axis=-1)
    else:
        part = sub
    out = []
    for b in budgets:
        # The (b+1)-th largest ratio: the smallest multiple b steps reach (every entry above it needs one).
        a = np.full(f, -np.inf, dtype=flat.dtype)
        if b + 1 <= size:
            a[rows] = np.where(leavable[rows] > b, part[:, size - b - 1], -np.inf)
        levels = (ratio > a[:, None, None]).sum(axis=-1)
        spare = np.where(a > -np.inf, b - levels.sum(axis=1), 0)  # -inf: a frame without weighted steps
        # Entries tied at the threshold: the spare steps go to those with the larger tiebreak (a
        # stable sort keeps task, then level, order among equals; both keys are non-increasing along
        # L, so the entries a task gets are its next levels).
        for fi in np.nonzero(spare > 0)[0]:
            tied = np.nonzero(flat[fi] == a[fi])[0]
            order = np.argsort(-tiebreak(fi, tied), kind="stable")[: spare[fi]]
            np.add.at(levels[fi], tied[order] // L, 1)
        out.append(levels)
    return out


def _ratio_tables(d: np.ndarray, floors: np.ndarray, max_level: np.ndarray) -> np.ndarray:
    """d (..., n, L, k) / floors (..., k), with a floor of 0 meaning "only 0 meets it"; -inf at each
    task's maximum level and above (levels it may not leave)."""
    f = np.broadcast_to(floors[..., None, None, :], d.shape)
    out = np.divide(d, f, out=np.where(d > 0, np.inf, 0.0), where=f > 0)
    out[..., np.arange(d.shape[-2])[None, :] >= max_level[:, None], :] = -np.inf
    ratios: np.ndarray = out
    return ratios


class _RangeMax:
    """Sparse table over the first axis: the max over any contiguous range [s, e) in two lookups."""

    def __init__(self, x: np.ndarray) -> None:
        self.levels = [x]
        span = 1
        while 2 * span <= x.shape[0]:
            prev = self.levels[-1]
            self.levels.append(np.maximum(prev[: prev.shape[0] - span], prev[span:]))
            span *= 2

    def query(self, starts: np.ndarray, ends: np.ndarray, out: np.ndarray) -> None:
        """Writes the maxima over [starts[i], ends[i]) to out[i]; ranges sorted by floor(log2(length)),
        so each power of two fills one contiguous block of out."""
        p = np.floor(np.log2(ends - starts)).astype(np.int64)
        bounds = np.flatnonzero(np.diff(np.concatenate([[-1], p, [-1]])))
        for i0, i1 in zip(bounds[:-1], bounds[1:], strict=True):
            table = self.levels[p[i0]]
            np.maximum(table[starts[i0:i1]], table[ends[i0:i1] - (1 << int(p[i0]))], out=out[i0:i1])


def frame_ratios(
    durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
) -> tuple[np.ndarray, np.ndarray, TieBreak]:
    """Steps 1 and 2 of the module docstring up to the ratios: durations (B, n, L, k), weights (B, k)
    -> (order (B,), R (B, n, L), tiebreak): R[j] belongs to frame order[j] (windows are grouped for the
    range maxima), -inf where a task may not leave a level; tiebreak(j) is each level's weighted frame
    time of given (flat) entries of R[j]'s frame."""
    b, n, L, k = durations.shape
    support = weights > 0
    shared = durations.strides[0] == 0 or b == 1
    edges = np.diff(np.pad(support, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    contiguous = np.all((edges == 1).sum(axis=1) <= 1)
    if shared and contiguous:
        table = durations[0]
        floors = step_floors(table, max_level, budget_steps)
        ratio = _ratio_tables(table, floors, max_level).astype(np.float32)  # (n, L, k); float32: see the module
        starts = support.argmax(axis=1)
        ends = starts + support.sum(axis=1)
        live = ends > starts
        # Frames without a weighted step last; the others grouped by the power of two of their length,
        # so each group of range maxima writes one block of R.
        order = np.lexsort((np.where(live, np.floor(np.log2(np.maximum(ends - starts, 1))), 0), ~live))
        n_live = int(live.sum())
        R = np.empty((b, n, L), dtype=np.float32)
        R[n_live:] = -np.inf
        if n_live:
            o = order[:n_live]
            _RangeMax(np.ascontiguousarray(ratio.transpose(2, 0, 1))).query(starts[o], ends[o], R[:n_live])
        flat = table.reshape(n * L, k)
        return order, R, lambda j, idx: flat[idx] @ weights[order[j]]
    ratio = _ratio_tables(durations, step_floors(durations, max_level, budget_steps), max_level).astype(np.float32)
    R = np.where(support[:, None, None, :], ratio, -np.inf).max(axis=-1)
    return np.arange(b), R, lambda j, idx: durations[j].reshape(n * L, k)[idx] @ weights[j]


def polish(
    durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, start: np.ndarray, budget_steps: int
) -> np.ndarray:
    """Spend the r = budget - sum(start) last steps by the greedy rule, on the few tasks that can matter.

    In greedy's rounds the straggler at a step is either the slowest task at its maximum there (they
    never change) or the slowest task that can grow; after j rounds at most j tasks have changed, so
    the latter is one of that step's r + 1 slowest growable tasks at the start, or a task already
    chosen (itself one of those). Greedy runs on the union, per step, of those r + 1 and the slowest
    task at its maximum (at most k (r + 2) per frame, padded with inert tasks), not on all n, and gives
    what it gives on all n (tests/test_threshold_allocator.py), up to ties at the edge of the r + 1."""
    b, n, L, k = durations.shape
    r = int(budget_steps - start.sum(axis=1).min())
    if r <= 0:
        return start
    if r + 2 >= n:  # every task is a candidate
        return greedy_rounds(durations, weights, max_level, budget_steps, start)
    fb = np.arange(b)[:, None, None]
    cur = durations[fb, np.arange(n)[None, :, None], start[:, :, None], np.arange(k)[None, None, :]]  # (B, n, k)
    can = (start < max_level[None, :])[:, :, None]
    m = r + 1
    top = np.argpartition(np.where(can, cur, -np.inf), n - m, axis=1)[:, n - m :, :]  # (B, m, k)
    chosen = np.zeros((b, n), dtype=bool)
    chosen[fb, top] = True
    at_max = np.where(can, -np.inf, cur)
    fi, ki = np.nonzero(at_max.max(axis=1) > -np.inf)  # (frame, step) pairs with a task at its maximum
    chosen[fi, at_max.argmax(axis=1)[fi, ki]] = True
    width = int(chosen.sum(axis=1).max())
    # Each frame's candidates in task order (keeps greedy's lower-index tie rule), padded with others
    # marked inert.
    order = np.argsort(~chosen, axis=1, kind="stable")[:, :width]
    real = np.take_along_axis(chosen, order, axis=1)
    sub_start = np.where(real, np.take_along_axis(start, order, axis=1), 0)
    spare = budget_steps - start.sum(axis=1)
    # Each frame spends its own spare steps on its candidates.
    lvl_sub = greedy_rounds(durations, weights, max_level, sub_start.sum(axis=1) + spare, sub_start, order, real)
    out = start.copy()
    rows = np.nonzero(real)
    out[rows[0], order[rows]] = lvl_sub[rows]
    return out


class ThresholdAllocator(Allocator):
    name = "threshold"
    polish_steps = 8  # the r of the module docstring's step 3

    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        durations, weights, max_level, idle = batch_inputs(durations, weights, max_level, budget_steps)
        b, n = durations.shape[:2]
        if idle:
            return np.zeros((b, n), dtype=np.int64)
        used = cast(np.ndarray, (weights > 0).any(axis=1))  # numpy types it as "array or scalar"
        if budget_steps >= max_level.sum():
            return np.where(used[:, None], max_level[None, :], 0)
        order, R, tiebreak = frame_ratios(durations, weights, max_level, budget_steps)
        r = min(self.polish_steps, budget_steps)
        levels = np.empty((b, n), dtype=np.int64)
        (levels[order],) = levels_for_ratios(R, tiebreak, [budget_steps - r])
        if r > 0:
            levels = polish(durations, weights, max_level, levels, budget_steps)
        levels[~used] = 0
        return levels

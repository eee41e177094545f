"""Bounds and starts for the exact allocator (`exact_frame.solve_frame`).

Bounds from per-step floors: with task i at level l, the others share budget - l, so step k takes at
least max(d[i, l, k], floor of the others at budget - l); a level whose bound over the frame exceeds
the incumbent's time cannot be optimal (three rounds; 60 levels typically shrink to 10-20 per task).
Starts: the incumbent is the best of greedy's configuration in batches, recent exact solutions, the
same frame one step shorter, and the min-max configuration of the frame's mean durations, then
improved by local search (within ~0.05% of the optimum and often optimal).
"""

from __future__ import annotations

import functools
from itertools import combinations, permutations

import numpy as np

from .base import frame_time


def need_counts(d: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """d (n, L, k) non-increasing along L; thresholds (c, k). Returns (n, c, k): for every task, the
    number of levels whose duration exceeds the threshold, i.e. the first level that reaches it
    (L when none does)."""
    n, L, k = d.shape
    out = np.empty((n, thresholds.shape[0], k), dtype=np.int64)
    asc = d[:, ::-1, :]
    for i in range(n):
        for kk in range(k):
            out[i, :, kk] = L - np.searchsorted(asc[i, :, kk], thresholds[:, kk], side="right")
    return out


def floors_without_each_task(
    d: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every task i, the per-step floor of the other tasks when they share b budget steps:
    fm[i, b, k] = min over their configurations (levels in lo..hi, sum <= b) of their slowest time at
    step k (inf when b < the sum of their minimum levels). Also returns the floor of all tasks (k,).

    A time T is reachable at step k iff sum_j max(lo_j, need_j(T)) <= b with need_j(T) <= hi_j, so the
    floor is the smallest candidate T (one of the table's durations) that passes, found by a search
    over the candidates sorted by T, for all tasks, budgets and steps at once."""
    n, L, k = d.shape
    cand = np.sort(d.reshape(n * L, k), axis=0)  # (c, k) ascending
    c = cand.shape[0]
    unreachable = budget + 1  # more than any budget: a task that cannot reach T
    need = need_counts(d, cand)  # (n, c, k)
    need = np.maximum(need, lo[:, None, None])
    need = np.where(need > hi[:, None, None], unreachable, need)
    total = need.sum(axis=0)  # (c, k), non-increasing along c
    ok = total <= budget
    first = np.where(ok.any(axis=0), ok.argmax(axis=0), c - 1)
    floor_all = cand[first, np.arange(k)]
    others = np.minimum(total[None] - need, unreachable)  # (n, c, k), non-increasing along c
    # For each (i, k) and b: the first c with others <= b, by one search over -others with the
    # groups (i, k) laid end to end (integers, so the offsets are exact).
    g = n * k
    span = 2 * (unreachable + 1)
    offs = (np.arange(g, dtype=np.int64) * span).reshape(n, k, 1)
    arr = (-others.transpose(0, 2, 1) + offs).ravel()
    q = (-np.arange(budget + 1, dtype=np.int64)[None, None, :] + offs).ravel()
    pos = np.searchsorted(arr, q, side="left").reshape(n, k, budget + 1) - np.arange(g).reshape(n, k, 1) * c
    vals = np.where(pos < c, cand[np.minimum(pos, c - 1), np.arange(k)[None, :, None]], np.inf)
    return vals.transpose(0, 2, 1), floor_all  # (n, budget+1, k), (k,)


def level_bound_terms(d: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """G[i, l, k] = max(d[i, l, k], floor of the others at budget - l): a lower bound on step k's time
    whenever task i runs at level l (inf outside lo_i..hi_i). Returns (G, floor of all tasks)."""
    n, L, k = d.shape
    fm, floor_all = floors_without_each_task(d, lo, hi, budget)
    lv = np.arange(L)
    rest = np.clip(budget - lv, 0, budget)
    G = np.maximum(d, fm[:, rest, :])  # (n, L, k)
    bad = (lv[None, :] < lo[:, None]) | (lv[None, :] > hi[:, None]) | (lv[None, :] > budget)
    G[bad] = np.inf
    return G, floor_all


def shrink_levels(
    lb: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, limit: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Keep the levels whose bound lb[i, l] (n, L) does not exceed `limit`; then no task may take so
    much that the others cannot reach their lowest remaining level. Returns (lo, hi) or None if some
    task has no level left (nothing can beat `limit`)."""
    ok = lb <= limit
    if not np.all(ok.any(axis=1)):
        return None
    L = lb.shape[1]
    lo2 = np.maximum(lo, ok.argmax(axis=1))
    hi2 = np.minimum(hi, L - 1 - ok[:, ::-1].argmax(axis=1))
    hi2 = np.minimum(hi2, budget - (lo2.sum() - lo2))
    if np.any(hi2 < lo2) or lo2.sum() > budget:
        return None
    return lo2, hi2


def proportional_floor(d: np.ndarray, max_level: np.ndarray, budget: int, floor_k: np.ndarray) -> np.ndarray:
    """A start that sees across plateaus (where one more CPU step gains nothing but several do, which
    greedy and small moves cannot cross): every step aims at the same multiple a of its own floor,
    each task takes the fewest levels that reach a x floor_k at all its steps, and a is the smallest
    multiple (bisection) whose levels fit the budget."""

    def levels_for(a: float) -> np.ndarray:
        levels: np.ndarray = (d > a * floor_k[None, None, :]).sum(axis=1).max(axis=1)  # (n,)
        return levels

    lo, hi = 1.0, float(np.max(d[:, 0, :].max(axis=0) / floor_k)) * (1 + 1e-12) + 1e-12
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lv = levels_for(mid)
        if np.all(lv <= max_level) and lv.sum() <= budget:
            hi = mid
        else:
            lo = mid
    lv = levels_for(hi)
    if np.any(lv > max_level) or lv.sum() > budget:  # only rounding could get here: start from nothing
        return np.zeros_like(max_level)
    return lv


@functools.cache
def _moves(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Level changes that keep the budget: CPU steps from one task to another, and from one task to
    two others (or from two to one). Returns (pair moves, triple moves), each (moves, n)."""
    pair_steps, triple_steps = (1, 2, 3, 5, 8), (1, 2, 3)
    e = np.eye(n, dtype=np.int64)
    pairs = [dl * (e[b] - e[a]) for a, b in permutations(range(n), 2) for dl in pair_steps]
    triples = [
        sign * (d1 * e[b] + d2 * e[c] - (d1 + d2) * e[a])
        for a in range(n)
        for b, c in combinations([x for x in range(n) if x != a], 2)
        for d1 in triple_steps
        for d2 in triple_steps
        for sign in (1, -1)
    ]
    pair_moves, triple_moves = (np.array(m, dtype=np.int64).reshape(len(m), n) for m in (pairs, triples))
    return pair_moves, triple_moves


def local_search(
    d: np.ndarray, w: np.ndarray, levels: np.ndarray, max_level: np.ndarray, budget: int, max_rounds: int = 200
) -> tuple[np.ndarray, float]:
    """Improve a configuration by moving CPU steps between two tasks (or from unused budget) while the
    frame gets shorter, then, when no such move helps, between three; every candidate move of a round
    is evaluated at once. Only a better incumbent for the MILP (tighter bounds, earlier pruning);
    optimality is the MILP's job."""
    n = levels.size
    pairs, triples = _moves(n)
    tasks = np.arange(n)[None, :]
    dw = d * w[None, None, :]  # weights are >= 0, so max_i(d) * w == max_i(d * w) step by step

    def times(cand: np.ndarray) -> np.ndarray:  # (P, n) -> (P,) weighted frame times
        weighted: np.ndarray = dw[tasks, cand].max(axis=1).sum(axis=1)
        return weighted

    gains = {id(pairs): pairs > 0, id(triples): triples > 0}
    lv = levels.copy()
    cur = float(times(lv[None])[0])
    eye = np.eye(n, dtype=np.int64)
    use_triples = False
    for _ in range(max_rounds):
        moves = triples if use_triples else pairs
        # More CPU shortens a step only for the task that is slowest there: moves that give CPU to a
        # task that is never the slowest cannot help, so only the slowest tasks receive.
        per_task = dw[np.arange(n), lv, :]  # (n, k)
        slowest = np.any(per_task >= per_task.max(axis=0, keepdims=True), axis=1)
        moves = moves[~np.any(gains[id(moves)] & ~slowest[None, :], axis=1)]
        cand = lv[None] + moves
        if lv.sum() < budget:
            cand = np.concatenate([cand, lv[None] + eye])
        ok = np.all(cand >= 0, axis=1) & np.all(cand <= max_level[None], axis=1) & (cand.sum(axis=1) <= budget)
        cand = cand[ok]
        if len(cand):
            vals = times(cand)
            j = int(np.argmin(vals))
            if vals[j] < cur - 1e-13 * abs(cur):
                lv, cur = cand[j], float(vals[j])
                use_triples = False
                continue
        if use_triples or not len(triples):
            break
        use_triples = True
    return lv, float(frame_time(d, lv, w))


def fill_budget(d: np.ndarray, w: np.ndarray, levels: np.ndarray, max_level: np.ndarray, budget: int) -> np.ndarray:
    """Hand out budget the solution left unused, one step at a time to the task with the largest
    weighted time (first among equals). Durations never rise with CPU, so the frame never gets longer."""
    levels = levels.copy()
    tw = (d * w[None, None, :]).sum(axis=2)  # (n, L)
    rows = np.arange(levels.size)
    for _ in range(budget - int(levels.sum())):
        can = levels < max_level
        if not can.any():
            break
        levels[int(np.argmax(np.where(can, tw[rows, levels], -np.inf)))] += 1
    return levels

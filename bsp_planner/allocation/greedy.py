"""The thesis's greedy N-step allocator (Algorithm 1), batched over many frames at once.

Every task starts at the minimum. While budget remains: find the slowest task at each step of the
frame; for each such straggler, sum the time one more CPU step would save at the steps where it is the
slowest, weighted by discount**k; give the step to the straggler with the largest sum. Ties go to the
lower task index (the slowest task at a step is the first among equals), so results are deterministic.
When no straggler can grow (all at their maximum), the stragglers among the tasks that still can grow
take their turn, so budget is never left idle while someone could use it.

How it is computed (same results, bit for bit, as recomputing everything at every step; see
tests/test_greedy_equivalence.py). A frame gives out one CPU step per round, so the rounds are
sequential; the work of a round is kept small instead of O(frames x tasks x steps):

* Tasks that reached their maximum never change again. Per (frame, step) we keep the slowest of them
  (`top_max`), updated by one comparison when a task reaches its maximum.
* The tasks that can still grow are split into blocks of about sqrt(tasks); per (frame, step) we keep
  each block's slowest task. A step given to task c changes only c's block, so a round recomputes one
  block and then the slowest block: O(sqrt(tasks)) per (frame, step) instead of O(tasks).
* The straggler over all tasks is the slower of the two (ties to the lower index). The "stuck"
  fallback is the slowest among those that can grow, which is the block structure's own answer.
* Gains are summed per task with np.bincount in step order, exactly as before, so equal sums and ties
  come out the same.
* A frame that cannot give a step (nothing can grow, or no positive weight) never will: we stop once no
  frame can.

Cost: O(budget x frames x (tasks + steps x sqrt(tasks))) array work in O(budget) numpy rounds of a fixed
number of calls, against O(budget x frames x tasks x steps) before.
"""

from __future__ import annotations

import numpy as np

from .base import Allocator


def _unique_view(a: np.ndarray) -> np.ndarray:
    """The distinct elements of a (possibly broadcast) array: drop axes with stride 0."""
    return a[tuple(0 if s == 0 and a.shape[i] > 0 else slice(None) for i, s in enumerate(a.strides))]


def _straggler_gains(cur: np.ndarray, nxt: np.ndarray, weights: np.ndarray):
    """cur, nxt: (B, n, k); weights: (B, k). Returns (gain (B, n), straggles (B, n) bool)."""
    b, n, k = cur.shape
    strag = cur.argmax(axis=1)  # (B, k): first slowest task at each step
    bi = np.arange(b)[:, None]
    ki = np.arange(k)[None, :]
    saved = (cur[bi, strag, ki] - nxt[bi, strag, ki]) * weights  # (B, k)
    flat = (bi * n + strag).ravel()
    gain = np.bincount(flat, weights=saved.ravel(), minlength=b * n).reshape(b, n)
    count = np.bincount(flat, weights=(weights > 0).ravel(), minlength=b * n).reshape(b, n)
    return gain, count > 0


def _allocate_plain(durations, weights, max_level, budget_steps):
    """The straightforward version: every straggler and gain recomputed at every step. Used for inputs
    with NaN or infinite values, where the fast version's -inf markers would be ambiguous."""
    b, n, n_levels, k = durations.shape
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
            # The slowest tasks are all at their maximum: look at the slowest among those that can grow.
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


def _allocate_fast(durations, weights, max_level, budget_steps):
    """Same as _allocate_plain for finite inputs (see the module docstring)."""
    b, n, n_levels, k = durations.shape
    top_level = n_levels - 1
    ninf = -np.inf
    lvl = np.zeros((b, n), dtype=np.int64)
    can = np.broadcast_to(max_level > 0, (b, n)).copy()
    hascan = can.any(axis=1)
    any_maxed = not can.all()
    cur = durations[:, :, 0, :].transpose(0, 2, 1)  # (B, k, n)
    nxt = durations[:, :, min(1, top_level), :].transpose(0, 2, 1)
    # Current durations of the tasks that can grow (-inf once at their maximum), and cur - nxt, the
    # time one more step saves; both (B, k, n), so the argmax over tasks runs along contiguous rows.
    vals = np.ascontiguousarray(np.where(can[:, None, :], cur, ninf))
    vflat = vals.reshape(-1)  # a view: writes through it update vals
    diff_flat = (cur - nxt).reshape(-1)
    step_base = (np.arange(b * k) * n).reshape(b, k)  # flat offset of (frame, step, task 0)
    # Slowest among the tasks at their maximum (they never change again): value, index.
    maxed = np.where(can[:, None, :], ninf, cur)
    tm_i = maxed.argmax(axis=2)
    tm_v = np.take_along_axis(maxed, tm_i[:, :, None], 2)[:, :, 0]

    posw = weights > 0
    posw_f = posw.ravel()
    rows = np.arange(b)
    bins_per = n + 1  # a bin per task and one for entries that count for nobody
    frame_base = (rows * bins_per)[:, None]
    size_bins = b * bins_per
    # Until a task reaches its maximum, a frame gives a step every round iff it has a positive weight.
    r = rows[posw.any(axis=1)]
    sb = step_base[r]
    both = np.array([0, 1])  # a task's level and the next, gathered together
    for _ in range(budget_steps):
        tc_i = vals.argmax(axis=2)  # the slowest growable task at every (frame, step): first among equals
        idx = step_base + tc_i
        if any_maxed:
            # The straggler over all tasks is growable where the growable top wins (ties: lower index).
            # Normal frames count those steps; stuck frames (no growable straggler at a step with
            # positive weight) count the growable top at every step, if any task can grow.
            tc_v = vflat[idx]
            grow = (tc_v > tm_v) | ((tc_v == tm_v) & (tc_i < tm_i))
            normal = (grow & posw).any(axis=1)
            valid = np.where(normal[:, None], grow, hascan[:, None])
            bins = (frame_base + np.where(valid, tc_i, n)).ravel()
            count_w = (valid & posw).ravel()
        else:
            bins, count_w = (frame_base + tc_i).ravel(), posw_f
        # Gains summed per task in step order, as np.bincount does: the same sums, bit for bit.
        gain = np.bincount(bins, weights=(diff_flat[idx] * weights).ravel(), minlength=size_bins)
        count = np.bincount(bins, weights=count_w, minlength=size_bins)
        score = np.where(count > 0, gain, ninf).reshape(b, bins_per)
        choice = score.argmax(axis=1)
        if any_maxed:
            ok = score[rows, choice] > ninf
            if not ok.any():
                break  # a frame that cannot give a step now never will
            r = rows[ok]
            sb = step_base[r]
        c = choice[r]
        lv = lvl[r, c] + 1
        lvl[r, c] = lv
        got = durations[r[:, None], c[:, None], np.minimum(lv[:, None] + both, top_level)]  # (R, 2, k)
        new = got[:, 0]
        pos = sb + c[:, None]
        diff_flat[pos] = new - got[:, 1]
        done = lv >= max_level[c]
        if done.any():
            any_maxed = True
            rd, cd, vd = r[done], c[done], new[done]
            tv, ti = tm_v[rd], tm_i[rd]
            better = (vd > tv) | ((vd == tv) & (cd[:, None] < ti))
            tm_v[rd] = np.where(better, vd, tv)
            tm_i[rd] = np.where(better, cd[:, None], ti)
            can[rd, cd] = False
            hascan[rd] = can[rd].any(axis=1)
            new = np.where(done[:, None], ninf, new)
        vflat[pos] = new
    return lvl


class GreedyAllocator(Allocator):
    name = "greedy"

    def allocate_batch(self, durations, weights, max_level, budget_steps):
        durations = np.asarray(durations, dtype=np.float64)
        b, n, n_levels, k = durations.shape
        weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), (b, k))
        max_level = np.minimum(np.asarray(max_level, dtype=np.int64), n_levels - 1)
        if budget_steps <= 0 or b == 0 or n == 0 or not (max_level > 0).any():
            return np.zeros((b, n), dtype=np.int64)
        if not (np.isfinite(_unique_view(durations)).all() and np.isfinite(weights).all()):
            return _allocate_plain(durations, weights, max_level, budget_steps)
        return _allocate_fast(durations, weights, max_level, budget_steps)

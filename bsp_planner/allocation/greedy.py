"""The thesis's greedy N-step allocator (Algorithm 1), batched over many frames at once.

Every task starts at the minimum. While budget remains: find the slowest task at each step of the
frame; for each such straggler, sum the time one more CPU step would save at the steps where it is the
slowest, weighted by discount**k; give the step to the straggler with the largest sum. Ties go to the
lower task index (the slowest task at a step is the first among equals), so results are deterministic.
When no straggler can grow (all at their maximum), the stragglers among the tasks that still can grow
take their turn, so budget is never left idle while someone could use it.
"""

from __future__ import annotations

import numpy as np

from .base import Allocator


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


class GreedyAllocator(Allocator):
    name = "greedy"

    def allocate_batch(self, durations, weights, max_level, budget_steps):
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

"""The thesis's greedy N-step allocator (Algorithm 1), batched over many frames at once.

Every task starts at the minimum. While budget remains: find the slowest task at each step of the
frame; for each such straggler, sum the time one more CPU step would save at the steps where it is the
slowest, weighted by discount**k; give the step to the straggler with the largest sum. Ties go to the
lower task index (the slowest task at a step is the first among equals), so results are deterministic.
When no straggler can grow (all at their maximum), the stragglers among the tasks that still can grow
take their turn, so budget is never left idle while someone could use it.

How it is computed (the same results, bit for bit, as the plain version that recomputes everything
every round, `greedy_rounds` below, used for inputs with NaN or infinities; tests/test_greedy_equivalence.py checks it).
A frame gives out one CPU step per round, so the rounds are sequential; each round is one fixed
sequence of numpy calls over all frames, kept short and on small arrays:

* Only entries count: the (frame, step) pairs with a non-zero weight. A zero-weight step never makes a
  task a candidate and adds only a zero to its gain (MPC's padded windows are mostly zeros).
* Per entry and task, the current duration of the tasks that can still grow and the time one more step
  saves live in two (entries, tasks) arrays; a round writes only the chosen task's column in each frame.
* Tasks at their maximum never change again: per entry we keep the slowest of them, updated by one
  comparison when a task reaches its maximum. The straggler over all tasks is the slower of that and
  the slowest growable task (ties to the lower index); the "stuck" fallback is the latter alone.
* Gains are summed per task with np.bincount in step order, so sums and ties are identical.
* A frame that cannot give a step now never will: frames without a positive weight are skipped, and the
  loop stops once no frame can give a step.

Cost per round: one argmax over (entries, tasks) plus O(entries + frames x tasks) elementwise work, in
about 25 numpy calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from .base import Allocator, batch_inputs

if TYPE_CHECKING:
    from .node_limits import NodeLimits


def _unique_view(a: np.ndarray) -> np.ndarray:
    """The distinct elements of a (possibly broadcast) array: drop axes with stride 0."""
    return a[tuple(0 if s == 0 and a.shape[i] > 0 else slice(None) for i, s in enumerate(a.strides))]


def _straggler_gains(cur: np.ndarray, nxt: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def greedy_rounds(
    durations: np.ndarray,
    weights: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int | np.ndarray,
    start: np.ndarray | None = None,
    tasks: np.ndarray | None = None,
    real: np.ndarray | None = None,
    limits: NodeLimits | None = None,
) -> np.ndarray:
    """The greedy rule, straightforward: every straggler and gain recomputed at every round, one CPU
    step per frame and round, until each frame's budget is spent or it cannot give a step.

    durations (B, N, L, k) seconds (a broadcast batch stays unexpanded: only the working tasks'
    current and next durations are gathered); weights (B, k); max_level (N,); budget_steps: levels
    above the minimum, one number or one per frame (B,). Optional: start (B, n) levels to begin from
    (default all 0); tasks (B, n) the tasks each frame works on (default all N, in order); real (B, n)
    False for padding (never a straggler, never grows); limits: the nodes' capacity, a task whose node
    is full cannot grow. Returns levels (B, n) of those tasks.

    Used by the allocator for inputs with NaN or infinities (where the fast version's -inf markers
    would be ambiguous), by the threshold allocator's polish (a few rounds on a few tasks) and on
    nodes (`nodes.greedy_with_nodes`)."""
    b, n_all, n_levels, k = durations.shape
    if tasks is None:
        tasks = np.broadcast_to(np.arange(n_all)[None, :], (b, n_all))
    n = tasks.shape[1]
    max_of = np.asarray(max_level)[tasks]
    if real is not None:
        max_of = np.where(real, max_of, 0)
    lvl = np.zeros((b, n), dtype=np.int64) if start is None else start.copy()
    left = np.broadcast_to(np.asarray(budget_steps) - lvl.sum(axis=1), (b,)).copy()
    fb, tb = np.arange(b)[:, None, None], tasks[:, :, None]
    ki = np.arange(k)[None, None, :]
    cur = durations[fb, tb, lvl[:, :, None], ki]  # (B, n, k)
    nxt = durations[fb, tb, np.minimum(lvl + 1, n_levels - 1)[:, :, None], ki]
    if real is not None:
        cur[~real] = -np.inf
        nxt[~real] = -np.inf
    if limits is not None:
        node_of = limits.node_of[tasks]  # (B, n)
        node_left = np.broadcast_to(limits.steps, (b, limits.n_nodes)).astype(np.int64)  # a copy
    while True:
        can = lvl < max_of
        if limits is not None:
            can &= np.take_along_axis(node_left, node_of, axis=1) > 0
        live = (left > 0) & can.any(axis=1)
        if not live.any():
            break
        f = np.nonzero(live)[0]
        every = f.size == b  # all frames: no copies
        cur_f, nxt_f = (cur, nxt) if every else (cur[f], nxt[f])
        w_f, can_f = (weights, can) if every else (weights[f], can[f])
        gain, straggles = _straggler_gains(cur_f, nxt_f, w_f)
        candidates = straggles & can_f
        stuck = ~candidates.any(axis=1)
        if stuck.any():
            # The slowest tasks are all at their maximum: look at the slowest among those that can grow.
            cs = can_f[stuck][:, :, None]
            g2, s2 = _straggler_gains(
                np.where(cs, cur_f[stuck], -np.inf), np.where(cs, nxt_f[stuck], -np.inf), w_f[stuck]
            )
            gain[stuck] = np.nan_to_num(g2, nan=0.0, neginf=0.0, posinf=0.0)
            candidates[stuck] = s2 & can_f[stuck]
        score = np.where(candidates, gain, -np.inf)
        choice = score.argmax(axis=1)
        ok = candidates[np.arange(f.size), choice]
        left[f[~ok]] = 0  # a frame that cannot give a step now never will
        r, c = f[ok], choice[ok]
        lv = lvl[r, c] + 1
        lvl[r, c] = lv
        left[r] -= 1
        if limits is not None:
            node_left[r, node_of[r, c]] -= 1
        t = tasks[r, c]
        cur[r, c] = durations[r, t, lv]
        nxt[r, c] = durations[r, t, np.minimum(lv + 1, n_levels - 1)]
    return lvl


def _allocate_fast(durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int) -> np.ndarray:
    """Same as greedy_rounds for finite inputs (see the module docstring)."""
    b, n, n_levels, k = durations.shape
    top_level = n_levels - 1
    ninf = -np.inf
    lvl = np.zeros((b, n), dtype=np.int64)
    # Entries: the (frame, step) pairs with a non-zero weight, frame by frame in step order. A step of
    # weight 0 never makes a task a candidate and adds only a zero to its gain, so it is left out.
    nz = weights != 0
    ent_b, ent_k = np.nonzero(nz)
    e = ent_b.size
    if e == 0:
        return lvl
    per = nz.sum(axis=1)
    kmax = int(per.max())
    filled = np.arange(kmax)[None, :] < per[:, None]
    ent_of = np.full((b, kmax), e)  # each frame's entries, padded with a scratch entry e
    ent_of[filled] = np.arange(e)
    k_of = np.zeros((b, kmax), dtype=np.int64)  # their steps
    k_of[filled] = ent_k

    can: np.ndarray = np.broadcast_to(max_level > 0, (b, n)).copy()
    hascan = cast(np.ndarray, can.any(axis=1))  # numpy types an axis reduction as "array or scalar"
    any_maxed = not can.all()
    cur = durations[ent_b, :, 0, ent_k]  # (E, n)
    nxt = durations[ent_b, :, min(1, top_level), ent_k]
    # Per entry and task: the current duration of the tasks that can grow (-inf once at their
    # maximum), and cur - nxt, the time one more step saves. Row e is scratch for the padding.
    vals = np.full((e + 1, n), ninf)
    vals[:e] = np.where(can[ent_b], cur, ninf)
    diff = np.zeros((e + 1, n))
    diff[:e] = cur - nxt
    vflat, diff_flat = vals.reshape(-1), diff.reshape(-1)  # views: writes go through
    live_vals = vals[:e]
    row_base = np.arange(e) * n
    ent_base = ent_of * n
    # Slowest among the tasks at their maximum (they never change again): value, index.
    maxed = np.where(can[ent_b], ninf, cur)
    tm_i = np.append(maxed.argmax(axis=1), 0)
    tm_v = np.append(maxed[np.arange(e), tm_i[:e]], ninf)

    w = weights[ent_b, ent_k]
    posw = w > 0
    rows = np.arange(b)
    bins_per = n + 1  # a bin per task and one for entries that count for nobody
    ent_bins = ent_b * bins_per
    size_bins = b * bins_per
    both = np.array([[0, 1]])
    level_pair = np.minimum(np.arange(n_levels)[:, None] + both, top_level)  # a level and the next
    dense = e == b * k  # every frame has every step: no need to pick each frame's steps

    def frames(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Index arrays for the frames r that give a step this round (kept while r stays the same)."""
        # pick: where each frame's entries lie in the flattened (R, 2, k) block of gathered durations
        pick = (np.arange(r.size)[:, None, None] * 2 + both[:, :, None]) * k + k_of[r][:, None, :]
        return r, r[:, None], pick, ent_base[r], ent_of[r]

    # Until a task reaches its maximum, a frame gives a step every round iff it has a positive weight.
    r, r2, pick, eb, ents = frames(rows[np.bincount(ent_b, weights=posw, minlength=b) > 0])
    for _ in range(budget_steps):
        tc_i = live_vals.argmax(axis=1)  # the slowest growable task at every entry: first among equals
        idx = row_base + tc_i
        if any_maxed:
            # The straggler over all tasks is growable where the growable top wins (ties: lower index).
            # Normal frames count those entries; stuck frames (no growable straggler at a step with
            # positive weight) count the growable top at every entry, if any task can grow.
            tc_v = vflat[idx]
            tv, ti = tm_v[:e], tm_i[:e]
            grow = (tc_v > tv) | ((tc_v == tv) & (tc_i < ti))
            normal = np.bincount(ent_b, weights=grow & posw, minlength=b) > 0
            valid = np.where(normal[ent_b], grow, hascan[ent_b])
            bins = ent_bins + np.where(valid, tc_i, n)
            count_w = valid & posw
        else:
            bins, count_w = ent_bins + tc_i, posw
        # Gains summed per task in step order, as np.bincount does: the same sums, bit for bit.
        gain = np.bincount(bins, weights=diff_flat[idx] * w, minlength=size_bins)
        count = np.bincount(bins, weights=count_w, minlength=size_bins)
        score = np.where(count > 0, gain, ninf).reshape(b, bins_per)
        choice = score.argmax(axis=1)
        if any_maxed:
            ok = score[rows, choice] > ninf
            if not ok.any():
                break  # a frame that cannot give a step now never will
            if not ok.all() or r.size < b:
                r, r2, pick, eb, ents = frames(rows[ok])
        c = choice if r.size == b else choice[r]
        lv = lvl[r, c] + 1
        lvl[r, c] = lv
        c2 = c[:, None]
        got = durations[r2, c2, level_pair[lv]]  # (R, 2, k): level lv and the next
        if not dense:
            got = got.reshape(-1)[pick]  # (R, 2, kmax): at each frame's entries
        new = got[:, 0]
        pos = eb + c2
        diff_flat[pos] = new - got[:, 1]
        done = lv >= max_level[c]
        if done.any():
            any_maxed = True
            rd, cd, vd = r[done], c[done], new[done]
            ed = ents[done]
            tv, ti = tm_v[ed], tm_i[ed]
            better = (vd > tv) | ((vd == tv) & (cd[:, None] < ti))
            tm_v[ed] = np.where(better, vd, tv)
            tm_i[ed] = np.where(better, cd[:, None], ti)
            can[rd, cd] = False
            hascan[rd] = can[rd].any(axis=1)
            new = np.where(done[:, None], ninf, new)
        vflat[pos] = new
    return lvl


class GreedyAllocator(Allocator):
    name = "greedy"

    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        durations, weights, max_level, idle = batch_inputs(durations, weights, max_level, budget_steps)
        if idle:
            return np.zeros(durations.shape[:2], dtype=np.int64)
        if not (np.isfinite(_unique_view(durations)).all() and np.isfinite(weights).all()):
            return greedy_rounds(durations, weights, max_level, budget_steps)
        return _allocate_fast(durations, weights, max_level, budget_steps)

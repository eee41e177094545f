"""Per-node CPU capacity as an allocation constraint, and the allocators that respect it.

A cluster is nodes: every task runs on one node (its placement), and the CPU its tasks hold on a node
can never exceed what that node can give. In level units (levels count CPU steps above every task's
minimum, see `CpuLevels`) node j can hand out `steps[j]` levels to its tasks together, on top of the
job-wide budget. `NodeLimits` holds that; `NodeConstrained` wraps an allocator so that every
configuration it returns fits the nodes, so planners (which only ever call an allocator) need no change:

* greedy: the greedy rule (thesis Algorithm 1) where a task whose node is full cannot grow
  (`greedy_with_nodes`);
* threshold: the threshold rule where each node gives at most its steps (`threshold_with_nodes`), for
  hundreds to thousands of tasks;
* exact: the MILP of `exact.py` (threshold formulation) with one more row per node, solved by HiGHS,
  started from the node-aware greedy configuration (`solve_frame_nodes`).

All are exact about the constraint; only `exact` is exact about the objective.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csr_array, vstack

from .base import Allocator, batch_inputs
from .floor import floor_levels
from .greedy import greedy_rounds
from .node_limits import NodeLimits

if TYPE_CHECKING:
    from .exact_frame import FrameSolution


def greedy_with_nodes(
    durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int, limits: NodeLimits
) -> np.ndarray:
    """The greedy rule with a task unable to grow once its node is full: durations (B, n, L, k),
    weights (B, k), max_level (n,) -> levels (B, n). The plain per-round loop (`greedy_rounds`), one
    CPU step per frame and round; a round costs O(B n k)."""
    durations, weights, cap, _ = batch_inputs(durations, weights, max_level, budget_steps, limits)
    return greedy_rounds(durations, weights, cap, budget_steps, limits=limits)


def threshold_with_nodes(
    durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int, limits: NodeLimits
) -> np.ndarray:
    """The threshold allocator's rule (`threshold.py`) with each node's cap: on node j only the S_j
    entries of its tasks with the largest ratios may be taken (the others, at or below its (S_j+1)-th
    largest ratio, are dropped), then the budget's largest of what is left. Ratios are non-increasing in
    level, so every task still takes a prefix of its levels. durations (B, n, L, k), weights (B, k) ->
    levels (B, n). No polish: O(B n L) per batch, whatever the budget (the greedy rule's rounds are what
    1,024 tasks cannot afford)."""
    from .threshold import _kth_largest, frame_ratios, levels_for_ratios

    durations, weights, cap, idle = batch_inputs(durations, weights, max_level, budget_steps, limits)
    b, n, n_levels, _ = durations.shape
    if idle:
        return np.zeros((b, n), dtype=np.int64)
    order, R, tiebreak = frame_ratios(durations, weights, cap, budget_steps)  # R (B, n, L), -inf: cannot leave
    # Nodes alike (as many tasks, as many steps) are cut in one partition: (B, nodes, tasks x L).
    count = np.bincount(limits.node_of, minlength=limits.n_nodes)
    for size, steps in {(int(c), int(st)) for c, st in zip(count, limits.steps, strict=True) if c}:
        nodes = np.nonzero((count == size) & (limits.steps == steps))[0]
        tasks = np.concatenate([np.nonzero(limits.node_of == j)[0] for j in nodes])  # node by node
        block = R[:, tasks, :].reshape(b, nodes.size, size * n_levels)
        a_j = _kth_largest(block, steps + 1, axis=-1)  # (B, nodes)
        kept = np.where(block > a_j[:, :, None], block, -np.inf)
        R[:, tasks, :] = kept.reshape(b, nodes.size * size, n_levels)
    levels = np.empty((b, n), dtype=np.int64)
    (levels[order],) = levels_for_ratios(R, tiebreak, [budget_steps])
    levels[~(weights > 0).any(axis=1)] = 0
    return levels


def solve_frame_nodes(
    durations: np.ndarray,
    weights: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
    limits: NodeLimits,
    *,
    incumbents: np.ndarray | None = None,
    cutoff: float | None = None,
    rel_gap: float = 1e-9,
    time_limit: float = 60.0,
    level_bounds: np.ndarray | None = None,
) -> FrameSolution:
    """The exact configuration of one frame under the budget and the nodes' capacity.

    durations (tasks, levels, k), weights (k,). The threshold model of `exact.py` (lo = 0, hi = each
    task's cap on its node) plus one row per node: the levels of its tasks sum to at most its steps.
    incumbents, cutoff, level_bounds: as `solve_frame`'s (incumbents that do not fit are dropped; the
    node-aware greedy one is always tried)."""
    from .exact_bounds import shrink_levels
    from .exact_frame import ExactSolverError, FrameSolution, _Frame, _Incumbent, _proved
    from .exact_highs import run_milp
    from .exact_model import build_threshold_model

    t0 = time.perf_counter()
    d = np.asarray(durations, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n, L, _ = d.shape
    active = np.nonzero(w > 0)[0]
    M = limits.task_cap(np.minimum(np.asarray(max_level, dtype=np.int64), L - 1))
    fr = _Frame(d[:, :, active], w[active], M, int(budget_steps), False, t0)
    d, w, budget = fr.d, fr.w, fr.budget
    if w.size == 0:
        return FrameSolution(np.zeros(n, dtype=np.int64), 0.0, 0.0, True, "empty", seconds=fr.elapsed())
    if w.size == 1:
        lv = floor_levels(d, M, budget, limits)[0][0]
        v = fr.time_of(lv)
        return FrameSolution(lv, v, v, True, "single-step", seconds=fr.elapsed())
    starts: list[np.ndarray] = []
    if incumbents is not None:
        inc = np.minimum(np.asarray(incumbents, dtype=np.int64).reshape(-1, n), M)
        starts += list(inc[limits.fits(inc) & (inc.sum(axis=1) <= budget)])
    if not starts:  # greedy's rounds cost more than the MILP on small frames: only without a start
        starts.append(greedy_with_nodes(d[None], w[None], M, budget, limits)[0])
    values = [fr.time_of(s) for s in starts]
    j = int(np.argmin(values))
    best_lv, best_v = starts[j], values[j]
    floor_k = floor_levels(d, M, budget, limits)[1]
    lb_all = float(np.dot(w, floor_k))
    limit = best_v if cutoff is None else min(best_v, float(cutoff))
    scale = max(abs(best_v), 1e-9)
    tol = 1e-12 * scale
    inc = _Incumbent(best_lv, best_v, limit, cutoff)
    if lb_all >= limit - tol:
        return _proved(fr, inc, lb_all)
    lo = np.zeros(n, dtype=np.int64)
    hi = np.minimum(M, budget)
    if level_bounds is not None:
        # a level whose bound cannot beat the limit is never taken (bounds of a relaxation hold here too)
        shrunk = shrink_levels(np.asarray(level_bounds, dtype=np.float64), lo, hi, budget, limit + tol)
        if shrunk is None:
            return _proved(fr, inc, lb_all)
        lo, hi = shrunk
        if np.any(limits.usage(lo) > limits.steps):
            return _proved(fr, inc, lb_all)
        if np.all(lo == hi):  # the bounds fixed every level
            v = fr.time_of(lo)
            if v < limit - tol and limits.fits(lo):
                return FrameSolution(lo, v, v, True, "bounds", seconds=fr.elapsed())
            return _proved(fr, inc, lb_all)
    model = build_threshold_model(d, w, lo, hi, budget, floor_k)
    ny_i = hi - lo
    ny = int(ny_i.sum())
    task_of_y = np.repeat(np.arange(n), ny_i)
    node_rows = csr_array(
        (np.ones(ny), (limits.node_of[task_of_y], np.arange(ny))), shape=(limits.n_nodes, model.A.shape[1])
    )
    model.A = csr_array(vstack([model.A, node_rows]))
    model.row_lo = np.concatenate([model.row_lo, np.full(limits.n_nodes, -np.inf)])
    model.row_hi = np.concatenate([model.row_hi, (limits.steps - limits.usage(lo)).astype(np.float64)])
    cut = limit + max(rel_gap * scale, tol)
    res = run_milp(model, cut, rel_gap, time_limit, scale)
    if res.x is not None:
        lv = model.decode(res.x)
        v = fr.time_of(lv)
        if v < limit - tol and limits.fits(lv) and lv.sum() <= budget:
            return FrameSolution(lv, v, v, True, "milp", fr.elapsed())
    if res.status not in (0, 2):
        raise ExactSolverError(f"the node-constrained MILP stopped without a proof ({str(res.message).strip()})")
    return _proved(fr, inc, lb_all)


class NodeConstrained(Allocator):
    """An allocator whose configurations fit the nodes: `inner` is greedy, threshold or exact (see
    the module docstring; exact's frames are cached, like `ExactAllocator`'s)."""

    def __init__(self, inner: str, limits: NodeLimits) -> None:
        self.inner = inner
        self.limits = limits
        self.name = f"{inner}+nodes"
        self._cache: dict[bytes, np.ndarray] = {}

    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        durations = np.asarray(durations, dtype=np.float64)
        b, n, _, k = durations.shape
        weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), (b, weights.shape[-1]))
        if weights.shape[1] < k:
            durations = durations[..., : weights.shape[1]]
        if self.inner == "threshold":
            return threshold_with_nodes(durations, weights, max_level, budget_steps, self.limits)
        if self.inner != "exact":
            return greedy_with_nodes(durations, weights, max_level, budget_steps, self.limits)
        import hashlib

        out = np.empty((b, n), dtype=np.int64)
        for f in range(b):
            act = weights[f] > 0
            h = hashlib.blake2b(digest_size=20)
            for part in (
                np.ascontiguousarray(durations[f][:, :, act]),
                np.round(weights[f][act], 12),
                np.asarray(max_level, dtype=np.int64),
                np.int64(budget_steps),
            ):
                h.update(part.tobytes())
            key = h.digest()
            if key not in self._cache:
                sol = solve_frame_nodes(durations[f], weights[f], max_level, budget_steps, self.limits)
                self._cache[key] = np.asarray(sol.levels, dtype=np.int64)
            out[f] = self._cache[key]
        return out

"""The per-step floor: for every step, the exact minimum over all configurations within the budget (and,
given nodes, within every node's capacity) of the slowest task's time (min-max), with no
reconfiguration cost. The `floor` bound of the planners and a building block of the allocators.

Durations are non-increasing in CPU, so a time T is reachable iff giving each task the fewest levels
that bring it to T or below fits the budget (and each node); the smallest reachable T is found by
binary search over the step's own durations, for all steps at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .node_limits import NodeLimits


def floor_levels(
    durations: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
    limits: NodeLimits | None = None,
    min_level: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """durations: (tasks, levels, steps) actual seconds; limits: the nodes' capacity (None: one pool);
    min_level: (tasks,) the lowest level each task may take (None: 0). Returns (levels (steps, tasks),
    times (steps,))."""
    n, n_levels, m = durations.shape
    max_level = np.minimum(np.asarray(max_level), n_levels - 1)
    cand = np.sort(durations.reshape(n * n_levels, m), axis=0)  # (n*L, m)
    cols = np.arange(m)
    # (tasks, nodes): summing a node's needed levels is one product
    one_hot = (
        None if limits is None else (limits.node_of[:, None] == np.arange(limits.n_nodes)[None, :]).astype(np.int64)
    )

    def need(thresholds: np.ndarray) -> np.ndarray:  # (tasks, steps) levels needed to reach the threshold
        counts: np.ndarray = (durations > thresholds[None, None, :]).sum(axis=1)
        return counts if min_level is None else np.maximum(counts, np.asarray(min_level)[:, None])

    lo = np.zeros(m, dtype=np.int64)
    hi = np.full(m, n * n_levels - 1)
    # The largest duration of all is always reachable (every task at its minimum), so hi stays feasible.
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        counts = need(cand[mid, cols])
        feasible = np.all(counts <= max_level[:, None], axis=0) & (counts.sum(axis=0) <= budget_steps)
        if limits is not None and one_hot is not None:
            feasible &= np.all(one_hot.T @ counts <= limits.steps[:, None], axis=0)
        hi = np.where(feasible, mid, hi)
        lo = np.where(feasible, lo, mid + 1)
    levels = need(cand[lo, cols]).T  # (steps, tasks)
    times = durations[np.arange(n)[None, :], levels, cols[:, None]].max(axis=1)
    return levels, times

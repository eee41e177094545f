"""Per-node CPU capacity in level units: which node each task runs on and what each node can hand out.
Below every allocator and planner that respects nodes (`nodes.py`, `floor.py`), so that they share it
without importing one another."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NodeLimits:
    """node_of: (tasks,) the node index each task runs on; steps: (nodes,) CPU steps above its tasks'
    minimum that each node can hand out (>= 0)."""

    node_of: np.ndarray
    steps: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.steps.size)

    def usage(self, levels: np.ndarray) -> np.ndarray:
        """levels (..., tasks) -> steps used on each node (..., nodes)."""
        lv = np.asarray(levels, dtype=np.int64)
        one_hot = self.node_of[:, None] == np.arange(self.n_nodes)[None, :]  # (tasks, nodes)
        used: np.ndarray = lv @ one_hot.astype(np.int64)
        return used

    def fits(self, levels: np.ndarray) -> np.ndarray:
        """levels (..., tasks) -> (...) bool: every node holds its tasks' levels."""
        ok: np.ndarray = np.all(self.usage(levels) <= self.steps, axis=-1)
        return ok

    def task_cap(self, max_level: np.ndarray) -> np.ndarray:
        """(tasks,) the highest level each task can reach alone on its node."""
        capped: np.ndarray = np.minimum(np.asarray(max_level, dtype=np.int64), self.steps[self.node_of])
        return capped

    def key(self) -> bytes:
        return self.node_of.astype(np.int64).tobytes() + b"|" + self.steps.astype(np.int64).tobytes()

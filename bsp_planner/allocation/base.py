"""What every allocator shares: the allowed CPU levels, the budget, and the batch interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..core.errors import InputError

if TYPE_CHECKING:
    from .node_limits import NodeLimits


@dataclass(frozen=True)
class CpuLevels:
    """Allowed CPU limits min, min+step, ..., max (millicores) and the job's total budget."""

    min_millicores: float
    step_millicores: float
    max_millicores: float
    budget_millicores: float

    def __post_init__(self) -> None:
        if not (self.min_millicores > 0 and self.step_millicores > 0 and self.max_millicores >= self.min_millicores):
            raise InputError(
                f"expected 0 < min <= max and step > 0, got min={self.min_millicores:g}, "
                f"step={self.step_millicores:g}, max={self.max_millicores:g}",
                field="cpu",
            )

    @property
    def millicores(self) -> np.ndarray:
        n = int(round((self.max_millicores - self.min_millicores) / self.step_millicores)) + 1
        return self.min_millicores + self.step_millicores * np.arange(n)

    @property
    def n_levels(self) -> int:
        return len(self.millicores)

    def level_of(self, millicores: float) -> int:
        """Highest level index whose CPU does not exceed `millicores` (clipped to the range)."""
        idx = int(np.floor((millicores - self.min_millicores) / self.step_millicores + 1e-9))
        return int(np.clip(idx, 0, self.n_levels - 1))

    def budget_steps(self, n_tasks: int) -> int:
        """CPU steps the allocator may hand out once every task holds the minimum."""
        spare = self.budget_millicores - n_tasks * self.min_millicores
        if spare < -1e-9:
            raise InputError(
                f"budget {self.budget_millicores:g}m is below {n_tasks} tasks x min {self.min_millicores:g}m "
                f"= {n_tasks * self.min_millicores:g}m",
                field="cpu.budget_millicores",
            )
        return int(np.floor(spare / self.step_millicores + 1e-9))

    def to_millicores(self, levels: npt.ArrayLike) -> np.ndarray:
        return self.min_millicores + self.step_millicores * np.asarray(levels)


def discount_weights(length: int, discount: float) -> np.ndarray:
    """discount**k for the k-th step of a frame, k from 0: (length,)."""
    return discount ** np.arange(length, dtype=np.float64)


class Allocator(ABC):
    """Chooses one configuration (a CPU level per task) for a time frame of predicted durations."""

    name = "allocator"

    @abstractmethod
    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        """durations: (B, tasks, levels, k) seconds; weights: (B, k), 0 for steps outside a frame;
        max_level: (tasks,) highest allowed level index per task; budget_steps: CPU steps above every
        task's minimum. Returns level indices (B, tasks)."""

    def allocate(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        """One frame: durations (tasks, levels, k), weights (k,) -> level indices (tasks,)."""
        levels: np.ndarray = self.allocate_batch(durations[None], np.asarray(weights)[None], max_level, budget_steps)[0]
        return levels


def batch_inputs(
    durations: np.ndarray,
    weights: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
    limits: NodeLimits | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """An allocator's batch as floats: durations (B, tasks, levels, k), weights broadcast to (B, k), each
    task's highest level within the table (and, given nodes, within its node), and whether no CPU step
    can be given at all (then every level is 0)."""
    durations = np.asarray(durations, dtype=np.float64)
    b, n, n_levels, k = durations.shape
    weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), (b, k))
    top = np.minimum(np.asarray(max_level, dtype=np.int64), n_levels - 1)
    top = top if limits is None else limits.task_cap(top)
    return durations, weights, top, budget_steps <= 0 or b == 0 or n == 0 or not (top > 0).any()


def frame_time(durations: np.ndarray, levels: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Predicted (weighted) time of a frame under a configuration: sum over steps of the slowest task.

    durations (..., tasks, levels, k), levels (..., tasks) -> (...)"""
    per_task = np.take_along_axis(durations, levels[..., :, None, None], axis=-2)[..., 0, :]  # (..., tasks, k)
    slowest = per_task.max(axis=-2)
    if weights is not None:
        slowest = slowest * weights
    total: np.ndarray = slowest.sum(axis=-1)
    return total

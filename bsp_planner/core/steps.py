"""The types every layer of a run shares: what one step measured (:class:`StepObservation`, made by an
executor, read by the loop, the predictions and the live run log) and what a whole run of one strategy
gave (:class:`StrategyResult`, made by the loop or the simulator, read by the report and the CLI).

They sit below `loop.py`, `simulation.py` and `executors/` so that none of those imports another for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .structure import StepStructure


@dataclass(frozen=True)
class StepObservation:
    """What an executor measured for one step (shapes (tasks,), seconds and workload units)."""

    step: int
    duration_s: np.ndarray  # (tasks,) each task's compute time of this step, seconds
    workloads: np.ndarray  # (tasks,) the workload each task ran, on the workload scale
    step_s: float  # wall time of the whole step (its slowest task in simulation), seconds
    next_workloads: np.ndarray | None = None  # (tasks,) announced for step+1, NaN where unknown


@dataclass
class StrategyResult:
    strategy: str
    mode: str
    levels: np.ndarray  # (steps, tasks) CPU level indices
    step_s: np.ndarray  # (steps,) actual duration of each step
    reconfigured: np.ndarray  # (steps,) bool: a checkpoint was paid before this step
    penalty_s: float
    decision_ms: np.ndarray  # (steps,) wall-clock time the planner took before each step
    actions: np.ndarray  # (steps,) 0 = keep, j = configure for j steps, -1 = bound (no planner)
    prepare_ms: float = 0.0  # offline planning before the first step
    notes: dict[str, Any] = field(default_factory=dict)
    # (steps,) what each reconfiguration cost when changes are priced by their method (on nodes: in
    # place or recreate); None: every one cost penalty_s.
    reconfigure_s: np.ndarray | None = None

    @property
    def compute_s(self) -> float:
        return float(self.step_s.sum())

    @property
    def checkpoints(self) -> int:
        return int(self.reconfigured.sum())

    @property
    def checkpoint_s(self) -> float:
        if self.reconfigure_s is not None:
            return float(self.reconfigure_s.sum())
        return self.checkpoints * self.penalty_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.checkpoint_s

    @property
    def mean_decision_ms(self) -> float:
        """Per-step decision time, with any offline planning spread over the steps."""
        return float(self.decision_ms.mean() + self.prepare_ms / max(1, len(self.decision_ms)))


def step_times(actual: np.ndarray, levels: np.ndarray, structure: StepStructure | None = None) -> np.ndarray:
    """actual: (tasks, levels, steps); levels: (steps, tasks) -> duration of each step (steps,): the critical
    path through `structure` (None: independent tasks, the slowest task)."""
    n, _, m = actual.shape
    per_task = actual[np.arange(n)[None, :], levels, np.arange(m)[:, None]]  # (steps, tasks)
    times: np.ndarray = per_task.max(axis=1) if structure is None else structure.step_time(per_task, axis=1)
    return times

"""The simulated executor: a step takes what the true duration table says at the levels chosen.

actual: (tasks, levels, steps) true durations in seconds, exactly as the scenario computes them from
the true performance model at the actual workloads; the step lasts as long as its slowest task (or, when
tasks wait for each other, the critical path through them), and a
reconfiguration costs the checkpoint penalty. It keeps no state but the table, so one executor serves
any number of runs.
"""

from __future__ import annotations

import numpy as np

from ..core.steps import StepObservation
from ..core.structure import StepStructure


class SimulatedExecutor:
    """Executor (see `bsp_planner.loop`) over a duration table.

    actual: (tasks, levels, steps) seconds; workloads: (tasks, steps) the workloads those durations
    were computed at (what the tasks "report"); penalty_s: the cost of one reconfiguration.
    """

    def __init__(
        self, actual: np.ndarray, workloads: np.ndarray, penalty_s: float, structure: StepStructure | None = None
    ) -> None:
        self.actual = actual
        self.structure = structure  # None: independent tasks, a step lasts as long as its slowest
        self.workloads = np.asarray(workloads, dtype=np.float64)
        self.penalty_s = float(penalty_s)
        self.n_tasks = int(actual.shape[0])
        if self.workloads.shape != (self.n_tasks, actual.shape[2]):
            raise ValueError(
                f"workloads of shape {self.workloads.shape} do not match durations of shape {actual.shape}"
            )
        self._levels: np.ndarray | None = None

    def apply(self, step: int, levels: np.ndarray, reconfigure: bool) -> float:
        self._levels = np.asarray(levels, dtype=np.int64)
        return self.penalty_s if reconfigure else 0.0

    def observe(self, step: int) -> StepObservation:
        if self._levels is None:
            raise RuntimeError("observe() before apply(): no configuration to run the step with")
        d = self.actual[np.arange(self.n_tasks), self._levels, step]
        return StepObservation(
            step=step,
            duration_s=d,
            workloads=self.workloads[:, step],
            step_s=float(d.max() if self.structure is None else self.structure.step_time(d)),
        )

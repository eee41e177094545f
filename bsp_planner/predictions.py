"""Predictions made step by step (the `loop.Predictions` of an online or learning run).

Before step t, row t of the planning context's predicted durations (tasks, levels, H) is made from
the workloads expected for steps t..t+H-1 (perfect knowledge, the offline forecast matrix, or an
online forecast from the history observed so far) and the performance model as it stands (the
profile's, or the profile's corrected by what was measured). After the step, the online forecaster
observes the workloads and the model learns from the durations. Once written, row t never changes:
it is what was known before step t.

Only planners that decide one step at a time can run this way; one that plans the whole job before
the first step (dp) needs every row at once and is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .allocation.base import Allocator
from .errors import InputError
from .learning import LearnedDurations
from .loop import StepObservation
from .performance import DurationModel
from .planners.base import ConfigTable


class OnlineConfigTable(ConfigTable):
    """A ConfigTable whose rows become known one step at a time (`reveal(t, row)`): batched
    precomputation covers only the rows already known; asking for a later row is an error.

    shape: (steps, tasks, levels, H) of the predicted durations, NaN until revealed."""

    def __init__(
        self,
        shape: tuple[int, int, int, int],
        allocator: Allocator,
        max_level: np.ndarray,
        budget_steps: int,
        discount: float,
    ) -> None:
        super().__init__(np.full(shape, np.nan), allocator, max_level, budget_steps, discount)
        self.known = 0  # rows 0..known-1 are written

    def reveal(self, t: int, row: np.ndarray) -> None:
        if t != self.known:
            raise RuntimeError(f"predictions for step {t} revealed after {self.known} rows")
        self.predicted[t] = row
        self.known = t + 1

    def ensure_all(self, jmax: int, steps: np.ndarray | None = None) -> None:
        self._check(jmax)
        s = np.arange(self.known) if steps is None else np.asarray(steps)
        super().ensure_all(jmax, s[s < self.known])

    def ensure_row(self, t: int, jmax: int) -> None:
        if t >= self.known:
            raise RuntimeError(f"a planner asked for the predictions of step {t} before they were made")
        super().ensure_row(t, jmax)


class StepPredictions:
    """Fills a context's rows before each step and learns after it (implements `loop.Predictions`).

    workloads: where the expected workloads come from, one of
      ("actual", (tasks, steps) array): perfect knowledge of the workloads,
      ("matrix", (tasks, steps, H) array): an offline forecast matrix,
      ("online", OnlineForecasts): forecasts from the history observed so far.
    model: a DurationModel (fixed) or LearnedDurations (learns from every measurement).
    workload_range: (low, high) forecasts are clipped to, as offline.
    """

    def __init__(
        self,
        table: OnlineConfigTable,
        workloads: tuple[str, Any],
        model: DurationModel | LearnedDurations,
        workload_range: tuple[float, float],
    ) -> None:
        self.table = table
        self.kind, self.source = workloads
        if self.kind not in ("actual", "matrix", "online"):
            raise ValueError(f"unknown source of workloads {self.kind!r}")
        self.model = model
        self.workload_range = workload_range
        self.horizon = table.horizon

    def expected_workloads(self, t: int) -> np.ndarray:
        """(tasks, H) workloads expected for steps t..t+H-1."""
        h = self.horizon
        if self.kind == "actual":
            w = self.source
            idx = np.minimum(np.arange(t, t + h), w.shape[1] - 1)  # edge padding, never read past the last step
            return w[:, idx]
        if self.kind == "matrix":
            return np.clip(self.source[:, t, :], *self.workload_range)
        fc = self.source.forecast()
        return np.clip(fc, *self.workload_range)

    def before_step(self, step: int) -> None:
        self.table.reveal(step, self.model.durations(self.expected_workloads(step)))

    def after_step(self, step: int, levels: np.ndarray, observation: StepObservation) -> dict | None:
        if self.kind == "online":
            self.source.observe(observation.workloads)
        if isinstance(self.model, LearnedDurations):
            w = np.clip(observation.workloads, *self.workload_range)
            return self.model.learn(step, w, levels, observation.duration_s)
        return None


def refuse_offline(planner, why: str) -> None:
    if getattr(planner, "offline", False):
        raise InputError(
            f"strategy '{planner.name}' plans the whole job before the first step, so it cannot run with {why}; "
            "leave it out (--strategies) or run without it",
            field="strategies",
        )

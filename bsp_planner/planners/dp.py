"""`dp` (thesis eq. 5.1-5.4): offline dynamic programming over segment boundaries.

The job is cut into segments of at most `dp_max_segment` steps (and never beyond the forecast
horizon); a segment starting at s runs the allocator's configuration for its frame, from the forecast
made before step s. V(e) = min over s of V(s) + C [s > 0] + predicted time of [s, e). The plan is the
argmin path; with perfect forecasts it is optimal among plans built from allocator configurations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .base import Decision, Planner, PlanningContext

if TYPE_CHECKING:
    from ..inputs.experiment import PlannerSettings


@dataclass(frozen=True)
class DpParams:
    max_segment: int = 40  # steps; segments are also never longer than the forecast horizon

    @classmethod
    def from_settings(cls, s: PlannerSettings | None) -> DpParams:
        return cls() if s is None else cls(max_segment=s.dp_max_segment)


def segment_dp(window_times: np.ndarray, penalty_s: float, steps: int) -> tuple[float, list[tuple[int, int]]]:
    """window_times: (steps, jmax), entry [s, j-1] = cost of a segment [s, s+j). Returns
    (total predicted cost, segments [(start, length), ...])."""
    jmax = window_times.shape[1]
    value = np.full(steps + 1, np.inf)
    value[0] = 0.0
    arg = np.zeros(steps + 1, dtype=np.int64)
    for e in range(1, steps + 1):
        j = np.arange(1, min(jmax, e) + 1)
        s = e - j
        cand = value[s] + window_times[s, j - 1] + penalty_s * (s > 0)
        k = int(np.argmin(cand))  # ties: the shortest segment
        value[e], arg[e] = cand[k], j[k]
    segments = []
    e = steps
    while e > 0:
        segments.append((e - int(arg[e]), int(arg[e])))
        e -= int(arg[e])
    return float(value[steps]), segments[::-1]


class DpPlanner(Planner):
    name = "dp"
    offline = True
    params_type = DpParams

    params: DpParams

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        jmax = min(self.params.max_segment, ctx.configs.horizon, ctx.steps)
        ctx.configs.ensure_all(jmax)
        self._starts = dict(segment_dp(ctx.configs.window_times(jmax), ctx.penalty_s, ctx.steps)[1])

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if t in self._starts:
            j = self._starts[t]
            return Decision(j, self.ctx.configs.levels(t, j))
        assert current is not None  # step 0 always starts a segment
        return Decision(0, current)

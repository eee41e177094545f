"""Planners that know their forecasts' error: `mpc-risk` and `mpc-adaptive`.

Both are `mpc` (Algorithm 4, unchanged) run on what the forecasts' measured error says, learned during
the run from the workloads observed so far (see observed.py: before step t only the errors of
forecasts whose targets ran before t are known; until 20 errors per lead are known they plan as `mpc`).

    mpc-risk[:LEVEL]   risk-aware MPC, after Pace et al., "Dynamic resource shaping", which plans on
                       forecast confidence: every task's workload is taken at the LEVEL quantile
                       (default 0.7) of its forecast, i.e. the median forecast plus that quantile of
                       the task's recent errors at each lead time, adaptively calibrated. A task whose
                       forecast is often too low gets more CPU than its median forecast asks for.
                       Assumes: a task's recent errors describe its next ones (errors drift slowly).
    mpc-adaptive       MPC whose horizon and length punishment follow the measured error per lead
                       time: the horizon stops before the first lead whose RMSE exceeds twice the
                       lead-1 RMSE, and a window of j steps is weighted by lambda**j with lambda fitted
                       to 1 + (mean relative RMSE over leads 1..j) (least squares in log space), so
                       long windows are distrusted exactly as much as their forecasts are worse.
                       Assumes: step time scales with workload, so relative workload error is
                       relative step-time error.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .base import Decision, OnlineConfigTable, PlanningContext, spec_number
from .mpc import MpcPlanner
from .observed import Observations, observations

DEFAULT_RISK_LEVEL = 0.7
#: mpc-adaptive cuts its horizon at the first lead whose RMSE exceeds this multiple of lead 1's.
HORIZON_ERROR_RATIO = 2.0


def upper_quantile_durations(obs: Observations, t: int, level: float, horizon: int) -> np.ndarray:
    """(tasks, levels, horizon) durations predicted before step t with each task's workload at the
    `level` quantile of its forecast (median + recent error quantile, per lead)."""
    fc = obs.forecast(t, horizon)
    upper = np.clip(fc + obs.error_quantile_offsets(t, level, horizon), *obs.workload_range)
    return obs.durations(upper)


class RiskAwareMpcPlanner(MpcPlanner):
    """MPC on upper-quantile workloads (see the module's notes). Its table's row t is made before
    step t from what is known then, so it plans the same offline, online and live."""

    def __init__(self, arg: str | None = None, params: Any = None) -> None:
        super().__init__(None, params)
        usage = "mpc-risk:LEVEL with a quantile level in [0.5, 1)"
        self.level = spec_number("mpc-risk", arg, float, DEFAULT_RISK_LEVEL, lambda q: 0.5 <= q < 1.0, usage)
        self.name = "mpc-risk" if arg is None else f"mpc-risk:{arg}"

    def reset(self, ctx: PlanningContext) -> None:
        self.obs = observations(ctx, self.name)
        self.table: OnlineConfigTable | None = None  # None in perfect mode: the context's own table
        if self.obs.forecast_workloads is not None:
            self.table = OnlineConfigTable.like(ctx.configs)
            ctx = replace(ctx, configs=self.table)
        super().reset(ctx)

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if self.table is not None:
            self.table.reveal(t, upper_quantile_durations(self.obs, t, self.level, self.table.horizon))
        return super().decide(t, current)


class AdaptiveMpcPlanner(MpcPlanner):
    """MPC with a horizon and length punishment set from the measured error per lead time."""

    name = "mpc-adaptive"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        self.base_params = self.params
        self.obs = observations(ctx, self.name)
        self.error_horizon = min(self.params.horizon, ctx.configs.horizon)
        self.mean_workload = float(np.mean(self.obs.workload_range))

    def adapted(self, t: int) -> tuple[int, float]:
        """(horizon, length punishment) for step t from the errors known before it."""
        base = self.base_params
        r = self.obs.rmse_by_lead(t, self.error_horizon)
        if np.isnan(r).any() or not r[0] > 0:
            return base.horizon, base.length_punishment
        over = np.nonzero(r > HORIZON_ERROR_RATIO * r[0])[0]
        h = int(over[0]) if over.size else len(r)
        h = max(2, min(h, base.horizon))
        rel = np.cumsum(r[:h] / self.mean_workload) / np.arange(1, h + 1)  # mean relative RMSE over leads 1..j
        j = np.arange(1, h + 1)
        log_lambda = float(np.sum(j * np.log1p(rel)) / np.sum(j * j))
        return h, float(np.exp(log_lambda))

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        h, lam = self.adapted(t)
        self.params = replace(self.base_params, horizon=h, length_punishment=lam)
        return super().decide(t, current)

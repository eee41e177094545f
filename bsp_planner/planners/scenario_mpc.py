"""`mpc-scenario[:K]`: scenario-based (stochastic) MPC on the forecasts' measured joint error.

`mpc` plans on one forecast; `mpc-risk` on one upper quantile per task. Both size each task for a
single workload, while a step lasts as long as its slowest task: what matters is the expected maximum
over tasks, which a per-task quantile only approximates. Before step t this planner draws K workload
scenarios for steps t..t+h-1: the forecast made before t plus the whole error trajectory (every task,
every lead at once) of a past forecast, taken from K origins spread evenly over the most recent
ERROR_WINDOW origins whose targets have all run (so errors that move together across tasks and leads
stay together). It then runs Algorithm 4 on the expected cost over those scenarios: every window's
configuration is the allocator's for the K scenarios' steps together (each weighted 1/K), so it
minimises the expected sum over steps of the slowest task's time, and the window, keep and checkpoint
costs compared are expectations over the scenarios (`MpcPlanner.plan_on`).

Assumes: the errors of the recent forecasts (their joint distribution over tasks and leads) describe
those of the next one; no scenario is weighted above another. Learns only from steps already run
(observed.py's contract); plans exactly as `mpc` until MIN_ERRORS such error trajectories are known,
in perfect mode, and whenever every known error is zero (identical scenarios collapse into one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import InputError
from .base import Decision, PlanningContext
from .mpc import MpcPlanner, first_decision
from .observed import ERROR_WINDOW, MIN_ERRORS, Observations, observations

#: Scenarios drawn per step unless `mpc-scenario:K` says otherwise: validation's choice among 4, 8, 16, 32
#: (benchmarks/bench_scenario_count.py, steps 800..999; 8 and 32 within 0.02% of each other).
DEFAULT_SCENARIOS = 32


def scenario_origins(t: int, lead_span: int, k: int) -> np.ndarray:
    """Past forecast origins whose errors over leads 0..lead_span-1 are all known before step t: K of
    the newest ERROR_WINDOW, evenly spread (empty until MIN_ERRORS exist)."""
    newest = t - lead_span  # origin o's last target o + lead_span - 1 must have run: <= t - 1
    oldest = max(0, newest - ERROR_WINDOW + 1)
    if newest - oldest + 1 < MIN_ERRORS:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.round(np.linspace(oldest, newest, min(k, newest - oldest + 1))).astype(np.int64))


def workload_scenarios(obs: Observations, t: int, h: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(workloads (tasks, S, h), probabilities (S,)) for steps t..t+h-1: the forecast made before t
    plus the errors of up to k past forecasts (identical scenarios merged, their weights summed)."""
    fc = obs.forecast(t, h)  # (tasks, h)
    origins = scenario_origins(obs.known_before(t), h, k)
    if origins.size == 0:
        return fc[:, None, :], np.ones(1)
    errors = obs.error_trajectories(t, origins, h)  # (tasks, S, h)
    unique, counts = np.unique(errors.transpose(1, 0, 2).reshape(origins.size, -1), axis=0, return_counts=True)
    scen = np.clip(fc[None] + unique.reshape(-1, *fc.shape), *obs.workload_range)  # (S, tasks, h)
    return scen.transpose(1, 0, 2), counts / counts.sum()


class ScenarioMpcPlanner(MpcPlanner):
    """MPC on the expected cost over K workload scenarios (see the module's notes)."""

    def __init__(self, arg: str | None = None, params: Any = None) -> None:
        super().__init__(None, params)
        try:
            self.n_scenarios = int(arg) if arg is not None else DEFAULT_SCENARIOS
        except ValueError:
            self.n_scenarios = 0
        if self.n_scenarios < 1:
            raise InputError(
                f"expected mpc-scenario:K with K a whole number of scenarios >= 1, got 'mpc-scenario:{arg}'",
                field="strategies",
            )
        self.name = "mpc-scenario" if arg is None else f"mpc-scenario:{arg}"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        self.obs = observations(ctx, self.name)
        self.scenario_counts: list[int] = []  # scenarios planned on before each step

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        if self.obs.forecast_workloads is None:  # perfect mode: the forecast is the truth
            self.scenario_counts.append(1)
            return super().decide(t, current)
        h = min(self.params.horizon, self.ctx.steps - t, self.obs.forecast_workloads.shape[2])
        workloads, probs = workload_scenarios(self.obs, t, h, self.n_scenarios)
        self.scenario_counts.append(probs.size)
        if probs.size == 1 and not np.any(workloads[:, 0] != self.obs.forecast(t, h)):
            return super().decide(t, current)  # no error known (or all zero): exactly mpc
        durations = self.obs.durations(workloads).transpose(2, 0, 1, 3)  # (S, tasks, levels, h)
        return first_decision(self.plan_on(durations, probs, current)[1], current)

"""`mpc` (thesis Algorithm 4, eq. 5.5): model predictive control over a receding horizon.

Before step t, with the forecast made before t and a horizon h (capped at the steps left), MPC finds
the cheapest plan for steps t..t+h-1 and applies only its first decision. A plan is a sequence of
windows: the first may keep the current configuration (no checkpoint); every other window [s, s+j)
runs the allocator's configuration for that frame and pays the checkpoint penalty C first (the very
first configuration of a job is free). Each window's predicted time is multiplied by factor**j for a
window of j steps: the length punishment (1.0 = the equations as written; the thesis code used 1.02
to distrust long windows, whose forecasts are worse).

If the cheapest plan starts by keeping the current configuration, the action is a0 (even when it
reconfigures later in the horizon: that is decided again at that step, with a newer forecast);
otherwise it is a_j for the plan's first window of j steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..allocation.base import Allocator, discount_weights
from .base import Decision, Planner, step_time

if TYPE_CHECKING:
    from ..inputs.experiment import PlannerSettings


@dataclass(frozen=True)
class MpcParams:
    horizon: int = 10  # look-ahead, in steps
    length_punishment: float = 1.0  # a window of j steps is weighted by this ** j

    @classmethod
    def from_settings(cls, s: PlannerSettings | None) -> MpcParams:
        return cls() if s is None else cls(horizon=s.horizon, length_punishment=s.length_punishment)


def horizon_frames(h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window (start s, length j) inside a horizon of h steps, in a fixed order."""
    s, j = np.nonzero(np.arange(h)[:, None] + np.arange(1, h + 1)[None, :] <= h)
    return s, j + 1


class MpcPlanner(Planner):
    name = "mpc"
    params_type = MpcParams

    def plan(self, t: int, current: np.ndarray | None) -> tuple[float, list[tuple[int, int, np.ndarray | None]]]:
        """The cheapest plan over the horizon: (predicted cost, [(start, length, levels or None=keep)])."""
        h = min(self.params.horizon, self.ctx.steps - t)
        pred = self.ctx.configs.predicted[t, :, :, :h]  # (tasks, levels, h)
        return self.plan_on(pred[None], np.ones(1), current)

    def plan_on(
        self, scenarios: np.ndarray, probs: np.ndarray, current: np.ndarray | None, allocator: Allocator | None = None
    ) -> tuple[float, list[tuple[int, int, np.ndarray | None]]]:
        """The plan minimising the expected cost over scenarios (S, tasks, levels, h) of predicted
        durations with probabilities (S,); one scenario of probability 1 is Algorithm 4 as written.
        Every window's configuration is the allocator's for the S scenarios' steps taken together
        (weights scaled by each scenario's probability), so it minimises the expected sum of per-step
        maxima over tasks: a step waits for its slowest task in every scenario. allocator: the one to
        build the windows' configurations with (None: the context's)."""
        ctx = self.ctx
        S, n, _, h = scenarios.shape
        pred = scenarios.transpose(1, 2, 0, 3).reshape(n, scenarios.shape[2], S * h)  # (tasks, levels, S*h)
        starts, lengths = horizon_frames(h)
        k = np.arange(h)
        inside = (k[None, :] >= starts[:, None]) & (k[None, :] < (starts + lengths)[:, None])
        weights = np.where(
            inside, discount_weights(h, ctx.discount)[np.clip(k[None, :] - starts[:, None], 0, h - 1)], 0.0
        )
        if S > 1:
            weights = (weights[:, None, :] * probs[None, :, None]).reshape(starts.size, S * h)
        d = np.broadcast_to(pred, (starts.size,) + pred.shape)
        cfgs = (allocator or ctx.allocator).allocate_batch(
            d, weights, ctx.max_level, ctx.budget_steps
        )  # (frames, tasks)
        per_step = step_time(pred[np.arange(n)[None, :], cfgs, :], ctx.structure, axis=1)  # (frames, S*h)
        if S > 1:
            per_step = np.einsum("fsh,s->fh", per_step.reshape(starts.size, S, h), probs)
        punish = self.params.length_punishment**lengths
        window = (per_step * inside).sum(axis=1) * punish
        penalty = np.full(starts.size, ctx.penalty_s)
        if current is None:
            penalty[starts == 0] = 0.0  # the first configuration of the job is free
        else:
            same = np.all(cfgs == current[None, :], axis=1)
            penalty[(starts == 0) & same] = 0.0
        cost = window + penalty
        if current is not None:
            keep_steps = step_time(pred[np.arange(n), current, :], ctx.structure, axis=0)  # (S*h,)
            if S > 1:
                keep_steps = probs @ keep_steps.reshape(S, h)
            keep = np.cumsum(keep_steps) * self.params.length_punishment ** np.arange(1, h + 1)
        # best[e]: cheapest plan covering the first e steps; back[e]: its last window (frame index or -e for keep)
        best = np.full(h + 1, np.inf)
        best[0] = 0.0
        back = np.zeros(h + 1, dtype=np.int64)
        for e in range(1, h + 1):
            ending = np.nonzero(starts + lengths == e)[0]
            cand = best[starts[ending]] + cost[ending]
            i = int(np.argmin(cand))
            best[e], back[e] = cand[i], ending[i]
            if current is not None and keep[e - 1] <= best[e]:
                best[e], back[e] = keep[e - 1], -1
        windows: list[tuple[int, int, np.ndarray | None]] = []
        e = h
        while e > 0:
            f = int(back[e])
            if f < 0:
                windows.append((0, e, None))
                e = 0
            else:
                windows.append((int(starts[f]), int(lengths[f]), cfgs[f]))
                e = int(starts[f])
        return float(best[h]), windows[::-1]

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        return first_decision(self.plan(t, current)[1], current)


def first_decision(windows: list[tuple[int, int, np.ndarray | None]], current: np.ndarray | None) -> Decision:
    """A plan's first window as the decision before its first step: keep (a0) or a_j; the whole plan, one
    configuration per step, rides along (`Decision.plan`)."""
    _, length, levels = windows[0]
    plan = np.concatenate([np.tile(lv if lv is not None else np.asarray(current), (j, 1)) for _, j, lv in windows])
    if levels is None:
        assert current is not None  # a plan keeps a configuration only when there is one
        return Decision(0, current, plan)
    return Decision(length, levels, plan)

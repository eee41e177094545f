"""What the agent sees, computed the same way by the environment and by the `dqn`/`rl` planner.

Observation before step t (thesis section 5.3): an (n+1) x m matrix. Row 0 holds the predicted
durations of steps t..t+m-1 under the current configuration; row i (1 <= i <= n) the same under the
configuration action a_i would build (the allocator's configuration for the frame [t, t+i), taken from
the planning context's ConfigTable). A step's predicted duration is its slowest task's, from the
forecast made before step t: exactly what the other planners predict. Durations are divided by a fixed
scale (seconds per unit) and clipped to the declared range [0, high].

Only numpy here: the planner uses this without gymnasium.
"""

from __future__ import annotations

import numpy as np

from ..planners.base import PlanningContext, step_time


def auto_scale(ctx: PlanningContext) -> float:
    """A typical step's duration: the slowest task at mid workload with the budget split evenly.

    Derived from the profile (through the context's mid-workload durations), never from the actual
    workloads, so it is the same for every step range of an experiment."""
    mid = ctx.mid_durations
    if mid is None:
        raise ValueError("the planning context has no mid-workload durations to derive a scale from")
    even = np.minimum(ctx.budget_steps // max(1, ctx.n_tasks), ctx.max_level)
    return float(mid[np.arange(ctx.n_tasks), even].max())


def predicted_rows(ctx: PlanningContext, t: int, configs: np.ndarray, window: int) -> np.ndarray:
    """Predicted step durations (seconds) of steps t..t+window-1 under each configuration.

    configs: (k, tasks) level indices -> (k, window)."""
    pred = ctx.configs.predicted[t, :, :, :window]  # (tasks, levels, window)
    return step_time(pred[np.arange(ctx.n_tasks)[None, :], configs, :], ctx.structure, axis=1)


def observation(
    ctx: PlanningContext, t: int, current: np.ndarray | None, n: int, window: int, scale: float, high: float
) -> np.ndarray:
    """The (n+1, window) float32 observation before step t.

    Before the first step of a job (current None) there is no configuration to keep; row 0 then shows
    a_n's configuration, which is what a0 means there (see `resolve_action`)."""
    cfg = ctx.configs.row(t, n)[0]  # (n, tasks): a_1..a_n's configurations (cached by the ConfigTable)
    cur = cfg[n - 1] if current is None else current
    rows = predicted_rows(ctx, t, np.vstack([cur[None, :], cfg]), window)
    return np.clip(rows / scale, 0.0, high).astype(np.float32)


def resolve_action(action: int, current: np.ndarray | None, cfg: np.ndarray) -> tuple[int, np.ndarray]:
    """(action as recorded, levels) for an agent's action; cfg: (n, tasks) of a_1..a_n.

    a0 before the first step (nothing to keep) runs a_n's configuration: the first one is free anyway."""
    n = cfg.shape[0]
    if action == 0:
        if current is None:
            return n, cfg[n - 1]
        return 0, current
    return action, cfg[action - 1]

"""The arrays an environment steps through, built once per (settings, step range) from the same
Scenario and PlanningContext that `simulate` uses, so that observations are what planners predict
and rewards are what the simulator charges.

Everything per (step, action) is precomputed: the allocator's configuration of a_1..a_n at every step
(batched through the ConfigTable), the observation rows those configurations give, and the actual
duration of the step under each. Only row 0 (the current configuration) is computed while stepping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from ..inputs.experiment import PlannerSettings
from ..planners.base import PlanningContext, step_time
from .features import auto_scale, predicted_rows
from .settings import EnvSettings, StepRange


@dataclass
class EnvData:
    settings: EnvSettings
    range: StepRange
    ctx: PlanningContext
    actual: np.ndarray  # (tasks, levels, steps) true durations
    cfg: np.ndarray  # (steps, n, tasks) configuration of a_1..a_n at each step
    rows: np.ndarray  # (steps, n, window) float32 observation rows 1..n
    action_step_s: np.ndarray  # (steps, n) actual duration of each step under a_1..a_n
    obs_scale: float
    reward_scale: float
    penalty_s: float
    forecast_label: str
    planner: PlannerSettings | None = None  # the experiment's [planner] settings (baselines are made with them)

    @property
    def steps(self) -> int:
        return self.ctx.steps

    def step_s(self, t: int, levels: np.ndarray) -> float:
        """Actual duration of step t under a configuration (the simulator's `step_times`)."""
        return float(step_time(self.actual[np.arange(self.actual.shape[0]), levels, t], self.ctx.structure, axis=0))


def build_data(
    s: EnvSettings,
    split: str = "train",
    *,
    extra_overrides: list[str] | None = None,
    scales: tuple[float, float] | None = None,
) -> EnvData:
    """Build the scenario of the training or evaluation range of an environment's experiment, and the
    tables of its planning context (`scales`: (obs_scale, reward_scale), else the settings')."""
    from ..inputs.experiment import load_experiment
    from ..simulate.scenario import build_scenario

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = s.train if split == "train" else s.eval
    exp = load_experiment(s.experiment_path, experiment_overrides(s, rng, extra_overrides))
    scen = build_scenario(exp)
    ctx, actual = scen.contexts[s.mode], scen.actual
    n, m, h = s.horizon_actions, s.window, ctx.configs.horizon
    if m > h or n > h:
        raise InputError(
            f"window {m} and actions a0..a{n} need forecasts of at least {max(m, n)} steps ahead; the "
            f"predictions here cover {h}",
            path=s.path,
            field="window",
        )
    if scales is None:
        obs = auto_scale(ctx) if s.obs_scale == "auto" else float(s.obs_scale)
        rew = obs if s.reward_scale == "auto" else float(s.reward_scale)
        if not (obs > 0 and rew > 0):
            raise InputError(
                f"expected positive scales, got obs_scale={obs!r}, reward_scale={rew!r}", path=s.path, field="obs_scale"
            )
        scales = (obs, rew)
    ctx.configs.ensure_all(n)
    T = ctx.steps
    cfg = np.stack([ctx.configs.row(t, n)[0] for t in range(T)]).astype(np.int64)  # (T, n, tasks)
    tasks = np.arange(ctx.n_tasks)
    rows = np.stack([predicted_rows(ctx, t, cfg[t], m) for t in range(T)])  # (T, n, m) seconds
    rows = np.clip(rows / scales[0], 0.0, s.obs_high).astype(np.float32)
    step_s = step_time(actual[tasks[None, None, :], cfg, np.arange(T)[:, None, None]], ctx.structure, axis=2)  # (T, n)
    label = scen.forecast_label[s.mode]
    return EnvData(s, rng, ctx, actual, cfg, rows, step_s, *scales, ctx.penalty_s, label, exp.planner)


def experiment_overrides(s: EnvSettings, rng: StepRange, extra: list[str] | None = None) -> list[str]:
    """The experiment as a step range of the environment sees it: its own overrides, `extra`, the range, the mode."""
    return [*s.overrides, *(extra or []), f"start={rng.start}", f"steps={rng.steps}", f"modes={s.mode}"]

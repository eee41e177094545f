"""`dqn` and `rl:PATH`: a trained reinforcement-learning agent as a planner (thesis section 5.3).

Before step t it builds the same observation the agent was trained on (`bsp_planner.rl.features`:
predicted durations over the next m steps under the current configuration and under each a_i's) from
the planning context alone, and runs the action the agent's policy picks (greedily).

    dqn            the shipped agent, agents/default/dqn.zip (+ dqn.json), or $BSP_PLANNER_DQN_AGENT
    dqn:PATH       the same planner with another DQN agent
    rl:PATH        any agent trained by `bsp-planner rl train` (DQN, PPO or A2C)

The model is loaded when the planner is made (once per file: later planners share it); torch and
stable-baselines3 are imported only then, so strategies without an agent never pay for them.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import InputError, InputWarning
from ..planners.base import Decision, Planner, PlanningContext

AGENT_ENV_VAR = "BSP_PLANNER_DQN_AGENT"


def default_agent_path() -> Path:
    from .settings import DEFAULT_AGENT_DIR

    env = os.environ.get(AGENT_ENV_VAR)
    return Path(env) if env else DEFAULT_AGENT_DIR / "dqn.zip"


class RlPlanner(Planner):
    name = "rl"

    def __init__(self, arg: str | None = None, *, name: str | None = None) -> None:
        if not arg:
            raise InputError("expected rl:PATH to a trained agent, e.g. rl:agents/default/dqn.zip", field="strategies")
        from .agent import load_agent

        self.agent = load_agent(arg)
        self.name = name or f"rl:{arg}"

    def reset(self, ctx: PlanningContext) -> None:
        super().reset(ctx)
        a = self.agent
        n = a.actions - 1
        h = ctx.configs.horizon
        if a.window > h or n > h:
            raise InputError(
                f"the agent observes {a.window} predicted steps and acts up to a{n}, but the forecasts here "
                f"cover {h} steps ahead; raise forecast.horizon or use an agent trained for a shorter window",
                path=a.path,
            )
        trained = a.meta.get("penalty_s")
        if trained is not None and abs(float(trained) - ctx.penalty_s) > 1e-9:
            warnings.warn(
                f"agent {a.path.name} was trained with a checkpoint penalty of {trained:g} s, this run charges "
                f"{ctx.penalty_s:g} s; its decisions assume the former",
                InputWarning,
                stacklevel=2,
            )
        ctx.configs.ensure_all(n)  # every a_1..a_n configuration in one batch per frame length

    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        from .features import observation, resolve_action

        a = self.agent
        n = a.actions - 1
        obs = observation(self.ctx, t, current, n, a.window, a.obs_scale, a.obs_high)
        action, levels = resolve_action(a.act(obs), current, self.ctx.configs.row(t, n)[0])
        return Decision(action, levels)


def rl_planner(arg: str | None, settings: Any = None) -> Planner:
    """rl:PATH (the agent brings its own parameters; the [planner] settings do not apply)."""
    return RlPlanner(arg)


def dqn_planner(arg: str | None, settings: Any = None) -> Planner:
    """dqn or dqn:PATH."""
    planner = RlPlanner(arg, name=f"dqn:{arg}") if arg else RlPlanner(str(default_agent_path()), name="dqn")
    if planner.agent.algo != "dqn":
        raise InputError(
            f"strategy 'dqn' needs a DQN agent; this one is {planner.agent.algo.upper()} (use rl:PATH)",
            path=planner.agent.path,
            field="strategies",
        )
    return planner

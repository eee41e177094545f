"""`bsp_planner/Reconfigure-v0`: the reconfiguration decision as a Gymnasium environment (thesis 5.3).

Before every superstep the agent picks an action:
    a0          keep the current configuration;
    a_i (i>=1)  run the allocator's configuration for the next i steps (from the forecast made now).
It observes an (n+1) x m matrix of predicted step durations (see `features.py`): row 0 under the
current configuration, row i under a_i's, over the next m steps, divided by `obs_scale` and clipped
to [0, obs_high]. The reward is minus the simulator's cost of the step, divided by `reward_scale`:
the actual duration of the step (its slowest task at the true workloads) plus the checkpoint penalty
when the configuration changed (times `penalty_scale`, 1 by default).

An episode is `episode_steps` consecutive steps of the training range; `reset(seed=...)` draws where
it starts and a configuration left over from a few steps before (mid-job: changing it costs the
penalty). It ends truncated (the job goes on). `reset(options={"full": True})` instead runs the whole
range from its first step, with no configuration yet (the first one is free), which is exactly what
`simulate` does with the `rl` planner.

    import gymnasium as gym, bsp_planner.rl.env
    env = gym.make("bsp_planner/Reconfigure-v0")                              # m = 6, a0..a3
    env = gym.make("bsp_planner/Reconfigure-v0", settings="envs/default.toml")  # the shipped agent's
    # where this module is not imported yet (SubprocVecEnv workers): "bsp_planner.rl.env:bsp_planner/Reconfigure-v0"
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .data import EnvData, build_data
from .features import predicted_rows, resolve_action
from .settings import ENV_ID, EnvSettings, load_env_settings


class ReconfigureEnv(gym.Env):
    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        settings: EnvSettings | str | Path | None = None,
        data: EnvData | None = None,
        split: str = "train",
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if data is not None:
            settings = data.settings
        elif settings is None:
            settings = EnvSettings()  # the thesis's setting on the default experiment
        elif not isinstance(settings, EnvSettings):
            settings = load_env_settings(settings)
        self.settings = settings
        self.data = data if data is not None else build_data(settings, split)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        s, d = settings, self.data
        self.n = s.horizon_actions
        self.window = s.window
        self.observation_space = spaces.Box(0.0, float(s.obs_high), shape=s.obs_shape, dtype=np.float32)
        self.action_space = spaces.Discrete(s.actions)
        self._penalty = d.penalty_s * s.penalty_scale
        self._t = 0
        self._end = 0
        self._current: np.ndarray | None = None
        self._last: dict = {}

    # --- helpers -------------------------------------------------------------------------------
    def _obs(self) -> np.ndarray:
        t = min(self._t, self.data.steps - 1)
        cur = self.data.cfg[t, self.n - 1] if self._current is None else self._current
        row0 = predicted_rows(self.data.ctx, t, cur[None, :], self.window)[0] / self.data.obs_scale
        obs = np.empty(self.settings.obs_shape, dtype=np.float32)
        obs[0] = np.clip(row0, 0.0, self.settings.obs_high)
        obs[1:] = self.data.rows[t]
        return obs

    @property
    def current(self) -> np.ndarray | None:
        return self._current

    # --- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        opts = dict(options or {})
        d, T = self.data, self.data.steps
        if opts.get("full"):
            self._t, self._end, self._current = 0, T, None
        else:
            length = int(opts.get("steps", self.settings.episode_steps))
            if not 1 <= length <= T - 1:
                raise ValueError(f"an episode of {length} steps does not fit {T - 1} steps")
            start = opts.get("start")
            self._t = int(self.np_random.integers(0, T - length)) if start is None else int(start)
            if not 0 <= self._t <= T - 1 - length:
                raise ValueError(f"start {self._t} leaves no room for {length} steps in {T}")
            self._end = self._t + length
            if "config" in opts:
                self._current = None if opts["config"] is None else np.asarray(opts["config"], dtype=np.int64)
            else:
                back = int(self.np_random.integers(1, 2 * self.n + 1))
                j = int(self.np_random.integers(1, self.n + 1))
                self._current = d.cfg[max(0, self._t - back), j - 1].copy()
        self._last = {}
        return self._obs(), {"t": self._t, "step": d.range.start + self._t}

    def step(self, action):
        if self._t >= self._end:
            raise RuntimeError("step() after the episode ended; call reset()")
        a = int(action)
        if not 0 <= a <= self.n:
            raise ValueError(f"action {action!r} outside a0..a{self.n}")
        t, d = self._t, self.data
        recorded, levels = resolve_action(a, self._current, d.cfg[t])
        changed = self._current is not None and not np.array_equal(levels, self._current)
        step_s = d.action_step_s[t, recorded - 1] if recorded > 0 else d.step_s(t, levels)
        cost = float(step_s) + (d.penalty_s if changed else 0.0)
        reward = -(float(step_s) + (self._penalty if changed else 0.0)) / d.reward_scale
        self._current = np.array(levels, dtype=np.int64)
        self._t += 1
        info = {
            "t": t,
            "step": d.range.start + t,
            "action": recorded,
            "step_s": float(step_s),
            "reconfigured": bool(changed),
            "cost_s": cost,
        }
        self._last = info
        terminated = self._t >= d.steps  # the job itself ends
        truncated = not terminated and self._t >= self._end
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            # The observation as a grey image, 8x8 pixels per cell, white = obs_high.
            cells = (255 * self._obs() / self.settings.obs_high).astype(np.uint8)
            return np.repeat(np.repeat(cells, 8, axis=0), 8, axis=1)[:, :, None].repeat(3, axis=2)
        if self.render_mode != "ansi":
            return None
        i = self._last
        if not i:
            return f"step {self.data.range.start + self._t}: not started\n"
        flag = " (reconfigured)" if i["reconfigured"] else ""
        return f"step {i['step']}: a{i['action']} -> {i['step_s']:.3f} s{flag}\n"


def register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="bsp_planner.rl.env:ReconfigureEnv")


register()


class BaselineShaping(gym.Wrapper):
    """Adds back an action-independent baseline to every reward: b_t / reward_scale, with b_t the
    actual duration of step t under a_1's configuration (a function of the step alone, never of the
    agent's choices). Over a fixed segment this shifts every policy's return by the same amount, so
    the best policy is unchanged, but it removes the workload's own swings from the returns the
    agent must predict: the values left are what its choices add (the penalty included)."""

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        d = self.env.unwrapped.data
        return obs, reward + float(d.action_step_s[info["t"], 0]) / d.reward_scale, term, trunc, info

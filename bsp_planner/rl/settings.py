"""Environment and training settings: `envs/*.toml` files (the shipped `envs/default.toml` sets every
top-level field, the [train] and [eval] step ranges and the [agent]), overridable from the CLI.

No torch, SB3 or gymnasium here: the `dqn` planner and the CLI read these without the heavy stack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core.errors import InputError
from ..inputs import settings as _settings
from ..inputs.settings import internal, setting
from ..inputs.shipped import data_dir

ENV_ID = "bsp_planner/Reconfigure-v0"
ALGOS = ("dqn", "ppo", "a2c")
MODES = ("forecast", "perfect")
# Shipped files (package data). Agents record their environment file relative to SHIPPED_ROOT when it
# is a shipped one ("envs/default.toml"), so their metadata holds no machine's absolute path.
SHIPPED_ROOT = data_dir()
DEFAULT_ENV = SHIPPED_ROOT / "envs" / "default.toml"
DEFAULT_AGENT_DIR = SHIPPED_ROOT / "agents" / "default"


@dataclass(frozen=True)
class StepRange:
    """Steps start..start+steps-1 of the test half of every series."""

    start: int = setting(ge=0)
    steps: int = setting(ge=2)

    @property
    def end(self) -> int:
        """One past the last step."""
        return self.start + self.steps

    def overlaps(self, other: StepRange) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}..{self.end - 1}"

    @classmethod
    def parse(cls, text: str, what: str) -> StepRange:
        """'400:1000' (end exclusive) or '400+600' (start + steps)."""
        try:
            if "+" in text:
                a, b = text.split("+", 1)
                r = cls(int(a), int(b))
            else:
                a, b = text.split(":", 1)
                r = cls(int(a), int(b) - int(a))
        except ValueError:
            raise InputError(f"expected START:END (end exclusive) or START+STEPS, got {text!r}", field=what) from None
        r.check(what)
        return r

    def check(self, what: str, path: Path | None = None) -> None:
        if self.start < 0 or self.steps < 2:
            raise InputError(f"expected start >= 0 and at least 2 steps, got {self}", path=path, field=what)


@dataclass
class AgentSettings:
    algo: str = setting("dqn", choices=ALGOS)
    timesteps: int = setting(100_000, ge=1)
    seed: int = setting(0, ge=0, le=2**32 - 1)  # numpy's legacy seeding (SB3's set_random_seed) takes no more
    gamma: float = setting(0.95, gt=0, le=1)
    learning_rate: float = setting(5e-4, gt=0)
    net_arch: list[int] = setting(default_factory=lambda: [128, 128], ge=1, min_items=1)
    n_envs: int = setting(1, ge=1)  # vectorised copies of the environment (PPO/A2C like several)
    # "a1": train on rewards shifted by an action-independent baseline (see env.BaselineShaping);
    # "none": on the environment's rewards as they are.
    reward_baseline: str = setting("a1", choices=("a1", "none"))
    # DQN
    buffer_size: int = setting(50_000, ge=1)
    learning_starts: int = setting(2_000, ge=0)
    batch_size: int = setting(64, ge=1)
    train_freq: int = setting(4, ge=1)
    gradient_steps: int = setting(1, ge=1)
    target_update_interval: int = setting(1_000, ge=1)
    exploration_fraction: float = setting(0.3, gt=0, le=1)
    exploration_final_eps: float = setting(0.02, ge=0, le=1)
    # PPO / A2C
    n_steps: int = setting(256, ge=1)
    ent_coef: float = setting(0.01, ge=0)
    # The saved agent's weights: the average of snapshots taken every `average_every` steps from
    # `average_from` (a fraction of the training) on, smoothing the step-to-step wobble of the greedy
    # policy that comes from noisy targets (1.0: the last weights as they are).
    average_from: float = setting(0.5, ge=0, le=1)
    average_every: int = setting(1_000, ge=1)
    # Bookkeeping
    eval_every: int = setting(5_000, ge=1)
    checkpoint_every: int = setting(25_000, ge=1)
    threads: int = setting(1, ge=1)  # torch intra-op threads


@dataclass
class EnvSettings:
    experiment: str = "../experiments/default.toml"  # relative to this file
    overrides: list[str] = field(default_factory=list)  # experiment overrides, e.g. ["forecast.source=..."]
    mode: str = setting("forecast", choices=MODES)  # which predictions the agent sees
    window: int = setting(6, ge=1)  # m: predicted steps per observation row
    actions: int = setting(4, ge=2)  # a0 keeps, a1.. reconfigure
    episode_steps: int = setting(100, ge=1)  # one episode: this many consecutive steps of the training range
    penalty_scale: float = setting(1.0, gt=0)  # times the checkpoint penalty in the reward (1: the simulator's)
    obs_scale: float | Literal["auto"] = setting("auto", gt=0)  # seconds per observation unit (auto: a typical step)
    reward_scale: float | Literal["auto"] = setting("auto", gt=0)  # seconds per reward unit (auto: obs_scale)
    obs_high: float = setting(4.0, gt=0)  # observations are clipped to [0, obs_high]
    train: StepRange = StepRange(400, 600)  # the steps of the test halves the agent learns from
    eval: StepRange = StepRange(0, 400)  # the held-out steps it is evaluated on
    agent: AgentSettings = field(default_factory=AgentSettings)  # the learner: algorithm, budget, seed, ...
    name: str = internal("default")
    path: Path | None = internal(None)

    @property
    def horizon_actions(self) -> int:
        """n: the longest frame an action configures for (a1..an)."""
        return self.actions - 1

    @property
    def obs_shape(self) -> tuple[int, int]:
        return (self.actions, self.window)

    @property
    def experiment_path(self) -> Path:
        """Relative to the environment file (settings made in code count as living in envs/)."""
        p = Path(self.experiment).expanduser()
        if p.is_absolute():
            return p
        base = self.path.parent if self.path is not None else DEFAULT_ENV.parent
        return (base / p).resolve()

    def validate(self, path: str | Path | None = None) -> None:
        """The rules that tie fields together (each field's own range is checked when it is read)."""
        p = self.path
        self.train.check("train", p)
        self.eval.check("eval", p)
        if self.episode_steps > self.train.steps - 1:
            raise InputError(
                f"an episode of {self.episode_steps} steps does not fit the training range {self.train} "
                f"({self.train.steps} steps; an episode needs one more for its last observation)",
                path=p,
                field="episode_steps",
            )

    def to_dict(self) -> dict[str, Any]:
        """Everything, with the file's own location as `env_file` (relative to the package data when
        shipped, so an agent's metadata stays valid in another installation)."""
        d = dataclasses.asdict(self)  # the step ranges and the agent as tables too
        d.pop("path")
        d["env_file"] = shipped_relative(self.path) if self.path else None
        return d

    def check_ranges(self, strict: bool) -> str | None:
        """With strict, an overlap of the training and evaluation ranges is an error; else a warning text."""
        if not self.train.overlaps(self.eval):
            return None
        msg = (
            f"the training range {self.train} overlaps the evaluation range {self.eval}: "
            "evaluation would not be out of sample"
        )
        if strict:
            raise InputError(msg, path=self.path, field="train")
        return msg


def load_env_settings(path: str | Path | None = None, overrides: list[str] | None = None) -> EnvSettings:
    path = Path(path) if path is not None else DEFAULT_ENV
    shipped = SHIPPED_ROOT / "envs" / f"{path.stem}.toml"
    if (
        not path.is_file()
        and path.parent in (Path("."), Path("envs"))
        and path.suffix in ("", ".toml")
        and shipped.is_file()
    ):
        path = shipped  # a shipped environment by name: default, wide (or envs/wide.toml as before)
    s = _settings.load_settings_file(EnvSettings, path, "environment", {"name": path.stem, "path": path.resolve()})
    # `KEY=VALUE` overrides (`window=8`, `train.start=300`), checked like the file's own values
    return _settings.apply_overrides(s, overrides, flag="--env-set") if overrides else s


def shipped_relative(path: Path | str) -> str:
    """A shipped file as a path relative to the package data ("envs/default.toml"); another as given."""
    p = Path(path).resolve()
    try:
        return p.relative_to(SHIPPED_ROOT.resolve()).as_posix()
    except ValueError:
        return str(p)


def settings_from_dict(d: dict) -> EnvSettings:
    """Rebuild settings saved in an agent's metadata (paths relative to the file they came from)."""
    d = dict(d)
    name = d.pop("name", "agent")
    env_file = d.pop("env_file", None)
    d.pop("path", None)
    base = EnvSettings(name=name, path=SHIPPED_ROOT / env_file if env_file else None)
    return _settings.load_settings(EnvSettings, d, base=base)

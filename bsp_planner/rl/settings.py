"""Environment and training settings: `envs/*.toml` files, overridable from the CLI.

    experiment = "../experiments/default.toml"   # relative to this file
    overrides = []            # experiment overrides, e.g. ["forecast.source=forecasts/lstm"]
    mode = "forecast"         # which predictions the agent sees: forecast | perfect
    window = 6                # m: predicted steps per observation row
    actions = 4               # a0..a(n): n = actions - 1 longest frame
    episode_steps = 100       # one episode = this many consecutive steps of the training range
    penalty_scale = 1.0       # multiplies the checkpoint penalty in the reward (1 = the simulator's cost)
    obs_scale = "auto"        # seconds per observation unit ("auto": a typical step, from the profile)
    reward_scale = "auto"     # seconds per reward unit ("auto": the same as obs_scale)
    obs_high = 4.0            # observations are clipped to [0, obs_high]

    [train]                   # steps of the series' test half the agent learns from
    start = 400
    steps = 600

    [eval]                    # held-out steps it is evaluated on (the default experiment's own steps)
    start = 0
    steps = 400

    [agent]                   # the learner: algorithm, budget, seed and hyperparameters
    algo = "dqn"
    timesteps = 100000
    seed = 0

No torch, SB3 or gymnasium here: the `dqn` planner and the CLI read these without the heavy stack.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..shipped import data_dir

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

    start: int
    steps: int

    @property
    def end(self) -> int:
        """One past the last step."""
        return self.start + self.steps

    def overlaps(self, other: "StepRange") -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}..{self.end - 1}"

    def to_dict(self) -> dict:
        return {"start": self.start, "steps": self.steps}

    @classmethod
    def parse(cls, text: str, what: str) -> "StepRange":
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
    algo: str = "dqn"
    timesteps: int = 100_000
    seed: int = 0
    gamma: float = 0.95
    learning_rate: float = 5e-4
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    n_envs: int = 1  # vectorised copies of the environment (PPO/A2C like several)
    # "a1": train on rewards shifted by an action-independent baseline (see env.BaselineShaping);
    # "none": on the environment's rewards as they are.
    reward_baseline: str = "a1"
    # DQN
    buffer_size: int = 50_000
    learning_starts: int = 2_000
    batch_size: int = 64
    train_freq: int = 4
    gradient_steps: int = 1
    target_update_interval: int = 1_000
    exploration_fraction: float = 0.3
    exploration_final_eps: float = 0.02
    # PPO / A2C
    n_steps: int = 256
    ent_coef: float = 0.01
    # The saved agent's weights: the average of snapshots taken every `average_every` steps from
    # `average_from` (a fraction of the training) on, smoothing the step-to-step wobble of the greedy
    # policy that comes from noisy targets (1.0: the last weights as they are).
    average_from: float = 0.5
    average_every: int = 1_000
    # Bookkeeping
    eval_every: int = 5_000
    checkpoint_every: int = 25_000
    threads: int = 1  # torch intra-op threads

    def validate(self, path: Path | None = None) -> None:
        if self.algo not in ALGOS:
            raise InputError(f"expected algo among {', '.join(ALGOS)}, got {self.algo!r}", path=path, field="agent.algo")
        for name in ("timesteps", "n_envs", "buffer_size", "batch_size", "train_freq", "gradient_steps",
                     "target_update_interval", "n_steps", "average_every", "eval_every", "checkpoint_every", "threads"):
            if getattr(self, name) < 1:
                raise InputError(f"expected {name} >= 1, got {getattr(self, name)}", path=path, field=f"agent.{name}")
        if self.reward_baseline not in ("a1", "none"):
            raise InputError(f"expected reward_baseline a1 or none, got {self.reward_baseline!r}", path=path, field="agent.reward_baseline")
        if not 0 <= self.average_from <= 1:
            raise InputError(f"expected 0 <= average_from <= 1, got {self.average_from}", path=path, field="agent.average_from")
        if self.learning_starts < 0:
            raise InputError(f"expected learning_starts >= 0, got {self.learning_starts}", path=path, field="agent.learning_starts")
        if not 0 < self.gamma <= 1:
            raise InputError(f"expected 0 < gamma <= 1, got {self.gamma}", path=path, field="agent.gamma")
        if not self.learning_rate > 0:
            raise InputError(f"expected learning_rate > 0, got {self.learning_rate}", path=path, field="agent.learning_rate")
        if not 0 < self.exploration_fraction <= 1 or not 0 <= self.exploration_final_eps <= 1:
            raise InputError("expected 0 < exploration_fraction <= 1 and 0 <= exploration_final_eps <= 1", path=path, field="agent")
        if not self.net_arch or any(int(u) < 1 for u in self.net_arch):
            raise InputError(f"expected a list of layer widths >= 1, got {self.net_arch!r}", path=path, field="agent.net_arch")


@dataclass
class EnvSettings:
    experiment: str = "../experiments/default.toml"
    overrides: list[str] = field(default_factory=list)
    mode: str = "forecast"
    window: int = 6
    actions: int = 4
    episode_steps: int = 100
    penalty_scale: float = 1.0
    obs_scale: float | str = "auto"
    reward_scale: float | str = "auto"
    obs_high: float = 4.0
    train: StepRange = StepRange(400, 600)
    eval: StepRange = StepRange(0, 400)
    agent: AgentSettings = field(default_factory=AgentSettings)
    name: str = "default"
    path: Path | None = None

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

    def validate(self) -> None:
        p = self.path
        if self.mode not in MODES:
            raise InputError(f"expected mode among {', '.join(MODES)}, got {self.mode!r}", path=p, field="mode")
        if self.window < 1:
            raise InputError(f"expected window >= 1, got {self.window}", path=p, field="window")
        if self.actions < 2:
            raise InputError(f"expected actions >= 2 (a0 keeps, a1.. reconfigure), got {self.actions}", path=p, field="actions")
        if self.episode_steps < 1:
            raise InputError(f"expected episode_steps >= 1, got {self.episode_steps}", path=p, field="episode_steps")
        for name in ("penalty_scale", "obs_scale", "reward_scale", "obs_high"):
            v = getattr(self, name)
            if v == "auto" and name in ("obs_scale", "reward_scale"):
                continue
            if isinstance(v, str) or not v > 0:
                also = ' or "auto"' if name in ("obs_scale", "reward_scale") else ""
                raise InputError(f"expected a number > 0{also}, got {v!r}", path=p, field=name)
        self.train.check("train", p)
        self.eval.check("eval", p)
        if self.episode_steps > self.train.steps - 1:
            raise InputError(
                f"an episode of {self.episode_steps} steps does not fit the training range {self.train} "
                f"({self.train.steps} steps; an episode needs one more for its last observation)",
                path=p,
                field="episode_steps",
            )
        self.agent.validate(p)

    def to_dict(self) -> dict[str, Any]:
        """Everything, with the file's own location as `env_file` (relative to the repository when
        inside it, so an agent's metadata stays valid in another checkout)."""
        d = dataclasses.asdict(self)
        d.pop("path")
        d["train"] = self.train.to_dict()
        d["eval"] = self.eval.to_dict()
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


def _coerce(value: Any, current: Any, where: str, path: Path | None) -> Any:
    try:
        if isinstance(current, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if isinstance(value, bool):
                return value
            raise ValueError
        if isinstance(current, int):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if isinstance(current, float) or where.endswith("_scale"):
            if isinstance(value, bool):
                raise ValueError
            if value == "auto" and where in ("obs_scale", "reward_scale"):
                return value
            return float(value)
        if isinstance(current, list):
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list):
                raise ValueError
            if where == "agent.net_arch":
                return [int(v) for v in value]
            return [str(v) for v in value]
        if isinstance(current, str):
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        pass
    raise InputError(f"expected a value like {current!r}, got {value!r}", path=path, field=where)


def _apply(s: EnvSettings, data: dict, path: Path | None) -> None:
    fields = {f.name for f in dataclasses.fields(s)} - {"path", "name"}
    agent_fields = {f.name for f in dataclasses.fields(AgentSettings)}
    for key, value in data.items():
        if key in ("train", "eval"):
            if not isinstance(value, dict) or set(value) - {"start", "steps"}:
                raise InputError("expected a table with start and steps", path=path, field=key)
            cur = getattr(s, key)
            start = _coerce(value.get("start", cur.start), 0, f"{key}.start", path)
            steps = _coerce(value.get("steps", cur.steps), 0, f"{key}.steps", path)
            setattr(s, key, StepRange(start, steps))
        elif key == "agent":
            if not isinstance(value, dict):
                raise InputError("expected an [agent] table", path=path, field=key)
            for k, v in value.items():
                if k not in agent_fields:
                    raise InputError(f"unknown setting; known: {', '.join(sorted(agent_fields))}", path=path, field=f"agent.{k}")
                setattr(s.agent, k, _coerce(v, getattr(s.agent, k), f"agent.{k}", path))
        elif key in fields:
            setattr(s, key, _coerce(value, getattr(s, key), key, path))
        else:
            raise InputError(f"unknown setting; known: {', '.join(sorted(fields))}", path=path, field=key)


def apply_env_overrides(s: EnvSettings, overrides: list[str]) -> EnvSettings:
    """`KEY=VALUE` overrides: `window=8`, `train.start=300`, `agent.timesteps=5000`."""
    for item in overrides:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--env-set")
        key, value = (x.strip() for x in item.split("=", 1))
        parts = key.split(".")
        if len(parts) == 1:
            data: dict = {key: value}
        elif len(parts) == 2:
            data = {parts[0]: {parts[1]: value}}
        else:
            raise InputError(f"expected KEY or SECTION.KEY, got {key!r}", field="--env-set")
        _apply(s, data, None)
    s.validate()
    return s


def load_env_settings(path: str | Path | None = None, overrides: list[str] | None = None) -> EnvSettings:
    path = Path(path) if path is not None else DEFAULT_ENV
    shipped = SHIPPED_ROOT / "envs" / f"{path.stem}.toml"
    if not path.is_file() and path.parent in (Path("."), Path("envs")) and path.suffix in ("", ".toml") and shipped.is_file():
        path = shipped  # a shipped environment by name: default, wide (or envs/wide.toml as before)
    if not path.is_file():
        raise InputError("environment file not found", path=path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    s = EnvSettings(name=path.stem)
    s.path = path.resolve()
    _apply(s, data, path)
    s.validate()
    if overrides:
        apply_env_overrides(s, overrides)
    return s


def shipped_relative(path: Path | str) -> str:
    """A shipped file as a path relative to the package data ("envs/default.toml"); another as given."""
    p = Path(path).resolve()
    try:
        return p.relative_to(SHIPPED_ROOT.resolve()).as_posix()
    except ValueError:
        return str(p)


def from_shipped(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else SHIPPED_ROOT / p


def settings_from_dict(d: dict) -> EnvSettings:
    """Rebuild settings saved in an agent's metadata (paths relative to the file they came from)."""
    d = dict(d)
    name = d.pop("name", "agent")
    env_file = d.pop("env_file", None)
    d.pop("path", None)
    s = EnvSettings(name=name)
    _apply(s, d, None)
    if env_file:
        s.path = from_shipped(env_file)
    return s

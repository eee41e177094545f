"""A trained agent on disk: the stable-baselines3 model (`NAME.zip`) and its metadata (`NAME.json`).

The metadata says what the model expects and how it was made: the environment settings (window,
actions, scales), the algorithm, seed, timesteps, training and evaluation ranges, and the experiment
it learned on. Loading checks the model against the metadata; `check_shape` checks both against the
environment or planning context they are about to be used with. Every problem is an InputError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import atomic
from ..core.errors import InputError
from ..inputs.shipped import data_path
from .settings import ALGOS, EnvSettings, StepRange, settings_from_dict

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

FORMAT = 1


@dataclass
class Agent:
    model: BaseAlgorithm
    meta: dict
    path: Path

    @property
    def algo(self) -> str:
        return self.meta["algo"]

    @property
    def window(self) -> int:
        return int(self.meta["env"]["window"])

    @property
    def actions(self) -> int:
        return int(self.meta["env"]["actions"])

    @property
    def obs_shape(self) -> tuple[int, int]:
        return (self.actions, self.window)

    @property
    def obs_scale(self) -> float:
        return float(self.meta["obs_scale"])

    @property
    def obs_high(self) -> float:
        return float(self.meta["env"]["obs_high"])

    @property
    def train_range(self) -> StepRange:
        return StepRange(**self.meta["train_range"])

    def settings(self) -> EnvSettings:
        return settings_from_dict(self.meta["env"])

    def check_shape(self, window: int, actions: int, where: str) -> None:
        """An agent only works with the observation shape and action count it was trained on."""
        if (window, actions) != (self.window, self.actions):
            raise InputError(
                f"the agent was trained on observations of shape {self.obs_shape} (window {self.window}) and "
                f"{self.actions} actions (a0..a{self.actions - 1}), but {where} gives shape ({actions}, {window}) "
                f"and {actions} actions; retrain it with `bsp-planner rl train` for these settings",
                path=self.path,
            )

    def act(self, obs) -> int:
        import torch

        # One observation through a small network: a second intra-op thread only adds synchronisation
        # (ten times slower on a busy 2-core machine). The process's setting is put back after.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            action, _ = self.model.predict(obs, deterministic=True)
        finally:
            torch.set_num_threads(threads)
        return int(action)


def metadata_path(path: Path) -> Path:
    return Path(path).with_suffix(".json")


def import_sb3():
    """stable_baselines3, imported without TensorFlow.

    SB3 imports torch's TensorBoard writer, which imports TensorBoard, which imports TensorFlow when it
    is installed (it is, for the forecasters): seconds of start-up for a planner that only needs a small
    torch network. TensorBoard's own switch for its TF-free stub (the `tensorboard.compat.notf` module)
    avoids that; its event files are the same. Nothing changes if TensorFlow is already loaded."""
    import sys
    import types

    if "tensorflow" not in sys.modules:
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    import stable_baselines3

    return stable_baselines3


def algo_class(algo: str):
    sb3 = import_sb3()

    if algo not in ALGOS:
        raise InputError(f"expected algo among {', '.join(ALGOS)}, got {algo!r}", field="algo")
    return {"dqn": sb3.DQN, "ppo": sb3.PPO, "a2c": sb3.A2C}[algo]


def save_agent(model, path: Path, meta: dict) -> Path:
    """Write NAME.zip and NAME.json (the metadata last, so a half-written agent has none)."""
    path = Path(path).with_suffix(".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path, exclude=["replay_buffer", "tensorboard_log", "_logger", "ep_info_buffer", "ep_success_buffer"])
    atomic.write_text(metadata_path(path), json.dumps({"format": FORMAT, **meta}, indent=2, default=str) + "\n")
    return path


def read_metadata(path: Path) -> dict:
    path = Path(path)
    mpath = metadata_path(path)
    if not mpath.is_file():
        raise InputError(f"agent metadata not found: expected {mpath.name} beside the model", path=path)
    try:
        meta = json.loads(mpath.read_text())
        # what the checks below and the Agent's properties read, readable
        meta["algo"], int(meta["env"]["window"]), int(meta["env"]["actions"]), float(meta["env"]["obs_high"])
        float(meta["obs_scale"]), StepRange(**meta["train_range"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"corrupt agent metadata ({type(exc).__name__}: {exc})", path=mpath) from exc
    if meta["algo"] not in ALGOS:
        raise InputError(f"unknown algorithm {meta['algo']!r} (known: {', '.join(ALGOS)})", path=mpath, field="algo")
    return meta


_CACHE: dict[tuple[str, int, int], Agent] = {}


def agent_file(path: str | Path) -> Path:
    """The file meant by an agent path: as given, else a shipped agent by its place in the package data
    (`agents/default/dqn.zip`); `.zip` may be left out. A path that names nothing comes back as given."""
    given = Path(path).expanduser()
    candidates = [given] if given.suffix == ".zip" else [given, given.with_suffix(".zip")]
    if not given.is_absolute():
        candidates += [data_path(c.as_posix()) for c in candidates]
    return next((c for c in candidates if c.is_file()), given)


def load_agent(path: str | Path) -> Agent:
    """Load and check an agent; cached per (file, mtime, size), so repeated planners share one model."""
    path = agent_file(path)
    if not path.is_file():
        raise InputError(
            "agent file not found; train one with `bsp-planner rl train` or give rl:PATH to a .zip", path=path
        )
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key in _CACHE:
        return _CACHE[key]
    meta = read_metadata(path)
    cls = algo_class(meta["algo"])
    import zipfile

    if not zipfile.is_zipfile(path):
        raise InputError(
            f"not a readable {meta['algo'].upper()} agent: the file is not a zip archive (corrupt or truncated?)",
            path=path,
        )
    try:
        # Schedules are only needed to keep training; constants keep loading independent of pickles.
        custom = {
            "learning_rate": 0.0,
            "lr_schedule": lambda _: 0.0,
            "exploration_schedule": lambda _: 0.0,
            "clip_range": lambda _: 0.0,
        }
        model = cls.load(path, device="cpu", custom_objects=custom)
    except Exception as exc:  # SB3 raises many types for a damaged archive
        raise InputError(
            f"not a readable {meta['algo'].upper()} agent ({type(exc).__name__}: {exc})", path=path
        ) from exc
    agent = Agent(model, meta, path)
    space = getattr(model, "observation_space", None)
    n_actions = getattr(getattr(model, "action_space", None), "n", None)
    if space is None or tuple(space.shape) != agent.obs_shape or n_actions != agent.actions:
        raise InputError(
            f"the model takes observations {getattr(space, 'shape', None)} and {n_actions} actions but its "
            f"metadata says {agent.obs_shape} and {agent.actions}: model and metadata do not belong together",
            path=path,
        )
    _CACHE[key] = agent
    return agent

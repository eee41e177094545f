"""Training and evaluating agents on the reconfiguration environment (stable-baselines3).

The greedy policy is evaluated on the held-out range as `simulate` runs the `rl` planner there, so
its totals compare directly with MPC's. The agent kept is the final one, not the best evaluation:
picking by held-out score would make the held-out score no longer out of sample.
"""

from __future__ import annotations

import csv
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..simulate.simulation import simulate
from .data import EnvData, build_data
from .settings import EnvSettings


@dataclass
class PolicyRun:
    total_s: float
    compute_s: float
    reconfigurations: int
    actions: np.ndarray

    def to_dict(self) -> dict:
        return {
            "total_s": round(self.total_s, 3),
            "compute_s": round(self.compute_s, 3),
            "reconfigurations": self.reconfigurations,
            "action_counts": [int(c) for c in np.bincount(self.actions, minlength=1)],
        }


def run_policy(act, data: EnvData) -> PolicyRun:
    """Run a policy (obs -> action) over a whole range from its first step, as `simulate` would."""
    from .env import ReconfigureEnv

    env = ReconfigureEnv(data=data)
    obs, _ = env.reset(options={"full": True})
    total = compute = 0.0
    reconf = 0
    actions = []
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(act(obs))
        total += info["cost_s"]
        compute += info["step_s"]
        reconf += info["reconfigured"]
        actions.append(info["action"])
        done = term or trunc
    return PolicyRun(total, compute, reconf, np.array(actions))


def baseline(strategy: str, data: EnvData) -> PolicyRun:
    """Another planner on the same range and context (e.g. MPC), through the simulator."""
    from ..planners.base import make_planner

    r = simulate(make_planner(strategy, data.planner), data.ctx, data.actual, data.settings.mode)
    return PolicyRun(r.total_s, r.compute_s, r.checkpoints, np.maximum(r.actions, 0))


@dataclass
class TrainResult:
    agent_path: Path
    run_dir: Path
    meta: dict
    evals: list[dict] = field(default_factory=list)


def _make_model(s: EnvSettings, env, tb_dir: Path | None):
    from .agent import algo_class

    a = s.agent
    cls = algo_class(a.algo)
    common = dict(
        policy="MlpPolicy",
        env=env,
        seed=a.seed,
        gamma=a.gamma,
        learning_rate=a.learning_rate,
        policy_kwargs={"net_arch": list(a.net_arch)},
        verbose=0,
        device="cpu",
        tensorboard_log=str(tb_dir) if tb_dir is not None else None,
    )
    if a.algo == "dqn":  # the settings named as DQN's own arguments
        dqn = ["buffer_size", "learning_starts", "batch_size", "train_freq", "gradient_steps"]
        dqn += ["target_update_interval", "exploration_fraction", "exploration_final_eps"]
        model = cls(**common, **{k: getattr(a, k) for k in dqn})
    elif a.algo == "ppo":
        model = cls(
            **common, n_steps=a.n_steps, batch_size=min(a.batch_size, a.n_steps * a.n_envs), ent_coef=a.ent_coef
        )
    else:
        model = cls(**common, n_steps=min(a.n_steps, 32), ent_coef=a.ent_coef)
    if tb_dir is None:  # SB3's own default logger makes an empty SB3-<time> folder in the system's temp dir
        from stable_baselines3.common.logger import Logger

        model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _callbacks(
    s: EnvSettings,
    train_data: EnvData,
    eval_data: EnvData,
    run_dir: Path,
    progress,
    evals: list,
    checkpoints: bool,
    mpc: PolicyRun | None,
):
    from .agent import import_sb3

    import_sb3()
    from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback

    a = s.agent

    class HeldOutEval(BaseCallback):
        """Evaluates on the held-out range every `eval_every` steps; then reports progress."""

        def __init__(self):
            super().__init__()
            self.next_at = a.eval_every

        def _evaluate(self) -> None:
            model = self.model
            act = lambda o: int(model.predict(o, deterministic=True)[0])  # noqa: E731
            res = run_policy(act, eval_data)
            seen = run_policy(act, train_data)  # the whole training range, greedily: in-sample
            row = {
                "timesteps": self.num_timesteps,
                **res.to_dict(),
                "train_total_s": round(seen.total_s, 3),
                "train_reconfigurations": seen.reconfigurations,
            }
            evals.append(row)
            self.logger.record("eval/train_range_total_s", seen.total_s)
            self.logger.record("eval/total_s", res.total_s)
            self.logger.record("eval/reconfigurations", res.reconfigurations)
            if mpc is not None:
                self.logger.record("eval/vs_mpc_pct", 100.0 * (res.total_s / mpc.total_s - 1.0))
            self.logger.dump(self.num_timesteps)

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_at:
                self.next_at += a.eval_every
                self._evaluate()
            if progress is not None:
                progress(self.num_timesteps, evals[-1] if evals else None)
            return True

        def _on_training_end(self) -> None:
            # The model may have trained after the last evaluation at this step count: the final
            # row must describe the agent that is saved.
            if evals and evals[-1]["timesteps"] == self.num_timesteps:
                evals.pop()
            self._evaluate()

    class WeightAverage(BaseCallback):
        """Snapshots of the policy's weights from `average_from` on; their mean replaces the weights
        when training ends (before the final evaluation, so that it describes the saved agent)."""

        def __init__(self):
            super().__init__()
            self.sum = None
            self.count = 0
            self.start = int(a.average_from * a.timesteps)
            self.next_at = max(self.start, 1)

        def _on_step(self) -> bool:
            if a.average_from < 1 and self.num_timesteps >= self.next_at:
                self.next_at += a.average_every
                params = {k: v.detach().clone() for k, v in self.model.policy.state_dict().items()}
                if self.sum is None:
                    self.sum = params
                else:
                    for k, v in params.items():
                        self.sum[k] += v
                self.count += 1
            return True

        def _on_training_end(self) -> None:
            if self.count > 1:
                last = self.model.policy.state_dict()
                self.model.policy.load_state_dict(
                    {k: (v / self.count if v.is_floating_point() else last[k]) for k, v in self.sum.items()}
                )

    cbs = [WeightAverage(), HeldOutEval()]
    if checkpoints:
        cbs.append(
            CheckpointCallback(max(1, a.checkpoint_every // a.n_envs), str(run_dir / "checkpoints"), name_prefix=a.algo)
        )
    return cbs


def train_agent(
    s: EnvSettings,
    run_dir: Path,
    agent_path: Path | None = None,
    *,
    strict: bool = False,
    extra_overrides: list[str] | None = None,
    progress=None,
    tensorboard: bool = True,
    checkpoints: bool = True,
    plot: bool = True,
    compare: str | None = "mpc",
    warn=None,
) -> TrainResult:
    """Train an agent; write run_dir/{agent.zip,agent.json,eval.csv,learning_curve.png,tb/,checkpoints/}
    and, when agent_path is given, the agent there too. `progress(timesteps, last_eval)` is called
    after every step."""
    msg = s.check_ranges(strict)
    if msg and warn:
        warn(msg)
    from .agent import import_sb3, save_agent

    sb3 = import_sb3()
    import gymnasium
    import torch
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import set_random_seed

    from .env import BaselineShaping, ReconfigureEnv

    a = s.agent
    torch.set_num_threads(a.threads)
    set_random_seed(a.seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t_build = time.perf_counter()
    train_data = build_data(s, "train", extra_overrides=extra_overrides)
    eval_data = build_data(
        s, "eval", extra_overrides=extra_overrides, scales=(train_data.obs_scale, train_data.reward_scale)
    )
    build_s = time.perf_counter() - t_build
    ref = baseline(compare, eval_data) if compare else None
    env = make_vec_env(
        ReconfigureEnv,
        n_envs=a.n_envs,
        seed=a.seed,
        env_kwargs={"data": train_data},
        monitor_dir=str(run_dir / "monitor"),
        wrapper_class=BaselineShaping if a.reward_baseline == "a1" else None,
    )
    model = _make_model(s, env, run_dir / "tb" if tensorboard else None)
    evals: list[dict] = []
    cbs = _callbacks(s, train_data, eval_data, run_dir, progress, evals, checkpoints, ref)
    t0 = time.perf_counter()
    model.learn(total_timesteps=a.timesteps, callback=cbs, tb_log_name=a.algo, progress_bar=False)
    train_s = time.perf_counter() - t0
    final = evals[-1]
    exp = train_data.ctx
    meta = {
        "algo": a.algo,
        "env": s.to_dict(),
        "obs_scale": train_data.obs_scale,
        "reward_scale": train_data.reward_scale,
        "penalty_s": exp.penalty_s,
        "seed": a.seed,
        "timesteps": a.timesteps,
        "train_range": asdict(s.train),
        "eval_range": asdict(s.eval),
        "experiment_overrides": list(s.overrides) + list(extra_overrides or []),
        "forecasts": train_data.forecast_label,
        "eval_forecasts": eval_data.forecast_label,
        "n_tasks": exp.n_tasks,
        "train_seconds": round(train_s, 1),
        "build_seconds": round(build_s, 1),
        "eval": final,
        "baseline": {compare: ref.to_dict()} if ref else {},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": {
            "python": platform.python_version(),
            "stable_baselines3": sb3.__version__,
            "torch": torch.__version__,
            "gymnasium": gymnasium.__version__,
            "numpy": np.__version__,
        },
    }
    path = save_agent(model, run_dir / "agent.zip", meta)
    if agent_path is not None:
        save_agent(model, agent_path, meta)
        path = Path(agent_path).with_suffix(".zip")
    with (run_dir / "eval.csv").open("w", newline="") as fh:
        columns = ["timesteps", "total_s", "compute_s", "reconfigurations", "train_total_s", "train_reconfigurations"]
        w = csv.DictWriter(fh, columns, extrasaction="ignore")  # action_counts stays in summary.json
        w.writeheader()
        w.writerows(evals)
    if plot:
        learning_curve(run_dir / "learning_curve.png", run_dir / "monitor", evals, ref, compare, train_data, a.algo)
    (run_dir / "summary.json").write_text(
        json.dumps({"agent": str(path), **meta, "evals": evals}, indent=2, default=str) + "\n"
    )
    env.close()
    return TrainResult(path, run_dir, meta, evals)


def learning_curve(
    path: Path,
    monitor_dir: Path,
    evals: list[dict],
    ref: PolicyRun | None,
    compare: str | None,
    data: EnvData,
    algo: str,
) -> None:
    """Left: training episodes' mean cost per step; right: held-out total vs the reference planner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from stable_baselines3.common.monitor import load_results

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    episodes = load_results(str(monitor_dir)) if any(monitor_dir.glob("*.monitor.csv")) else None
    if episodes is not None and len(episodes):  # the training episodes, in the order they ended
        ls = episodes["l"].to_numpy(dtype=np.int64)
        ts, per_step = np.cumsum(ls), -episodes["r"].to_numpy(dtype=np.float64) * data.reward_scale / ls
        ax1.plot(ts, per_step, color="#bbbbbb", lw=0.6, label="episode")
        k = max(1, min(50, len(ls) // 10))
        smooth = np.convolve(per_step, np.ones(k) / k, mode="valid")
        ax1.plot(ts[k - 1 :], smooth, color="#4C72B0", label=f"mean of {k} (exploring)")
    if evals:
        ax1.plot(
            [e["timesteps"] for e in evals],
            [e["train_total_s"] / data.steps for e in evals],
            "o-",
            color="#55A868",
            label="greedy policy, whole range",
        )
    ax1.set(ylabel="cost per step (s), training range", title=f"{algo.upper()} training ({data.settings.train})")
    if evals:
        ax2.plot([e["timesteps"] for e in evals], [e["total_s"] for e in evals], "o-", color="#4C72B0", label=algo)
    if ref is not None:
        ax2.axhline(ref.total_s, color="#DD8452", ls="--", label=f"{compare} ({ref.total_s:.1f} s)")
    ax2.set(ylabel="total time (s), held-out range", title=f"held-out steps {data.settings.eval}")
    for ax in (ax1, ax2):
        ax.set_xlabel("training steps")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def evaluate_agent(
    agent, s: EnvSettings, strategies: list[str], *, extra_overrides: list[str] | None = None, strict: bool = False
) -> tuple[dict[str, PolicyRun], EnvData]:
    """The agent and other planners on the evaluation range of settings `s` (through the simulator)."""
    from .planner import RlPlanner

    if strict and agent.train_range.overlaps(s.eval):
        raise InputError(
            f"the agent was trained on steps {agent.train_range}, which overlap the evaluation range {s.eval}: "
            "not out of sample",
            path=agent.path,
        )
    agent.check_shape(s.window, s.actions, f"the environment {s.name!r}")
    data = build_data(
        s,
        "eval",
        extra_overrides=extra_overrides,
        scales=(agent.obs_scale, float(agent.meta.get("reward_scale", agent.obs_scale))),
    )
    planner = RlPlanner(str(agent.path), name=agent.algo)
    r = simulate(planner, data.ctx, data.actual, s.mode)
    out = {agent.algo: PolicyRun(r.total_s, r.compute_s, r.checkpoints, r.actions)}
    return out | {st: baseline(st, data) for st in strategies}, data

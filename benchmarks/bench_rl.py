"""The reinforcement-learning planner: environment speed, DQN training time, and DQN vs MPC out of sample.

    .venv/bin/python benchmarks/bench_rl.py                 # all three, on envs/default.toml
    .venv/bin/python benchmarks/bench_rl.py --skip-train    # speed + the shipped agent vs MPC
    .venv/bin/python benchmarks/bench_rl.py --set profile=/tmp/synth/profile.csv

Targets: >= 1,000 environment steps per second on 2 cores; 100k DQN training steps in under 10
minutes; in forecast mode on steps it was not trained on, the agent's total at or below MPC's on the
default experiment (with both totals and reconfiguration counts). Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.rl.settings import DEFAULT_AGENT_DIR, load_env_settings  # noqa: E402


def env_speed(data, steps: int = 50_000) -> dict:
    """Random actions through the bare environment, and through SB3's vectorised wrapper + Monitor."""
    from stable_baselines3.common.env_util import make_vec_env

    from bsp_planner.rl.env import ReconfigureEnv

    env = ReconfigureEnv(data=data)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, env.action_space.n, size=steps)
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    bare = steps / (time.perf_counter() - t0)
    venv = make_vec_env(ReconfigureEnv, n_envs=1, seed=0, env_kwargs={"data": data})
    venv.reset()
    t0 = time.perf_counter()
    for a in actions[: steps // 2]:
        venv.step(np.array([a]))
    vec = (steps // 2) / (time.perf_counter() - t0)
    return {"bare_steps_per_s": bare, "vec_steps_per_s": vec}


def train_time(settings, timesteps: int, overrides: list[str]) -> dict:
    from bsp_planner.rl.train import train_agent

    settings.agent.timesteps = timesteps
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = train_agent(settings, Path(tmp), None, extra_overrides=overrides, plot=False, compare="mpc")
        wall = time.perf_counter() - t0
    return {
        "timesteps": timesteps,
        "learn_s": r.meta["train_seconds"],
        "wall_s": wall,
        "eval": r.meta["eval"],
        "mpc": r.meta["baseline"]["mpc"],
    }


def versus(agent_path: Path, overrides: list[str], strategies: list[str]) -> dict:
    from bsp_planner.rl.agent import load_agent
    from bsp_planner.rl.train import evaluate_agent

    agent = load_agent(agent_path)
    s = agent.settings()
    runs, data = evaluate_agent(agent, s, strategies, extra_overrides=overrides, strict=True)
    t0 = time.perf_counter()
    from bsp_planner.rl.planner import RlPlanner
    from bsp_planner.simulate.simulation import simulate

    r = simulate(RlPlanner(str(agent_path), name="dqn"), data.ctx, data.actual, s.mode)
    decide_ms = float(r.decision_ms.mean())
    return {
        "agent": agent,
        "settings": s,
        "runs": runs,
        "label": data.forecast_label,
        "decide_ms": decide_ms,
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default=None, help="environment file (default envs/default.toml)")
    ap.add_argument("--agent", default=str(DEFAULT_AGENT_DIR / "dqn.zip"))
    ap.add_argument("--timesteps", type=int, default=100_000)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="experiment override KEY=VALUE")
    ap.add_argument("--strategies", default="mpc,dp,static:8")
    args = ap.parse_args()

    from bsp_planner.rl.data import build_data

    s = load_env_settings(args.env)
    load = os.getloadavg()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    data = build_data(s, "train", extra_overrides=args.set)
    sp = env_speed(data)
    print("\n| environment | steps/s |\n|---|---|")
    print(f"| bare `ReconfigureEnv.step` (random actions) | {sp['bare_steps_per_s']:,.0f} |")
    print(f"| through SB3 `DummyVecEnv` + `Monitor` | {sp['vec_steps_per_s']:,.0f} |")
    if not args.skip_train:
        tr = train_time(s, args.timesteps, args.set)
        print(
            f"\nDQN, {tr['timesteps']:,} steps (settings of {s.path.name}): learn {tr['learn_s']:.0f} s, "
            f"whole command {tr['wall_s']:.0f} s (scenarios, MPC reference, evaluations); held-out "
            f"{tr['eval']['total_s']:.2f} s / {tr['eval']['reconfigurations']} reconfigurations vs MPC "
            f"{tr['mpc']['total_s']:.2f} s / {tr['mpc']['reconfigurations']}"
        )
    if Path(args.agent).is_file():
        v = versus(Path(args.agent), args.set, [x for x in args.strategies.split(",") if x])
        a, s2 = v["agent"], v["settings"]
        print(
            f"\nShipped agent {Path(args.agent).name} ({a.algo.upper()}, {a.meta['timesteps']:,} steps, seed "
            f"{a.meta['seed']}, trained on steps {a.train_range}) on held-out steps {s2.eval}, {s2.mode} mode "
            f"({v['label']}):\n"
        )
        print("| strategy | total s | compute s | reconfigurations |\n|---|---|---|---|")
        for name, r in v["runs"].items():
            print(f"| {name} | {r.total_s:.2f} | {r.compute_s:.2f} | {r.reconfigurations} |")
        mpc = v["runs"].get("mpc")
        if mpc is not None:
            mine = v["runs"][a.algo]
            print(
                f"\n{a.algo} vs mpc: {mine.total_s - mpc.total_s:+.2f} s ({100 * (mine.total_s / mpc.total_s - 1):+.2f}%); "
                f"agent decision {v['decide_ms']:.2f} ms per step"
            )
    else:
        print(f"\nno agent at {args.agent}")


if __name__ == "__main__":
    main()

"""The `threshold` allocator against `greedy`: MPC plan quality, and how a decision's cost grows.

    .venv/bin/python benchmarks/bench_allocators.py [--only quality,frames,tasks,horizon,budget] [--big 256]

* quality: MPC's total time (compute + checkpoints) on the default experiment (both modes) and on a
  --big-task job (perfect knowledge, 400 steps), greedy against threshold, and the default
  experiment's MPC with the exact allocator where --exact is given (slow: minutes).
* frames: the weighted frame time of every MPC window (horizon 10) at every 5th step of the default
  experiment, threshold against greedy.
* tasks / horizon / budget: median MPC decision (wall and CPU of the decision alone) with the threshold
  allocator for n = 8..10,000 tasks (horizon 10), h = 5, 10, 20 (1,024 tasks), and budgets of
  500..1,500m per task (1,024 tasks; 5..25 CPU steps above the minimum per task).

Jobs larger than eight tasks are copies of the eight default tasks over shifted windows of their test
series (benchmarks/bench_simulate.py `big_context`). Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_simulate import big_context  # noqa: E402

from bsp_planner.allocation import make_allocator  # noqa: E402
from bsp_planner.inputs.experiment import PlannerSettings, load_experiment  # noqa: E402
from bsp_planner.planners.base import make_planner  # noqa: E402
from bsp_planner.simulate.runs import run_strategy  # noqa: E402
from bsp_planner.simulate.scenario import build_scenario  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402


def timed_mpc(ctx, actual, horizon: int):
    """Run MPC with a horizon of `horizon` steps; returns (result, wall ms per decision, CPU ms per decision)."""
    planner = make_planner("mpc", PlannerSettings(horizon=horizon))
    cpu_ms = []
    decide = planner.decide

    def timed(t, current):
        c0 = time.process_time()
        d = decide(t, current)
        cpu_ms.append((time.process_time() - c0) * 1e3)
        return d

    planner.decide = timed
    r = simulate(planner, ctx, actual)
    return r, r.decision_ms, np.array(cpu_ms)


def quality(big: int, exact: bool) -> None:
    print(
        "| experiment | mode | greedy total s | threshold total s | threshold vs greedy |"
        + (" exact total s |" if exact else "")
    )
    print("|---|---|---|---|---|" + ("---|" if exact else ""))
    allocators = ["greedy", "threshold"] + (["exact"] if exact else [])
    for mode in ("perfect", "forecast"):
        totals = {}
        for a in allocators:
            exp = load_experiment(
                ROOT / "bsp_planner" / "data" / "experiments" / "default.toml",
                ["strategies=mpc", f"modes={mode}", f"planner.allocator={a}"],
            )
            totals[a] = run_strategy(build_scenario(exp), "mpc", mode).total_s
        gap = 100 * (totals["threshold"] / totals["greedy"] - 1)
        print(
            f"| default (8 tasks x 400 steps) | {mode} | {totals['greedy']:.3f} | {totals['threshold']:.3f} | {gap:+.3f}% |"
            + (f" {totals['exact']:.3f} |" if exact else ""),
            flush=True,
        )
    if big:
        totals = {}
        for a in ("greedy", "threshold"):
            ctx, actual = big_context(big, 400, 10, allocator=make_allocator(a))
            totals[a] = simulate(make_planner("mpc"), ctx, actual).total_s
        gap = 100 * (totals["threshold"] / totals["greedy"] - 1)
        print(
            f"| {big} tasks x 400 steps | perfect | {totals['greedy']:.3f} | {totals['threshold']:.3f} | {gap:+.3f}% |"
            + (" |" if exact else ""),
            flush=True,
        )


def frames(every: int = 5) -> None:
    """Weighted frame time, threshold / greedy, over MPC's 55 windows at every `every`-th step."""
    from bsp_planner.allocation.base import discount_weights, frame_time
    from bsp_planner.allocation.greedy import GreedyAllocator
    from bsp_planner.allocation.threshold import ThresholdAllocator
    from bsp_planner.planners.mpc import horizon_frames

    print("| mode | frames | threshold / greedy: mean | max | min | share of frames worse |")
    print("|---|---|---|---|---|---|")
    h = 10
    starts, lengths = horizon_frames(h)
    kk = np.arange(h)
    inside = (kk >= starts[:, None]) & (kk < (starts + lengths)[:, None])
    w = np.where(inside, discount_weights(h, 0.95)[np.clip(kk - starts[:, None], 0, h - 1)], 0.0)
    for mode in ("perfect", "forecast"):
        exp = load_experiment(
            ROOT / "bsp_planner" / "data" / "experiments" / "default.toml", ["strategies=mpc", f"modes={mode}"]
        )
        ctx = build_scenario(exp).contexts[mode]
        ratios = []
        for t in range(0, exp.steps - h + 1, every):
            d = np.broadcast_to(
                ctx.configs.predicted[t, :, :, :h], (starts.size,) + ctx.configs.predicted.shape[1:3] + (h,)
            )
            g = frame_time(d, GreedyAllocator().allocate_batch(d, w, ctx.max_level, ctx.budget_steps), w)
            th = frame_time(d, ThresholdAllocator().allocate_batch(d, w, ctx.max_level, ctx.budget_steps), w)
            ratios.append(th / g)
        r = np.concatenate(ratios)
        print(
            f"| {mode} | {r.size} | {r.mean():.4f} | {r.max():.4f} | {r.min():.4f} | {100 * (r > 1 + 1e-12).mean():.1f}% |",
            flush=True,
        )


def growth(cases, steps: int) -> None:
    print(
        "| tasks | horizon | budget per task | budget steps | median decision ms (wall) | median CPU ms | p90 CPU ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, h, per_task in cases:
        ctx, actual = big_context(
            n, steps, h, allocator=make_allocator("threshold"), budget_per_task_millicores=per_task
        )
        _, wall, cpu = timed_mpc(ctx, actual, h)
        # The last h-1 decisions see shorter horizons: only full ones count.
        wall, cpu = wall[: steps - h + 1], cpu[: steps - h + 1]
        print(
            f"| {n} | {h} | {per_task:g}m | {ctx.budget_steps} | {np.median(wall):.1f} | {np.median(cpu):.1f} | "
            f"{np.percentile(cpu, 90):.1f} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="quality,frames,tasks,horizon,budget")
    ap.add_argument("--big", type=int, default=256, help="tasks of the larger quality experiment (0: skip)")
    ap.add_argument("--exact", action="store_true", help="also MPC with the exact allocator on the default experiment")
    ap.add_argument("--tasks", default="8,64,256,1024,4096,10000")
    args = ap.parse_args()
    only = args.only.split(",")
    print(
        f"- date: {time.strftime('%Y-%m-%d %H:%M')} UTC; machine: {platform.node()}, {os.cpu_count()} cores; "
        f"load average at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    if "quality" in only:
        quality(args.big, args.exact)
        print()
    if "frames" in only:
        frames()
        print()
    cases = []
    if "tasks" in only:
        cases += [(int(n), 10, 1000.0) for n in args.tasks.split(",")]
    if "horizon" in only:
        cases += [(1024, h, 1000.0) for h in (5, 20)]
    if "budget" in only:
        cases += [(1024, 10, b) for b in (500.0, 1500.0)]
    if cases:
        growth(cases, steps=30)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Issue 13 in one command: the three speed goals and the threshold allocator's plan quality.

    .venv/bin/python benchmarks/bench_scale.py --quick      # goals and quality, one table (~5-10 min)
    .venv/bin/python benchmarks/bench_scale.py              # also growth in n, h and budget, and exact

Rows (Markdown, for BENCHMARKS.md "The threshold allocator at scale"), each with CPU time next to wall time and the load average
(`os.getloadavg`) when it was taken:

* MPC decision (threshold allocator, horizon 10, perfect knowledge) at 1,024 and 10,000 tasks: median
  over the decisions with a full horizon (goals 50 ms and 1 s), CPU = process time of the decision alone.
* The thesis experiment (benchmarks/bench_thesis.py: exppo, static:1..9, mpc; both modes; 8 tasks x
  400 steps; 1000..8000m step 100m, budget 24000m): the whole `bsp-planner simulate` command in a
  child process, best and median of --repeat runs (goal 4 s).
* Quality: MPC's total (compute + checkpoints) with threshold against greedy, on the default
  experiment and on a --big-task job, both modes (goal: within 0.1% of greedy, or better).

The --big job is --big copies of the eight default tasks over shifted windows of their series (as
benchmarks/bench_simulate.py `big_context`); in forecast mode each copy gets its task's shipped LSTM
forecasts shifted the same way, so every copy is planned on real forecast errors.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_allocators import growth, timed_mpc  # noqa: E402
from bench_simulate import big_context  # noqa: E402
from bench_thesis import run_once, write_experiment  # noqa: E402

from bsp_planner.allocation import make_allocator  # noqa: E402
from bsp_planner.allocation.base import CpuLevels  # noqa: E402
from bsp_planner.inputs.experiment import PlannerSettings, load_experiment  # noqa: E402
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner  # noqa: E402
from bsp_planner.simulate.runs import run_strategy  # noqa: E402
from bsp_planner.simulate.scenario import build_scenario  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402

DEFAULT = ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def big_forecast_context(n_tasks: int, steps: int, horizon: int, allocator: str, seed: int = 0):
    """big_context's job (same copies, same shifts) planned on the shipped LSTM forecasts."""
    exp = load_experiment(DEFAULT, [f"steps={steps + 600}", "modes=forecast", "strategies=floor"])
    base = build_scenario(exp)
    rng = np.random.default_rng(seed)
    idx = np.arange(n_tasks) % base.actual.shape[0]
    shift = rng.integers(0, 600, n_tasks)
    t = np.arange(steps)[:, None]
    actual = np.stack([base.actual[i, :, s : s + steps] for i, s in zip(idx, shift, strict=True)])
    predicted = base.contexts["forecast"].configs.predicted[t + shift[None, :], idx[None, :], :, :horizon]
    cpu = CpuLevels(exp.cpu.min_millicores, exp.cpu.step_millicores, exp.cpu.max_millicores, 1000.0 * n_tasks)
    max_level = np.full(n_tasks, cpu.n_levels - 1)
    budget = cpu.budget_steps(n_tasks)
    ctx = PlanningContext(
        steps=steps,
        cpu=cpu,
        max_level=max_level,
        penalty_s=exp.penalty_s,
        configs=ConfigTable(predicted, make_allocator(allocator), max_level, budget, exp.planner.discount),
        mid_durations=actual.mean(axis=2),
    )
    return ctx, actual


def mpc_total(allocator: str, mode: str, big: int, steps: int = 400) -> float:
    if not big:
        exp = load_experiment(DEFAULT, ["strategies=mpc", f"modes={mode}", f"planner.allocator={allocator}"])
        return run_strategy(build_scenario(exp), "mpc", mode).total_s
    if mode == "perfect":
        ctx, actual = big_context(big, steps, 10, allocator=make_allocator(allocator))
    else:
        ctx, actual = big_forecast_context(big, steps, 10, allocator)
    return simulate(make_planner("mpc", PlannerSettings(horizon=10)), ctx, actual).total_s


def quality(big: int, exact: bool) -> None:
    print("| experiment | mode | greedy total s | threshold total s | threshold vs greedy |" + " exact |" * exact)
    print("|---|---|---|---|---|" + "---|" * exact)
    jobs = [(0, "default (8 tasks x 400 steps)")] + ([(big, f"{big} tasks x 400 steps")] if big else [])
    for n, label in jobs:
        for mode in ("perfect", "forecast"):
            totals = {a: mpc_total(a, mode, n) for a in ["greedy", "threshold"] + ["exact"] * (exact and not n)}
            gap = 100 * (totals["threshold"] / totals["greedy"] - 1)
            ex = (f" {totals['exact']:.3f} |" if "exact" in totals else " - |") if exact else ""
            print(
                f"| {label} | {mode} | {totals['greedy']:.3f} | {totals['threshold']:.3f} | {gap:+.3f}% |{ex}",
                flush=True,
            )


def decisions(tasks: list[int], steps: int = 30) -> None:
    print("| MPC decision, threshold, h=10 | goal | median CPU ms | p90 CPU ms | median wall ms | load |")
    print("|---|---|---|---|---|---|")
    for n in tasks:
        ctx, actual = big_context(n, steps, 10, allocator=make_allocator("threshold"))
        _, wall, cpu = timed_mpc(ctx, actual, 10)
        wall, cpu = wall[: steps - 9], cpu[: steps - 9]  # full horizons only
        goal = "50 ms" if n <= 1024 else "1000 ms"
        print(
            f"| {n} tasks | {goal} | {np.median(cpu):.1f} | {np.percentile(cpu, 90):.1f} | {np.median(wall):.1f} | "
            f"{load()} |",
            flush=True,
        )


def thesis(repeat: int, allocator: str) -> None:
    import tempfile

    print(
        "| thesis experiment, whole command | goal | best CPU s | median CPU s | best wall s | median wall s | load |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        exp = write_experiment(Path(tmp), allocator)
        runs = [run_once(exp, allocator, None)[:2] for _ in range(repeat)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    print(
        f"| allocator {allocator}, {repeat} runs | 4 s | {min(cpus):.2f} | {statistics.median(cpus):.2f} | "
        f"{min(walls):.2f} | {statistics.median(walls):.2f} | {load()} |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="goals and quality only (no growth, no exact)")
    ap.add_argument("--only", default="speed,thesis,quality,growth", help="comma-separated sections")
    ap.add_argument("--big", type=int, default=256, help="tasks of the larger quality job (0: skip)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the thesis experiment")
    ap.add_argument("--thesis-allocator", default="threshold")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if args.quick:
        only -= {"growth"}
    print(
        f"- {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; {platform.node()}, {os.cpu_count()} cores, "
        f"{platform.machine()}; load average at start {load()}\n",
        flush=True,
    )
    if "speed" in only:
        decisions([1024, 10000])
        print()
    if "thesis" in only:
        thesis(args.repeat, args.thesis_allocator)
        print()
    if "quality" in only:
        quality(args.big, exact=not args.quick)
        print()
    if "growth" in only:
        cases = [(n, 10, 1000.0) for n in (8, 64, 256, 1024, 4096, 10000)]
        cases += [(1024, h, 1000.0) for h in (5, 20)] + [(1024, 10, b) for b in (500.0, 1500.0)]
        growth(cases, steps=30)
        print()
    print(f"- load average at end {load()}")


if __name__ == "__main__":
    main()

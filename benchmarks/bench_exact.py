"""The exact allocator and the optimum: speed targets and how far greedy and every strategy are from them.

    .venv/bin/python benchmarks/bench_exact.py [--only frame,mpc,optimum,quality,strategies]
        [--experiment experiments/default.toml] [--set KEY=VALUE ...] [--full]

Prints Markdown for BENCHMARKS.md ("Exact bounds"). Sections:

* frame: one exact frame of 8 tasks x 10 steps over 60 CPU levels (250m..1725m in 25m steps, budget
  8000m, discount 0.95), from the default experiment's actual durations at 60 seeded random steps; a
  fresh allocator each time (no cache): greedy, local search, level fixing and the MILP, all counted.
* mpc: MPC decisions with the exact allocator, forecast mode (every step's forecast is new), first 60
  steps; once with the allocator's cache as `simulate` runs it, once with no cache at all.
* optimum: the optimum of the experiment (8 tasks x 400 steps by default), wall and CPU time.
* quality: greedy against exact per frame length (perfect knowledge, discount 0.95), on the default
  experiment and on experiments/large.toml.
* strategies: every strategy against `optimum` in both modes, with the greedy and the exact allocator
  (dp with the exact allocator solves steps x 40 frames per mode, and MPC on the large experiment
  ~7 frame MILPs per step: only with --full).

CPU seconds are this process's (the machine is shared: wall-clock times carry other people's load).
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

from bsp_planner.allocation.base import discount_weights, frame_time  # noqa: E402
from bsp_planner.allocation.exact import ExactAllocator  # noqa: E402
from bsp_planner.allocation.greedy import GreedyAllocator  # noqa: E402
from bsp_planner.inputs.experiment import load_experiment  # noqa: E402
from bsp_planner.planners.base import make_planner  # noqa: E402
from bsp_planner.planners.optimum import optimum_plan  # noqa: E402
from bsp_planner.simulate.runs import run_strategy  # noqa: E402
from bsp_planner.simulate.scenario import build_scenario  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402

GRID_60 = ["cpu.min_millicores=250", "cpu.step_millicores=25", "cpu.max_millicores=1725", "cpu.budget_millicores=8000"]


def scenario(path: Path, overrides: list[str]):
    exp = load_experiment(path, ["strategies=floor"] + overrides)
    return exp, build_scenario(exp)


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q))


def bench_frame(path, overrides) -> None:
    exp, scen = scenario(path, ["modes=perfect"] + overrides + GRID_60)
    actual, cpu = scen.actual, scen.cpu
    n, L, m = actual.shape
    budget = cpu.budget_steps(n)
    max_level = np.full(n, L - 1)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, m - 10, 60)
    w = discount_weights(10, exp.planner.discount)
    walls, cpus, gaps, milps = [], [], [], 0
    for t in starts:
        d = actual[:, :, t : t + 10]
        alloc = ExactAllocator(threads=1)
        w0, c0 = time.perf_counter(), time.process_time()
        lv = alloc.allocate(d, w, max_level, budget)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        milps += alloc.stats.milps
        g = frame_time(d, GreedyAllocator().allocate(d, w, max_level, budget), w)
        gaps.append(100 * (g / frame_time(d, lv, w) - 1))
    walls, cpus = np.array(walls) * 1e3, np.array(cpus) * 1e3
    print(
        f"**Exact frame, {n} tasks x 10 steps x {L} CPU levels** (budget {budget} steps above the minimum, "
        f"{len(starts)} frames, {milps} needed the MILP; the rest were proved by bounds):\n"
    )
    print("| | median | p90 | max |\n|---|---|---|---|")
    print(f"| wall ms | {np.median(walls):.1f} | {pct(walls, 90):.1f} | {walls.max():.1f} |")
    print(f"| CPU ms | {np.median(cpus):.1f} | {pct(cpus, 90):.1f} | {cpus.max():.1f} |")
    print(f"\ngreedy is {np.mean(gaps):.3f}% slower on these frames on average (max {np.max(gaps):.3f}%).\n")


def bench_mpc(path, overrides, steps: int = 60) -> None:
    exp, scen = scenario(path, ["modes=forecast", "planner.allocator=exact"] + overrides)
    ctx = scen.contexts["forecast"]
    n = ctx.n_tasks
    rows = []
    for label, alloc in (("cache on (as `simulate`)", ExactAllocator()), ("no cache", ExactAllocator(cache_size=0))):
        ctx.configs.allocator = alloc
        sub = type(ctx)(**{**ctx.__dict__, "steps": steps})
        c0 = time.process_time()
        r = simulate(make_planner("mpc", exp.planner), sub, scen.actual[:, :, :steps], "forecast")
        cpu = time.process_time() - c0
        d = r.decision_ms
        rows.append((label, np.median(d), pct(d, 90), d.max(), 1e3 * cpu / steps, alloc.stats.milps / steps))
    print(
        f"**MPC with the exact allocator**, {n} tasks, horizon {exp.planner.horizon} (55 frames per step), forecast mode "
        f"({scen.forecast_label['forecast']}), first {steps} steps, decision time per step:\n"
    )
    print(
        "| allocator cache | median ms | p90 ms | max ms | CPU ms per step | MILPs per step |\n|---|---|---|---|---|---|"
    )
    for label, med, p90, mx, cpu, mil in rows:
        print(f"| {label} | {med:.0f} | {p90:.0f} | {mx:.0f} | {cpu:.0f} | {mil:.1f} |")
    print()


def bench_optimum(path, overrides) -> None:
    exp, scen = scenario(path, ["modes=perfect"] + overrides)
    ctx = scen.contexts["perfect"]
    max_level = np.maximum(ctx.max_level, ctx.exppo_max_level)
    w0, c0 = time.perf_counter(), time.process_time()
    plan = optimum_plan(scen.actual, max_level, ctx.budget_steps, ctx.penalty_s, exp.planner.optimum_max_segment)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    st = plan.stats
    n, L, m = scen.actual.shape
    print(
        f"**optimum**, {exp.name}: {n} tasks x {m} steps x {L} levels, penalty {ctx.penalty_s:g} s, cap "
        f"{plan.max_segment}: **{wall:.1f} s wall, {cpu:.1f} s CPU**; value {plan.value:.2f} s, "
        f"{len(plan.segments)} segments, certified optimal over all plans: {plan.certified}. "
        f"{st['milps']} segment MILPs ({st['cutoff_proofs']} ended by their cutoff), "
        f"{st['bound_proofs']} segments decided by meeting bounds, {st['waited']} waits; at most "
        f"{st['max_live']} live starts, the longest-lived {st['longest_live']} steps; pool {st['pool']} configurations.\n"
    )


def bench_quality(path, overrides, every: int = 5) -> None:
    exp, scen = scenario(path, ["modes=perfect"] + overrides)
    actual, ctx = scen.actual, scen.contexts["perfect"]
    n, L, m = actual.shape
    greedy, exact = GreedyAllocator(), ExactAllocator()
    print(
        f"**Greedy vs exact configurations**, {exp.name} ({n} tasks x {m} steps x {L} levels, budget "
        f"{ctx.budget_steps} steps), perfect knowledge, discount {exp.planner.discount}, frames at every "
        f"{every}th step: how much longer greedy's frame is than the exact one\n"
    )
    print(
        "| frame length | frames | mean % | p90 % | max % | greedy optimal | exact s per frame (CPU) |\n"
        "|---|---|---|---|---|---|---|"
    )
    for j in (1, 2, 3, 5, 10, 20, 40):
        ts = np.arange(0, m - j + 1, every)
        d = np.stack([actual[:, :, t : t + j] for t in ts])
        w = np.tile(discount_weights(j, exp.planner.discount), (len(ts), 1))
        g = greedy.allocate_batch(d, w, ctx.max_level, ctx.budget_steps)
        c0 = time.process_time()
        e = exact.allocate_batch(d, w, ctx.max_level, ctx.budget_steps)
        cpu = (time.process_time() - c0) / len(ts)
        gv = np.array([frame_time(d[b], g[b], w[b]) for b in range(len(ts))])
        ev = np.array([frame_time(d[b], e[b], w[b]) for b in range(len(ts))])
        gap = 100 * (gv / ev - 1)
        print(
            f"| {j} | {len(ts)} | {gap.mean():.3f} | {pct(gap, 90):.3f} | {gap.max():.3f} | "
            f"{np.mean(gap < 1e-7) * 100:.0f}% | {cpu:.3f} |"
        )
    print()


def bench_strategies(path, overrides, full: bool, exact_too: tuple[str, ...]) -> None:
    strategies = ["exppo", "static:1", "static:3", "static:5", "static:9", "dp", "mpc", "floor", "optimum"]
    exp, scen = scenario(path, overrides)
    results = {}
    timing = {}
    for alloc in ("greedy", "exact"):
        for mode in exp.modes:
            ctx = scen.contexts[mode]
            ctx.configs = type(ctx.configs)(
                ctx.configs.predicted,
                ExactAllocator() if alloc == "exact" else GreedyAllocator(),
                ctx.max_level,
                ctx.budget_steps,
                ctx.discount,
            )
            for s in strategies:
                if alloc == "exact" and (s in ("floor", "optimum") or (s not in exact_too and not full)):
                    continue
                w0 = time.perf_counter()
                results[(alloc, mode, s)] = run_strategy(scen, s, mode)
                timing[(alloc, mode, s)] = time.perf_counter() - w0
    n, L, m = scen.actual.shape
    print(
        f"**Strategies against the optimum**, {exp.name} ({n} tasks x {m} steps x {L} levels, penalty "
        f"{exp.penalty_s:g} s): total seconds and % above `optimum` (greedy | exact allocator)\n"
    )
    print("| strategy | " + " | ".join(f"{md} greedy | {md} exact" for md in exp.modes) + " |")
    print("|---|" + "---|---|" * len(exp.modes))
    for s in strategies:
        cells = []
        for mode in exp.modes:
            opt = results[("greedy", mode, "optimum")].total_s
            for alloc in ("greedy", "exact"):
                r = results.get((alloc, mode, s))
                cells.append("" if r is None else f"{r.total_s:.1f} ({100 * (r.total_s / opt - 1):+.2f}%)")
        print(f"| {s} | " + " | ".join(cells) + " |")
    slow = [(k, v) for k, v in timing.items() if v > 5]
    if slow:
        print(
            "\nslowest runs: "
            + ", ".join(f"{a}/{md}/{s} {v:.0f} s" for (a, md, s), v in sorted(slow, key=lambda x: -x[1])[:6])
        )
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="frame,mpc,optimum,quality,strategies")
    ap.add_argument("--experiment", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"))
    ap.add_argument("--large", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "large.toml"))
    ap.add_argument("--set", action="append", default=[], help="override, e.g. profile=/tmp/synth/profile.csv")
    ap.add_argument("--full", action="store_true", help="also dp with the exact allocator (slow)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    print(
        f"- date: {time.strftime('%Y-%m-%d')}; machine: {platform.node()}, {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}; load average at start {os.getloadavg()[0]:.2f}\n"
    )
    t0 = time.perf_counter()
    default, large = Path(args.experiment), Path(args.large)
    if "frame" in only:
        bench_frame(default, args.set)
    if "mpc" in only:
        bench_mpc(default, args.set)
    if "optimum" in only:
        bench_optimum(default, args.set)
    if "quality" in only:
        bench_quality(default, args.set)
        bench_quality(large, args.set, every=10)
    if "strategies" in only:
        bench_strategies(default, args.set, args.full, ("exppo", "static:1", "static:3", "static:5", "static:9", "mpc"))
        bench_strategies(large, args.set, False, ("exppo", "static:1", "static:3", "static:5", "static:9"))
    print(f"load average at end {os.getloadavg()[0]:.2f}; {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()

"""The particles application under each planner, simulated from its recorded workloads (issue 15 goal,
offline part): online mpc vs exppo vs an even split of the same budget, 8 ranks.

    python benchmarks/bench_apps_particles.py [--ranks 8] [--steps 30]

`bsp-planner simulate` needs a workload series per task; the particles job has none (its workloads are
observed as it runs), so this builds the planning context directly from the shipped trace
(`traces/particles-N/`, recorded by `python -m bsp_planner.apps.particles.trace`) and the shipped profile
(`profiles/particles-N/`), with the experiment's CPU settings, penalty and planner settings. The
planners see persistence forecasts (the workload observed at step t-1, repeated over the horizon: what
the live `--online` run with forecaster `persistence` sees) or perfect knowledge; the simulated tasks
take the profile's duration at the true workload. The even split is every rank at budget/N (rounded
down to the CPU step) for the whole run. Prints one row per strategy and mode.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from bsp_planner.allocation import make_allocator
from bsp_planner.allocation.base import CpuLevels
from bsp_planner.forecasting.files import read_trace
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.profiles import load_profile
from bsp_planner.inputs.shipped import data_dir
from bsp_planner.model.performance import PerformanceModel
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner
from bsp_planner.simulate.simulation import simulate


def contexts(ranks: int, steps: int):
    data = data_dir()
    exp = load_experiment(data / "experiments" / f"particles-{ranks}.toml")
    names = [f"p{r}" for r in range(ranks)]
    profile = load_profile(data / "profiles" / f"particles-{ranks}" / "profile.csv")
    dm_full = PerformanceModel(profile, names, exp.interpolation, exp.out_of_grid)
    c = exp.cpu
    cpu = CpuLevels(c.min_millicores, c.step_millicores, c.max_millicores, c.budget_millicores)
    dm = dm_full.at_levels(cpu.millicores)
    w = read_trace(data / "traces" / f"particles-{ranks}", names, steps + 1)  # (n, steps+1)
    actual_w = w[:, :steps]
    actual = dm.durations(actual_w)  # (n, L, steps)
    h = exp.forecast.horizon
    max_level = np.full(ranks, cpu.level_of(c.max_millicores))
    budget_steps = cpu.budget_steps(ranks)
    p = exp.planner
    mid = np.full((ranks,), sum(exp.workload_range) / 2)

    def ctx(predicted):
        return PlanningContext(
            steps=steps,
            cpu=cpu,
            max_level=max_level,
            penalty_s=exp.penalty_s,
            configs=ConfigTable(predicted, make_allocator(p.allocator), max_level, budget_steps, p.discount),
            discount=p.discount,
            mid_durations=dm.durations(mid[:, None])[:, :, 0],
            exppo_max_level=max_level,
        )

    # perfect knowledge: the true durations of steps t..t+h-1
    padded = np.concatenate([actual, np.repeat(actual[:, :, -1:], h - 1, axis=2)], axis=2)
    perfect = sliding_window_view(padded, h, axis=2).transpose(2, 0, 1, 3)
    # persistence: before step t the last observed workload (step t-1; the initial one at step 0)
    last = np.concatenate([actual_w[:, :1], actual_w[:, :-1]], axis=1)  # (n, steps)
    fc = np.repeat(last[:, :, None], h, axis=2)  # (n, steps, h)
    persistence = dm.durations(fc).transpose(2, 0, 1, 3)  # (steps, n, L, h)
    return exp, cpu, actual, actual_w, {"perfect": ctx(perfect), "persistence": ctx(persistence)}


def even_split_s(cpu: CpuLevels, actual: np.ndarray, ranks: int, budget: float) -> tuple[float, float]:
    share = cpu.millicores[cpu.millicores <= budget / ranks + 1e-9].max()
    level = int(np.nonzero(cpu.millicores == share)[0][0])
    return float(actual[:, level, :].max(axis=0).sum()), float(share)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args(argv)
    exp, cpu, actual, actual_w, ctxs = contexts(args.ranks, args.steps)
    even, share = even_split_s(cpu, actual, args.ranks, exp.cpu.budget_millicores)
    print(
        f"particles-{args.ranks}: {args.steps} steps, budget {exp.cpu.budget_millicores:g}m, "
        f"penalty {exp.penalty_s:g} s, CPU {exp.cpu.min_millicores:g}-{exp.cpu.max_millicores:g}m"
    )
    print(f"even split ({share:g}m each): {even:.2f} s")
    print(f"{'strategy':<10} {'forecast':<12} {'total_s':>8} {'vs even':>8} {'reconf':>6} {'decide_ms':>9}")
    for mode, ctx in ctxs.items():
        for strategy in ("mpc", "exppo", "static:4"):
            t0 = time.perf_counter()
            res = simulate(make_planner(strategy, exp.planner), ctx, actual, "forecast", actual_w)
            _ = time.perf_counter() - t0
            print(
                f"{strategy:<10} {mode:<12} {res.total_s:>8.2f} {res.total_s / even:>8.2f} {res.checkpoints:>6} "
                f"{float(np.median(res.decision_ms)):>9.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of the offline core: the default experiment, MPC decisions, and how cost grows.

    .venv/bin/python benchmarks/bench_simulate.py [--quick] [--tasks 8,32,128,256] [--reference]

Prints Markdown for BENCHMARKS.md. Uses the shipped profile and job; larger jobs are made by giving
copies of the eight tasks workloads from other (shifted) parts of their series. Times are wall clock
and CPU (user + system of this process or the child): on a loaded machine the CPU time is the steadier
number. --reference runs everything with the original greedy allocator (the straightforward version in
tests/test_greedy_equivalence.py), for before/after comparisons under the same conditions.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.allocation.base import CpuLevels  # noqa: E402
from bsp_planner.allocation.greedy import GreedyAllocator  # noqa: E402
from bsp_planner.inputs.experiment import PlannerSettings, load_experiment  # noqa: E402
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner  # noqa: E402
from bsp_planner.simulate.scenario import build_scenario  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402

REFERENCE = False


def use_reference_allocator() -> None:
    """Swap the greedy allocator for the original implementation (kept in the equivalence test)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_greedy_equivalence import reference_allocate

    GreedyAllocator.allocate_batch = lambda self, d, w, m, b: reference_allocate(d, w, m, b)


def _child_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def default_experiment_wall() -> tuple[float, float]:
    """(wall s, CPU s) of the whole `bsp-planner simulate` command."""
    cmd = [str(ROOT / ".venv" / "bin" / "bsp-planner"), "simulate", "-q", "--out", "/tmp/bench-simulate-out"]
    if REFERENCE:
        cmd = [
            sys.executable,
            "-c",
            "import sys; sys.argv = ['bsp-planner'] + sys.argv[1:]; "
            f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_simulate as b; "
            "b.use_reference_allocator(); from bsp_planner.cli import main; main()",
            *cmd[1:],
        ]
    t0, c0 = time.perf_counter(), _child_cpu()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, _child_cpu() - c0


def big_context(
    n_tasks: int, steps: int, horizon: int, seed: int = 0, allocator=None, budget_per_task_millicores: float = 1000.0
):
    """n_tasks copies of the eight default tasks over shifted windows of their test series."""
    exp = load_experiment(
        ROOT / "bsp_planner" / "data" / "experiments" / "default.toml",
        [f"steps={steps + 600}", "modes=perfect", "strategies=floor"],
    )
    scen = build_scenario(exp)
    base = scen.actual  # (8, L, steps+600)
    rng = np.random.default_rng(seed)
    idx = np.arange(n_tasks) % base.shape[0]
    shift = rng.integers(0, 600, n_tasks)
    actual = np.stack([base[i, :, s : s + steps] for i, s in zip(idx, shift, strict=True)])
    cpu = CpuLevels(
        exp.cpu.min_millicores, exp.cpu.step_millicores, exp.cpu.max_millicores, budget_per_task_millicores * n_tasks
    )
    max_level = np.full(n_tasks, cpu.n_levels - 1)
    padded = np.concatenate([actual, np.repeat(actual[:, :, -1:], horizon - 1, axis=2)], axis=2)
    predicted = sliding_window_view(padded, horizon, axis=2).transpose(2, 0, 1, 3)
    ctx = PlanningContext(
        steps=steps,
        cpu=cpu,
        max_level=max_level,
        penalty_s=exp.penalty_s,
        configs=ConfigTable(predicted, allocator or GreedyAllocator(), max_level, cpu.budget_steps(n_tasks), 0.95),
        mid_durations=actual.mean(axis=2),
    )
    return ctx, actual


def mpc_run(n_tasks: int, steps: int, horizon: int):
    """(wall s, CPU s, median decision ms) of an MPC simulation."""
    ctx, actual = big_context(n_tasks, steps, horizon)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(make_planner("mpc", PlannerSettings(horizon=horizon)), ctx, actual)
    return time.perf_counter() - t0, time.process_time() - c0, float(np.median(r.decision_ms))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the 256-task run")
    ap.add_argument("--tasks", help="only MPC runs of 400 steps, horizon 10, for these task counts (e.g. 8,32,256)")
    ap.add_argument("--no-default", action="store_true", help="skip the default experiment")
    ap.add_argument("--reference", action="store_true", help="time the original greedy allocator instead")
    args = ap.parse_args()
    if args.reference:
        global REFERENCE
        REFERENCE = True
        use_reference_allocator()
    print(
        f"- date: {time.strftime('%Y-%m-%d')}; machine: {platform.node()}, {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}; load average at start {os.getloadavg()[0]:.2f}"
        + ("; ORIGINAL greedy allocator" if args.reference else ""),
        flush=True,
    )
    if not args.no_default:
        runs = [default_experiment_wall() for _ in range(3)]
        print(
            f"- default experiment (`bsp-planner simulate`, all strategies, both modes, 8 tasks x 400 steps), "
            f"whole command incl. start-up: median {statistics.median(r[0] for r in runs):.2f} s wall, "
            f"{statistics.median(r[1] for r in runs):.2f} s CPU of 3 runs",
            flush=True,
        )
    if args.tasks:
        cases = [(int(n), 400, 10) for n in args.tasks.split(",")]
    else:
        _, _, med = mpc_run(8, 400, 10)
        print(f"- MPC decision, 8 tasks, horizon 10 (its own 55 frames per step, uncached): median {med:.2f} ms")
        cases = [(8, 400, 10), (32, 400, 10), (128, 400, 10), (8, 400, 5), (8, 400, 20), (8, 200, 10)]
        if not args.quick:
            cases.append((256, 400, 10))
    print()
    print("| tasks | steps | horizon | MPC simulation s (wall) | CPU s | median decision ms |")
    print("|---|---|---|---|---|---|")
    for n, m, h in cases:
        wall, cpu, med = mpc_run(n, m, h)
        print(f"| {n} | {m} | {h} | {wall:.2f} | {cpu:.2f} | {med:.2f} |", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""The bounds stay cheap: the default `bsp-planner simulate`, its `optimum` row, and MPC on nodes.

    .venv/bin/python benchmarks/bench_speed.py                  # all three parts
    .venv/bin/python benchmarks/bench_speed.py --part optimum   # one part: simulate | strategies | optimum | mpc

* simulate: the whole default command (`bsp-planner simulate -q`, every run of the
  default experiment, shipped defaults; the row names how many runs the command reported) in a
  child process, wall and CPU (user + system of the child). Goal: within 20 s on the 2-core class.
* strategies: the CPU time of every (mode, strategy) run of that experiment in this process, heaviest
  first (where the time goes; `optimum`'s plan is made once and shared by both modes, as in the command).
* optimum: the `optimum` row alone, once per mode with the plan cache emptied (each mode paying for its
  own plan), with its MILP count. Goal: within 10 s a mode.
* mpc: MPC's decision time at 1,024 tasks on 64 nodes (`bench_nodes.decisions`). Goal: under 100 ms.

The machine is shared: every row gives CPU time (the steadier number) and wall time, with the 1-minute
load average when it was taken.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _child_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def bench_simulate() -> None:
    """The default command, as a user runs it (a fresh process: imports and outputs included)."""
    exe = Path(sys.executable).with_name("bsp-planner")
    with tempfile.TemporaryDirectory() as tmp:
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), _child_cpu()
        done = subprocess.run([str(exe), "simulate", "-q"], cwd=tmp, check=True, stdout=subprocess.PIPE, text=True)
        wall, cpu = time.perf_counter() - t0, _child_cpu() - c0
    # the command's own count ("N runs in S s"), so the row follows the experiment as it grows
    counted = re.search(r"(\d+)\s+runs\s+in\s", done.stdout)
    runs = f"{counted.group(1)} runs" if counted else "runs not reported"
    print(f"| default simulate ({runs}) | goal | wall s | CPU s | load before/after |")
    print("|---|---|---|---|---|")
    print(
        f"| bsp-planner simulate | 20 s | {wall:.1f} | {cpu:.1f} | {load0:.1f}/{os.getloadavg()[0]:.1f} |", flush=True
    )


def _scenario():
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.shipped import default_experiment
    from bsp_planner.simulate.scenario import build_scenario

    return build_scenario(load_experiment(default_experiment()))


def bench_strategies() -> None:
    """CPU seconds of each run of the default experiment, in the command's order (so `optimum`'s
    plan is paid by its first mode only, as in the command)."""
    from bsp_planner.simulate.runs import run_strategy

    scen = _scenario()
    exp = scen.experiment
    rows = []
    for mode in exp.modes:
        for s in exp.strategies:
            t0, c0 = time.perf_counter(), time.process_time()
            run_strategy(scen, s, mode)
            rows.append((time.process_time() - c0, time.perf_counter() - t0, mode, s))
    print("| strategy | mode | CPU s | wall s |")
    print("|---|---|---|---|")
    for cpu, wall, mode, s in sorted(rows, reverse=True):
        print(f"| {s} | {mode} | {cpu:.2f} | {wall:.2f} |")
    print(f"| all runs | | {sum(r[0] for r in rows):.1f} | {sum(r[1] for r in rows):.1f} |", flush=True)


def bench_optimum() -> None:
    from bsp_planner.planners import optimum
    from bsp_planner.simulate.runs import run_strategy

    scen = _scenario()
    print(
        "| optimum row | goal | CPU s | wall s | segment solves (LP, then MILP if needed) | solver s | total_s | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mode in scen.experiment.modes:
        optimum._PLANS.clear()  # each mode pays for its own plan
        t0, c0 = time.perf_counter(), time.process_time()
        r = run_strategy(scen, "optimum", mode)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        n = r.notes
        print(
            f"| {mode} | 10 s | {cpu:.2f} | {wall:.2f} | {n.get('milps')} | {n.get('milp_seconds')} | "
            f"{r.total_s:.3f} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )


def bench_mpc(tasks: int, nodes: int) -> None:
    from bench_nodes import decisions

    row = decisions(tasks, nodes, 1.1)
    print("| MPC decision | goal | median CPU ms | p90 CPU ms | median wall ms | load |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {tasks} tasks on {nodes} nodes | 100 ms | {row['median_cpu_ms']:.1f} | {row['p90_cpu_ms']:.1f} | "
        f"{row['median_wall_ms']:.1f} | {row['load']:.1f} |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["all", "simulate", "strategies", "optimum", "mpc"], default="all")
    ap.add_argument("--tasks", type=int, default=1024)
    ap.add_argument("--nodes", type=int, default=64)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs\n")
    if args.part in ("all", "simulate"):
        bench_simulate()
        print()
    if args.part == "strategies":
        bench_strategies()
        print()
    if args.part in ("all", "optimum"):
        bench_optimum()
        print()
    if args.part in ("all", "mpc"):
        bench_mpc(args.tasks, args.nodes)


if __name__ == "__main__":
    main()

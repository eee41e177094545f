"""A cluster is nodes: MPC's decision time at scale on nodes, and the shipped node experiments' figures.

    .venv/bin/python benchmarks/bench_nodes.py                 # decisions at 1,024 tasks on 64 nodes
    .venv/bin/python benchmarks/bench_nodes.py --tasks 256,1024 --nodes 16,64

Decision rows: `bench_simulate.big_context`'s job (n copies of the default tasks over shifted windows
of their series, 1000m a task, perfect knowledge, horizon 10) on n/16 nodes of 16 tasks each, every node
holding 16 x 1000m x `--node-share` (default 1.1: a node 10% above its tasks' share of the budget, so
nodes bind where several of their tasks peak together); MPC with the node-aware threshold allocator.
Median and p90 of the CPU (process) time of the decisions with a full horizon, and wall time, with the
load average. Goal: under 100 ms at 1,024 tasks on 64 nodes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_simulate import big_context  # noqa: E402

from bsp_planner.allocation.nodes import NodeConstrained  # noqa: E402
from bsp_planner.inputs.experiment import PlannerSettings  # noqa: E402
from bsp_planner.model.cluster import Cluster  # noqa: E402
from bsp_planner.planners.base import make_planner  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402


def decisions(n_tasks: int, n_nodes: int, share: float, steps: int = 30, horizon: int = 10) -> dict:
    ctx, actual = big_context(n_tasks, steps, horizon)
    per_node = n_tasks // n_nodes
    cluster = Cluster(
        tuple(f"n{j}" for j in range(n_nodes)),
        np.full(n_nodes, per_node * 1000.0 * share),
        np.repeat(np.arange(n_nodes), per_node),
        np.ones(n_tasks, dtype=bool),
        "given",
    )
    limits = cluster.limits(ctx.cpu)
    ctx.configs.allocator = NodeConstrained("threshold", limits)
    ctx.nodes = limits
    planner = make_planner("mpc", PlannerSettings(horizon=horizon))
    cpu_ms: list[float] = []
    decide = planner.decide

    def timed(t, current):
        c0 = time.process_time()
        d = decide(t, current)
        cpu_ms.append((time.process_time() - c0) * 1e3)
        return d

    planner.decide = timed  # type: ignore[method-assign]
    r = simulate(planner, ctx, actual)
    full = slice(0, steps - horizon + 1)
    assert np.all(limits.fits(r.levels)), "a decision did not fit the nodes"
    cpu = np.array(cpu_ms)[full]
    wall = r.decision_ms[full]
    return {
        "tasks": n_tasks,
        "nodes": n_nodes,
        "median_cpu_ms": float(np.median(cpu)),
        "p90_cpu_ms": float(np.percentile(cpu, 90)),
        "median_wall_ms": float(np.median(wall)),
        "load": os.getloadavg()[0],
        "peak_node_pct": float(100 * (limits.usage(r.levels) / np.maximum(limits.steps, 1)).max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="1024")
    ap.add_argument("--nodes", default="64")
    ap.add_argument("--node-share", type=float, default=1.1)
    args = ap.parse_args()
    print("| tasks | nodes | goal | median CPU ms | p90 CPU ms | median wall ms | load |")
    print("|---|---|---|---|---|---|---|")
    for n, m in zip(map(int, args.tasks.split(",")), map(int, args.nodes.split(",")), strict=True):
        row = decisions(n, m, args.node_share)
        print(
            f"| {n} | {m} | 100 ms | {row['median_cpu_ms']:.1f} | {row['p90_cpu_ms']:.1f} | "
            f"{row['median_wall_ms']:.1f} | {row['load']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Co-location interference on the tight cluster: interference-aware placement against interference-blind.

    .venv/bin/python benchmarks/bench_interference.py
    .venv/bin/python benchmarks/bench_interference.py --steps 400 --strategies mpc,static:3,optimum --modes perfect,forecast

The shipped `nodes-tight` experiment (3 nodes x 4 CPU, the default job's 8 tasks, 10-CPU budget, placement
chosen) with the shipped pair profile of the default job's tasks (`profiles/local-2core/pairs.csv`,
measured on this machine class by `bsp-planner profile pairs`). Both placements are simulated WITH the
interference model applied (each task's duration times the product of its co-located pairs' slowdowns):
`blind` chooses the placement balancing the nodes' predicted peaks only, `aware` also avoids the pairs that
hurt. A third row, `none`, is the same experiment without a pair profile (no interference assumed), for
scale. Prints each placement, its mean and worst slowdown, and each strategy's total per mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load, write_results  # noqa: E402

from bsp_planner.inputs.experiment import load_experiment  # noqa: E402
from bsp_planner.inputs.shipped import data_path  # noqa: E402
from bsp_planner.simulate.runs import run_strategy  # noqa: E402
from bsp_planner.simulate.scenario import build_scenario  # noqa: E402

PAIRS = "../profiles/local-2core/pairs.csv"  # relative to the shipped experiment


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--strategies", default="mpc,static:3,optimum")
    ap.add_argument("--modes", default="perfect,forecast")
    ap.add_argument("--forecasts", default="lstm", help="the experiment's forecast.source")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_interference.json")
    args = ap.parse_args()
    results: dict = {"load_before": load(), "steps": args.steps, "rows": []}
    strategies = args.strategies.split(",")
    modes = args.modes.split(",")
    print(f"nodes-tight, {args.steps} steps, forecasts {args.forecasts}; load {results['load_before']}")
    print("| placement | node_of | mean slowdown | " + " | ".join(f"{m} {s}" for m in modes for s in strategies) + " |")
    print("|---|---|---|" + "---|" * (len(modes) * len(strategies)))
    for placement in ("none", "blind", "aware"):
        overrides = [
            f"steps={args.steps}",
            f"modes={','.join(modes)}",
            f"forecast.source={args.forecasts}",
        ]
        if placement != "none":
            overrides += [f"interference.pairs={PAIRS}", f"interference.placement={placement}"]
        exp = load_experiment(data_path("experiments/nodes-tight.toml"), overrides)
        t0 = time.perf_counter()
        scen = build_scenario(exp)
        assert scen.cluster is not None
        totals = {f"{m} {s}": run_strategy(scen, s, m).total_s for m in modes for s in strategies}
        factor = (
            scen.model.factor if hasattr(scen.model, "factor") else [1.0] * len(scen.task_names)  # type: ignore[attr-defined]
        )
        where = {n: scen.cluster.names[j] for n, j in zip(scen.task_names, scen.cluster.node_of, strict=True)}
        row = {
            "placement": placement,
            "node_of": where,
            "slowdown": dict(zip(scen.task_names, map(float, factor), strict=True)),
            "totals_s": totals,
            "note": scen.interference,
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        results["rows"].append(row)
        groups = "; ".join("+".join(n for n in scen.task_names if where[n] == node) for node in scen.cluster.names)
        mean = sum(row["slowdown"].values()) / len(factor)
        print(f"| {placement} | {groups} | x{mean:.2f} | " + " | ".join(f"{v:.1f}" for v in totals.values()) + " |")
    blind, aware = results["rows"][1]["totals_s"], results["rows"][2]["totals_s"]
    for k in blind:
        print(f"{k}: aware {aware[k]:.1f} s vs blind {blind[k]:.1f} s ({100 * (aware[k] / blind[k] - 1):+.1f}%)")
    write_results(results, args.out)


if __name__ == "__main__":
    main()

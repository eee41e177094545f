"""Where the forecast-mode planning gap goes (issue 12): decomposition and oracles.

    .venv/bin/python benchmarks/bench_gap_decomposition.py [--strategies mpc,mpc-risk] [--only 0,1,2,3]

For each of bench_planning_gap's four settings (penalties 0.1/0.3/1.0 s on steps 0..399, 0.3 s on
steps 400..799), forecast mode:

- the excess of each strategy over `optimum`, split into checkpoint seconds and compute seconds;
- "same timing, right allocations": the strategy's own reconfiguration steps kept, but every segment
  between them runs the greedy allocator's configuration for the segment's TRUE durations. The
  strategy's total minus this is what its allocations cost (configurations tuned to wrong
  workloads); this minus `optimum` is what its timing (when and how often it reconfigures) costs;
- the compute excess coming from steps whose lead-1 forecast was badly wrong (any task's absolute
  error above twice the pooled lead-1 RMSE);
- oracles (not strategies: they read the evaluated steps' truth):
  `mpc+next`: mpc whose forecast for the next step (lead 1) is the true workload, leads 2.. as forecast;
  `mpc+next3`: the same for leads 1..3;
  `mpc-risk+trueq`: mpc-risk whose per-task, per-lead error quantile (0.7) is taken from the errors over
  the evaluated steps themselves (the forecast's true error distribution, fixed over the run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_planning_gap import SETTINGS  # noqa: E402

from bsp_planner.planners.base import ConfigTable  # noqa: E402
from bsp_planner.planners.mpc import MpcPlanner  # noqa: E402
from bsp_planner.planners.observed import observations  # noqa: E402


def segments(levels: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of runs of one configuration; levels: (steps, tasks)."""
    change = np.nonzero(np.any(levels[1:] != levels[:-1], axis=1))[0] + 1
    bounds = [0, *change.tolist(), len(levels)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def right_allocations(ctx, actual: np.ndarray, levels: np.ndarray) -> float:
    """Compute seconds with the same segments, each configured by greedy on its true durations."""
    total = 0.0
    for s, e in segments(levels):
        d = actual[None, :, :, s:e]
        cfg = ctx.allocator.allocate_batch(d, np.ones((1, e - s)), ctx.max_level, ctx.budget_steps)[0]
        per = actual[np.arange(actual.shape[0]), cfg, s:e].max(axis=0)
        own = actual[np.arange(actual.shape[0]), levels[s], s:e].max(axis=0)
        total += min(float(per.sum()), float(own.sum()))  # greedy is a heuristic: never worse than the own
    return total


def oracle_context(ctx, workloads: np.ndarray):
    obs = observations(ctx, "oracle")
    c = ctx.configs
    predicted = obs.durations(workloads).transpose(2, 0, 1, 3)
    return replace(ctx, configs=ConfigTable(predicted, c.allocator, c.max_level, c.budget_steps, c.discount))


def run_planner(planner, ctx, scen, mode="forecast"):
    from bsp_planner.simulate.simulation import simulate

    return simulate(planner, ctx, scen.actual, mode, scen.actual_workloads)


def main() -> None:
    import warnings

    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.settings import apply_overrides
    from bsp_planner.planners.base import make_planner
    from bsp_planner.planners.risk import RiskAwareMpcPlanner
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="mpc,mpc-risk")
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_gap_decomposition.json"))
    args = ap.parse_args()
    exp0 = load_experiment(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml")
    wanted = SETTINGS if args.only is None else [SETTINGS[int(i)] for i in args.only.split(",")]
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()[0], "settings": []}
    for setting in wanted:
        exp = apply_overrides(
            exp0, [f"penalty_s={setting['penalty_s']}", f"start={setting['start']}", "modes=forecast", "steps=400"]
        )
        scen = build_scenario(exp)
        ctx = scen.contexts["forecast"]
        obs = observations(ctx, "bench")
        fc = obs.forecast_workloads  # (n, m, H)
        act = obs.actual_workloads  # (n, m)
        n, m, H = fc.shape
        opt = run_strategy(scen, "optimum", "forecast")
        rows = {"optimum": {"total_s": opt.total_s, "compute_s": opt.compute_s, "checkpoints": opt.checkpoints}}
        err1 = np.abs(act - fc[:, :, 0])  # lead-1 errors (n, m)
        rmse1 = float(np.sqrt(np.mean(err1**2)))
        bad = np.any(err1 > 2 * rmse1, axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = {s: run_strategy(scen, s, "forecast") for s in args.strategies.split(",")}
            # oracles
            truth = np.stack([np.pad(act, ((0, 0), (0, H)), mode="edge")[:, t : t + H] for t in range(m)], axis=1)
            for k, name in [(1, "mpc+next"), (3, "mpc+next3")]:
                w = fc.copy()
                w[:, :, :k] = truth[:, :, :k]
                p = make_planner("mpc", exp.planner)
                results[name] = run_planner(p, oracle_context(ctx, w), scen)
            # the true error distribution over the evaluated steps, per task and lead
            errs = truth - fc  # (n, m, H); the padded tail repeats the last step
            q = np.quantile(errs, 0.7, axis=1)  # (n, H)
            w = np.clip(fc + q[:, None, :], *obs.workload_range)
            p = RiskAwareMpcPlanner(None, None)
            p_ctx = oracle_context(ctx, w)
            results["mpc-risk+trueq"] = run_planner(MpcPlanner(None, p.params), p_ctx, scen)
        for s, r in results.items():
            right = right_allocations(ctx, scen.actual, r.levels)
            step_excess = r.step_s - opt.step_s
            rows[s] = {
                "total_s": round(r.total_s, 2),
                "vs_optimum_pct": round(100 * (r.total_s / opt.total_s - 1), 2),
                "checkpoints": r.checkpoints,
                "checkpoint_excess_s": round(r.checkpoint_s - opt.checkpoint_s, 2),
                "compute_excess_s": round(r.compute_s - opt.compute_s, 2),
                "same_timing_right_alloc_s": round(right + r.checkpoint_s, 2),
                "allocation_loss_s": round(r.total_s - right - r.checkpoint_s, 2),
                "timing_loss_s": round(right + r.checkpoint_s - opt.total_s, 2),
                "compute_excess_on_bad_steps_s": round(float(step_excess[bad].sum()), 2),
                "bad_steps": int(bad.sum()),
            }
        res = {**setting, "lead1_rmse": round(rmse1, 3), "rows": rows}
        report["settings"].append(res)
        print(json.dumps(res, indent=1), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

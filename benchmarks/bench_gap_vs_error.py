"""How much better must the forecasts be for the planning gap goal (issue 12)?

    .venv/bin/python benchmarks/bench_gap_vs_error.py [--alphas 1,0.9,0.8,0.75,0.7,0.6,0.5]
                                                      [--strategies mpc,mpc-risk] [--only 0,1,2,3]

For each of bench_planning_gap's four settings it takes the default forecasts (the shipped lstm's, or
`forecast predict`'s for steps 400..799) and shrinks their error uniformly: the forecast of every task,
origin and lead becomes truth + alpha * (forecast - truth). alpha = 1 is today's forecast, alpha = 0
perfect knowledge; the error keeps its shape (which tasks, leads and hours are hard) and only its size
changes. For every alpha it reports the mean RMSE over leads 1..20 of those forecasts on the simulated
steps and every strategy's distance above `optimum`, so the goal "best non-oracle strategy within 3% of
optimum" reads as a forecast error that would reach it. The error-aware strategies learn the shrunken
error during the run as they learn the real one. Results go to --out (JSON) after every setting; a
setting already there (with the same alphas) is skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import load  # noqa: E402
from bench_planning_gap import SETTINGS  # noqa: E402


def forecasts_and_truth(scen) -> tuple[np.ndarray, np.ndarray]:
    """(forecasts, truth), both (tasks, steps, H): the scenario's forecast matrix and what came true."""
    from bsp_planner.planners.observed import observations

    obs = observations(scen.contexts["forecast"], "bench")
    fc = obs.forecast_workloads
    n, m, h = fc.shape
    exp = scen.experiment
    series = scen.job_series.workloads(exp.start, m + h)  # targets past the last step: the series goes on
    truth = np.stack([series[:, t : t + h] for t in range(m)], axis=1)
    return fc, truth


def write_folder(folder: Path, names: list[str], fc: np.ndarray, start: int) -> None:
    """A forecast folder whose row start + t is fc[:, t] (rows before `start` are never read: the middle
    of the workload range)."""
    folder.mkdir(parents=True, exist_ok=True)
    header = ",".join(f"h{k}" for k in range(fc.shape[2]))
    for i, name in enumerate(names):
        rows = np.concatenate([np.full((start, fc.shape[2]), 30.0), fc[i]])
        np.savetxt(folder / f"{name}.csv", rows, delimiter=",", header=header, comments="", fmt="%.6f")


def run_setting(setting: dict, alphas: list[float], strategies: list[str], experiment: Path) -> dict:
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.settings import apply_overrides
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    base = [f"penalty_s={setting['penalty_s']}", f"start={setting['start']}", "modes=forecast", "steps=400"]
    exp = apply_overrides(load_experiment(experiment), base)
    scen = build_scenario(exp)
    fc, truth = forecasts_and_truth(scen)
    err = fc - truth
    optimum = run_strategy(scen, "optimum", "forecast").total_s
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for alpha in alphas:
            shrunk = truth + alpha * err
            folder = Path(tmp) / f"alpha-{alpha:g}"
            write_folder(folder, scen.task_names, shrunk, exp.start)
            s2 = build_scenario(apply_overrides(exp, [f"forecast.source={folder}"]))
            rmse = float(np.sqrt(np.mean((shrunk - truth) ** 2, axis=(0, 1))).mean())
            row: dict = {"alpha": alpha, "mean_rmse": round(rmse, 3), "strategies": {}}
            for s in strategies:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    total = run_strategy(s2, s, "forecast").total_s
                row["strategies"][s] = {
                    "total_s": round(total, 2),
                    "vs_optimum_pct": round(100 * (total / optimum - 1), 2),
                }
            best = min(row["strategies"], key=lambda k: row["strategies"][k]["total_s"])
            row["best"] = best
            row["best_vs_optimum_pct"] = row["strategies"][best]["vs_optimum_pct"]
            print(
                f"  alpha {alpha:4g}  RMSE {rmse:5.3f}  "
                + "  ".join(f"{k} {v['vs_optimum_pct']:+.2f}%" for k, v in row["strategies"].items()),
                flush=True,
            )
            rows.append(row)
    met = [r["alpha"] for r in rows if r["best_vs_optimum_pct"] <= 3.0]
    return {
        **setting,
        "optimum_s": round(optimum, 2),
        "rows": rows,
        "largest_alpha_meeting_3pct": max(met) if met else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"))
    ap.add_argument("--alphas", default="1,0.9,0.8,0.75,0.7,0.6,0.5")
    ap.add_argument("--strategies", default="mpc,mpc-risk")
    ap.add_argument("--only", default=None, help="comma-separated setting indices (0-3)")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_gap_vs_error.json"))
    ap.add_argument("--fresh", action="store_true", help="ignore settings already measured in --out")
    args = ap.parse_args()
    try:
        alphas = [float(a) for a in args.alphas.split(",") if a]
    except ValueError:
        ap.error(f"--alphas: expected comma-separated numbers, got {args.alphas!r}")
    if not alphas or any(not 0 <= a <= 2 for a in alphas):
        ap.error("--alphas: every alpha must lie in [0, 2]")
    wanted = SETTINGS if args.only is None else [SETTINGS[int(i)] for i in args.only.split(",")]
    strategies = [s for s in args.strategies.split(",") if s]
    out = Path(args.out)
    earlier = json.loads(out.read_text()) if out.is_file() and not args.fresh else {}
    done = {s["name"]: s for s in earlier.get("settings", []) if s.get("alphas") == alphas}
    report: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_before": load(),
        "settings": [done[s["name"]] for s in SETTINGS if s["name"] in done],
    }
    t0, c0 = time.perf_counter(), time.process_time()
    for setting in wanted:
        if setting["name"] in done:
            print(f"{setting['name']}: already measured (--fresh to redo)")
            continue
        print(f"{setting['name']}:", flush=True)
        done[setting["name"]] = {**run_setting(setting, alphas, strategies, Path(args.experiment)), "alphas": alphas}
        report["settings"] = [done[s["name"]] for s in SETTINGS if s["name"] in done]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["cpu_s"] = round(time.process_time() - c0, 1)
    report["load_after"] = load()
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['wall_s']} s wall, {report['cpu_s']} s CPU; load {report['load_before']} -> {report['load_after']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

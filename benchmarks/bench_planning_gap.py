"""The gap between forecast-mode plans and the perfect-knowledge optimum (issue 12's goal).

    .venv/bin/python benchmarks/bench_planning_gap.py [--forecasts lstm] [--out out/bench_planning_gap.json]

For each setting (the default experiment at penalties 0.1, 0.3 and 1.0 s on steps 0..399, and at
0.3 s on steps 400..799) it simulates every strategy in forecast mode and the `optimum` bound, and
reports each strategy's total seconds and its distance above `optimum`; the best non-oracle strategy
(neither `optimum` nor `floor`) is the figure the goal is about (within 3% of optimum). Results are
written to the JSON file after every strategy, and strategies already there are skipped (resume
after an interruption; --fresh to start over). The DQN agent was trained on steps 400..999, so on
steps 400..799 it plays in sample: its row there is not an out-of-sample figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STRATEGIES = ["static:3", "static:8", "dp", "mpc", "mpc-risk", "mpc-adaptive", "mpc-scenario", "reactive", "dqn"]
SETTINGS = [
    {"name": "default (penalty 0.3 s, steps 0..399)", "penalty_s": 0.3, "start": 0},
    {"name": "penalty 0.1 s", "penalty_s": 0.1, "start": 0},
    {"name": "penalty 1.0 s", "penalty_s": 1.0, "start": 0},
    {"name": "steps 400..799 (penalty 0.3 s)", "penalty_s": 0.3, "start": 400},
]
NON_ORACLE_EXCLUDED = {"optimum", "floor"}


def run_setting(
    setting: dict, strategies: list[str], forecasts: str | None, experiment: Path, rows: dict, save
) -> dict:
    import warnings

    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.settings import apply_overrides
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    exp = load_experiment(experiment)
    overrides = [f"penalty_s={setting['penalty_s']}", f"start={setting['start']}", "modes=forecast", "steps=400"]
    if forecasts:
        overrides.append(f"forecast.source={forecasts}")
    exp = apply_overrides(exp, overrides)
    t0 = time.perf_counter()
    scen = build_scenario(exp)
    for s in [*strategies, "optimum"]:
        if s in rows:
            continue  # measured in an earlier run
        t1 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dqn warns when the penalty differs from its training one
            r = run_strategy(scen, s, "forecast")
        rows[s] = {
            "total_s": round(r.total_s, 3),
            "compute_s": round(r.compute_s, 3),
            "checkpoints": r.checkpoints,
            "seconds": round(time.perf_counter() - t1, 2),
        }
        print(f"  {s:14s} {r.total_s:9.2f} s  ({r.checkpoints} checkpoints)", flush=True)
        save({**setting, "forecasts": scen.forecast_label["forecast"], "rows": rows})
    opt = rows["optimum"]["total_s"]
    for v in rows.values():
        v["vs_optimum_pct"] = round(100.0 * (v["total_s"] / opt - 1.0), 2)
    best = min((s for s in rows if s not in NON_ORACLE_EXCLUDED), key=lambda s: rows[s]["total_s"])
    return {
        **setting,
        "forecasts": scen.forecast_label["forecast"],
        "rows": rows,
        "best_non_oracle": best,
        "best_vs_optimum_pct": rows[best]["vs_optimum_pct"],
        "goal_met_3pct": rows[best]["vs_optimum_pct"] <= 3.0,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def markdown(report: dict) -> str:
    settings = [s for s in report["settings"] if "best_non_oracle" in s]  # complete settings only
    if not settings:
        return "(no setting complete yet)"
    names = list(dict.fromkeys(n for s in settings for n in s["rows"]))
    head = "| strategy | " + " | ".join(s["name"] for s in settings) + " |"
    lines = [head, "|---" * (len(settings) + 1) + "|"]
    for n in names:
        cells = []
        for s in settings:
            r = s["rows"].get(n)
            cells.append("-" if r is None else f"{r['total_s']:.1f} ({r['vs_optimum_pct']:+.1f}%)")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append(
        "| **best non-oracle** | "
        + " | ".join(f"{s['best_non_oracle']} {s['best_vs_optimum_pct']:+.1f}%" for s in settings)
        + " |"
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"))
    ap.add_argument("--forecasts", default=None, help="forecast source (default: the experiment's)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--only", default=None, help="comma-separated setting indices (0-3)")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_planning_gap.json"))
    ap.add_argument("--fresh", action="store_true", help="ignore results already in --out")
    args = ap.parse_args()
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.is_file() and not args.fresh else {}
    report.update(
        {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
        }
    )
    done = {s["name"]: s for s in report.get("settings", [])}
    wanted = SETTINGS if args.only is None else [SETTINGS[int(i)] for i in args.only.split(",")]
    strategies = [s for s in args.strategies.split(",") if s]

    def save(res: dict) -> None:  # after every strategy: an interrupted run resumes where it stopped
        done[res["name"]] = res
        report["settings"] = [done[s["name"]] for s in SETTINGS if s["name"] in done]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

    for setting in wanted:
        rows = dict(done.get(setting["name"], {}).get("rows", {}))
        if all(s in rows for s in [*strategies, "optimum"]):
            print(f"{setting['name']}: already measured (--fresh to redo)")
            continue
        print(f"{setting['name']}:", flush=True)
        load0 = os.getloadavg()[0]
        res = run_setting(setting, strategies, args.forecasts, Path(args.experiment), rows, save)
        res["load_before"] = round(load0, 2)
        save(res)
        print(
            f"  best non-oracle: {res['best_non_oracle']} {res['best_vs_optimum_pct']:+.2f}% above optimum", flush=True
        )
    if report.get("settings"):
        print(markdown(report))


if __name__ == "__main__":
    main()

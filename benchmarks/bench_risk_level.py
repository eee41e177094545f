"""Choose `mpc-risk`'s quantile level on a validation range that no reported setting uses (issue 12).

    .venv/bin/python benchmarks/bench_risk_level.py [--levels 0.55,0.6,0.7,0.8,0.9] [--out out/bench_risk_level.json]

The planning-gap settings (benchmarks/bench_planning_gap.py) use steps 0..399 and 400..799 of the
default experiment; this runs `mpc` and `mpc-risk:LEVEL` on steps 800..999 (the last 200 test steps
every task has) in forecast mode at penalties 0.1, 0.3 and 1.0 s, and picks the level with the
lowest total seconds summed relative to `mpc` over the three penalties. Nothing of steps 0..799 is
read. Reports CPU and wall time and the load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VALIDATION = {"start": 800, "steps": 200}
PENALTIES_S = (0.1, 0.3, 1.0)


def main() -> None:
    from bsp_planner.inputs.experiment import apply_overrides, load_experiment
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"))
    ap.add_argument("--levels", default="0.55,0.6,0.7,0.8,0.9")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_risk_level.json"))
    args = ap.parse_args()
    levels = [float(x) for x in args.levels.split(",")]
    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
    totals: dict[str, dict[str, float]] = {}
    for penalty in PENALTIES_S:
        exp = apply_overrides(
            load_experiment(args.experiment),
            [
                f"penalty_s={penalty}",
                f"start={VALIDATION['start']}",
                f"steps={VALIDATION['steps']}",
                "modes=forecast",
            ],
        )
        scen = build_scenario(exp)
        row: dict[str, float] = {}
        for s in ["mpc", *(f"mpc-risk:{lv:g}" for lv in levels)]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row[s] = round(run_strategy(scen, s, "forecast").total_s, 3)
            print(f"penalty {penalty:g} s  {s:14s} {row[s]:9.3f} s", flush=True)
        totals[f"{penalty:g}"] = row
    score = {
        f"{lv:g}": sum(totals[p][f"mpc-risk:{lv:g}"] / totals[p]["mpc"] - 1.0 for p in totals) / len(totals)
        for lv in levels
    }
    best = min(score, key=lambda k: score[k])
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "validation": VALIDATION,
        "penalties_s": list(PENALTIES_S),
        "totals_s": totals,
        "mean_relative_to_mpc": {k: round(v, 5) for k, v in score.items()},
        "chosen_level": float(best),
        "cpu_s": round(time.process_time() - cpu0, 1),
        "wall_s": round(time.perf_counter() - wall0, 1),
        "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("mean_relative_to_mpc", "chosen_level", "cpu_s", "wall_s")}, indent=2))


if __name__ == "__main__":
    main()

"""Pick `mpc-scenario`'s scenario count K on a validation range, not on the reported settings.

    .venv/bin/python benchmarks/bench_scenario_count.py

As bench_risk_level.py does for mpc-risk's level: runs `mpc`, `mpc-risk` and `mpc-scenario:K` for
K in COUNTS on steps 800..999 (the last 200 test steps, which no planning-gap setting uses) in
forecast mode at penalties 0.1, 0.3 and 1.0 s, and reports each total relative to `mpc`, averaged
over the three penalties. The K with the lowest mean is validation's choice.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COUNTS = [4, 8, 16, 32]
PENALTIES_S = [0.1, 0.3, 1.0]
VALIDATION = {"start": 800, "steps": 200}


def main() -> None:
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.settings import apply_overrides
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    exp0 = load_experiment(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}", flush=True)
    strategies = ["mpc", "mpc-risk", *[f"mpc-scenario:{k}" for k in COUNTS]]
    rel: dict[str, list[float]] = {s: [] for s in strategies}
    cpu0 = time.process_time()
    for penalty in PENALTIES_S:
        exp = apply_overrides(
            exp0,
            [
                f"penalty_s={penalty}",
                f"start={VALIDATION['start']}",
                f"steps={VALIDATION['steps']}",
                "modes=forecast",
            ],
        )
        scen = build_scenario(exp)
        row = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in strategies:
                row[s] = run_strategy(scen, s, "forecast").total_s
                print(f"penalty {penalty:g} s  {s:16s} {row[s]:9.3f} s", flush=True)
        for s in strategies:
            rel[s].append(100.0 * (row[s] / row["mpc"] - 1.0))
    for s in strategies:
        print(f"{s:16s} mean vs mpc {sum(rel[s]) / len(rel[s]):+.2f}%  ({', '.join(f'{r:+.2f}' for r in rel[s])})")
    best = min(strategies[2:], key=lambda s: sum(rel[s]))
    print(f"validation's choice: {best}; {time.process_time() - cpu0:.1f} s CPU")


if __name__ == "__main__":
    main()

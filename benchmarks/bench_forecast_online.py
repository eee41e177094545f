"""Per-step cost and one-step accuracy of `online-select`, the default forecaster for observed tasks.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_forecast_online.py [--tasks 5] [--steps 120] [--seed 1]
        [--out out/bench_forecast_online.json]

Loads shaped like a star federation's leaves (two overlapping periodic components, phases differing per
task so the busiest one moves, seeded random bursts, small noise) are fed step by step to the online
forecasts of a run with no series (`simulate/online.py:unseeded_online_forecasts`), as simulate and a
live run drive them: before every step `forecast()` for all tasks, after it `observe()`. The per-step
decision cost is the wall time of that pair (it includes the refits that fall on the step, every
`refit_every_steps`); the first step also pays statsforecast's compilation, reported apart. Accuracy:
one-step RMSE of the forecasts against persistence per task over the whole run (fallback steps included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.simulate.online import unseeded_online_forecasts  # noqa: E402


def star_leaf_loads(seed: int, steps: int, tasks: int) -> np.ndarray:
    """(tasks, steps) workloads: as tests/test_forecast_online_select.py's."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    out = np.empty((tasks, steps))
    for i in range(tasks):
        phase = 2 * np.pi * i / tasks
        periodic = 30 + 8 * np.sin(2 * np.pi * t / 16 + phase) + 5 * np.sin(2 * np.pi * t / 6 + 2 * phase)
        bursts = np.zeros(steps)
        for s in np.flatnonzero(rng.random(steps) < 0.04):
            bursts[s : s + 3] += rng.uniform(4, 10)
        out[i] = periodic + bursts + rng.normal(0, 0.5, steps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="out/bench_forecast_online.json")
    args = ap.parse_args()
    loads = star_leaf_loads(args.seed, args.steps, args.tasks)
    online = unseeded_online_forecasts("online-select", args.tasks, 20, (0.0, 60.0))
    step_s, one_step = [], []
    for t in range(args.steps):
        t0 = time.perf_counter()
        fc = online.forecast()
        online.observe(loads[:, t])
        step_s.append(time.perf_counter() - t0)
        one_step.append(fc[:, 0])
    pred = np.array(one_step).T[:, 1:]
    truth, persistence = loads[:, 1:], loads[:, :-1]
    rmse = np.sqrt(np.mean((pred - truth) ** 2, axis=1))
    rmse_p = np.sqrt(np.mean((persistence - truth) ** 2, axis=1))
    steady = np.array(step_s[1:]) * 1000
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    result = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.node()}, {cpu}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_1min": os.getloadavg()[0],
        "tasks": args.tasks,
        "steps": args.steps,
        "first_step_ms": step_s[0] * 1000,
        "step_ms": {
            "median": float(np.median(steady)),
            "p95": float(np.percentile(steady, 95)),
            "max": float(steady.max()),
            "mean": float(steady.mean()),
        },
        "rmse_ratio_to_persistence": [round(float(r), 3) for r in rmse / rmse_p],
        "chosen": [
            {c: h.forecaster.chosen.count(c) for c in sorted(set(h.forecaster.chosen))} for h in online._histories
        ],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

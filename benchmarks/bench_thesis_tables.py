"""The thesis's own Tables 6.2/6.3, reproduced from the thesis's own inputs with `compat = "thesis"`.

    .venv/bin/python benchmarks/bench_thesis_tables.py [--reference ../shared/reference/thesis] [--compat thesis|none]

The reference folder (not part of this repository, and never copied into it: it carries no license)
holds what the thesis's code read: `workload_profiling.csv` (task, workload 10..49, CPU shares
1000..8500, duration in s) and, per NAB series, `actual/<series>.csv` and `forecasts/<series>.csv`:
1000 rows of 20 columns, row t the actual (or the LSTM's forecast) workloads of steps t..t+19 in the
series' own units. This script turns them, in a temporary folder, into the files `simulate` reads:

- the profile as a profile CSV (one repeat);
- every matrix scaled per column onto [10, 50], as the thesis did; the actual workloads are column 0
  of the scaled actual matrix (a replayed trace), the forecasts the scaled forecast matrix (a
  forecast folder); the series a task names is the thesis's (its Table 4.2), only there because a
  forecast run needs one (the trace and the forecast folder replace what it would give);
- an experiment with the thesis's settings: spline, out_of_grid = "clamp", CPU 1000..8000m in 100m
  steps, a 24000m budget, exppo up to 8000m, discount 0.95, penalty 15 s, 400 steps, MPC horizon 10,
  length punishment 1.02, and `compat = "thesis"` (or none, to see what bsp-planner's own rules give).

It runs `bsp-planner simulate` once (exppo, static:1..9 and mpc, both modes), prints every total
against the published one and the difference in %, and exits 1 if any is off by more than 0.1%.
Exit 2 when the reference folder is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference" / "thesis"
TOLERANCE_PCT = 0.1
WORKLOAD_RANGE = (10.0, 50.0)
FORECAST_HORIZON = 20
# The thesis's Table 4.2: which NAB series (and which slice of it) each task replays.
TASK_SERIES = {
    "affinity": "nyc_taxi_1",
    "atomic": "nyc_taxi_2",
    "bsearch": "nyc_taxi_3",
    "cap": "nyc_taxi_4",
    "chmod": "art_daily_small_noise",
    "memcpy": "ambient_temperature_system_failure_1",
    "vecmath": "ambient_temperature_system_failure_2",
    "zero": "ambient_temperature_system_failure_3",
}
STRATEGIES = ["exppo"] + [f"static:{k}" for k in range(1, 10)] + ["mpc"]
# Tables 6.2 (perfect knowledge) and 6.3 (forecasts): total time in s.
PUBLISHED = {
    "perfect": {
        "exppo": 65126.48,
        "static:1": 47206.58,
        "static:2": 45493.69,
        "static:3": 45601.13,
        "static:4": 45851.03,
        "static:5": 46560.09,
        "static:6": 48136.89,
        "static:7": 48028.10,
        "static:8": 47958.89,
        "static:9": 50333.65,
    },
    "forecast": {
        "exppo": 65126.48,
        "static:1": 52180.28,
        "static:2": 49955.59,
        "static:3": 49875.18,
        "static:4": 52059.75,
        "static:5": 52048.58,
        "static:6": 52777.43,
        "static:7": 55909.51,
        "static:8": 57346.80,
        "static:9": 58759.98,
        "mpc": 49407.93,
    },
}


def read_matrix(path: Path) -> np.ndarray:
    """A thesis matrix file: a '# t, t+1, ...' comment line, then rows of comma-separated numbers."""
    return np.loadtxt(path, delimiter=",", comments="#", ndmin=2)


def scale_columns(matrix: np.ndarray) -> np.ndarray:
    """Each column min-max scaled onto the workload range (the thesis's scaling)."""
    lo, hi = WORKLOAD_RANGE
    cmin, cmax = matrix.min(axis=0), matrix.max(axis=0)
    return lo + (hi - lo) * (matrix - cmin) / (cmax - cmin)


def write_profile(reference: Path, out: Path) -> None:
    with (reference / "workload_profiling.csv").open() as src, out.open("w", newline="") as dst:
        rows = csv.reader(src, skipinitialspace=True)
        next(rows)  # Task Name, Workload Size, CPU Shares, Duration
        w = csv.writer(dst)
        w.writerow(["task", "workload", "cpu_millicores", "duration_s", "repeat"])
        for task, workload, cpu, duration in rows:
            w.writerow([task, workload, cpu, duration, 0])


def write_inputs(reference: Path, folder: Path, compat: str) -> Path:
    """The experiment (and the files it names) in `folder`; returns the experiment's path."""
    write_profile(reference, folder / "profile.csv")
    trace, forecasts, series = folder / "actual", folder / "forecasts", folder / "series"
    for d in (trace, forecasts, series):
        d.mkdir()
    job = ['name = "thesis-reference"', "workers = 1", ""]
    for task, name in TASK_SERIES.items():
        actual = scale_columns(read_matrix(reference / "actual" / f"{name}.csv"))
        fc = scale_columns(read_matrix(reference / "forecasts" / f"{name}.csv"))[:, :FORECAST_HORIZON]
        np.savetxt(trace / f"{task}.csv", actual[:, 0], fmt="%.9f", header="workload", comments="")
        header = ",".join(f"h{h}" for h in range(fc.shape[1]))
        np.savetxt(forecasts / f"{task}.csv", fc, fmt="%.9f", delimiter=",", header=header, comments="")
        # A series only because a forecast run wants one: its test half is the actual workloads (unused).
        values = np.concatenate([actual[:, 0], actual[:, 0]])
        stamps = np.datetime64("2020-01-01T00:00") + np.arange(values.size) * np.timedelta64(30, "m")
        with (series / f"{task}.csv").open("w") as fh:
            fh.write("timestamp,value\n")
            fh.writelines(f"{str(s).replace('T', ' ')},{v:.9f}\n" for s, v in zip(stamps, values, strict=True))
        job += [
            "[[task]]",
            f'name = "{task}"',
            f'stressor = "{task}"',
            "ops_per_unit = 1",
            f'series = {{ file = "series/{task}.csv" }}',
            "",
        ]
    (folder / "job.toml").write_text("\n".join(job))
    exp = folder / "thesis-reference.toml"
    lines = [
        'job = "job.toml"',
        'profile = "profile.csv"',
        'interpolation = "spline"',
        'out_of_grid = "clamp"',
        f"workload_range = [{WORKLOAD_RANGE[0]:g}, {WORKLOAD_RANGE[1]:g}]",
        "steps = 400",
        "penalty_s = 15.0",
        'modes = ["perfect", "forecast"]',
        f"strategies = {json.dumps(STRATEGIES)}",
        'output = "out"',
    ]
    if compat != "none":
        lines.append(f'compat = "{compat}"')
    lines += [
        "",
        "[cpu]",
        "budget_millicores = 24000",
        "min_millicores = 1000",
        "step_millicores = 100",
        "max_millicores = 8000",
        "exppo_max_millicores = 8000",
        "",
        "[planner]",
        'allocator = "greedy"',
        "discount = 0.95",
        "horizon = 10",
        "length_punishment = 1.02",
        "",
        "[forecast]",
        'source = "forecasts"',
        'actual = "actual"',
        f"horizon = {FORECAST_HORIZON}",
    ]
    exp.write_text("\n".join(lines) + "\n")
    return exp


def simulate(exp: Path) -> dict[str, dict[str, float]]:
    """Runs `bsp-planner simulate` on the experiment; returns {mode: {strategy: total_s}}."""
    cmd = [sys.executable, "-m", "bsp_planner.cli", "simulate", str(exp), "-q"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(cmd, cwd=exp.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"bsp-planner simulate failed (exit {done.returncode}):\n{done.stderr.strip()}")
    rows = json.loads((exp.parent / "out" / "comparison.json").read_text())
    totals: dict[str, dict[str, float]] = {}
    for r in rows["results"] if isinstance(rows, dict) else rows:
        totals.setdefault(r["mode"], {})[r["strategy"]] = float(r["total_s"])
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="the thesis's input folder")
    ap.add_argument("--compat", default="thesis", choices=("thesis", "none"), help="none: bsp-planner's own rules")
    args = ap.parse_args()
    if not (args.reference / "workload_profiling.csv").is_file():
        print(f"{args.reference}: no workload_profiling.csv here: pass --reference DIR (the thesis's inputs)")
        return 2
    print(
        f"- date: {time.strftime('%Y-%m-%d %H:%M')} UTC; machine: {platform.node()}, {os.cpu_count()} cores; "
        f"load average at start {os.getloadavg()[0]:.2f}; compat {args.compat}",
        flush=True,
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-thesis-tables-") as tmp:
        totals = simulate(write_inputs(args.reference, Path(tmp), args.compat))
    wall = time.perf_counter() - t0
    print("\n| mode | strategy | bsp-planner (s) | published (s) | difference |")
    print("| --- | --- | ---: | ---: | ---: |")
    worst = 0.0
    for mode, published in PUBLISHED.items():
        for strategy, want in published.items():
            got = totals[mode][strategy]
            pct = 100.0 * (got - want) / want
            worst = max(worst, abs(pct))
            print(f"| {mode} | {strategy} | {got:.2f} | {want:.2f} | {pct:+.3f}% |")
    ok = worst <= TOLERANCE_PCT
    print(
        f"\nlargest difference {worst:.3f}% ({'within' if ok else 'beyond'} {TOLERANCE_PCT}%); "
        f"{wall:.1f} s wall; load average at end {os.getloadavg()[0]:.2f}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

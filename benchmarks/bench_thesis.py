"""The whole thesis experiment on the thesis-sized CPU grid, timed end to end (issue 13).

    .venv/bin/python benchmarks/bench_thesis.py [--allocator greedy|threshold] [--repeat 3] [--jobs N]

exppo, static:1..9 and mpc, both modes (perfect knowledge and the shipped LSTM forecasts), the eight
thesis tasks x 400 steps, on CPU levels 1000m..8000m in 100m steps (71 levels) with a 24000m budget,
as in the thesis's own experiments.

The profile (the fixture this script writes to a temporary folder): the shipped
`profiles/local-2core` measurements with every CPU limit multiplied by 4 (250m..2000m becomes
1000m..8000m), durations unchanged. Model: a task doing 4x the work per workload unit on 4x the CPU
takes what the measured task took, i.e. duration(w, 4c) = measured duration(w, c); the shipped grid
(6 CPU points, 5 workloads) is then interpolated by the experiment's spline like any profile. It covers
the thesis's grid without extrapolation; nothing is read from outside this repository.

Times the `bsp-planner simulate` command in a child process (wall and CPU of the child, start-up
included) and prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "bsp_planner" / "data" / "profiles" / "local-2core" / "profile.csv"
CPU_SCALE = 4.0
STRATEGIES = ["exppo"] + [f"static:{k}" for k in range(1, 10)] + ["mpc"]


def write_scaled_profile(folder: Path) -> Path:
    """The shipped profile with CPU limits x4 (see the module docstring). Returns the CSV's path."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "profile.csv"
    with SHIPPED.open() as src, out.open("w", newline="") as dst:
        rows = csv.DictReader(src)
        w = csv.DictWriter(dst, fieldnames=rows.fieldnames)
        w.writeheader()
        for row in rows:
            row["cpu_millicores"] = f"{float(row['cpu_millicores']) * CPU_SCALE:g}"
            w.writerow(row)
    meta = json.loads(SHIPPED.with_name("profile.meta.json").read_text())
    meta["derived"] = f"profiles/local-2core with cpu_millicores x {CPU_SCALE:g} (benchmarks/bench_thesis.py)"
    meta.get("grid", {})["cpu_millicores"] = [c * CPU_SCALE for c in meta.get("grid", {}).get("cpu_millicores", [])]
    (folder / "profile.meta.json").write_text(json.dumps(meta, indent=2))
    return out


def write_experiment(folder: Path, allocator: str) -> Path:
    profile = write_scaled_profile(folder / "profile")
    default = (ROOT / "bsp_planner" / "data" / "experiments" / "default.toml").read_text()
    exp = folder / "thesis-grid.toml"
    # The default experiment's settings with the thesis's grid and budget, and absolute paths.
    text = default.replace(
        '"../jobs/thesis-8.toml"', json.dumps(str(ROOT / "bsp_planner" / "data" / "jobs" / "thesis-8.toml"))
    )
    text = text.replace('"../profiles/local-2core/profile.csv"', json.dumps(str(profile)))
    text = text.replace('output = "out/default"', f"output = {json.dumps(str(folder / 'out'))}")
    exp.write_text(text)
    return exp


def overrides(allocator: str) -> list[str]:
    sets = {
        "cpu.min_millicores": 1000,
        "cpu.step_millicores": 100,
        "cpu.max_millicores": 8000,
        "cpu.budget_millicores": 24000,
        "planner.allocator": allocator,
        # The default experiment's shipped LSTM forecasts (workloads, so independent of the profile).
        "forecast.source": ROOT / "bsp_planner" / "data" / "experiments" / "forecasts" / "default",
    }
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")] + ["--strategies", ",".join(STRATEGIES)]


def _child_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run_once(exp: Path, allocator: str, jobs: int | None) -> tuple[float, float, str]:
    cmd = [sys.executable, "-m", "bsp_planner.cli", "simulate", str(exp), "-q", *overrides(allocator)]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0, c0 = time.perf_counter(), _child_cpu()
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, _child_cpu() - c0, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", default="threshold")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="pass --jobs N to simulate")
    ap.add_argument("--show", action="store_true", help="print the comparison tables of the last run")
    args = ap.parse_args()
    print(
        f"- date: {time.strftime('%Y-%m-%d %H:%M')} UTC; machine: {platform.node()}, {os.cpu_count()} cores; "
        f"load average at start {os.getloadavg()[0]:.2f}; allocator {args.allocator}"
        + (f"; --jobs {args.jobs}" if args.jobs else ""),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-thesis-") as tmp:
        exp = write_experiment(Path(tmp), args.allocator)
        runs = [run_once(exp, args.allocator, args.jobs) for _ in range(args.repeat)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    print(
        f"- thesis experiment ({', '.join(STRATEGIES[:2])}..static:9, mpc; both modes; 8 tasks x 400 steps; "
        f"1000..8000m step 100m, budget 24000m), whole command incl. start-up: median "
        f"{statistics.median(walls):.2f} s wall (min {min(walls):.2f}), {statistics.median(cpus):.2f} s CPU "
        f"of {args.repeat} runs; load average at end {os.getloadavg()[0]:.2f}"
    )
    if args.show:
        print(runs[-1][2])


if __name__ == "__main__":
    main()

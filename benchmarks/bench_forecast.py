"""Forecasting speed targets: train all eight default models, and `predict` a 400-step experiment.

    .venv/bin/python benchmarks/bench_forecast.py [--gaps fill] [--out out/bench_forecast.json]
    .venv/bin/python benchmarks/bench_forecast.py --predict-only   # shipped models, no training

1. train: `bsp-planner forecast train` for every task of the default experiment's job, into a fresh
   temporary models folder (target: under 5 minutes on 2 cores);
2. predict: `bsp-planner forecast predict` for the default experiment's 400 steps from those saved
   models, as a user runs it (a new process: Python, TensorFlow and the models load inside the
   timing; target: under 10 s). With --predict-only, from the shipped models (no training), and
   the forecasts are compared with the shipped ones (max and RMS |difference|, workload units).

Both run as subprocesses; the report gives wall time, the CPU time of the process, and the machine's
1-minute load average before and after (other work on the machine slows wall time, not CPU time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "bsp_planner.cli"]


def _timed(cmd: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return {
        "command": " ".join(cmd[2:] if cmd[:2] == CLI[:2] else cmd),
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "load_before": round(load0, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "tail": proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "",
    }


def _compare_with_shipped(folder: Path) -> dict:
    """Max |difference| between the forecasts from the freshly trained models and the shipped ones."""
    import numpy as np

    from bsp_planner.forecasting.files import read_forecast_metadata, read_forecasts

    shipped = ROOT / "bsp_planner" / "data" / "experiments" / "forecasts" / "default"
    a, b = read_forecast_metadata(folder), read_forecast_metadata(shipped)
    if not b or a.get("digest") != b.get("digest"):
        return {"comparable": False}
    tasks = [t["task"] for t in a["inputs"]["tasks"]]
    steps, h = a["inputs"]["steps"], a["inputs"]["horizon"]
    diff = np.abs(read_forecasts(folder, tasks, steps, h) - read_forecasts(shipped, tasks, steps, h))
    return {
        "comparable": True,
        "max_abs_difference": float(diff.max()),
        "rms_difference": float(np.sqrt(np.mean(diff**2))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaps", default=None, help="gap policy to pass on (default: the experiment's)")
    ap.add_argument("--experiment", default=str(ROOT / "bsp_planner" / "data" / "experiments" / "default.toml"))
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_forecast.json"))
    ap.add_argument("--predict-only", action="store_true", help="time predict from the shipped models only")
    args = ap.parse_args()
    extra = ["-e", args.experiment] + (["--gaps", args.gaps] if args.gaps else [])
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        train = None
        if not args.predict_only:
            train = _timed([*CLI, "forecast", "train", *extra, "--models", str(models)])
        where = [] if args.predict_only else ["--models", str(models)]
        predict = _timed([*CLI, "forecast", "predict", *extra, *where, "-o", str(Path(tmp) / "fc")])
        repeat = _compare_with_shipped(Path(tmp) / "fc")
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "train_all_models": train,
        "predict_400_steps": predict,
        "vs_shipped_forecasts": repeat,
        "targets": {"train_all_models_wall_s": 300, "predict_400_steps_wall_s": 10},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

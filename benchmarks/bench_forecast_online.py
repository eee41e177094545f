"""Per-step cost and one-step accuracy of `online-select`, the default forecaster for observed tasks.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_forecast_online.py [--tasks 5] [--steps 120] [--seed 1]
        [--modes in-place,background] [--step-s 0.4] [--set refit_every_steps=10] [--out out/bench_forecast_online.json]

Loads shaped like a star federation's leaves (two overlapping periodic components, phases differing per
task so the busiest one moves, seeded random bursts, small noise) are fed step by step to the online
forecasts of a run with no series (`simulate/online.py:unseeded_online_forecasts`), as simulate and a
live run drive them: before every step `forecast()` for all tasks, after it `observe()`. The per-step
decision cost is the wall time of `forecast()`: with refits `in-place` (simulate's way) it includes the
refits a step uses first; with refits in the `background` (a live run's way: one worker process, started
and warmed up first as the coordinator does before the first step, `worker_start_s`) only the cheap
forecasts of fitted models, and a wait when a refit is not done by the step that uses it
(`refit_wait_s`); there a step lasts `--step-s` (the ring's live mpc steps: ~0.4 s) while the worker
fits. The two modes must give the same forecasts (checked). The first step of `in-place` also pays the
first statsforecast fit's start-up.
Accuracy: one-step RMSE of the forecasts against persistence per task over the whole run (fallback steps
included). The machine's 1-minute load is recorded before and after each mode.

On recorded traces instead of the synthetic loads:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_forecast_online.py \
        --trace bsp_planner/data/traces/helics-star-5-160 --modes in-place [--run RUN_DIR]

`--trace DIR` feeds each ``<task>.csv`` of a trace (`simulate --actual`'s format) as its task's load
(`--tasks`/`--steps`/`--seed` are then the trace's). `--run RUN_DIR`: a live run's folder (a run of that
trace's federation with `--online` and `online-select`, no decision lead): its own one-step forecasts,
what it told each task before each step (`workload` in steps.jsonl), against persistence of what the
tasks reported (`observed_workload`): the forecaster chosen during the run, as it ran.
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


def trace_loads(folder: Path) -> tuple[list[str], np.ndarray]:
    """(task names, (tasks, steps) workloads) of a trace folder's ``<task>.csv`` files (header ``workload``)."""
    files = sorted(folder.glob("*.csv"))
    return [f.stem for f in files], np.array([np.loadtxt(f, skiprows=1, ndmin=1) for f in files])


def run_forecasts(run_dir: Path) -> dict:
    """One-step RMSE of a live run's own forecasts (what it told each task before each step) against
    persistence of what the tasks reported, per task, over every step after the first."""
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    names = [x["task"] for x in records[0]["tasks"]]
    told = np.array([[x["workload"] for x in r["tasks"]] for r in records]).T
    ran = np.array([[x["observed_workload"] for x in r["tasks"]] for r in records]).T
    rmse = np.sqrt(np.mean((told[:, 1:] - ran[:, 1:]) ** 2, axis=1))
    rmse_p = np.sqrt(np.mean((ran[:, :-1] - ran[:, 1:]) ** 2, axis=1))
    return {
        "run_dir": str(run_dir),
        "steps": len(records),
        "tasks": names,
        "rmse": [round(float(r), 4) for r in rmse],
        "rmse_persistence": [round(float(r), 4) for r in rmse_p],
        "rmse_ratio_to_persistence": [round(float(r), 3) for r in rmse / rmse_p],
    }


def run_mode(mode: str, loads: np.ndarray, step_s: float, settings: dict) -> tuple[dict, np.ndarray]:
    """One run of every step in `mode`: its figures, and the (tasks, steps) one-step forecasts."""
    tasks, steps = loads.shape
    online = unseeded_online_forecasts("online-select", tasks, 20, (0.0, 60.0), settings=settings)
    worker_start_s = None
    if mode == "background":
        t0 = time.perf_counter()
        online.refit_in_background()
        # a live run starts the worker with the coordinator, seconds before the first step
        online._histories[0].forecaster.refits.wait_ready()  # type: ignore[attr-defined]
        worker_start_s = time.perf_counter() - t0
    load_before = os.getloadavg()[0]
    cost_s, one_step = [], []
    for t in range(steps):
        t0 = time.perf_counter()
        fc = online.forecast()
        cost_s.append(time.perf_counter() - t0)
        if mode == "background":
            time.sleep(step_s)  # the step itself, while the worker fits
        online.observe(loads[:, t])
        one_step.append(fc[:, 0])
    pred = np.array(one_step).T
    refits = online._histories[0].forecaster.refits  # type: ignore[attr-defined]
    truth, persistence = loads[:, 1:], loads[:, :-1]
    rmse = np.sqrt(np.mean((pred[:, 1:] - truth) ** 2, axis=1))
    rmse_p = np.sqrt(np.mean((persistence - truth) ** 2, axis=1))
    ms = np.array(cost_s) * 1000
    figures = {
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        "worker_start_s": worker_start_s,
        "step_s": step_s if mode == "background" else 0.0,
        "first_step_ms": float(ms[0]),
        "step_ms": {
            "median": float(np.median(ms[1:])),
            "p95": float(np.percentile(ms[1:], 95)),
            "max": float(ms[1:].max()),
            "mean": float(ms[1:].mean()),
        },
        "refit_wait_s": online.refit_wait_s,
        "waits_over_10ms": [(r, round(w, 3)) for r, w in getattr(refits, "waits", []) if w > 0.01],
        "rmse_ratio_to_persistence": [round(float(r), 3) for r in rmse / rmse_p],
        "chosen": [
            {c: h.forecaster.chosen.count(c) for c in sorted(set(h.forecaster.chosen))} for h in online._histories
        ],
    }
    return figures, pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="in-place,background")
    ap.add_argument("--step-s", type=float, default=0.4, help="a step's length in background mode (live ring: ~0.4)")
    ap.add_argument("--out", default="out/bench_forecast_online.json")
    ap.add_argument("--set", action="append", default=[], help="an online-select setting, e.g. refit_every_steps=10")
    ap.add_argument("--trace", default=None, help="a trace folder (<task>.csv) to use instead of synthetic loads")
    ap.add_argument("--run", default=None, help="a live run's folder: its own one-step forecasts against persistence")
    args = ap.parse_args()
    settings = {k: int(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    names = None
    if args.trace:
        names, loads = trace_loads(Path(args.trace))
        args.tasks, args.steps, args.seed = loads.shape[0], loads.shape[1], None
    else:
        loads = star_leaf_loads(args.seed, args.steps, args.tasks)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    result: dict = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.node()}, {cpu}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "tasks": args.tasks,
        "steps": args.steps,
        "settings": settings,
    }
    if args.trace:
        result |= {"trace": args.trace, "task_names": names}
    preds = {}
    for mode in filter(None, args.modes.split(",")):
        result[mode], preds[mode] = run_mode(mode, loads, args.step_s, settings)
    if args.run:
        result["live_run"] = run_forecasts(Path(args.run))
    if len(preds) > 1:
        first, *rest = preds.values()
        result["same_forecasts_in_every_mode"] = all(np.array_equal(first, p) for p in rest)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

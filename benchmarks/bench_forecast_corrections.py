"""Cheap corrections of the shipped forecasts, and how concentrated their error is (issue 12).

    .venv/bin/python benchmarks/bench_forecast_corrections.py [--forecasters lstm,mstl]
                                                              [--out out/bench_forecast_corrections.json]

On the default job's test halves (every origin whose H = 20 targets exist; gaps filled as the shipped
forecasts were made), per task, the mean RMSE over leads 1..20 of the median forecast:

- as made;
- clipped to the workload range [10, 50] (every workload lies in it);
- corrected per lead h by beta_h . (e1, e2): e1 the lead-1 error of the forecast made one origin back,
  e2 the lead-2 error of the one made two back (both targets are the step just run, so both are known
  before the forecast); beta_h by ridge-regularised least squares (ridge 1) over the newest 240 past
  origins whose lead-h targets have run (the 300 origins before the test half seed it); then clipped;
- without each task's two test days of largest squared error (what the error would be if its worst
  days, holidays among them, were forecast as well as the rest).

Nothing in a forecast uses a value at or after its origin. The mean of the tasks' RMSEs is reported
(the issue's pooled figure weighs tasks by their spread; both move together here).
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

from _report import load  # noqa: E402
from bench_forecast_error import rmse_by_lead  # noqa: E402

H = 20
WINDOW = 240
RIDGE = 1.0
SEED_ORIGINS = 300  # origins before the test half that seed the correction's regression
RANGE = (10.0, 50.0)


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    """Mean over leads of the RMSE per lead; pred, truth (origins, H)."""
    return float(rmse_by_lead(pred, truth).mean())


def error_corrected(pred: np.ndarray, errors: np.ndarray, first: int) -> np.ndarray:
    """pred (k, H) forecasts at consecutive origins, errors (k, H) their errors (truth - pred): the
    forecasts from origin index `first` on corrected from the errors known at each origin."""
    k = len(pred)
    x = np.full((k, 2), np.nan)
    x[1:, 0] = errors[:-1, 0]  # made one origin back, lead 1: its target is the step just run
    x[2:, 1] = errors[:-2, 1]  # made two back, lead 2: the same target
    out = pred.copy()
    for i in range(first, k):
        for h in range(H):
            hi = i - 1 - h  # newest origin whose lead-h target has run before origin i
            lo = max(2, hi - WINDOW + 1)
            if hi - lo < 30:
                continue
            X, Y = x[lo : hi + 1], errors[lo : hi + 1, h]
            beta = np.linalg.solve(X.T @ X + RIDGE * np.eye(2), X.T @ Y)
            out[i, h] = pred[i, h] + x[i] @ beta
    return np.clip(out, *RANGE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forecasters", default="lstm,mstl")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_forecast_corrections.json"))
    args = ap.parse_args()
    from bsp_planner.forecasting.pipeline import Workspace, obtain

    job = ROOT / "bsp_planner" / "data" / "jobs" / "thesis-8.toml"
    ws = Workspace.load(job, gaps="fill", horizon=H)
    names = [n for n in args.forecasters.split(",") if n]
    report: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_before": load(),
        "tasks": {},
    }
    t0, c0 = time.perf_counter(), time.process_time()
    for p in ws.prepared:
        origins = np.arange(max(1, p.n_train - SEED_ORIGINS), len(p.rows) - H + 1)
        test = origins >= p.n_train
        first = int(np.argmax(test))
        truth = p.rows[origins[:, None] + np.arange(H)]
        row: dict = {}
        for name in names:
            f, _ = obtain(ws, name, p)
            pred = p.predict_rows(f, origins)[f.median_index]
            err = truth - pred
            corrected = error_corrected(pred, err, first)
            se = np.mean(err[test] ** 2, axis=1)
            day = (origins[test] - p.n_train) // p.period  # test day of each origin (rows ~ grid steps)
            per_day = np.bincount(day, weights=se)
            worst = np.argsort(per_day)[::-1][:2]
            keep = ~np.isin(day, worst)
            row[name] = {
                "as_made": round(rmse(pred[test], truth[test]), 4),
                "clipped": round(rmse(np.clip(pred[test], *RANGE), truth[test]), 4),
                "error_corrected": round(rmse(corrected[test], truth[test]), 4),
                "without_worst_2_days": round(rmse(pred[test][keep], truth[test][keep]), 4),
                "worst_2_days_share_of_squared_error": round(float(per_day[worst].sum() / per_day.sum()), 3),
            }
            print(p.task, name, row[name], flush=True)
        report["tasks"][p.task] = row
    report["mean_of_tasks"] = {
        n: {
            k: round(float(np.mean([report["tasks"][t][n][k] for t in report["tasks"]])), 4)
            for k in report["tasks"][ws.prepared[0].task][n]
        }
        for n in names
    }
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["cpu_s"] = round(time.process_time() - c0, 1)
    report["load_after"] = load()
    print(json.dumps(report["mean_of_tasks"], indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['wall_s']} s wall, {report['cpu_s']} s CPU; wrote {out}")


if __name__ == "__main__":
    main()

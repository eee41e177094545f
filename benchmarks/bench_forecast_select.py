"""Choose the default forecaster on validation data, never on the test halves (issue 25).

    .venv/bin/python benchmarks/bench_forecast_select.py [--fraction 0.75]
                                                          [--out out/bench_forecast_select.json]

Every task's series is cut to its training half; the first `fraction` of that half trains each
candidate afresh (lstm, gbm, and their equal-weight ensemble; gbm's pools follow the same
source-series rule as always), and the rest is the validation period: every origin in it whose H = 20
targets lie in the training half is scored, as `forecast evaluate` scores the test halves. Nothing of
the test halves is read. It reports, per candidate, the mean RMSE over leads 1..20 per task, their mean
and the pooled figure; and the weight w of lstm in w * lstm + (1 - w) * gbm that validation prefers
(from 0, 0.1, .., 1), the only place an ensemble weight may come from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.experiment import load_experiment  # noqa: E402
from bsp_planner.forecasting.pipeline import Workspace, obtain, test_origins  # noqa: E402
from bsp_planner.forecasting.prepare import PreparedSeries  # noqa: E402
from bsp_planner.shipped import find_experiment  # noqa: E402

H = 20
CANDIDATES = ("lstm", "gbm", "ensemble")


def validation_part(p: PreparedSeries, fraction: float) -> PreparedSeries:
    """The task's training half alone, its first `fraction` as the training part."""
    n = p.n_train
    grid_end = int(p.grid_index[n - 1]) + 1
    return replace(
        p,
        rows=p.rows[:n],
        grid=p.grid[:grid_end],
        grid_index=p.grid_index[:n],
        n_train=int(round(fraction * n)),
        filled=int(grid_end - n),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, default=0.75)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_forecast_select.json")
    args = ap.parse_args()
    exp = load_experiment(find_experiment(None))
    full = Workspace.load(exp.job_path, workload_range=tuple(exp.workload_range), gaps="fill", horizon=H)
    ws = replace(full, prepared=[validation_part(p, args.fraction) for p in full.prepared], shared={})
    t0, cpu0 = time.perf_counter(), time.process_time()
    preds: dict[str, dict[str, np.ndarray]] = {n: {} for n in CANDIDATES}
    truths: dict[str, np.ndarray] = {}
    for i, p in enumerate(ws.prepared):
        o = test_origins(p, H)
        truths[p.task] = p.rows[o[:, None] + np.arange(H)[None, :]]
        for n in CANDIDATES:
            tag = f"[{i + 1}/{len(ws.prepared)}] {p.task} · {n}"
            say = lambda msg, tag=tag: print(f"{tag}: {msg}", flush=True)  # noqa: E731
            f, how = obtain(ws, n, p, model_root=None, save=False, say=say)
            preds[n][p.task] = p.predict_rows_median(f, o)
            err = np.sqrt(np.mean((preds[n][p.task] - truths[p.task]) ** 2, axis=0)).mean()
            print(f"[{i + 1}/{len(ws.prepared)}] {p.task} · {n}: {how}; validation RMSE {err:.3f}", flush=True)
    tasks = [p.task for p in ws.prepared]

    def scores(pred: dict[str, np.ndarray]) -> dict:
        per = {t: float(np.sqrt(np.mean((pred[t] - truths[t]) ** 2, axis=0)).mean()) for t in tasks}
        sse = sum(((pred[t] - truths[t]) ** 2).sum(axis=0) for t in tasks)
        n = sum(len(truths[t]) for t in tasks)
        return {
            "per_task": per,
            "mean_of_tasks": float(np.mean(list(per.values()))),
            "pooled": float(np.sqrt(sse / n).mean()),
        }

    result = {n: scores(preds[n]) for n in CANDIDATES}
    weights = {}
    for w in np.round(np.linspace(0, 1, 11), 2):
        mix = {t: w * preds["lstm"][t] + (1 - w) * preds["gbm"][t] for t in tasks}
        weights[float(w)] = scores(mix)
    best_w = min(weights, key=lambda w: weights[w]["mean_of_tasks"])
    chosen = min(CANDIDATES, key=lambda n: result[n]["mean_of_tasks"])
    print(f"\nvalidation (last {1 - args.fraction:.0%} of each training half), mean RMSE over leads 1..{H}:")
    print("task       " + "".join(f"{n:>10}" for n in CANDIDATES))
    for t in tasks:
        print(f"{t:10} " + "".join(f"{result[n]['per_task'][t]:10.3f}" for n in CANDIDATES))
    print("mean       " + "".join(f"{result[n]['mean_of_tasks']:10.3f}" for n in CANDIDATES))
    print("pooled     " + "".join(f"{result[n]['pooled']:10.3f}" for n in CANDIDATES))
    print("lstm weight w: " + ", ".join(f"{w:.1f}: {s['mean_of_tasks']:.3f}" for w, s in weights.items()))
    print(f"chosen by validation: {chosen}; best lstm weight {best_w:.1f}")
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "fraction": args.fraction,
                "candidates": result,
                "lstm_weight": {str(w): s for w, s in weights.items()},
                "chosen": chosen,
                "best_lstm_weight": best_w,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "load": os.getloadavg(),
                "machine": platform.platform(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out} ({wall:.0f} s wall, {cpu:.0f} s CPU)")


if __name__ == "__main__":
    main()

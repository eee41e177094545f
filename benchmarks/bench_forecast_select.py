"""Choose the default forecaster on validation data, never on the test halves (issue 25).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_forecast_select.py [--fraction 0.25]
                                                                      [--out out/bench_forecast_select.json]

Every task's series is cut to its training half (`forecasting.validation`); its first 1 - `fraction`
trains each candidate afresh (lstm with the lags its whole half gives it; gbm's pools under the same
source-series rule as always), and the rest is the validation period: every origin in it whose H = 20
targets lie in the training half is scored, as `forecast evaluate` scores the test halves. Nothing of
the test halves is read. Candidates: lstm, gbm, their equal-weight `ensemble`, and `ensemble-fit`
(per-task weights of lstm and gbm on a 0.1 grid, fitted on the validation period). Since ensemble-fit's
weights are fitted on the very period scored, it is also scored out of sample: weights fitted on one
half of a task's validation origins, scored on the other (both ways, H origins left out between them),
and the choice uses that figure. Reported per candidate: the mean RMSE over leads 1..20 per task, their
mean and the pooled figure; the default is the candidate with the least mean of tasks.
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

from bsp_planner.experiment import load_experiment  # noqa: E402
from bsp_planner.forecasting.pipeline import Workspace, obtain  # noqa: E402
from bsp_planner.forecasting.validation import fit_weights, validation_forecasts  # noqa: E402
from bsp_planner.shipped import find_experiment  # noqa: E402

H = 20
MEMBERS = ("lstm", "gbm")
CANDIDATES = ("lstm", "gbm", "ensemble", "ensemble-fit", "ensemble-fit (out of sample)")


def two_fold(preds: list[np.ndarray], truth: np.ndarray, step: float = 0.1) -> tuple[np.ndarray, list]:
    """Forecasts of weights fitted on one half of the origins, applied to the other (both ways;
    the H origins nearest the cut are left out of the fitting side, so no target is shared)."""
    m = len(truth)
    cut = m // 2
    out = np.empty_like(truth)
    chosen = []
    for fit_idx, use_idx in (
        (np.arange(0, max(1, cut - H)), np.arange(cut, m)),
        (np.arange(cut + H, m), np.arange(0, cut)),
    ):
        if fit_idx.size == 0:
            fit_idx = use_idx
        w = fit_weights([p[fit_idx] for p in preds], truth[fit_idx], step)
        out[use_idx] = np.tensordot(w, np.stack([p[use_idx] for p in preds]), axes=1)
        chosen.append(w.tolist())
    return out, chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--fraction", type=float, default=0.25, help="the validation period: this last part of each training half"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_forecast_select.json")
    args = ap.parse_args()
    exp = load_experiment(find_experiment(None))
    ws = Workspace.load(exp.job_path, workload_range=tuple(exp.workload_range), gaps="fill", horizon=H)
    t0, cpu0 = time.perf_counter(), time.process_time()
    preds: dict[str, dict[str, np.ndarray]] = {n: {} for n in CANDIDATES}
    truths: dict[str, np.ndarray] = {}
    weights: dict[str, dict] = {}
    for i, p in enumerate(ws.prepared):
        got = {}
        for n in MEMBERS:
            tag = f"[{i + 1}/{len(ws.prepared)}] {p.task} · {n}"
            say = lambda msg, tag=tag: print(f"{tag}: {msg}", flush=True)  # noqa: E731
            got[n], truths[p.task] = validation_forecasts(ws, n, p, obtain, args.fraction, say)
            preds[n][p.task] = got[n]
        both = [got[n] for n in MEMBERS]
        preds["ensemble"][p.task] = np.mean(both, axis=0)
        w = fit_weights(both, truths[p.task])
        preds["ensemble-fit"][p.task] = np.tensordot(w, np.stack(both), axes=1)
        preds["ensemble-fit (out of sample)"][p.task], folds = two_fold(both, truths[p.task])
        weights[p.task] = {"fitted": w.tolist(), "two_fold": folds}
        err = {n: np.sqrt(np.mean((preds[n][p.task] - truths[p.task]) ** 2, axis=0)).mean() for n in CANDIDATES}
        print(
            f"[{i + 1}/{len(ws.prepared)}] {p.task}: validation RMSE "
            + ", ".join(f"{n} {e:.3f}" for n, e in err.items())
            + f"; weights lstm {w[0]:.1f}, gbm {w[1]:.1f}",
            flush=True,
        )
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
    shippable = {"lstm": "lstm", "gbm": "gbm", "ensemble": "ensemble", "ensemble-fit (out of sample)": "ensemble-fit"}
    best = min(shippable, key=lambda n: result[n]["mean_of_tasks"])
    chosen = shippable[best]
    print(f"\nvalidation (last {args.fraction:.0%} of each training half), mean RMSE over leads 1..{H}:")
    heads = ["lstm", "gbm", "ensemble", "fit", "fit (oos)"]
    print("task       " + "".join(f"{n:>11}" for n in heads) + "   weights lstm,gbm")
    for t in tasks:
        w = weights[t]["fitted"]
        print(
            f"{t:10} " + "".join(f"{result[n]['per_task'][t]:11.3f}" for n in CANDIDATES) + f"   {w[0]:.1f},{w[1]:.1f}"
        )
    print("mean       " + "".join(f"{result[n]['mean_of_tasks']:11.3f}" for n in CANDIDATES))
    print("pooled     " + "".join(f"{result[n]['pooled']:11.3f}" for n in CANDIDATES))
    print(f"chosen by validation (least mean of tasks; ensemble-fit by its out-of-sample figure): {chosen}")
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "fraction": args.fraction,
                "candidates": result,
                "weights": weights,
                "chosen": chosen,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "load": os.getloadavg(),
                "machine": platform.platform(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out} ({wall:.0f} s wall, {cpu:.0f} s CPU, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

"""Where the default forecaster's error comes from, how much of it is noise, and what a validation-fitted
lstm + mstl combination buys (issue 12).

    .venv/bin/python benchmarks/bench_forecast_error.py [--out out/bench_forecast_error.json]

On the default experiment's job (shipped `lstm` models, `mstl` fitted on each training half, gaps as
the shipped forecasts were made):

1. RMSE per task and lead time on the test halves (every origin whose H targets exist, the rows a
   simulation replays), for `lstm` and `mstl`; the mean over leads 1..H, pooled over tasks, is the
   issue's figure.
2. Two noise floors on the test halves, both using the future (an oracle, not a forecaster):
   * white noise: the residual of x_t against the mean of its two neighbours has variance
     1.5 sigma^2 for white noise on a locally linear signal, so sigma = rms / sqrt(1.5);
   * decomposition remainder: MSTL (daily and weekly seasons, statsforecast's `mstl`) of the whole
     test half; the RMS of what trend + seasons leave. A forecaster that knew the trend and seasons
     exactly would still be off by about this much at long leads;
   * `oracle_structure`: that oracle trend + seasons plus the remainder's last value times the
     least-squares coefficient of each lead (fitted on the test remainder itself): what knowing the
     structure exactly and extrapolating the remainder linearly achieves, per lead.
3. A combination w_h * lstm + (1 - w_h) * mstl per lead time h, w_h in [0, 1] fitted by least
   squares on the validation tail (the last 20% of each training half's origins, the lstm's own
   early-stopping tail), per task and pooled over tasks; scored on the test halves. No test value
   is read while fitting the weights.

The report also gives CPU time and the load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
H = 20


def rmse_by_lead(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean((pred - truth) ** 2, axis=0))


def fit_weights(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per lead h, the w in [0, 1] minimising sum (w a + (1 - w) b - y)^2: (H,)."""
    d = a - b
    num = np.sum(d * (y - b), axis=0)
    den = np.sum(d * d, axis=0)
    w = np.divide(num, den, out=np.ones_like(num), where=den > 1e-12)
    return np.clip(w, 0.0, 1.0)


def noise_floors(rows: np.ndarray, seasons: list[int]) -> dict:
    from statsforecast.mstl import mstl

    from bsp_planner.forecasting.statistical import stl_jumps

    x = np.asarray(rows, dtype=np.float64)
    local = x[1:-1] - 0.5 * (x[:-2] + x[2:])
    fit = [s for s in seasons if 2 * s <= len(x)]
    parts = mstl(x, period=fit, stl_kwargs=stl_jumps(min(fit))) if fit else None
    rem = np.asarray(parts["remainder"]) if parts is not None else x - x.mean()
    # the oracle forecaster: exact trend + seasons, and the remainder's last value times the
    # least-squares coefficient for each lead (fitted on these very values)
    o = np.arange(1, len(x) - H + 1)
    last = rem[o - 1]
    ahead = rem[o[:, None] + np.arange(H)[None, :]]
    beta = (last @ ahead) / (last @ last)
    oracle_err = ahead - last[:, None] * beta[None, :]
    return {
        "white_noise_sd": float(np.sqrt(np.mean(local**2) / 1.5)),
        "decomposition_remainder_rms": float(np.sqrt(np.mean(rem**2))),
        "oracle_rmse_by_lead": np.sqrt(np.mean(oracle_err**2, axis=0)).round(4).tolist(),
        "seasons": fit,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default="default")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_forecast_error.json"))
    args = ap.parse_args()

    from bsp_planner.forecasting.cli import _context
    from bsp_planner.forecasting.pipeline import obtain
    from bsp_planner.forecasting.prepare import test_origins
    from bsp_planner.forecasting.statistical import MSTLForecaster

    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
    ws, exp = _context(args.experiment, None, None, H, None, None, ["lstm"])  # as `forecast evaluate`
    gaps = ws.gaps
    per_task: dict[str, dict] = {}
    pooled: dict[str, list[np.ndarray]] = {"val_lstm": [], "val_mstl": [], "val_y": []}
    test: dict[str, list[np.ndarray]] = {"lstm": [], "mstl": [], "y": []}
    for p in ws.prepared:
        f, _ = obtain(ws, "lstm", p)
        o_test = test_origins(p, H)
        y_test = p.rows[o_test[:, None] + np.arange(H)[None, :]]
        lstm_test = p.predict_rows_median(f, o_test)
        m = getattr(f, "mstl_", None)  # fitted on the training half by the lstm's first forecast
        assert isinstance(m, MSTLForecaster)
        m.error_quantiles_ = np.zeros((len(m.quantiles), H))  # point forecasts only
        mstl_test = p.predict_rows_median(m, o_test)
        # validation tail: the last 20% of training-half origins whose targets lie in the training half
        last = p.n_train - H
        first_ok = int(np.searchsorted(p.grid_index, f._min_origin()))  # rows whose grid origin has history
        n_val = max(2 * H, int(round((last - first_ok + 1) * 0.2)))
        o_val = np.arange(last - n_val + 1, last + 1)
        y_val = p.rows[o_val[:, None] + np.arange(H)[None, :]]
        lstm_val = p.predict_rows_median(f, o_val)
        mstl_val = p.predict_rows_median(m, o_val)
        w = fit_weights(lstm_val, mstl_val, y_val)
        comb_test = w * lstm_test + (1 - w) * mstl_test
        seasons = [p.period, 7 * p.period] if p.period > 1 else []
        per_task[p.task] = {
            "test_origins": int(len(o_test)),
            "val_origins": int(len(o_val)),
            "rmse_by_lead": {
                "lstm": rmse_by_lead(lstm_test, y_test).round(4).tolist(),
                "mstl": rmse_by_lead(mstl_test, y_test).round(4).tolist(),
                "combined_per_task": rmse_by_lead(comb_test, y_test).round(4).tolist(),
            },
            "weights_per_task": w.round(3).tolist(),
            "val_rmse_mean": {
                "lstm": float(rmse_by_lead(lstm_val, y_val).mean()),
                "mstl": float(rmse_by_lead(mstl_val, y_val).mean()),
            },
            "noise": noise_floors(p.rows[p.n_train :], seasons),
        }
        for k, v in (("val_lstm", lstm_val), ("val_mstl", mstl_val), ("val_y", y_val)):
            pooled[k].append(v)
        for k, v in (("lstm", lstm_test), ("mstl", mstl_test), ("y", y_test)):
            test[k].append(v)
        print(p.task, {k: round(float(np.mean(v)), 3) for k, v in per_task[p.task]["rmse_by_lead"].items()})

    w_pooled = fit_weights(*(np.concatenate(pooled[k]) for k in ("val_lstm", "val_mstl", "val_y")))
    y_all = np.concatenate(test["y"])
    lstm_all, mstl_all = np.concatenate(test["lstm"]), np.concatenate(test["mstl"])
    per_task_comb = np.concatenate(
        [
            np.asarray(per_task[t]["weights_per_task"]) * a + (1 - np.asarray(per_task[t]["weights_per_task"])) * b
            for t, a, b in zip(per_task, test["lstm"], test["mstl"], strict=True)
        ]
    )
    summary = {
        "lstm": rmse_by_lead(lstm_all, y_all),
        "mstl": rmse_by_lead(mstl_all, y_all),
        "combined_per_task": rmse_by_lead(per_task_comb, y_all),
        "combined_pooled": rmse_by_lead(w_pooled * lstm_all + (1 - w_pooled) * mstl_all, y_all),
    }
    n = {t: per_task[t]["test_origins"] for t in per_task}
    total = sum(n.values())
    noise = {
        key: float(np.sqrt(sum(n[t] * per_task[t]["noise"][key] ** 2 for t in per_task) / total))
        for key in ("white_noise_sd", "decomposition_remainder_rms")
    }
    oracle = np.sqrt(sum(n[t] * np.asarray(per_task[t]["noise"]["oracle_rmse_by_lead"]) ** 2 for t in per_task) / total)
    summary["oracle_structure"] = oracle
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "experiment": exp.name,
        "gaps": gaps,
        "pooled_rmse_by_lead": {k: v.round(4).tolist() for k, v in summary.items()},
        "pooled_mean_rmse": {k: round(float(v.mean()), 4) for k, v in summary.items()},
        "pooled_weights": w_pooled.round(3).tolist(),
        "noise_floor_pooled": noise,
        "per_task": per_task,
        "cpu_s": round(time.process_time() - cpu0, 1),
        "wall_s": round(time.perf_counter() - wall0, 1),
        "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("pooled_mean_rmse", "pooled_weights", "noise_floor_pooled")}, indent=2))
    for t, d in per_task.items():
        print(
            t, "noise", {k: v for k, v in d["noise"].items() if k in ("white_noise_sd", "decomposition_remainder_rms")}
        )
    print(f"cpu {report['cpu_s']} s, wall {report['wall_s']} s, load {report['load_before_after']}")


if __name__ == "__main__":
    main()

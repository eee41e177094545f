"""A performance model that learns online, started from a profile 40% off.

    .venv/bin/python benchmarks/bench_learning.py [--steps 400] [--strategies mpc,static:3] [--modes perfect,forecast]

The shipped default experiment (8 tasks, budget 8000m, penalty 0.3 s) is simulated with the shipped
profile as the truth (`true_profile`) while the planner plans on a wrong copy of it:

* uniform: every duration x1.4;
* mixed: every other task x1.4, the others x0.6 (40% off either way, so the wrong profile also
  misleads the allocation between tasks, not only the checkpoint trade-off).

For each case, strategy and mode it reports: the step from which the per-step prediction error (the
worst task's |predicted before the step / measured - 1|, at the workload and CPU it ran) stays below
5%; that error at steps 0 and 14; and the total (compute + checkpoints) with learning and without it,
against the same planner on the true profile. Goal (issue 10): error below 5% within 15 steps, total
within 5% of the true profile's. Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.experiment import apply_overrides  # noqa: E402
from bsp_planner.experiment import load_experiment  # noqa: E402
from bsp_planner.scenario import build_scenario, run_strategy  # noqa: E402
from bsp_planner.shipped import find_experiment  # noqa: E402


def wrong_profile(src_csv: Path, folder: Path, factor_of) -> Path:
    """A copy of a profile (and its metadata) with every task's durations scaled by factor_of(task index)."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = src_csv.with_name("profile.meta.json")
    if meta.is_file():
        shutil.copy(meta, folder / meta.name)
    rows = list(csv.DictReader(src_csv.open()))
    order = list(dict.fromkeys(r["task"] for r in rows))
    out = folder / "profile.csv"
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            r["duration_s"] = f"{float(r['duration_s']) * factor_of(order.index(r['task'])):.6f}"
            w.writerow(r)
    return out


def step_errors(result) -> np.ndarray:
    """(steps,) the worst task's relative error of the prediction made before each step."""
    return np.array([np.max(np.abs(r["predicted_before_s"] / r["measured_s"] - 1)) for r in result.notes["learning"]])


def settled_at(err: np.ndarray, limit: float = 0.05) -> int | None:
    """The first step from which the error stays below the limit (None: never)."""
    above = np.nonzero(err >= limit)[0]
    if above.size == 0:
        return 0
    return None if above[-1] + 1 >= len(err) else int(above[-1] + 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--strategies", default="mpc,static:3")
    ap.add_argument("--modes", default="perfect,forecast")
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    modes = args.modes.split(",")
    base = load_experiment(find_experiment(None))
    base = apply_overrides(base, [f"steps={args.steps}", f"strategies={','.join(strategies)}", f"modes={','.join(modes)}"])
    true_csv = base.profile_path
    cases = {"uniform x1.4": lambda i: 1.4, "mixed x1.4 / x0.6": lambda i: 1.4 if i % 2 == 0 else 0.6}
    t0 = time.perf_counter()
    truth = build_scenario(base)
    best = {(m, s): run_strategy(truth, s, m).total_s for m in modes for s in strategies}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        for label, factor_of in cases.items():
            wrong = wrong_profile(true_csv, Path(tmp) / label.split()[0], factor_of)
            common = [f"profile={wrong}", f"true_profile={true_csv}"]
            learned = build_scenario(apply_overrides(base, common + ["learn=true"]))
            blind = build_scenario(apply_overrides(base, common))
            for m in modes:
                for s in strategies:
                    r = run_strategy(learned, s, m)
                    err = step_errors(r)
                    rows.append(
                        {
                            "case": label, "mode": m, "strategy": s, "settled": settled_at(err),
                            "err0": err[0], "err14": err[min(14, len(err) - 1)], "err_max_after_15": err[15:].max() if len(err) > 15 else float("nan"),
                            "true": best[(m, s)], "learn": r.total_s, "blind": run_strategy(blind, s, m).total_s,
                        }
                    )
    elapsed = time.perf_counter() - t0
    print(f"Command: `.venv/bin/python benchmarks/bench_learning.py --steps {args.steps} --strategies {args.strategies} --modes {args.modes}`, "
          f"{platform.node() or 'host'} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}, {elapsed:.0f} s.\n")
    print("| wrong profile | mode | strategy | error < 5% from step | error step 0 | error step 14 | max error after step 15 | total, true profile (s) | total, learning (s) | vs true | total, no learning (s) | vs true |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['mode']} | {r['strategy']} | {r['settled'] if r['settled'] is not None else 'never'} | "
            f"{100 * r['err0']:.1f}% | {100 * r['err14']:.2f}% | {100 * r['err_max_after_15']:.2f}% | {r['true']:.2f} | {r['learn']:.2f} | "
            f"{100 * (r['learn'] / r['true'] - 1):+.2f}% | {r['blind']:.2f} | {100 * (r['blind'] / r['true'] - 1):+.2f}% |"
        )


if __name__ == "__main__":
    main()

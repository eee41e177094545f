"""Calibration: the ops_per_unit that makes one run at the top CPU level and the lowest workload take
about a target time (e.g. 0.3 s), so every task costs about the same and the grid's slowest cell stays
short enough to measure twice.

A stress-ng run costs a fixed start-up plus a part proportional to its bogo-ops, ``t = a + b * ops``;
the search measures two points, fits that line, and verifies the answer (median of a few runs), with a
proportional correction if it missed by more than the tolerance.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..core.errors import InputError
from ..inputs.job import Task
from .results import RunResult


@dataclass(frozen=True)
class Calibration:
    task: str
    old_ops_per_unit: float
    old_duration_s: float | None  # one run with the old value (None: it timed out or failed)
    ops_per_unit: float  # suggested
    duration_s: float  # median of the verification runs with the suggested value
    runs: int
    cpu_ratio: float | None = None  # t(cpu / 2) / t(cpu): ~2 when the stressor uses its whole quota
    workload_ratio: float | None = None  # t(2 w) / t(w): ~2 when duration is linear in ops


def round_sig(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}") if x > 0 else x


def calibrate_task(
    run: Callable[[Task, float, float, float], RunResult],
    task: Task,
    *,
    cpu_millicores: float,
    workload: float,
    target_s: float,
    timeout_s: float = 60.0,
    checks: int = 3,
    tolerance: float = 0.1,
    scaling: bool = True,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """Find ops_per_unit for `task` so that `run(task, workload, cpu_millicores)` takes ~`target_s`."""
    if not target_s > 0:
        raise InputError(f"expected a positive target, got {target_s!r}", field="--target-s")
    runs = 0

    def measure(ops_per_unit: float, w: float = workload, cpu: float = cpu_millicores) -> float | None:
        nonlocal runs
        runs += 1
        r = run(replace(task, ops_per_unit=ops_per_unit), w, cpu, timeout_s)
        if log:
            log(
                f"{task.name}: ops_per_unit={ops_per_unit:g} w={w:g} {cpu:g}m -> "
                + (f"{r.duration_s:.3f} s" if r.ok else r.reason)
            )
        return r.duration_s if r.ok else None

    def median(ops_per_unit: float, n: int, **kw) -> float:
        values = [measure(ops_per_unit, **kw) for _ in range(n)]
        good = [v for v in values if v is not None]
        if not good:
            raise InputError(
                f"task '{task.name}': every run with ops_per_unit={ops_per_unit:g} failed (see above)",
                field="ops_per_unit",
            )
        return statistics.median(good)

    # 1. the current value; shrink it tenfold until a run finishes within the timeout
    u0 = task.ops_per_unit
    t0 = measure(u0)
    old_t = t0
    while t0 is None:
        u0 /= 10
        if u0 * workload < 1:
            raise InputError(
                f"task '{task.name}': stress-ng fails even with 1 bogo-op (see above)", field="ops_per_unit"
            )
        t0 = measure(u0)
    # 2. a proportional step, then 3. a line through the two points
    u1 = u0 * min(100.0, max(0.01, target_s / t0))
    t1 = measure(u1)
    if t1 is None:
        u1, t1 = u0, t0
    slope = (t1 - t0) / (u1 - u0) if abs(u1 - u0) > 1e-9 * u0 else 0.0
    intercept = t1 - slope * u1
    if slope > 0 and intercept < 0.8 * target_s:
        u = (target_s - intercept) / slope
    else:  # no usable line (noise, or start-up dominates): proportional from the nearer point
        u = u1 * target_s / t1
    u = round_sig(u)
    # 4. verify, with up to two proportional corrections
    t = median(u, checks)
    for _ in range(2):
        if abs(t / target_s - 1) <= tolerance:
            break
        u = round_sig(u * target_s / t)
        t = median(u, checks)
    cal = Calibration(task.name, task.ops_per_unit, old_t, u, t, runs)
    if scaling:
        half = median(u, 1, cpu=cpu_millicores / 2)
        double = median(u, 1, w=workload * 2)
        cal = replace(cal, cpu_ratio=half / t, workload_ratio=double / t, runs=runs)
    return cal

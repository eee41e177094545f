"""A tiny CPU-bound kernel for ``command`` tasks: run afresh every superstep by bsp-planner's worker.

    python -m bsp_planner.apps.kernel --size {workload}

Runs ``size x ops-per-unit`` iterations of an integer hash recurrence in pure Python (one core, no
imports beyond the standard library, so the start-up is small), i.e. work that grows linearly with the
workload, then prints the workload it ran as one JSON line (``{"workload": 37.5}``): the report the
coordinator records for a command task. Without ``--size`` it reads ``BSP_WORKLOAD`` from the
environment (set by the worker for command tasks).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

DEFAULT_OPS_PER_UNIT = 100_000  # about 10 ms of one core per workload unit (CPython 3.11, this machine)


def kernel(iterations: int) -> int:
    """`iterations` rounds of a 32-bit xorshift-multiply hash; the result keeps the work from being
    optimised away and makes a run checkable."""
    h = 0x9E3779B9
    for i in range(iterations):
        h ^= i
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
    return h


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.kernel", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=float, default=None, help="the workload of this step (default: $BSP_WORKLOAD)")
    p.add_argument("--ops-per-unit", type=int, default=DEFAULT_OPS_PER_UNIT, help="iterations per workload unit")
    args = p.parse_args(argv)
    if args.size is None:
        env = os.environ.get("BSP_WORKLOAD")
        if env is None:
            p.error("--size: required when BSP_WORKLOAD is not set")
        try:
            args.size = float(env)
        except ValueError:
            p.error(f"BSP_WORKLOAD: expected a number, got {env!r}")
    if not math.isfinite(args.size) or args.size < 0:
        p.error(f"--size: expected a finite non-negative workload, got {args.size!r}")
    if args.ops_per_unit < 1:
        p.error(f"--ops-per-unit: expected at least 1, got {args.ops_per_unit}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernel(round(args.size * args.ops_per_unit))
    print(json.dumps({"workload": args.size}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

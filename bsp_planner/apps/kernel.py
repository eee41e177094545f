"""A tiny CPU-bound kernel, as a ``command`` task (run afresh every superstep by bsp-planner's worker) or
as a long-running ``process`` task (started once, one kernel per superstep).

    python -m bsp_planner.apps.kernel --size {workload}                      # command task: one step
    python -m bsp_planner.apps.kernel --process                              # process task (jobs/kernel-3p)
    python -m bsp_planner.apps.kernel --process --size 20 --steps 5 --reports r.jsonl   # standalone

Runs ``size x ops-per-unit`` iterations of an integer hash recurrence in pure Python (one core, no
imports beyond the standard library, so the start-up is small), i.e. work that grows linearly with the
workload, then prints the workload it ran as one JSON line (``{"workload": 37.5}``): the report the
coordinator records for a command task. Without ``--size`` it reads ``BSP_WORKLOAD`` from the
environment (set by the worker for command tasks).

With ``--process`` the program joins the run (``bsp_planner.task``) and runs the kernel inside
``session.step`` at the workload the run assigns each step (the task's series; under ``bsp-planner profile
run``, the profiler's), reporting it; without a coordinator it runs ``--steps`` steps of ``--size`` with
a local session. Only the kernel is timed, not the interpreter's start-up and imports, which a command
task pays (and varies by) every step: on a 2-core VM at 250m a fresh interpreter costs about 45 ms of CPU,
0.18 s of wall time (BENCHMARKS.md, "Live per-step noise").
"""

from __future__ import annotations

import argparse
import contextlib
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
    p.add_argument(
        "--process", action="store_true", help="run as a long-running process task (one kernel per superstep)"
    )
    p.add_argument("--steps", type=int, default=None, help="--process started by hand: steps to run")
    p.add_argument("--reports", default=None, help="--process started by hand: append each step's report (JSONL)")
    p.add_argument("--task", default=os.environ.get("BSP_TASK", "kernel"), help="--process by hand: the task's name")
    args = p.parse_args(argv)
    if args.ops_per_unit < 1:
        p.error(f"--ops-per-unit: expected at least 1, got {args.ops_per_unit}")
    if args.process:
        from .session import under_coordinator

        if not under_coordinator() and (args.steps is None or args.size is None):
            p.error("--process: --steps and --size are required when started outside a bsp-planner run")
        if args.steps is not None and args.steps < 0:
            p.error(f"--steps: expected a non-negative count, got {args.steps}")
    elif args.size is None:
        env = os.environ.get("BSP_WORKLOAD")
        if env is None:
            p.error("--size: required when BSP_WORKLOAD is not set")
        try:
            args.size = float(env)
        except ValueError:
            p.error(f"BSP_WORKLOAD: expected a number, got {env!r}")
    if args.size is not None and (not math.isfinite(args.size) or args.size < 0):
        p.error(f"--size: expected a finite non-negative workload, got {args.size!r}")
    return args


def run_process(args: argparse.Namespace) -> int:
    """The process task's step loop: one kernel per superstep at the workload the run assigns it."""
    from .. import task
    from .session import open_session, under_coordinator

    by_hand = None if under_coordinator() else [args.size] * args.steps  # every step at --size
    with open_session(args.task, args.reports, args.steps, by_hand) as session:
        step = session.first_step
        with contextlib.suppress(task.RunEnded):
            while not session.ended:
                with session.step(step) as st:
                    w = st.assigned_workload
                    if w is None:  # raised inside the block: nothing is reported for this step
                        print(
                            f"kernel --process: the run assigns no workload to step {step}; give the task a "
                            "series (the kernel does not observe its workloads)",
                            file=sys.stderr,
                        )
                        raise SystemExit(2)
                    kernel(round(w * args.ops_per_unit))
                    st.workload = w
                step += 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.process:
        return run_process(args)
    kernel(round(args.size * args.ops_per_unit))
    print(json.dumps({"workload": args.size}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

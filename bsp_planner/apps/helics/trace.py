"""Record the ring federation's workloads (each federate's per superstep) as a trace the simulator replays:
one ``f<i>.csv`` per federate with the header ``workload`` (``simulate --actual``).

    python -m bsp_planner.apps.helics.trace --federates 4 --steps 30 --out traces/helics-4

The workloads come from the model (:func:`.model.serial_workloads`), which the federates reproduce exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..traces import write_trace
from .model import Ring, serial_workloads


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.trace", description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Ring):  # --federates, --cells, --hotspot, --base, --speed
        p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", required=True, help="folder for f<i>.csv")
    args = p.parse_args(argv)
    ring = Ring(*(getattr(args, f.name) for f in dataclasses.fields(Ring)))
    try:
        ring.check()
    except ValueError as exc:
        p.error(f"--{exc}")
    if args.steps < 1:
        p.error(f"--steps: expected at least 1, got {args.steps}")
    return write_trace(args.out, "f", serial_workloads(ring, args.steps), "%.6f")


if __name__ == "__main__":
    sys.exit(main())

"""Record a federation's workloads (each federate's per superstep) as a trace the simulator replays: one
``<task>.csv`` per federate with the header ``workload`` (``simulate --actual``).

    python -m bsp_planner.apps.helics.trace --federates 4 --steps 30 --out traces/helics-4
    python -m bsp_planner.apps.helics.trace --shape star --federates 5 --steps 30 --out traces/helics-star-5

The workloads come from the models (:func:`.model.serial_workloads`, :func:`.star_model.star_workloads`),
which the federates reproduce exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..traces import write_trace
from .model import Ring, serial_workloads
from .star_model import Star, federate_names, star_workloads


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=("ring", "star"), default="ring")
    for f in dataclasses.fields(Ring):  # --federates, --cells, --hotspot, --base, --speed
        p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    p.add_argument("--seed", type=int, default=Star.seed, help="star: the seed of the leaves' bursts")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", required=True, help="folder for <task>.csv")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps: expected at least 1, got {args.steps}")
    if args.shape == "star":
        if args.federates < 2:
            p.error(f"--federates: a star needs a hub and at least one leaf, got {args.federates}")
        star = Star(leaves=args.federates - 1, seed=args.seed)
        return write_trace(args.out, federate_names(star.leaves), star_workloads(star, args.steps), "%.6f")
    ring = Ring(*(getattr(args, f.name) for f in dataclasses.fields(Ring)))
    try:
        ring.check()
    except ValueError as exc:
        p.error(f"--{exc}")
    return write_trace(args.out, "f", serial_workloads(ring, args.steps), "%.6f")


if __name__ == "__main__":
    sys.exit(main())

"""Record the particles application's workloads (each rank's particle count per superstep) as a trace the
simulator replays: one ``<task>.csv`` per rank with the header ``workload`` (``simulate --actual``).

    python -m bsp_planner.apps.particles.trace --ranks 8 --particles 48000 --steps 60 --out traces/particles-8

The counts come from the serial run (:mod:`.serial`), which the rank processes reproduce exactly.
"""

from __future__ import annotations

import sys

from ..traces import write_trace
from .serial import parser, run_serial


def main(argv: list[str] | None = None) -> int:
    p = parser("trace", __doc__.split("\n\n")[0], steps=60)
    p.add_argument("--out", required=True, help="folder for p<rank>.csv")
    args = p.parse_args(argv)
    if args.ranks < 1 or args.steps < 1 or args.particles < 0:
        p.error("--ranks and --steps: expected at least 1; --particles: expected a non-negative count")
    counts, _ = run_serial(args.ranks, args.particles, args.seed, args.steps)
    return write_trace(args.out, "p", counts[: args.steps], "%d")


if __name__ == "__main__":
    sys.exit(main())

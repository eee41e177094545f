"""Record the particles application's workloads (each rank's particle count per superstep) as a trace the
simulator replays: one ``<task>.csv`` per rank with the header ``workload`` (``simulate --actual``).

    python -m bsp_planner.apps.particles.trace --ranks 8 --particles 48000 --steps 60 --out traces/particles-8

The counts come from the serial run (:mod:`.serial`), which the rank processes reproduce exactly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .main import DEFAULT_PARTICLES
from .serial import run_serial


def write_trace(folder: str | Path, ranks: int, particles: int, seed: int, steps: int) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    counts, _ = run_serial(ranks, particles, seed, steps)
    paths = [folder / f"p{r}.csv" for r in range(ranks)]
    for path, column in zip(paths, counts[:steps].T, strict=True):
        np.savetxt(path, column, fmt="%d", header="workload", comments="")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.particles.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--particles", type=int, default=DEFAULT_PARTICLES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--out", required=True, help="folder for p<rank>.csv")
    args = p.parse_args(argv)
    if args.ranks < 1 or args.steps < 1 or args.particles < 0:
        p.error("--ranks and --steps: expected at least 1; --particles: expected a non-negative count")
    for path in write_trace(args.out, args.ranks, args.particles, args.seed, args.steps):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

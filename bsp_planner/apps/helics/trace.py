"""Record the ring federation's workloads (each federate's per superstep) as a trace the simulator replays:
one ``f<i>.csv`` per federate with the header ``workload`` (``simulate --actual``).

    python -m bsp_planner.apps.helics.trace --federates 4 --steps 30 --out traces/helics-4

The workloads come from the model (:func:`.model.serial_workloads`), which the federates reproduce exactly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .model import Ring, serial_workloads


def write_trace(folder: str | Path, ring: Ring, steps: int) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"f{i}.csv" for i in range(ring.federates)]
    for path, column in zip(paths, serial_workloads(ring, steps).T, strict=True):
        np.savetxt(path, column, fmt="%.6f", header="workload", comments="")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--federates", type=int, default=Ring.federates)
    p.add_argument("--cells", type=int, default=Ring.cells)
    p.add_argument("--hotspot", type=float, default=Ring.hotspot)
    p.add_argument("--base", type=float, default=Ring.base)
    p.add_argument("--speed", type=int, default=Ring.speed)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", required=True, help="folder for f<i>.csv")
    args = p.parse_args(argv)
    ring = Ring(args.federates, args.cells, args.hotspot, args.base, args.speed)
    try:
        ring.check()
    except ValueError as exc:
        p.error(f"--{exc}")
    if args.steps < 1:
        p.error(f"--steps: expected at least 1, got {args.steps}")
    for path in write_trace(args.out, ring, args.steps):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

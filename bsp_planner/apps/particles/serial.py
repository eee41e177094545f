"""All ranks of the particles application in one process, exchanging in memory: the same physics and
the same per-rank random streams as the distributed run, so it gives the same particle counts. Used to
look at how the load drifts (``python -m bsp_planner.apps.particles.serial``) and by the tests."""

from __future__ import annotations

import argparse

import numpy as np

from .main import DEFAULT_PARTICLES, step_rng
from .model import (
    Physics,
    RankState,
    advance,
    initial_rank_state,
    merge_incoming,
    split_outgoing,
)


def run_serial(
    ranks: int, particles: int, seed: int, steps: int, physics: Physics | None = None
) -> tuple[np.ndarray, list[RankState]]:
    """(counts, states): counts[t, r] is rank r's particle count (its workload) at the start of superstep
    t, shape (steps + 1, ranks) (the last row: after the last superstep); states are the final ones."""
    physics = physics or Physics()
    states = [initial_rank_state(r, ranks, particles, seed, physics) for r in range(ranks)]
    counts = np.zeros((steps + 1, ranks), dtype=np.int64)
    for t in range(steps):
        counts[t] = [s.count for s in states]
        outgoing = []
        for r in range(ranks):
            states[r] = advance(states[r], physics, step_rng(seed, r, t))
            outgoing.append(split_outgoing(states[r], r, ranks))
        for r in range(ranks):
            from_left = outgoing[(r - 1) % ranks][2]  # what the left neighbour sent right (none with one rank)
            from_right = outgoing[(r + 1) % ranks][1]
            states[r] = merge_incoming(outgoing[r][0], from_left, from_right)
    counts[steps] = [s.count for s in states]
    return counts, states


def parser(name: str, description: str, steps: int) -> argparse.ArgumentParser:
    """The options of this module's and :mod:`.trace`'s CLI (``python -m bsp_planner.apps.particles.<name>``)."""
    p = argparse.ArgumentParser(prog=f"python -m bsp_planner.apps.particles.{name}", description=description)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--particles", type=int, default=DEFAULT_PARTICLES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=steps)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser("serial", __doc__.split("\n")[0], steps=30).parse_args(argv)
    counts, _ = run_serial(args.ranks, args.particles, args.seed, args.steps)
    print("step " + " ".join(f"{f'p{r}':>6}" for r in range(args.ranks)))
    for t, row in enumerate(counts):
        print(f"{t:>4} " + " ".join(f"{c:>6}" for c in row))


if __name__ == "__main__":
    main()

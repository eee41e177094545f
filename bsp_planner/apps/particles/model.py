"""The physics of the particles application: pure numpy, deterministic given a seed, no I/O.

Domain: the periodic interval [0, 1), split into ``ranks`` equal slices; rank r owns
[r / ranks, (r + 1) / ranks). A rank's state is three float64 arrays of shape (n,): positions ``x``,
velocities ``v`` (domain lengths per unit time) and each particle's crowd velocity ``u`` (the velocity it
relaxes towards: +U for the right-moving crowd, -U/2 for the left-moving one, 0 for the background).

Cost: one substep does a fixed number of numpy operations on an (n, 2K) array (K = ``neighbours``), so
the compute time of a superstep is proportional to the particle count n (plus a sort, n log n, small).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True)
class Physics:
    """Parameters of the simulation. Times are in simulation units; lengths in domain lengths (1.0)."""

    substeps: int = 40  # inner integration steps per superstep (work per superstep is proportional)
    neighbours: int = 8  # K: a particle interacts with the K nearest particles on each side
    dt: float = 0.0005  # one substep's time
    crowd_speed: float = 1.0  # U: the right-moving crowd's velocity (left-moving: -U/2)
    relaxation: float = 5.0  # 1/s: how fast a particle's velocity returns to its crowd's
    repulsion: float = 2e-5  # force scale of the short-range repulsion
    range_: float = 2e-4  # length scale of the repulsion (exp(-distance / range_))
    kick: float = 0.05  # standard deviation of the random velocity kick per superstep


@dataclass
class RankState:
    """The particles one rank holds: arrays of shape (n,)."""

    x: np.ndarray
    v: np.ndarray
    u: np.ndarray

    @property
    def count(self) -> int:
        return int(self.x.shape[0])

    @staticmethod
    def empty() -> RankState:
        z = np.empty(0)
        return RankState(z, z.copy(), z.copy())

    def take(self, mask: np.ndarray) -> RankState:
        return RankState(self.x[mask], self.v[mask], self.u[mask])


def slice_bounds(rank: int, ranks: int) -> tuple[float, float]:
    """[low, high) of the slice rank `rank` owns."""
    return rank / ranks, (rank + 1) / ranks


def initial_particles(total: int, seed: int, physics: Physics) -> RankState:
    """Every particle of the run at step 0 (the same on every rank, given the seed).

    Half of them are a background spread uniformly; a quarter are a right-moving crowd around x = 0.15
    and a quarter a left-moving crowd around x = 0.65 (Gaussian, standard deviation 0.04)."""
    if total < 0:
        raise ValueError(f"expected a non-negative particle count, got {total}")
    rng = np.random.default_rng(seed)
    n_right = total // 4
    n_left = total // 4
    n_back = total - n_right - n_left
    x = (
        np.concatenate(
            [
                rng.uniform(0.0, 1.0, n_back),
                rng.normal(0.15, 0.04, n_right),
                rng.normal(0.65, 0.04, n_left),
            ]
        )
        % 1.0
    )
    u = np.concatenate(
        [np.zeros(n_back), np.full(n_right, physics.crowd_speed), np.full(n_left, -physics.crowd_speed / 2)]
    )
    return RankState(x, u.copy(), u)


def initial_rank_state(rank: int, ranks: int, total: int, seed: int, physics: Physics) -> RankState:
    """The particles rank `rank` of `ranks` starts with: those of :func:`initial_particles` in its slice."""
    everything = initial_particles(total, seed, physics)
    return everything.take(owner(everything.x, ranks) == rank)


def owner(x: np.ndarray, ranks: int) -> np.ndarray:
    """The rank owning each position (positions in [0, 1)): shape (n,), int."""
    return np.minimum((x * ranks).astype(np.int64), ranks - 1)


def repulsion_forces(x_sorted: np.ndarray, physics: Physics) -> np.ndarray:
    """Short-range repulsion on each particle from its K nearest neighbours on each side, shape (n,).

    `x_sorted` is ascending. Neighbours come from a sliding window over the sorted positions (padded with
    far-away sentinels so that every particle sees exactly 2K candidates): an (n, 2K) array, so the cost is
    linear in n."""
    n = x_sorted.shape[0]
    k = physics.neighbours
    if n < 2:
        return np.zeros(n)
    far = 1e6
    padded = np.concatenate([np.full(k, -far), x_sorted, np.full(k, far)])
    window = sliding_window_view(padded, 2 * k + 1)  # (n, 2K+1), row i centred on particle i
    others = np.delete(window, k, axis=1)  # (n, 2K): the neighbours, without the particle itself
    dx = x_sorted[:, None] - others  # positive: the neighbour is on the left, it pushes right
    strength = physics.repulsion * np.exp(-np.abs(dx) / physics.range_)
    return np.sum(np.sign(dx) * strength, axis=1)


def advance(state: RankState, physics: Physics, rng: np.random.Generator) -> RankState:
    """One superstep of a rank's particles: a random kick, then `substeps` integration steps.

    Positions are wrapped into [0, 1) but may leave the rank's slice: :func:`split_outgoing` sorts them out.
    Particle order is kept sorted by position (deterministic)."""
    if state.count == 0:
        return state
    order = np.argsort(state.x, kind="stable")
    x, v, u = state.x[order], state.v[order], state.u[order]
    v = v + rng.normal(0.0, physics.kick, x.shape[0])
    for _ in range(physics.substeps):
        f = repulsion_forces(x, physics)
        v = v + physics.dt * (f + physics.relaxation * (u - v))
        x = x + physics.dt * v
    x = x % 1.0
    order = np.argsort(x, kind="stable")
    return RankState(x[order], v[order], u[order])


def split_outgoing(state: RankState, rank: int, ranks: int) -> tuple[RankState, RankState, RankState]:
    """(kept, to_left, to_right): particles in the slice, and those to hand to the left and right neighbour.

    A particle owned by another rank goes the shorter way round the ring (ties: right); one that crossed
    more than one slice is forwarded again by the neighbour next superstep."""
    if ranks == 1:
        return state, RankState.empty(), RankState.empty()
    dest = owner(state.x, ranks)
    ahead = (dest - rank) % ranks  # 0: mine; 1..ranks-1 steps to the right around the ring
    mine = ahead == 0
    right = (~mine) & (ahead <= ranks // 2)
    left = (~mine) & ~right
    return state.take(mine), state.take(left), state.take(right)


def merge_incoming(kept: RankState, from_left: RankState, from_right: RankState) -> RankState:
    """The rank's particles for the next superstep, in a deterministic order (kept, then left, then right)."""
    parts = [p for p in (kept, from_left, from_right) if p.count]
    if not parts:
        return RankState.empty()
    return RankState(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("x", "v", "u")))

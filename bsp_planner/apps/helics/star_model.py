"""The star federation's model: leaves whose load wanders irregularly, a hub that waits for them.

A star of ``leaves`` leaf federates (``l0``, ``l1``, ...) and one hub (``hub``). In every step each leaf's
workload (work units, about 10 ms of one core each, :mod:`bsp_planner.apps.kernel`) is

    base + slow.units * ((1 + sin(2 pi (t / slow.period_steps + i / leaves))) / 2) ** slow.sharpness
         + fast.units * ((1 + sin(2 pi (t / fast.period_steps + phase_i))) / 2) ** fast.sharpness + burst_i(t)

two periodic components with different periods (12 and 7 steps by default), each shifted per leaf, so
their sum peaks on a different leaf from step to step and the peaks line up the same way again only
after ``12 x 7`` steps. The slow one is peaked (sharpness 3: a pulse that passes from leaf to leaf, near
0 for most of its period), so in most steps one leaf holds about half the leaves' work and an even split
of the CPU leaves it the slowest by far; the fast one is a plain sinusoid. Plus bursts: in each step a
leaf starts a burst with probability ``bursts.chance``, of ``bursts.units x U(0.5, 1)`` units, which
decays by ``bursts.decay`` per step. The bursts are drawn from a generator seeded by ``(seed, step)``, so
a step's draws do not depend on how many steps are run, and the same seed always gives the same
workloads.

The hub computes once every leaf's value of the step has arrived: its workload is ``hub_base + hub_share x``
the sum of the leaves' workloads it received, modest and steady beside the leaves'. Everything here is a
pure function of the parameters: :func:`star_workloads` is what the federates, run for real, must report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HUB = "hub"


@dataclass(frozen=True)
class Wave:
    """A periodic component of a leaf's load: from 0 to `units` of work and back over `period_steps` steps,
    as ``((1 + sin) / 2) ** sharpness``: 1 a sinusoid, higher a narrower peak (most of a period near 0)."""

    units: float
    period_steps: float
    sharpness: float = 1.0

    def at(self, steps: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """Its work at `steps` (shape (steps, 1)) for leaves shifted by `phase` (fractions of a period, shape
        (1, leaves)): shape (steps, leaves), units."""
        return self.units * ((1 + np.sin(2 * np.pi * (steps / self.period_steps + phase))) / 2) ** self.sharpness


@dataclass(frozen=True)
class Bursts:
    """A leaf's random bursts: one starts in a step with probability `chance`, of `units` x U(0.5, 1) units of
    work, and decays by the factor `decay` in every step after."""

    chance: float
    units: float
    decay: float


@dataclass(frozen=True)
class Star:
    """The federation's parameters: `leaves` leaf federates; a leaf's floor `base` (units), its two periodic
    components `slow` and `fast` and its `bursts`; the hub's floor `hub_base` (units) and its share
    `hub_share` of the leaves' summed work; the `seed` of the bursts."""

    leaves: int = 4
    base: float = 2.0
    slow: Wave = Wave(units=16.0, period_steps=12.0, sharpness=3.0)
    fast: Wave = Wave(units=5.0, period_steps=7.0)
    bursts: Bursts = Bursts(chance=0.1, units=5.0, decay=0.6)
    hub_base: float = 2.0
    hub_share: float = 0.04
    seed: int = 5

    def check(self) -> None:
        """Raises ValueError naming the first parameter out of its range."""
        amounts = {"base": self.base, "slow.units": self.slow.units, "fast.units": self.fast.units}
        amounts |= {"bursts.units": self.bursts.units, "hub_base": self.hub_base, "hub_share": self.hub_share}
        rules: list[tuple[str, float, bool, str]] = [("leaves", self.leaves, self.leaves >= 1, "at least 1")]
        rules += [(name, v, math.isfinite(v) and v >= 0, "a finite non-negative number") for name, v in amounts.items()]
        for name, wave in (("slow", self.slow), ("fast", self.fast)):
            period, sharp = wave.period_steps, wave.sharpness
            rules.append((f"{name}.period_steps", period, math.isfinite(period) and period > 0, "a positive number"))
            rules.append((f"{name}.sharpness", sharp, math.isfinite(sharp) and sharp > 0, "a positive number"))
        for name, p in (("bursts.chance", self.bursts.chance), ("bursts.decay", self.bursts.decay)):
            rules.append((name, p, 0 <= p <= 1, "0..1"))
        for name, value, ok, expected in rules:
            if not ok:
                raise ValueError(f"{name}: expected {expected}, got {value}")


def federate_names(leaves: int) -> list[str]:
    """The federates' names (and the job's task names), in index order: ``l0`` .. ``l<leaves-1>``, ``hub``."""
    return [*(f"l{i}" for i in range(leaves)), HUB]


def _bursts(star: Star, step: int) -> np.ndarray:
    """The bursts the leaves start in `step`, shape (leaves,), units; drawn from (seed, step) alone."""
    rng = np.random.default_rng([star.seed, step])
    starts = rng.random(star.leaves) < star.bursts.chance
    heights = star.bursts.units * rng.uniform(0.5, 1.0, star.leaves)
    return np.where(starts, heights, 0.0)


def leaf_workloads(star: Star, steps: int) -> np.ndarray:
    """Every leaf's workload per step, shape (steps, leaves), rounded to 1e-6 units (so that what a leaf
    reports and the serial value print alike)."""
    star.check()
    t = np.arange(steps)[:, None]
    i = np.arange(star.leaves)[None, :]
    slow = star.slow.at(t, i / star.leaves)
    # the fast component's phase walks the leaves in another order than the slow one's, so the two
    # components' peaks fall on different leaves
    fast = star.fast.at(t, (i * 0.618) % 1.0)
    burst = np.zeros((steps, star.leaves))
    carried = np.zeros(star.leaves)
    for s in range(steps):
        carried = carried * star.bursts.decay + _bursts(star, s)
        burst[s] = carried
    return np.round(star.base + slow + fast + burst, 6)


def hub_workload(star: Star, leaf_values: Sequence[float]) -> float:
    """The hub's workload in a step, from the leaves' workloads of that step it received (units)."""
    return round(star.hub_base + star.hub_share * float(sum(leaf_values)), 6)


def star_workloads(star: Star, steps: int) -> np.ndarray:
    """Every federate's workload per step, shape (steps, leaves + 1), columns in :func:`federate_names`
    order (the hub last): what a run of the federation reports."""
    leaves = leaf_workloads(star, steps)
    hub = np.array([hub_workload(star, row) for row in leaves]).reshape(steps, 1)
    return np.hstack([leaves, hub])

"""The star federation's model: leaves whose load wanders irregularly, a hub that waits for them.

A star of ``leaves`` leaf federates (``l0``, ``l1``, ...) and one hub (``hub``). In every step each leaf's
workload (work units, about 10 ms of one core each, :mod:`bsp_planner.apps.kernel`) is

    base + slow * (1 + sin(2 pi (t / slow_period + i / leaves))) / 2
         + fast * (1 + sin(2 pi (t / fast_period + phase_i))) / 2 + burst_i(t)

two periodic components with different periods, each shifted per leaf (so their sum peaks on a different
leaf from step to step and the peaks never line up the same way twice within ``slow_period x
fast_period`` steps), plus bursts: in each step a leaf starts a burst with probability ``burst_chance``,
of ``burst x U(0.5, 1)`` units, which decays by ``burst_decay`` per step. The bursts are drawn from a
generator seeded by ``(seed, step)``, so a step's draws do not depend on how many steps are run, and the
same seed always gives the same workloads.

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
class Star:
    """The federation's parameters: `leaves` leaf federates; a leaf's floor `base`, its two periodic
    components (`slow` units over `slow_period` steps, `fast` units over `fast_period` steps), its bursts
    (started with probability `burst_chance` per step, up to `burst` units, decaying by `burst_decay` per
    step); the hub's floor `hub_base` and its share `hub_share` of the leaves' summed work; the `seed`."""

    leaves: int = 4
    base: float = 2.0
    slow: float = 10.0
    slow_period: float = 12.0
    fast: float = 6.0
    fast_period: float = 7.0
    burst_chance: float = 0.12
    burst: float = 8.0
    burst_decay: float = 0.5
    hub_base: float = 3.0
    hub_share: float = 0.05
    seed: int = 5

    def check(self) -> None:
        """ValueError naming the parameter that is out of range."""
        if self.leaves < 1:
            raise ValueError(f"leaves: expected at least 1, got {self.leaves}")
        for name in ("base", "slow", "fast", "burst", "hub_base", "hub_share"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite non-negative number, got {value}")
        for name in ("slow_period", "fast_period"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name}: expected a positive number of steps, got {getattr(self, name)}")
        for name in ("burst_chance", "burst_decay"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: expected 0..1, got {getattr(self, name)}")


def federate_names(leaves: int) -> list[str]:
    """The federates' names (and the job's task names), in index order: ``l0`` .. ``l<leaves-1>``, ``hub``."""
    return [*(f"l{i}" for i in range(leaves)), HUB]


def _bursts(star: Star, step: int) -> np.ndarray:
    """The bursts the leaves start in `step`, shape (leaves,), units; drawn from (seed, step) alone."""
    rng = np.random.default_rng([star.seed, step])
    starts = rng.random(star.leaves) < star.burst_chance
    heights = star.burst * rng.uniform(0.5, 1.0, star.leaves)
    return np.where(starts, heights, 0.0)


def leaf_workloads(star: Star, steps: int) -> np.ndarray:
    """Every leaf's workload per step, shape (steps, leaves), rounded to 1e-6 units (so that what a leaf
    reports and the serial value print alike)."""
    star.check()
    t = np.arange(steps)[:, None]
    i = np.arange(star.leaves)[None, :]
    slow = star.slow * (1 + np.sin(2 * np.pi * (t / star.slow_period + i / star.leaves))) / 2
    # the fast component's phase walks the leaves in another order than the slow one's, so the two
    # components' peaks fall on different leaves
    fast_phase = (i * 0.618) % 1.0
    fast = star.fast * (1 + np.sin(2 * np.pi * (t / star.fast_period + fast_phase))) / 2
    burst = np.zeros((steps, star.leaves))
    carried = np.zeros(star.leaves)
    for s in range(steps):
        carried = carried * star.burst_decay + _bursts(star, s)
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

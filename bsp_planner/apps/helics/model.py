"""The ring federation's model: a hotspot of work carried around a ring of federates.

The ring is ``federates x cells`` cells; federate i owns cells ``[i*cells, (i+1)*cells)``. The field on
it starts as a periodic Gaussian bump (``hotspot`` work units in all, width a quarter of a federate's
slice) centred on federate 0's slice, and every superstep it moves ``speed`` cells to the right, exactly
(the cells are shifted, never interpolated, so no work is lost or smeared): federate i hands its last
``speed`` cells to federate i+1 and takes federate i-1's. A federate's workload in a step is ``base`` plus
the sum of the cells it holds, in work units (about 10 ms of one core each, :mod:`bsp_planner.apps.kernel`).

So the hotspot crosses one federate's slice every ``cells / speed`` steps: with the defaults (10 cells, 1
cell per step) it sits on federate 0 at step 0 and on federate 3 at step 30, and the rest of the ring runs
at the base load. Everything here is a pure function of the parameters: :func:`serial_workloads` is what
the federates, run for real, must report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ring:
    """The federation's parameters: `federates` in the ring, `cells` per federate, the hotspot's total
    work `hotspot` (units), the per-federate floor `base` (units) and the hotspot's `speed` (cells/step)."""

    federates: int = 4
    cells: int = 10
    hotspot: float = 30.0
    base: float = 2.0
    speed: int = 1

    def check(self) -> None:
        """ValueError naming the parameter that is out of range."""
        if self.federates < 1:
            raise ValueError(f"federates: expected at least 1, got {self.federates}")
        if self.cells < 1:
            raise ValueError(f"cells: expected at least 1, got {self.cells}")
        if not 0 <= self.speed <= self.cells:
            raise ValueError(f"speed: expected 0..cells ({self.cells}) cells per step, got {self.speed}")
        if not (np.isfinite(self.hotspot) and self.hotspot >= 0):
            raise ValueError(f"hotspot: expected a finite non-negative amount of work, got {self.hotspot}")
        if not (np.isfinite(self.base) and self.base >= 0):
            raise ValueError(f"base: expected a finite non-negative workload, got {self.base}")


def initial_field(ring: Ring) -> np.ndarray:
    """The whole ring's cells at step 0, shape (federates * cells,), in work units summing to `hotspot`."""
    n = ring.federates * ring.cells
    centre = (ring.cells - 1) / 2.0  # the middle of federate 0's slice
    sigma = max(ring.cells / 4.0, 0.5)
    d = np.abs(np.arange(n) - centre)
    d = np.minimum(d, n - d)  # periodic distance around the ring
    bump = np.exp(-0.5 * (d / sigma) ** 2)
    return ring.hotspot * bump / bump.sum()


def local_cells(field: np.ndarray, ring: Ring, index: int) -> np.ndarray:
    """Federate `index`'s slice of the whole field (a copy), shape (cells,)."""
    return field[index * ring.cells : (index + 1) * ring.cells].copy()


def advance(cells: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    """One step of the conveyor on one federate: the left neighbour's outgoing cells enter on the left,
    the same number leave on the right (:func:`outgoing` of the step before)."""
    return np.concatenate([incoming, cells[: len(cells) - len(incoming)]])


def outgoing(cells: np.ndarray, ring: Ring) -> np.ndarray:
    """The cells this federate hands its right neighbour after a step, shape (speed,)."""
    return cells[len(cells) - ring.speed :].copy() if ring.speed else cells[:0].copy()


def workload(cells: np.ndarray, ring: Ring) -> float:
    """A federate's workload in work units: the floor plus the work its cells hold (rounded to 1e-6 so that
    the value reported and the serial one print alike)."""
    return round(ring.base + float(np.sum(cells)), 6)


def serial_workloads(ring: Ring, steps: int) -> np.ndarray:
    """Every federate's workload per step, shape (steps, federates): what a run of the federation reports,
    computed in one process by the same functions the federates use."""
    ring.check()
    cells = [local_cells(initial_field(ring), ring, i) for i in range(ring.federates)]
    out = np.zeros((steps, ring.federates))
    for t in range(steps):
        if t > 0:
            sent = [outgoing(c, ring) for c in cells]
            cells = [advance(cells[i], sent[i - 1]) for i in range(ring.federates)]
        out[t] = [workload(c, ring) for c in cells]
    return out

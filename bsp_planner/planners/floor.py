"""`floor`: for every step, the exact minimum over all configurations within the budget (and the
nodes, on a cluster) of the slowest task's time (min-max), with no reconfiguration cost. No strategy
can beat it: the lower bound. The computation lives with the allocators (`allocation/floor.py`), which
use it too.
"""

from __future__ import annotations

from ..allocation.floor import floor_levels

__all__ = ["floor_levels"]

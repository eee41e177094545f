"""Example BSP programs written for bsp-planner's task interface (docs/tasks.md).

- :mod:`bsp_planner.apps.particles`: a long-running BSP application (one process per rank) whose load
  drifts between ranks because of its own computation; a ``process`` task.
- :mod:`bsp_planner.apps.kernel`: a tiny CPU kernel run afresh every superstep; a ``command`` task.
"""

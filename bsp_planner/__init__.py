"""bsp-planner: split a CPU budget among the tasks of a BSP job and decide when to reconfigure."""

__version__ = "0.1.0"

"""Executors: what applies a planner's configuration and runs a step (see `bsp_planner.loop`).

`simulated.py` charges durations from duration tables; a live executor (ZooKeeper barriers, cgroup
quotas, Kubernetes) lives with the runtime and implements the same `loop.Executor` protocol.
"""

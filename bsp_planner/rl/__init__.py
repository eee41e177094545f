"""Reinforcement learning: a Gymnasium environment for reconfiguration decisions and agents trained on it.

Modules: settings (env files, no heavy imports), features (observations, numpy only), data (the
precomputed tables), env (the gymnasium.Env, registered as `bsp_planner/Reconfigure-v0`), agent
(saving/loading agents with their metadata), train, cli. Importing this package imports nothing heavy.
"""

"""Reinforcement learning: a Gymnasium environment for reconfiguration decisions and agents trained on it.

    bsp-planner rl train                 # DQN on envs/default.toml -> agents/default/dqn.zip (+ .json)
    bsp-planner rl evaluate              # the agent vs MPC on the held-out steps
    bsp-planner simulate -s dqn,mpc      # a trained agent is one more planner (`dqn`, or `rl:PATH`)

Modules: settings (env files, no heavy imports), features (observations, numpy only), data (the
precomputed tables), env (the gymnasium.Env, registered as `bsp_planner/Reconfigure-v0`), agent
(saving/loading agents with their metadata), train, cli. Importing this package imports nothing heavy.
"""

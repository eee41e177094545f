"""Workload forecasters (LSTM, gbm, ensembles, statistical baselines), listed in `registry.py`, with their
training pipeline, forecast files and `bsp-planner forecast`."""

"""How long a task's step takes: the interpolated performance model, its online learning, co-location
interference and the cluster of nodes the tasks are placed on."""

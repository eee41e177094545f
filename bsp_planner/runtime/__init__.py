"""Live runs (`bsp-planner run`, `worker`, `zk`): the coordinator that plans each step as `simulate` would,
its executor over ZooKeeper barriers, the tasks' workers and declared services, run folders that resume,
and the backends that place the tasks (local cgroup quotas or Kubernetes pods)."""

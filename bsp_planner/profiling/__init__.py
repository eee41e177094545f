"""`bsp-planner profile`: tasks timed over a grid of CPU limits x workload sizes and in pairs, under real
cgroup quotas or as Kubernetes Jobs (with the in-pod measurers), written as profiles the model reads."""

"""The Kubernetes backend's view of the nodes: does a configuration fit, and where may the run plan
(where the account may read nodes: see jobs/k8s/components/node-reader)."""

from __future__ import annotations

from collections.abc import Mapping

from ....k8s import names as N
from ....k8s.binpack import DoesNotFit, NodeCapacity, fits_in_place, node_capacities, pack
from ....k8s.cluster import pod_state
from .. import TaskLost
from .pods import KubernetesPods


class ConfigurationDoesNotFit(TaskLost):
    """A configuration cannot be placed on the nodes' allocatable CPU (checked before any pod changes, so
    the run stops where it is and resumes once the cluster has room). Mid-run, the run first re-reads the
    nodes and re-plans on what is free (executor.py)."""

    replan_on_nodes = True


class KubernetesNodes(KubernetesPods):
    """Reads the nodes and the pods on them, and checks configurations against them."""

    def _node_capacities(self, *, movable_own: bool) -> list[NodeCapacity] | None:
        if not self.fit_check:
            return None
        nodes = self._cluster.list_nodes()
        pods = self._cluster.list_all_pods() if nodes is not None else None
        if nodes is None or pods is None:
            self._warn(
                "cannot read the cluster's nodes and pods (the Role is namespaced): the fit check is off and a "
                "pod that cannot be placed stops the run after the pending timeout; apply "
                "jobs/k8s/components/node-reader to turn it on"
            )
            return None
        own = set(N.pod_name(self.run_key, t) for t in self.tasks)

        def movable(pod: Mapping) -> bool:
            meta = pod.get("metadata") or {}
            return (
                movable_own
                and meta.get("namespace") == self.namespace
                and ((meta.get("labels") or {}).get(N.LABEL_RUN) == self.run_key or meta.get("name") in own)
            )

        return node_capacities(nodes, pods, movable=movable, node_selector=self.node_selector)

    def _check_fit(self, millicores_max: float, budget_millicores: float, path=None) -> None:
        """Where nodes can be read: the budget fits the schedulable nodes' free CPU, the largest task one node."""
        nodes = self._node_capacities(movable_own=True)
        if nodes is None:
            return
        usable = [c for c in nodes if c.unschedulable is None]
        free = sum(max(0.0, c.free_m) for c in usable)
        biggest = max((c.free_m for c in usable), default=0.0)
        where = "; ".join(c.describe() for c in nodes)
        if budget_millicores > free + 1e-6:
            raise ConfigurationDoesNotFit(
                f"the CPU budget ({budget_millicores:g}m) exceeds the free allocatable CPU of the schedulable "
                f"nodes ({free:.0f}m: {where}); lower cpu.budget_millicores or add nodes",
                path=path,
                field="cpu.budget_millicores",
            )
        if millicores_max > biggest + 1e-6:
            raise ConfigurationDoesNotFit(
                f"one task may get up to {millicores_max:g}m but no node has more than {biggest:.0f}m free "
                f"({where}); lower cpu.max_millicores",
                path=path,
                field="cpu.max_millicores",
            )

    def cluster_nodes(self) -> list[tuple[str, float]] | None:
        """Every schedulable node (not cordoned, tainted, unready, or left out by the node selector) with
        its allocatable CPU less the requests of the pods that are not this run's: the cluster the run
        plans on. None where nodes cannot be read (the fit check is off): the run plans one pool."""
        nodes = self._node_capacities(movable_own=True)
        if nodes is None:
            return None
        return [(c.name, max(0.0, c.free_m)) for c in nodes if c.unschedulable is None]

    def check_configuration(self, millicores: Mapping[str, float]) -> dict[str, str]:
        """Can `millicores` (task -> CPU) be applied? Returns task -> how: 'start', 'keep', 'in-place' or
        'recreate' (resize_task follows this plan), or raises ConfigurationDoesNotFit.

        In in-place mode, a running pod keeps its node: its increase must fit there (decreases first free
        room); a task whose increase does not fit there is recreated instead, and every pod to (re)create
        must then be packed into what is left. In recreate mode all changed pods are packed again."""
        plan: dict[str, str] = {}
        for task, m in millicores.items():
            t = self.tasks.get(task)
            plan[task] = "start" if t is None else "keep" if abs(t.millicores - m) < 0.5 else self.mode
        nodes = self._node_capacities(movable_own=False)
        if nodes is not None:
            try:
                plan = self._fit(millicores, plan, nodes)
            except DoesNotFit as exc:
                raise ConfigurationDoesNotFit(
                    f"the configuration does not fit the cluster: {exc}", field="configuration"
                ) from None
        for task, how in plan.items():
            if task in self.tasks:
                self.tasks[task].plan = how
        return plan

    def _fit(self, millicores: Mapping[str, float], plan: dict[str, str], nodes: list) -> dict[str, str]:
        # current occupancy of this run's pods, by node
        where: dict[str, str | None] = {
            task: (t.last and t.last.node) or pod_state(self._cluster.get_pod(self._pod_name(task))).node
            for task, t in self.tasks.items()
        }
        in_place = {
            task: (node, self.tasks[task].millicores, float(millicores[task]))
            for task, how in plan.items()
            if how == "in-place" and (node := where.get(task))
        }
        for task, fits in fits_in_place(in_place, nodes).items():
            if not fits and task in self.processes:
                node, was, want = in_place[task]
                raise ConfigurationDoesNotFit(
                    f"task {task!r}'s CPU cannot grow in place from {was:g}m to {want:g}m on its node {node} (not enough "
                    "free allocatable CPU there), and a process task is never recreated behind its back (its state is "
                    "in memory)",
                    field="configuration",
                )
            if not fits:
                plan[task] = "recreate"
        # the pods that will be (re)created leave their node first; the in-place ones change in place
        room = {c.name: c.free_m for c in nodes}
        for task, how in plan.items():
            if how == "recreate" and where.get(task) in room:
                room[where[task]] += self.tasks[task].millicores
            elif how == "in-place" and where.get(task) in room:
                room[where[task]] -= float(millicores[task]) - self.tasks[task].millicores
        placed = {t: float(millicores[t]) for t, how in plan.items() if how in ("start", "recreate")}
        for task in [t for t in placed if self.placement.get(t) in room]:  # pinned: its own node must hold it
            node = self.placement[task]
            if placed[task] > room[node] + 1e-6:
                raise DoesNotFit(
                    f"task {task!r} needs {placed[task]:g}m on its node {node}, which has {room[node]:.0f}m free"
                )
            room[node] -= placed.pop(task)
        if placed:
            caps = [
                NodeCapacity(c.name, c.allocatable_m, c.allocatable_m - room[c.name], c.unschedulable) for c in nodes
            ]
            pack(placed, caps)
        return plan

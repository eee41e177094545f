"""A cluster is nodes: their CPU, where the tasks run, and what a configuration costs on them.

An experiment's `[[node]]` tables (name, allocatable `cpu_millicores`, optionally the `tasks` placed
there) become a `Cluster`. Without them there is no cluster and everything plans one pool.

* Placement: given (every task listed on exactly one node) or chosen before the run from the
  predictions (`place_balanced`: each node's forecast peak demand balanced against its capacity).
* Constraint: in level units a node can hand out `floor((cpu - tasks x min) / step)` steps to its
  tasks (`Cluster.limits`), on top of the job's budget; the allocators take it (`allocation/nodes.py`).
* Cost of a change (`ClusterExecutor`): a configuration that fits the tasks' nodes is an in-place
  resize (`in_place_s`); one that does not makes some tasks move to another node, a recreate
  (`recreate_s`, a checkpoint), which a task that cannot restore its state (a long-running `process`
  without `restorable = true`) cannot survive: a live run stops there (`ConfigurationDoesNotFit`); the
  simulation counts it as a stop.

Shapes: levels (steps, tasks) int level indices; millicores (tasks,) or (steps, tasks); node_of (tasks,)
int node indices; capacity (nodes,) millicores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..allocation.base import CpuLevels
from ..allocation.node_limits import NodeLimits
from ..core.errors import InputError

if TYPE_CHECKING:
    from ..core.steps import StepObservation


@dataclass(frozen=True)
class Cluster:
    names: tuple[str, ...]  # node names
    capacity_millicores: np.ndarray  # (nodes,) allocatable CPU
    node_of: np.ndarray  # (tasks,) initial placement: node index of each task
    can_restore: np.ndarray  # (tasks,) bool: survives a recreate (stateless between steps)
    placement: str  # "given" or "balanced" (chosen from the predictions)

    def limits(self, cpu: CpuLevels, node_of: np.ndarray | None = None) -> NodeLimits:
        """The nodes' capacity in CPU steps above their tasks' minimum, for a placement (default: the initial)."""
        where = self.node_of if node_of is None else node_of
        count = np.bincount(where, minlength=len(self.names))
        spare = self.capacity_millicores - count * cpu.min_millicores
        steps = np.floor(spare / cpu.step_millicores + 1e-9).astype(np.int64)
        return NodeLimits(np.asarray(where, dtype=np.int64), np.maximum(steps, 0))

    def used_millicores(self, millicores: np.ndarray, node_of: np.ndarray) -> np.ndarray:
        """millicores (..., tasks) -> (..., nodes) CPU held on each node, tasks placed by node_of (tasks,)."""
        one_hot = (np.asarray(node_of)[:, None] == np.arange(len(self.names))[None, :]).astype(np.float64)
        used: np.ndarray = np.asarray(millicores, dtype=np.float64) @ one_hot
        return used


def cluster_from_settings(nodes: list, task_names: list[str], can_restore: list[bool], cpu: CpuLevels) -> Cluster:
    """`[[node]]` tables -> a Cluster whose placement is given (every task listed) or still to choose
    (no task listed: node_of all -1 until `with_placement`). Errors name the node's field."""
    names = tuple(n.name for n in nodes)
    cap = np.array([n.cpu_millicores for n in nodes], dtype=np.float64)
    index = {t: i for i, t in enumerate(task_names)}
    node_of = np.full(len(task_names), -1, dtype=np.int64)
    listed = any(n.tasks for n in nodes)
    for j, n in enumerate(nodes):
        for t in n.tasks:
            if t not in index:
                raise InputError(f"unknown task {t!r}; the job has {', '.join(task_names)}", field=f"node[{j}].tasks")
            if node_of[index[t]] >= 0:
                raise InputError(
                    f"task {t!r} is already placed on node {names[node_of[index[t]]]!r}; place each task on one node",
                    field=f"node[{j}].tasks",
                )
            node_of[index[t]] = j
    if listed and np.any(node_of < 0):
        missing = task_names[int(np.argmax(node_of < 0))]
        raise InputError(
            f"task {missing!r} is on no node; list every task on one node, or none (the placement is then chosen "
            "from the predictions)",
            field="node",
        )
    if listed:
        count = np.bincount(node_of, minlength=len(names))
        for j in range(len(names)):
            if count[j] * cpu.min_millicores > cap[j] + 1e-9:
                raise InputError(
                    f"node {names[j]!r} has {cap[j]:g}m, less than its {count[j]} tasks x min "
                    f"{cpu.min_millicores:g}m = {count[j] * cpu.min_millicores:g}m",
                    field=f"node[{j}].cpu_millicores",
                )
    slots = np.floor(cap / cpu.min_millicores + 1e-9).sum()
    if slots < len(task_names):
        raise InputError(
            f"the nodes hold at most {int(slots)} tasks at the minimum {cpu.min_millicores:g}m each, the job has "
            f"{len(task_names)}; add nodes or CPU",
            field="node",
        )
    return Cluster(names, cap, node_of, np.asarray(can_restore, dtype=bool), "given" if listed else "balanced")


def place_balanced(
    demand_millicores: np.ndarray,
    capacity_millicores: np.ndarray,
    min_millicores: float,
    slowdown: np.ndarray | None = None,
) -> np.ndarray:
    """A placement that balances each node's peak demand against its capacity.

    demand_millicores (steps, tasks): what each task is predicted to want at each step (e.g. its CPU in
    the per-step min-max configuration). Tasks in order of mean demand, largest first, each go to the
    node whose peak over the steps of (its tasks' demand + this task's) / capacity is lowest, among the
    nodes with room for one more task at the minimum (ties: the lower index). Returns node_of (tasks,).

    slowdown (tasks, tasks), optional: a pair profile's slowdowns ([i, j]: task i while j co-runs; see
    `performance.co_location_slowdown`). Then the placement also avoids the pairs that hurt: a task
    slowed down s times needs about s times the CPU for the same step time, so a node's demand is its
    tasks' demand each times its co-location factor (`improve_placement` can refine the result against
    the performance model itself, as simulate/placement.py does).
    """
    d = np.asarray(demand_millicores, dtype=np.float64)
    cap = np.asarray(capacity_millicores, dtype=np.float64)
    n_nodes = cap.size
    load = np.zeros((n_nodes, d.shape[0]))
    count = np.zeros(n_nodes, dtype=np.int64)
    node_of = np.full(d.shape[1], -1, dtype=np.int64)
    left = d.shape[1]
    for i in np.argsort(-d.mean(axis=0), kind="stable"):
        left -= 1
        room = cap - (count + 1) * min_millicores >= -1e-9
        # keep enough minimum-sized slots elsewhere for the tasks still to place
        slots_after = np.floor(cap / min_millicores + 1e-9) - count
        spare = slots_after.sum() - 1 >= left
        ok = room & spare
        if slowdown is None:
            peak = ((load + d[:, i][None, :]) / cap[:, None]).max(axis=1)
        else:  # each node's demand with this task added, every task on it times its co-location factor
            peak = (
                np.array(
                    [_node_demand(d, np.append(np.nonzero(node_of == j)[0], i), slowdown).max() for j in range(n_nodes)]
                )
                / cap
            )
        j = int(np.argmin(np.where(ok, peak, np.inf)))
        node_of[i] = j
        load[j] += d[:, i]
        count[j] += 1
    return node_of


def _node_demand(d: np.ndarray, members: np.ndarray, slowdown: np.ndarray | None) -> np.ndarray:
    """(steps,) demand of the tasks `members` on one node, each times its co-location factor."""
    if slowdown is None or members.size < 2:
        return d[:, members].sum(axis=1)
    s = np.maximum(slowdown[np.ix_(members, members)], 1.0)
    np.fill_diagonal(s, 1.0)
    out: np.ndarray = d[:, members] @ s.prod(axis=1)
    return out


def improve_placement(node_of: np.ndarray, slots: np.ndarray, cost: Callable[[np.ndarray], float]) -> np.ndarray:
    """Local search from `node_of` (tasks,): each round makes the single move or pairwise swap of tasks
    that lowers `cost(node_of)` most, until none does (or after 4 x tasks rounds). A node never holds
    more than its `slots` (nodes,) tasks. Returns the placement found."""
    n_nodes, n = slots.size, node_of.size
    best = np.asarray(node_of, dtype=np.int64).copy()
    best_cost = cost(best)
    for _ in range(4 * n):
        found = None
        count = np.bincount(best, minlength=n_nodes)
        for i in range(n):
            for j in range(n_nodes):
                if j != best[i] and count[j] < slots[j]:
                    cand = best.copy()
                    cand[i] = j
                    if (c := cost(cand)) < best_cost - 1e-12:
                        found, best_cost = cand, c
            for k in range(i + 1, n):
                if best[k] != best[i]:
                    cand = best.copy()
                    cand[i], cand[k] = best[k], best[i]
                    if (c := cost(cand)) < best_cost - 1e-12:
                        found, best_cost = cand, c
        if found is None:
            break
        best = found
    return best


def repack(millicores: np.ndarray, node_of: np.ndarray, capacity_millicores: np.ndarray) -> np.ndarray | None:
    """Where the tasks would run for a configuration that does not fit their nodes, moving few tasks:
    from every overfull node its largest tasks leave (until it fits) for the node with the most free
    CPU that holds them; if that fails, a first-fit-decreasing packing of all tasks. None: nothing holds
    them (no placement fits the configuration). millicores (tasks,); returns node_of (tasks,)."""
    mc = np.asarray(millicores, dtype=np.float64)
    cap = np.asarray(capacity_millicores, dtype=np.float64)
    new = np.asarray(node_of, dtype=np.int64).copy()
    used: np.ndarray = np.bincount(new, weights=mc, minlength=cap.size).astype(np.float64)
    for j in np.nonzero(used > cap + 1e-6)[0]:
        for i in sorted(np.nonzero(new == j)[0], key=lambda t: -mc[t]):
            if used[j] <= cap[j] + 1e-6:
                break
            free = cap - used
            free[j] = -np.inf
            k = int(np.argmax(free))
            if free[k] + 1e-6 < mc[i]:
                continue
            new[i], used[j], used[k] = k, used[j] - mc[i], used[k] + mc[i]
    if np.all(used <= cap + 1e-6):
        return new
    used = np.zeros(cap.size)
    for i in np.argsort(-mc, kind="stable"):
        fit = np.nonzero(used + mc[i] <= cap + 1e-6)[0]
        if not fit.size:
            return None
        k = int(fit[0])
        new[i], used[k] = k, used[k] + mc[i]
    return new


@dataclass
class ClusterExecutor:
    """An executor (see `loop.py`) that charges each change by its method on the cluster.

    inner: the executor that runs the steps (the simulated one); every change the plan makes is applied
    to the tasks' current nodes: in place (in_place_s) when it fits them, else the tasks that must move
    are recreated on other nodes (recreate_s, counted in `recreates`; `stops` counts the steps where a
    task that cannot restore would have had to move: a live run stops at the first). A planner that
    moves tasks itself (`mpc-place`) writes the placement it chose into `planned["node_of"]`: that move
    is a recreate it priced (`planned_moves`). The first step starts every task, so its placement is
    free (the scheduler places fresh pods)."""

    inner: object
    cluster: Cluster
    cpu: CpuLevels
    in_place_s: float
    recreate_s: float
    # the run's table a planner that moves tasks writes its placement into ("node_of"); None: none does
    planned: dict | None = None
    node_of: np.ndarray = field(init=False)
    placements: list[np.ndarray] = field(default_factory=list)  # node_of of every step applied
    planned_moves: int = 0  # recreates the planner chose (and priced)
    recreates: int = 0
    moved_tasks: int = 0
    stops: int = 0
    unplaceable: int = 0  # steps whose configuration no placement holds

    def __post_init__(self) -> None:
        self.node_of = self.cluster.node_of.copy()
        self.n_tasks = int(self.node_of.size)

    def apply(self, step: int, levels: np.ndarray, reconfigure: bool) -> float:
        self.inner.apply(step, levels, reconfigure)  # type: ignore[attr-defined]
        mc = self.cpu.to_millicores(levels)
        cost = self.in_place_s if reconfigure else 0.0
        want = None if self.planned is None else self.planned.get("node_of")
        if want is not None and not np.array_equal(want, self.node_of):
            moved = want != self.node_of
            self.node_of = np.asarray(want, dtype=np.int64).copy()
            if step > 0:
                self.planned_moves += 1
                self.moved_tasks += int(moved.sum())
                self.stops += int(np.any(moved & ~self.cluster.can_restore))
                cost = self.recreate_s
        used = self.cluster.used_millicores(mc, self.node_of)
        if np.any(used > self.cluster.capacity_millicores + 1e-6):
            new = repack(mc, self.node_of, self.cluster.capacity_millicores)
            if new is None:
                self.unplaceable += 1
                self.stops += 1
            else:
                moved = new != self.node_of
                if reconfigure or step > 0:
                    self.recreates += 1
                    self.moved_tasks += int(moved.sum())
                    self.stops += int(np.any(moved & ~self.cluster.can_restore))
                    cost = self.recreate_s
                self.node_of = new
        self.placements.append(self.node_of.copy())
        return cost

    def observe(self, step: int) -> StepObservation:
        obs: StepObservation = self.inner.observe(step)  # type: ignore[attr-defined]
        return obs

    def notes(self, levels: np.ndarray) -> dict:
        """What the run did on the nodes, for the report: levels (steps, tasks) as run."""
        placement = np.stack(self.placements) if self.placements else np.empty((0, self.n_tasks), dtype=np.int64)
        return {
            "recreates": self.recreates + self.planned_moves,
            "planned_recreates": self.planned_moves,
            "moved_tasks": self.moved_tasks,
            "stops": self.stops,
            "unplaceable_steps": self.unplaceable,
            "node_utilisation": node_utilisation(self.cluster, self.cpu.to_millicores(levels), placement),
        }


def node_utilisation(cluster: Cluster, millicores: np.ndarray, placement: np.ndarray) -> dict[str, dict[str, float]]:
    """Per node: mean and peak share of its CPU the tasks held. millicores, placement: (steps, tasks)."""
    out: dict[str, dict[str, float]] = {}
    for j, name in enumerate(cluster.names):
        held = np.where(placement == j, millicores, 0.0).sum(axis=1) / cluster.capacity_millicores[j]
        out[name] = {
            "mean": round(float(held.mean()), 4) if held.size else 0.0,
            "peak": round(float(held.max()), 4) if held.size else 0.0,
        }
    return out

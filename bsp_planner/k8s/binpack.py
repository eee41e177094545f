"""Does a configuration fit the cluster? Bin packing of the tasks' CPU requests over the nodes.

The scheduler places a pod on a node only if the node's allocatable CPU minus the requests of the pods
already bound to it covers the pod's request. Before applying a configuration the backend asks the
same question for all tasks at once: an exact search (tasks are few) whose first try is best fit
decreasing, so a configuration that cannot be placed is refused with the numbers that say
why, before any pod is deleted, instead of leaving pods Pending.

Everything here reads plain dicts in the API's camelCase form (a node, a pod as the server returns
them), so it runs the same on objects from the client, from the fake API server or from YAML.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .names import cpu_millicores

EPS = 1e-6
SEARCH_LIMIT = 200_000  # exact-search steps before giving up (then the answer is "unknown")


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    allocatable_m: float
    requested_m: float  # by pods the packing does not move
    unschedulable: str | None = None  # why no new pod can go there (None: it can)

    @property
    def free_m(self) -> float:
        return self.allocatable_m - self.requested_m

    def describe(self) -> str:
        text = f"{self.name}: {self.free_m:.0f}m free of {self.allocatable_m:.0f}m allocatable"
        return text + (f" ({self.unschedulable})" if self.unschedulable else "")


class DoesNotFit(Exception):
    """The configuration cannot be placed on the nodes; the message says how far off it is."""


def _containers_request(containers: Iterable[Mapping] | None) -> float:
    return sum(cpu_millicores(((c.get("resources") or {}).get("requests") or {}).get("cpu")) for c in containers or ())


def pod_cpu_request(pod: Mapping) -> float:
    """A pod's effective CPU request as the scheduler counts it: its containers' requests plus sidecar
    (restartable) init containers, or the largest plain init container if more, plus the pod overhead."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    plain_inits = [c for c in inits if c.get("restartPolicy") != "Always"]
    running = _containers_request(spec.get("containers")) + _containers_request(sidecars)
    init_peak = max((_containers_request([c]) + _containers_request(sidecars) for c in plain_inits), default=0.0)
    overhead = cpu_millicores((spec.get("overhead") or {}).get("cpu"))
    return max(running, init_peak) + overhead


def pod_holds_resources(pod: Mapping) -> bool:
    """Bound to a node and not finished: its requests count against the node."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return bool(spec.get("nodeName")) and status.get("phase") not in ("Succeeded", "Failed")


def node_unschedulable(node: Mapping, node_selector: Mapping[str, str] | None) -> str | None:
    """Why no new pod can go to `node` (cordoned, not Ready, tainted, not selected), or None."""
    spec = node.get("spec") or {}
    meta = node.get("metadata") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        return "not Ready"
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    if taints:
        return "tainted " + ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in taints)
    labels = meta.get("labels") or {}
    for k, v in (node_selector or {}).items():
        if labels.get(k) != v:
            return f"not selected by {k}={v}"
    return None


def node_capacities(
    nodes: Iterable[Mapping],
    pods: Iterable[Mapping],
    *,
    movable: Callable[[Mapping], bool] = lambda pod: False,
    node_selector: Mapping[str, str] | None = None,
) -> list[NodeCapacity]:
    """Every node's allocatable CPU and the requests of the pods bound to it, leaving out the pods
    `movable` says the packing will place again (the run's own pods, when they are recreated)."""
    used: dict[str, float] = {}
    for pod in pods:
        if pod_holds_resources(pod) and not movable(pod):
            node = pod["spec"]["nodeName"]
            used[node] = used.get(node, 0.0) + pod_cpu_request(pod)
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        alloc = cpu_millicores(((node.get("status") or {}).get("allocatable") or {}).get("cpu"))
        out.append(NodeCapacity(name, alloc, used.get(name, 0.0), node_unschedulable(node, node_selector)))
    return sorted(out, key=lambda c: c.name)


def _search(items: list[tuple[str, float]], free: dict[str, float]) -> dict[str, str] | None | Literal[False]:
    """Exact placement by depth-first search (largest task first; nodes with equal free CPU are
    interchangeable, so only one of them is tried). None: none exists; False: gave up."""
    steps = 0
    assignment: dict[str, str] = {}

    def go(i: int) -> bool | None:
        nonlocal steps
        if i == len(items):
            return True
        steps += 1
        if steps > SEARCH_LIMIT:
            return None
        task, need = items[i]
        tried: set[float] = set()
        for node in sorted(free, key=lambda k: free[k]):
            room = round(free[node], 6)
            if room + EPS < need or room in tried:
                continue
            tried.add(room)
            free[node] -= need
            assignment[task] = node
            found = go(i + 1)
            free[node] += need
            if found is None:
                return None
            if found:
                return True
            del assignment[task]
        return False

    found = go(0)
    if found is None:
        return False
    return dict(assignment) if found else None


def pack(requests: Mapping[str, float], nodes: Iterable[NodeCapacity]) -> dict[str, str]:
    """Place every task's CPU request on a schedulable node; raises DoesNotFit with the reason.

    Returns task -> node (one placement that works; the scheduler may choose another). If the exact
    search runs out of steps, best fit's failure is not proof: an empty dict is returned and the caller
    goes on, relying on the pending timeout."""
    nodes = list(nodes)
    usable = [c for c in nodes if c.unschedulable is None]
    items = sorted(((t, float(m)) for t, m in requests.items()), key=lambda x: (-x[1], x[0]))
    if not items:
        return {}
    if not usable:
        raise DoesNotFit("no node can take new pods: " + "; ".join(c.describe() for c in nodes))
    free = {c.name: c.free_m for c in sorted(usable, key=lambda c: c.name)}  # equal room: the first by name
    total_need = sum(m for _, m in items)
    total_free = sum(max(0.0, f) for f in free.values())
    biggest = max(free.values())
    where = "; ".join(c.describe() for c in nodes)
    for task, need in items:
        if need > biggest + EPS:
            raise DoesNotFit(
                f"task '{task}' asks for {need:.0f}m of CPU but no node has more than {max(0.0, biggest):.0f}m "
                f"free ({where})"
            )
    if total_need > total_free + EPS:
        raise DoesNotFit(
            f"the configuration asks for {total_need:.0f}m of CPU in all, the schedulable nodes have "
            f"{total_free:.0f}m free ({where})"
        )
    # the search's first descent is best fit decreasing (each task onto the fullest node that still has
    # room); it backtracks only where that fails
    exact = _search(items, dict(free))
    if exact is False:
        return {}
    if exact is None:
        raise DoesNotFit(
            f"the configuration's {len(items)} pods ({total_need:.0f}m of CPU) fit the free CPU in total "
            f"({total_free:.0f}m) but cannot be split over the nodes ({where})"
        )
    return exact


def fits_in_place(changes: Mapping[str, tuple[str, float, float]], nodes: Iterable[NodeCapacity]) -> dict[str, bool]:
    """For in-place resizes: task -> (its node, current CPU, new CPU). A pod cannot move, so a node
    must cover the increases of the pods on it. Increases are granted smallest first per node (node
    capacity here counts the pods' current requests); decreases free room first. Returns task -> fits."""
    cap = {c.name: c for c in nodes}
    room = {k: c.free_m for k, c in cap.items()}
    for _task, (node, old, new) in changes.items():
        if new < old and node in room:
            room[node] += old - new
    out: dict[str, bool] = {}
    for task, (node, old, new) in sorted(changes.items(), key=lambda kv: (kv[1][2] - kv[1][1], kv[0])):
        delta = new - old
        out[task] = delta <= EPS or (node in room and room[node] + EPS >= delta)
        if out[task] and delta > EPS:
            room[node] -= delta
    return out

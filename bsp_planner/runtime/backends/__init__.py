"""Backends start, resize and stop a run's task processes; they never decide a configuration.

The coordinator tells a backend *what* each task should run with (a CPU limit) and *how* to start its
worker (:class:`WorkerLaunch`: the `bsp-planner worker ...` arguments and environment); the backend makes
it so on its platform: local processes under cgroup quotas (:mod:`.local`), or Kubernetes pods
(:mod:`.kubernetes`). Whether a task is ready is the worker's business, announced in
ZooKeeper; the backend only reports whether it knows the process to be gone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from ...core.errors import InputError


class TaskLost(InputError):
    """A task was lost in a way the backend cannot repair (evicted, unschedulable, deleted by someone
    else): the coordinator stops the run cleanly, and `--resume` continues it from the last logged step.
    Backends raise it (or a subclass) from any method."""


@dataclass(frozen=True)
class Capabilities:
    in_place: bool  # resize_task changes a running task's CPU limit without a restart
    sees_exit: bool  # poll_task knows when a task's process has gone (else: ZooKeeper membership only)


@dataclass(frozen=True)
class WorkerLaunch:
    """How to start one task's worker: `bsp-planner <args...>` with `env` added (credentials go there,
    never into args)."""

    task: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict, repr=False)
    incarnation: int = 0
    program: bool = False  # args is the user's own program (a process task), not `bsp-planner` arguments


@dataclass(frozen=True)
class TaskStatus:
    alive: bool | None  # None: the backend cannot tell
    exit_code: int | None = None
    detail: str = ""


class Backend(ABC):
    """Starts, resizes and stops tasks. Every method takes effect before it returns, except that a started
    worker may still be starting: the coordinator waits for its ZooKeeper membership."""

    name = "backend"

    @property
    def default_reconfigure(self) -> str:
        """How a run reconfigures when --reconfigure is not given (recreate, in-place or auto)."""
        return "recreate"

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    def check(self, job, millicores_max: float, budget_millicores: float, path=None) -> None:  # noqa: B027  (optional hook)
        """Fail before anything starts if the platform cannot run this job (InputError)."""

    def check_configuration(self, millicores: dict[str, float]) -> dict[str, str]:
        """Called before a configuration (task -> CPU) is applied: raise InputError if it cannot be placed.
        May return task -> how it will be applied ('start', 'keep', 'in-place', 'recreate')."""
        return {}

    def cluster_nodes(self) -> list[tuple[str, float]] | None:
        """The nodes this run's tasks may use, each with the CPU free for them (millicores), where the
        platform has nodes and says so (Kubernetes); None: one pool (the experiment's [[node]] if any)."""
        return None

    def place(self, placement: dict[str, str]) -> None:  # noqa: B027  (optional hook: no nodes, nothing to place)
        """Run each task (task -> node name) on the node the plan put it on, from its next start on."""

    def cleanup_stale(self) -> list[str]:
        """Remove what an earlier, killed coordinator of the same run left behind; returns what it removed."""
        return []

    @abstractmethod
    def start_task(self, launch: WorkerLaunch, millicores: float) -> None:
        """Start the task's worker under a CPU limit of `millicores` (a restart if a dead one is there)."""

    def measure_reconfigure_cost(self, method: str) -> float | None:
        """Seconds one reconfiguration with `method` ('in-place' or 'recreate') costs on this platform,
        measured now; None where the backend cannot measure it before the run (the experiment's
        penalty_s is used then)."""
        return None

    @abstractmethod
    def resize_task(self, task: str, millicores: float) -> None:
        """Change a running task's CPU limit in place (no restart)."""

    @abstractmethod
    def recreate_task(self, launch: WorkerLaunch, millicores: float) -> None:
        """Stop the task (its worker checkpoints on the way out) and start it again under `millicores`."""

    @abstractmethod
    def stop_task(self, task: str, timeout_s: float = 10.0) -> TaskStatus:
        """Stop the task and release everything it held (process, cgroup, pod)."""

    def poll_task(self, task: str) -> TaskStatus:
        return TaskStatus(alive=None)

    def log_tail(self, task: str, limit: int = 2000) -> str:
        return ""

    def service_runner(self, log_dir, cwd: str):
        """Where the job's services run (:class:`~bsp_planner.runtime.services.ServiceRunner`); InputError
        where this backend runs none."""
        raise InputError(f"the {self.name} backend does not run a job's services", field="service")

    def close(self) -> None:  # noqa: B027  (optional hook: a backend that holds nothing has nothing to release)
        """Stop every task still running and release everything."""

    def info(self) -> dict:
        return {"backend": self.name}


def make_backend(name: str, **kwargs) -> Backend:
    """The backend called `name`, built from the coordinator's settings (run_id, log_dir, stress_ng,
    cgroup_prefix, reconfigure, cpu_weight, cfs_period_us); each takes what applies to it."""
    if name == "local":
        from .local import LocalBackend

        kwargs.pop("reconfigure", None)  # the coordinator chooses between resize_task and recreate_task
        return LocalBackend(**kwargs)
    if name in ("kubernetes", "k8s"):  # its client library is imported only when it connects
        from .kubernetes import KubernetesBackend

        kwargs.pop("cpu_weight", None)  # local cgroup matters
        kwargs.pop("cfs_period_us", None)
        return KubernetesBackend(**kwargs)
    raise InputError(f"unknown backend {name!r}; known: local, kubernetes", field="--backend")

"""What a live run (and its resumption) needs, stored in run.json under ``settings`` (credentials never).

Read through the product's one settings loader (:mod:`bsp_planner.inputs.settings`): a run.json's settings and
the settings a caller builds are coerced and range-checked the same way (NaN, infinity and non-positive
timeouts refused, naming the field), and unknown keys are refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inputs.settings import load_settings, setting
from ..profiling.cgroups import MAX_PERIOD_US, MIN_PERIOD_US
from ..zk.schema import BARRIER_KINDS
from ..zk.session import DEFAULT_HOSTS

RECONFIGURE = ("recreate", "in-place", "auto")
BACKENDS = ("local", "kubernetes", "k8s")
DEFAULT_STEP_TIMEOUT_S = 600.0
# Upper bounds on the waits: beyond them a value is a typo, and a huge one fails deep inside (kazoo sends the
# session timeout as 32-bit milliseconds; a deadline past the platform's time_t cannot be computed).
MAX_SESSION_TIMEOUT_S = 3600.0  # ZooKeeper servers clamp sessions to 20 ticks (40 s by default) anyway
MAX_WAIT_S = 7 * 86400.0  # one week: a wait for ZooKeeper, a worker's start, one superstep


@dataclass
class RunSettings:
    experiment: str
    planner: str = setting("mpc")
    mode: str = setting("perfect", choices=("perfect", "forecast"))
    # None: the backend's default (local: recreate; kubernetes: $BSP_PLANNER_K8S_RECONFIGURE, else auto)
    reconfigure: str | None = setting(None, choices=RECONFIGURE)
    overrides: list[str] = setting(default_factory=list)
    backend: str = setting("local", choices=BACKENDS)
    zookeeper: str = setting(DEFAULT_HOSTS)
    zk_root: str | None = setting(None)  # default: /bsp-planner/runs/<run-id>
    zk_auth: str = setting("generated")  # generated (runs/<id>/zk-auth) | file:<path> | env
    session_timeout_s: float = setting(10.0, gt=0, le=MAX_SESSION_TIMEOUT_S)
    # bounded wait for an unreachable ZooKeeper, at start and during the run
    zk_wait_s: float = setting(30.0, gt=0, le=MAX_WAIT_S)
    worker_start_s: float = setting(60.0, gt=0, le=MAX_WAIT_S)  # how long a (re)started worker may take to join
    # one superstep, from publishing it to every task's release
    step_timeout_s: float = setting(DEFAULT_STEP_TIMEOUT_S, gt=0, le=MAX_WAIT_S)
    max_restarts: int = setting(3, ge=0)  # restarts of one task within one step before the run fails
    # the steps' barrier: "double" (the tasks count themselves) or "counting" (the coordinator counts the
    # arrivals: 2 requests per task and phase, whatever the number of tasks); recorded in the run's root
    barrier: str = setting("double", choices=BARRIER_KINDS)
    stress_ng: str = setting("stress-ng")
    cgroup_prefix: str = setting("bsp-planner")
    cpu_weight: str = setting("guaranteed", choices=("guaranteed", "workers"))  # local backend: the run group's weight
    # local backend: the CFS period of the tasks' quotas (us); None: the one the profile was measured at (its
    # metadata), else the profiler's default (CFS_PERIOD_US)
    cfs_period_us: int | None = setting(None, ge=MIN_PERIOD_US, le=MAX_PERIOD_US)
    keep_zk: bool = setting(False)  # leave the run's znodes after a finished run
    # the kubernetes backend's options (namespace, image, ...), checked by that backend
    kubernetes: Any = setting(default_factory=dict)

    def validate(self, path: str | Path | None = None) -> None:
        """What the loader's per-field checks cannot say (it calls this once every field is in place)."""
        if not isinstance(self.kubernetes, dict):
            from ..core.errors import InputError

            raise InputError(
                f"expected a table of kubernetes options, got {self.kubernetes!r}", path=path, field="kubernetes"
            )

    def checked(self) -> RunSettings:
        """A copy with every field through the settings loader: a RunSettings built in code (the command
        line, a benchmark) is checked exactly as one read from run.json; InputError names the field."""
        return load_settings(RunSettings, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_dict(cls, d: dict, path: str | Path | None = None) -> RunSettings:
        """The settings a run.json holds (`path`), checked."""
        return load_settings(cls, d, path=path)


@dataclass
class MetricsEndpoint:
    """Where a live run serves its Prometheus metrics (`--metrics-port`, `--metrics-host`; docs/metrics.md).
    Not a setting of the run (not in run.json): each start, a resume included, says it again. port: None
    (no endpoint, the default), 0 (any free port) or a TCP port; host: the address it binds."""

    port: int | None = None
    host: str = "127.0.0.1"

    @classmethod
    def from_flags(
        cls, port: str | None, host: str, port_field: str = "--metrics-port", host_field: str = "--metrics-host"
    ) -> MetricsEndpoint:
        """The endpoint of `run`'s options (text, as given or from the environment), checked; InputError
        names the option (or the environment variable) that gave the value."""
        from ..core.errors import InputError
        from ..inputs.settings import coerce_field

        try:
            value = coerce_field(port, int | None, {"ge": 0, "le": 65535}, where=port_field, path=None, from_text=True)
        except InputError:
            raise InputError(
                f"expected a TCP port from 0 (any free port) to 65535, got {port!r}", field=port_field
            ) from None
        if not host.strip():
            raise InputError("expected a host name or address to bind, got an empty one", field=host_field)
        return cls(port=value, host=host.strip())

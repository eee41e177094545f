"""What a live run (and its resumption) needs, stored in run.json under ``settings`` (credentials never)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import InputError
from .zk import DEFAULT_HOSTS

RECONFIGURE = ("recreate", "in-place", "auto")
DEFAULT_STEP_TIMEOUT_S = 600.0


@dataclass
class RunSettings:
    experiment: str
    planner: str = "mpc"
    mode: str = "perfect"
    reconfigure: str | None = None  # None: the backend's default (local: recreate; kubernetes: auto or $BSP_PLANNER_K8S_RECONFIGURE)
    overrides: list[str] = field(default_factory=list)
    backend: str = "local"
    zookeeper: str = DEFAULT_HOSTS
    zk_root: str | None = None  # default: /bsp-planner/runs/<run-id>
    zk_auth: str = "generated"  # generated (runs/<id>/zk-auth) | file:<path> | env
    session_timeout_s: float = 10.0
    zk_wait_s: float = 30.0  # bounded wait for an unreachable ZooKeeper, at start and during the run
    worker_start_s: float = 60.0  # how long a (re)started worker may take to join
    step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S  # one superstep, from publishing it to every task's release
    max_restarts: int = 3  # restarts of one task within one step before the run fails
    stress_ng: str = "stress-ng"
    cgroup_prefix: str = "bsp-planner"
    cpu_weight: str = "guaranteed"  # local backend: the run group's weight, guaranteed | workers
    keep_zk: bool = False  # leave the run's znodes after a finished run
    kubernetes: dict = field(default_factory=dict)  # the kubernetes backend's options (namespace, image, ...)

    def validate(self) -> None:
        if self.reconfigure is not None and self.reconfigure not in RECONFIGURE:
            raise InputError(f"expected --reconfigure {' or '.join(RECONFIGURE)}, got {self.reconfigure!r}", field="--reconfigure")
        if self.mode not in ("perfect", "forecast"):
            raise InputError(f"expected --mode perfect or forecast, got {self.mode!r}", field="--mode")
        flags = {"session_timeout_s": "--session-timeout", "zk_wait_s": "--zk-wait", "worker_start_s": "worker_start_s", "step_timeout_s": "--step-timeout"}
        for name, flag in flags.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
                raise InputError(f"expected a positive, finite number of seconds, got {v!r}", field=flag)

    @classmethod
    def from_dict(cls, d: dict) -> RunSettings:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

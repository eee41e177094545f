"""The planner interface, the registry, and the shared table of configurations planners draw from.

A planner sees forecasts (as predicted duration tables), the current configuration and an allocator;
before each step it returns a Decision. It never reads files, never talks to ZooKeeper, and never knows
whether the run is simulated or live.

Actions follow the thesis: a0 keeps the current configuration; a_j builds the configuration the
allocator gives for the next j steps, from the forecast made before this step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..allocation.base import Allocator, CpuLevels, discount_weights
from ..allocation.node_limits import NodeLimits
from ..core.errors import InputError
from ..core.structure import StepStructure


@dataclass(frozen=True)
class Decision:
    action: int  # 0 = keep, j = configure for the next j steps
    levels: np.ndarray  # (tasks,) CPU level indices for this step
    # (k, tasks) the configurations the planner's plan holds for this step and the k - 1 after it (row 0 is
    # `levels`); a live run puts a task that runs ahead of the decisions under them (None: no plan beyond it)
    plan: np.ndarray | None = None


class ConfigTable:
    """Configurations a_j at every step t, computed on demand in batches and shared by all planners.

    predicted: (steps, tasks, levels, H) durations predicted before step t for steps t..t+H-1.
    `levels(t, j)` is the allocator's configuration for frame [t, t+j); `window_time(t, j)` its
    predicted (undiscounted) time over that frame.
    """

    def __init__(
        self,
        predicted: np.ndarray,
        allocator: Allocator,
        max_level: np.ndarray,
        budget_steps: int,
        discount: float,
        structure: StepStructure | None = None,
    ) -> None:
        self.predicted = predicted
        self.structure = structure  # None: independent tasks, a step is its slowest task
        self.allocator = allocator
        self.max_level = np.asarray(max_level)
        self.budget_steps = budget_steps
        self.discount = discount
        m, n, _, h = predicted.shape
        self._cfg = np.full((m, h, n), -1, dtype=np.int64)
        self._time = np.full((m, h), np.nan)

    @property
    def horizon(self) -> int:
        return int(self.predicted.shape[3])

    def _check(self, j: int) -> None:
        if j > self.horizon:
            raise InputError(
                f"a frame of {j} steps is beyond the forecast horizon of {self.horizon} steps",
                field="forecast.horizon",
            )

    def _store(self, ts: np.ndarray, js: np.ndarray, cfg: np.ndarray) -> None:
        self._cfg[ts, js - 1] = cfg
        per_task = np.take_along_axis(self.predicted[ts], cfg[:, :, None, None], axis=2)[:, :, 0, :]  # (B, n, H)
        slowest = step_time(per_task, self.structure, axis=1)  # (B, H)
        mask = np.arange(self.horizon)[None, :] < js[:, None]
        self._time[ts, js - 1] = (slowest * mask).sum(axis=1)

    def ensure_row(self, t: int, jmax: int) -> None:
        """Frames j = 1..jmax at step t, in one padded batch (cheap for one step at a time)."""
        self._check(jmax)
        missing = np.nonzero(self._cfg[t, :jmax, 0] < 0)[0] + 1
        if missing.size == 0:
            return
        w = discount_weights(jmax, self.discount)[None, :] * (np.arange(jmax)[None, :] < missing[:, None])
        d = np.broadcast_to(self.predicted[t, :, :, :jmax], (missing.size,) + self.predicted.shape[1:3] + (jmax,))
        cfg = self.allocator.allocate_batch(d, w, self.max_level, self.budget_steps)
        self._store(np.full(missing.size, t), missing, cfg)

    def ensure_all(self, jmax: int, steps: np.ndarray | None = None) -> None:
        """Frames j = 1..jmax at every step, batched by frame length (fast for offline planners)."""
        self._check(jmax)
        steps = np.arange(self.predicted.shape[0]) if steps is None else np.asarray(steps)
        for j in range(1, jmax + 1):
            ts = steps[self._cfg[steps, j - 1, 0] < 0]
            if ts.size == 0:
                continue
            w = np.broadcast_to(discount_weights(j, self.discount), (ts.size, j))
            cfg = self.allocator.allocate_batch(self.predicted[ts, :, :, :j], w, self.max_level, self.budget_steps)
            self._store(ts, np.full(ts.size, j), cfg)

    def levels(self, t: int, j: int) -> np.ndarray:
        if self._cfg[t, j - 1, 0] < 0:
            self.ensure_row(t, j)
        levels: np.ndarray = self._cfg[t, j - 1]
        return levels

    def row(self, t: int, jmax: int) -> tuple[np.ndarray, np.ndarray]:
        """(configs (jmax, tasks), window times (jmax,)) for j = 1..jmax at step t."""
        self.ensure_row(t, jmax)
        return self._cfg[t, :jmax], self._time[t, :jmax]

    def window_times(self, jmax: int) -> np.ndarray:
        """(steps, jmax) predicted frame times; call ensure_all(jmax) first."""
        return self._time[:, :jmax]

    def predicted_time(self, t: int, levels: np.ndarray, length: int) -> float:
        """Predicted time of steps t..t+length-1 under a given configuration."""
        per_task = self.predicted[t, np.arange(levels.size), levels, :length]
        return float(step_time(per_task, self.structure, axis=0).sum())


def step_time(per_task: np.ndarray, structure: StepStructure | None, axis: int) -> np.ndarray:
    """Step times from per-task durations with the tasks along `axis`: the critical path through
    `structure`, or the slowest task when there is none."""
    out: np.ndarray = per_task.max(axis=axis) if structure is None else structure.step_time(per_task, axis=axis)
    return out


class OnlineConfigTable(ConfigTable):
    """A ConfigTable whose rows become known one step at a time (`reveal(t, row)`): batched
    precomputation covers only the rows already known; asking for a later row is an error.

    shape: (steps, tasks, levels, H) of the predicted durations, NaN until revealed."""

    def __init__(
        self,
        shape: tuple[int, int, int, int],
        allocator: Allocator,
        max_level: np.ndarray,
        budget_steps: int,
        discount: float,
        structure: StepStructure | None = None,
    ) -> None:
        super().__init__(np.full(shape, np.nan), allocator, max_level, budget_steps, discount, structure)
        self.known = 0  # rows 0..known-1 are written

    @classmethod
    def like(cls, table: ConfigTable) -> OnlineConfigTable:
        """An empty table of the same shape, allocator, bounds and discount as `table`: for a planner
        that makes its own predictions one step at a time."""
        shape = table.predicted.shape
        return cls(shape, table.allocator, table.max_level, table.budget_steps, table.discount, table.structure)

    def reveal(self, t: int, row: np.ndarray) -> None:
        if t != self.known:
            raise RuntimeError(f"predictions for step {t} revealed after {self.known} rows")
        self.predicted[t] = row
        self.known = t + 1

    def ensure_all(self, jmax: int, steps: np.ndarray | None = None) -> None:
        self._check(jmax)
        s = np.arange(self.known) if steps is None else np.asarray(steps)
        super().ensure_all(jmax, s[s < self.known])

    def ensure_row(self, t: int, jmax: int) -> None:
        if t >= self.known:
            raise RuntimeError(f"a planner asked for the predictions of step {t} before they were made")
        super().ensure_row(t, jmax)


@dataclass
class PlanningContext:
    """Everything a planner may know. `predicted[t]` is built from the forecast made before step t."""

    steps: int
    cpu: CpuLevels
    max_level: np.ndarray  # (tasks,)
    penalty_s: float
    configs: ConfigTable
    discount: float = 0.95
    # Durations at the middle of the workload range (tasks, levels): what EXPPO sizes for.
    mid_durations: np.ndarray | None = None
    exppo_max_level: np.ndarray | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    # The nodes' capacity when the cluster is nodes (the allocator already respects it; the bounds read
    # it here); None: one pool.
    nodes: NodeLimits | None = None
    # Which tasks wait for which inside a step (the job's `after`); None: independent tasks.
    structure: StepStructure | None = None
    # (tasks,) each task's lowest level (its min_millicores; the allocator already respects it); None: 0.
    min_level: np.ndarray | None = None
    # compat = "thesis": a static window's last window is planned over its full K steps, past the job's end,
    # as the thesis's code did (else over the steps left).
    last_window_full: bool = False

    @property
    def n_tasks(self) -> int:
        return int(self.max_level.size)

    @property
    def budget_steps(self) -> int:
        return self.configs.budget_steps

    @property
    def allocator(self) -> Allocator:
        return self.configs.allocator


class Planner(ABC):
    """Decides, before every step, the configuration to run it with."""

    name = "planner"
    #: A planner that plans the whole job at once (dp, optimum) reads every forecast row in reset().
    offline = False
    #: Its own typed parameters: a frozen dataclass with `from_settings([planner] settings or None)`.
    params_type: Any = None
    params: Any = None  # an instance of params_type, set when made or at reset

    def __init__(self, arg: str | None = None, params: Any = None) -> None:
        if arg is not None:
            raise InputError(
                f"strategy '{self.name}' takes no ':' argument, got '{self.name}:{arg}'", field="strategies"
            )
        self.params = params

    @classmethod
    def from_spec(cls, arg: str | None, settings: Any = None) -> Planner:
        """The registry's factory: 'name:arg' and the experiment's [planner] settings (None: defaults)."""
        typed = cls.params_type is not None and settings is not None
        return cls(arg, cls.params_type.from_settings(settings) if typed else None)

    def reset(self, ctx: PlanningContext) -> None:
        self.ctx = ctx
        if self.params is None and self.params_type is not None:
            self.params = self.params_type.from_settings(None)  # made without settings: the defaults

    @abstractmethod
    def decide(self, t: int, current: np.ndarray | None) -> Decision:
        """The configuration for step t, given the one step t-1 ran with (None before the first)."""


PlannerFactory = Callable[[str | None, Any], Planner]


def spec_number(
    spec: str, arg: str | None, convert: Callable[[str], Any], default: Any, ok: Callable[[Any], bool], usage: str
) -> Any:
    """The number after 'spec:' (`default` without one); an InputError showing `usage` when `ok` refuses it."""
    try:
        value = convert(arg) if arg is not None else default
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise InputError(f"expected {usage}, got '{spec}:{arg}'", field="strategies")
    return value


def make_planner(spec: str, settings: Any = None) -> Planner:
    """'mpc', 'static:3', 'rl:path/to/agent.zip'... -> a planner instance, with its parameters taken
    from the experiment's [planner] settings (None: the planner's defaults)."""
    from . import BOUNDS, PLANNERS

    name, _, arg = spec.partition(":")
    factory = PLANNERS.get(name, hint=f" (and the bounds {', '.join(BOUNDS.names())})")
    planner: Planner = factory(arg or None, settings)
    return planner

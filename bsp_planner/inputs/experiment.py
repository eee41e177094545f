"""Experiment files: everything a simulation needs, in one TOML file, overridable from the CLI.

job = "../jobs/thesis-8.toml"            # paths are relative to the experiment file
profile = "../profiles/local-2core/profile.csv"
interpolation = "spline"                 # spline | linear
out_of_grid = "error"                    # error | clamp | extrapolate
workload_range = [10, 50]
steps = 400
start = 0                                # first step, counted into the test half of every series
penalty_s = 15.0                         # checkpoint cost of one reconfiguration
modes = ["perfect", "forecast"]
strategies = ["exppo", "static:1", "dp", "mpc", "floor"]
output = "out/default"

[cpu]
budget_millicores = 8000
min_millicores = 250
step_millicores = 50
max_millicores = 2000
exppo_max_millicores = 2000

[planner]
allocator = "greedy"
discount = 0.95
horizon = 10          # MPC look-ahead, in steps
length_punishment = 1.0
dp_max_segment = 40

[forecast]
source = "seasonal-naive"   # a forecaster name, or a folder of forecast CSVs (unnamed: seasonal-naive,
                            # online-select for observed tasks, with online_min_history_steps = 24,
                            # online_refit_every_steps = 5, online_refit_lag_steps = 5,
                            # online_select_window_steps = 8, online_fit_window_steps = 240,
                            # online_trend_min_history_steps = 4)
horizon = 20                # columns of the forecast matrix
# actual = "traces/run-1"   # replay actual workloads from a folder instead of the job's series

# compat = "thesis"        # reproduce the thesis's published numbers (docs/thesis.md); default: none
# online = false            # forecasts made before every step from the observed history
# learn = false             # the performance model learns from every measured step
# true_profile = "..."      # what the simulated tasks really follow (plan on `profile`)
# [learning]                # how it learns: the fields of LearningSettings below
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from . import settings as _settings
from .names import check_name
from .settings import internal, setting
from .shipped import output_base

MODES = ("perfect", "forecast")
INTERPOLATIONS = ("spline", "linear")
OUT_OF_GRID = ("error", "clamp", "extrapolate")
COMPATS = ("none", "thesis")
# The allocator and the bounds that assume durations never grow with CPU (compat = "thesis" breaks that).
THESIS_ALLOCATOR = "greedy"
MONOTONE_BOUNDS = ("floor", "optimum")


@dataclass
class LearningSettings:
    """The experiment's [learning] table."""

    window: int = setting(20, ge=1)  # steps of residuals the correction is fitted to
    prior_weight: float = setting(1.0, ge=0)  # how many measurements the profile counts as (fades as they accumulate)
    slope_weight: float = setting(0.3, ge=0)  # ridge on the slopes shared by all tasks (towards the profile's shape)
    task_slope_weight: float = setting(3.0, ge=0)  # ridge on each task's slopes towards the shared ones
    slope_window: int = setting(200, ge=1)  # steps the slopes are fitted to (a machine's shape changes slowly)
    max_ratio: float = setting(10.0, gt=1)  # a measurement this many times off the model is refused


@dataclass
class CpuSettings:
    budget_millicores: float = setting(24000.0, gt=0)
    min_millicores: float = setting(1000.0, gt=0)
    step_millicores: float = setting(100.0, gt=0)
    max_millicores: float = setting(8000.0, gt=0)
    exppo_max_millicores: float | None = setting(None, gt=0)  # None: the same as max_millicores


@dataclass
class PlannerSettings:
    allocator: str = "greedy"
    discount: float = setting(0.95, gt=0, le=1)
    horizon: int = setting(10, ge=1)
    length_punishment: float = setting(1.0, gt=0)
    dp_max_segment: int = setting(40, ge=1)
    optimum_max_segment: int = setting(40, ge=1)
    # Decide step t+1 while step t runs, from what was observed through step t-1, so that a task's next
    # quota can be in place the moment it reports step t (loop.StepLoop; observe-mode jobs only). Off by
    # default: forecasts one step staler cost the shipped HELICS ring 23% in simulation and gained nothing
    # live (docs/live.md).
    decide_ahead: bool = False

    def decides_ahead(self, sync: str) -> bool:
        """Whether a job with this `sync` ("barrier" or "observe") is planned with a decision lead."""
        return self.decide_ahead and sync == "observe"


@dataclass
class ReconfigureCosts:
    """`[reconfigure_cost]`: seconds one reconfiguration costs with each method (None: measured)."""

    in_place_s: float | None = setting(None, ge=0)
    recreate_s: float | None = setting(None, ge=0)

    def of(self, method: str) -> float | None:
        return self.in_place_s if method == "in-place" else self.recreate_s


@dataclass
class NodeSettings:
    """One `[[node]]` of the cluster: its name, allocatable CPU and (optionally) the tasks placed on it.
    No task listed on any node: the placement is chosen from the predictions (see cluster.py)."""

    name: str = setting()
    cpu_millicores: float = setting(gt=0)
    tasks: list[str] = setting(default_factory=list)


@dataclass
class InterferenceSettings:
    """`[interference]`: a pair profile (`profile pairs`) whose slowdowns the model applies to tasks that
    share a node (performance.co_location_slowdown); None: no interference assumed. `placement`: a chosen
    placement avoids the pairs that hurt ("aware") or ignores them ("blind", to see what avoiding them is worth)."""

    pairs: str | None = None
    placement: str = setting("aware", choices=("aware", "blind"))


@dataclass
class ForecastSettings:
    """source: a forecaster's name or a folder of forecast files; None (not named): `seasonal-naive` for
    tasks with a series, `online-select` for tasks whose workloads are only observed during the run.
    The online_* fields are the `online-select` forecaster's (see forecasting/online_select.py)."""

    source: str | None = None
    horizon: int = setting(20, ge=1)
    actual: str | None = None
    online_min_history_steps: int = setting(24, ge=4)  # observed steps before any model but persistence
    online_refit_every_steps: int = setting(5, ge=1)
    online_refit_lag_steps: int = setting(5, ge=1)  # steps after its start a refit is used
    online_select_window_steps: int = setting(8, ge=1)  # past one-step errors the choice reads
    online_fit_window_steps: int = setting(240, ge=8)  # most recent steps one fit reads
    online_trend_min_history_steps: int = setting(4, ge=3)  # observed steps before the damped trend forecasts

    def source_for(self, observed: bool) -> str:
        """The forecast source used: the named one, else the default for series or observed tasks."""
        return self.source or ("online-select" if observed else "seasonal-naive")

    def online_select_settings(self) -> dict:
        """The `online-select` forecaster's settings from these fields."""
        return {
            "min_history_steps": self.online_min_history_steps,
            "refit_every_steps": self.online_refit_every_steps,
            "refit_lag_steps": self.online_refit_lag_steps,
            "select_window_steps": self.online_select_window_steps,
            "fit_window_steps": self.online_fit_window_steps,
            "trend_min_history_steps": self.online_trend_min_history_steps,
        }


@dataclass
class Experiment:
    job: str = "../jobs/thesis-8.toml"
    profile: str = "../profiles/local-2core/profile.csv"
    interpolation: str = setting("spline", choices=INTERPOLATIONS)
    out_of_grid: str = setting("error", choices=OUT_OF_GRID)
    workload_range: tuple[float, float] = setting((10.0, 50.0), ge=0)
    steps: int = setting(400, ge=1)
    start: int = setting(0, ge=0)
    penalty_s: float = setting(15.0, ge=0)
    modes: list[str] = setting(default_factory=lambda: list(MODES), choices=MODES, min_items=1)
    strategies: list[str] = setting(default_factory=lambda: ["exppo", "static:3", "dp", "mpc", "floor"], min_items=1)
    output: str = "out/default"
    # "thesis": plan and simulate as the thesis's code did, to reproduce its published numbers (the raw
    # spline, durations free to grow with CPU; a static window's last window planned over its full K).
    compat: str = setting("none", choices=COMPATS)
    cpu: CpuSettings = field(default_factory=CpuSettings)
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    # Forecasts made before every step from the workloads observed so far, not read from a matrix.
    online: bool = False
    # The performance model learns from every measured step (see learning.py), the profile its prior.
    learn: bool = False
    # The profile the (simulated) tasks really follow; None: `profile`. Set it to plan on a wrong one.
    true_profile: str | None = None
    learning: LearningSettings = field(default_factory=LearningSettings)
    # A live run plans with the cost of the reconfiguration method it uses (--reconfigure): these when
    # given, else what the backend measures (local in-place: a quota rewrite), else penalty_s.
    reconfigure_cost: ReconfigureCosts = field(default_factory=lambda: ReconfigureCosts())
    # The cluster's nodes ([[node]]); none: one pool, as if the cluster were one machine.
    node: list[NodeSettings] = setting(default_factory=list)
    # Co-location interference between tasks on one node, from a pair profile (needs [[node]]).
    interference: InterferenceSettings = field(default_factory=InterferenceSettings)
    name: str = internal("experiment")
    path: Path | None = internal(None)

    def resolve(self, relative: str) -> Path:
        """A path from the file, relative to the experiment file's folder (or as given if absolute)."""
        p = Path(relative).expanduser()
        if p.is_absolute() or self.path is None:
            return p
        return (self.path.parent / p).resolve()

    @property
    def job_path(self) -> Path:
        return self.resolve(self.job)

    @property
    def profile_path(self) -> Path:
        return self.resolve(self.profile)

    @property
    def pairs_path(self) -> Path | None:
        return self.resolve(self.interference.pairs) if self.interference.pairs else None

    @property
    def true_profile_path(self) -> Path:
        return self.resolve(self.true_profile) if self.true_profile else self.profile_path

    @property
    def output_path(self) -> Path:
        """Where results go: relative to the experiment's folder, or for a shipped experiment to
        ./experiments of the current directory (see shipped.output_base)."""
        p = Path(self.output).expanduser()
        return p if p.is_absolute() else output_base(self.path) / p

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("path")
        d["workload_range"] = list(self.workload_range)
        if not d["node"]:
            d.pop("node")  # one pool: recorded as before nodes existed
        if self.interference == InterferenceSettings():
            d.pop("interference")  # none: recorded as before interference existed
        if self.compat == "none":
            d.pop("compat")  # recorded as before compat existed
        return d

    def validate(self, path: str | Path | None = None) -> None:
        """The rules that tie fields together (each field's own range is checked when it is read)."""

        def bad(message: str, field: str) -> InputError:
            return InputError(message, path=self.path, field=field)

        for fname, what in (("strategies", "strategy"), ("modes", "mode")):
            items = [_same_strategy_key(s) for s in getattr(self, fname)]
            twice = sorted({s for s in items if items.count(s) > 1})
            if twice:  # it would run twice and write two identical rows
                raise bad(
                    f"{what} {', '.join(repr(s) for s in twice)} is listed more than once; list each {what} once", fname
                )
        c = self.cpu
        if not c.max_millicores >= c.min_millicores:
            raise bad(
                f"expected 0 < min_millicores <= max_millicores and step_millicores > 0, got "
                f"min={c.min_millicores:g}, step={c.step_millicores:g}, max={c.max_millicores:g}",
                "cpu",
            )
        span = (c.max_millicores - c.min_millicores) / c.step_millicores
        if abs(span - round(span)) > 1e-9:
            raise bad(
                f"max_millicores ({c.max_millicores:g}) is not reachable from min_millicores ({c.min_millicores:g}) "
                f"in steps of {c.step_millicores:g}",
                "cpu.max_millicores",
            )
        if span > 100_000:
            raise bad(
                f"{span:.0f} CPU levels between min_millicores and max_millicores; expected at most 100000 "
                "(raise step_millicores)",
                "cpu.step_millicores",
            )
        pl = self.planner
        if self.forecast.horizon < pl.horizon:
            raise bad(
                f"forecast horizon {self.forecast.horizon} is shorter than the planner horizon {pl.horizon}",
                "forecast.horizon",
            )
        seen: dict[str, int] = {}
        for j, nd in enumerate(self.node):
            check_name(nd.name, "node", path=self.path, field=f"node[{j}].name")
            if nd.name in seen:
                raise bad(
                    f"node name {nd.name!r} is also node[{seen[nd.name]}]'s; give every node its own name",
                    f"node[{j}].name",
                )
            seen[nd.name] = j
        if self.interference.pairs is not None and not self.node:
            raise bad(
                "a pair profile says how tasks that share a node slow each other; this experiment has no [[node]] "
                "tables (one pool): describe its nodes or remove interference.pairs",
                "interference.pairs",
            )
        lo, hi = self.workload_range
        if not hi > lo:
            raise bad(f"expected low < high, got {list(self.workload_range)}", "workload_range")
        if self.compat == "thesis":
            self._validate_thesis_compat(bad)

    def _validate_thesis_compat(self, bad: Callable[[str, str], InputError]) -> None:
        """compat = "thesis" gives durations that can grow with CPU: refuse what assumes they never do."""
        why = 'compat = "thesis" plans with the raw spline, whose durations can grow with CPU'
        if self.planner.allocator != THESIS_ALLOCATOR:
            raise bad(
                f"{why}, and the {self.planner.allocator} allocator assumes they never do; use allocator = "
                f'"{THESIS_ALLOCATOR}" as the thesis did, or leave compat out',
                "planner.allocator",
            )
        bounds = [s for s in self.strategies if s.partition(":")[0] in MONOTONE_BOUNDS]
        if bounds:
            raise bad(
                f"{why}, and the bounds ({', '.join(bounds)}) assume they never do; leave them out of the "
                "strategies or leave compat out",
                "strategies",
            )
        if self.learn:
            raise bad(
                f"{why}, and the learning model keeps them from growing; use learn = false or leave compat out", "learn"
            )
        if self.node:
            raise bad(
                f"{why}, and placing tasks on [[node]]s assumes they never do; the thesis planned one pool: "
                "remove the [[node]] tables or leave compat out",
                "node",
            )


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """The experiment file, with `--set` overrides (`steps=100`, `cpu.budget_millicores=6000`) checked like
    the file's own values."""
    path = Path(path)
    exp = _settings.load_settings_file(
        Experiment, path, "experiment", {"name": path.stem, "path": path.resolve()}, required=("job", "profile")
    )
    return _settings.apply_overrides(exp, overrides, flag="--set") if overrides else exp


def _same_strategy_key(name: str) -> str:
    """One spelling of a strategy: `static:03` and `static:3.0` are `static:3` (a number argument)."""
    prefix, sep, arg = name.partition(":")
    try:
        return f"{prefix}:{float(arg):g}" if sep else name
    except ValueError:
        return name

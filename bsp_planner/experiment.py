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
    source = "seasonal-naive"   # a forecaster name, or a folder of forecast CSVs
    horizon = 20                # columns of the forecast matrix
    # actual = "traces/run-1"   # replay actual workloads from a folder instead of the job's series
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

MODES = ("perfect", "forecast")
INTERPOLATIONS = ("spline", "linear")
OUT_OF_GRID = ("error", "clamp", "extrapolate")


@dataclass
class CpuSettings:
    budget_millicores: float = 24000.0
    min_millicores: float = 1000.0
    step_millicores: float = 100.0
    max_millicores: float = 8000.0
    exppo_max_millicores: float | None = None  # None: the same as max_millicores


@dataclass
class PlannerSettings:
    allocator: str = "greedy"
    discount: float = 0.95
    horizon: int = 10
    length_punishment: float = 1.0
    dp_max_segment: int = 40
    optimum_max_segment: int = 40


@dataclass
class ForecastSettings:
    source: str = "seasonal-naive"
    horizon: int = 20
    actual: str | None = None


@dataclass
class Experiment:
    job: str = "../jobs/thesis-8.toml"
    profile: str = "../profiles/local-2core/profile.csv"
    interpolation: str = "spline"
    out_of_grid: str = "error"
    workload_range: tuple[float, float] = (10.0, 50.0)
    steps: int = 400
    start: int = 0
    penalty_s: float = 15.0
    modes: list[str] = field(default_factory=lambda: list(MODES))
    strategies: list[str] = field(default_factory=lambda: ["exppo", "static:3", "dp", "mpc", "floor"])
    output: str = "out/default"
    name: str = "experiment"
    cpu: CpuSettings = field(default_factory=CpuSettings)
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    path: Path | None = None

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
    def output_path(self) -> Path:
        """Where results go: relative to the experiment's folder, or for a shipped experiment to
        ./experiments of the current directory (see shipped.output_base)."""
        from .shipped import output_base

        p = Path(self.output).expanduser()
        return p if p.is_absolute() else output_base(self.path) / p

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("path")
        d["workload_range"] = list(self.workload_range)
        return d


_SECTIONS = {"cpu": CpuSettings, "planner": PlannerSettings, "forecast": ForecastSettings}


def _coerce(value: Any, current: Any, ftype: Any, where: str, path: Path | None) -> Any:
    """Check a value from a file or the CLI against the field's declared type."""
    t = str(ftype)
    try:
        if t in ("float", "float | None") or isinstance(current, float):
            if value is None and "None" in t:
                return None
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if t == "int" or (isinstance(current, int) and not isinstance(current, bool)):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if t.startswith("list"):
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError
            return list(value)
        if t.startswith("tuple"):
            if isinstance(value, str):
                value = [v for v in value.split(",")]
            lo, hi = (float(v) for v in value)
            return (lo, hi)
        if t in ("str", "str | None"):
            if value is None and "None" in t:
                return None
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise InputError(f"expected {t}, got {value!r}", path=path, field=where)


def _apply(obj: Any, data: dict, prefix: str, path: Path | None) -> None:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key in _SECTIONS and prefix == "":
            if not isinstance(value, dict):
                raise InputError(f"expected a [{key}] table", path=path, field=where)
            _apply(getattr(obj, key), value, f"{key}.", path)
            continue
        if key not in fields or key == "path":
            known = ", ".join(sorted(k for k in fields if k != "path"))
            raise InputError(f"unknown setting; known settings here: {known}", path=path, field=where)
        setattr(obj, key, _coerce(value, getattr(obj, key), fields[key].type, where, path))


def apply_overrides(exp: Experiment, overrides: list[str]) -> Experiment:
    """Apply `key=value` overrides, e.g. `steps=100`, `cpu.budget_millicores=6000`, `modes=perfect`."""
    for item in overrides:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--set")
        key, value = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if len(parts) == 2:
            data = {parts[0]: {parts[1]: value}}
        elif len(parts) == 1:
            data = {key: value}
        else:
            raise InputError(f"expected KEY or SECTION.KEY, got {key!r}", field="--set")
        _apply(exp, data, "", None)
    validate(exp)
    return exp


def validate(exp: Experiment) -> None:
    p = exp.path
    if exp.interpolation not in INTERPOLATIONS:
        raise InputError(f"expected one of {', '.join(INTERPOLATIONS)}, got {exp.interpolation!r}", path=p, field="interpolation")
    if exp.out_of_grid not in OUT_OF_GRID:
        raise InputError(f"expected one of {', '.join(OUT_OF_GRID)}, got {exp.out_of_grid!r}", path=p, field="out_of_grid")
    bad = [m for m in exp.modes if m not in MODES]
    if bad or not exp.modes:
        raise InputError(f"expected modes among {', '.join(MODES)}, got {exp.modes!r}", path=p, field="modes")
    if not exp.strategies:
        raise InputError("expected at least one strategy", path=p, field="strategies")
    if exp.steps < 1:
        raise InputError(f"expected steps >= 1, got {exp.steps}", path=p, field="steps")
    if exp.start < 0:
        raise InputError(f"expected start >= 0, got {exp.start}", path=p, field="start")
    if exp.penalty_s < 0:
        raise InputError(f"expected penalty_s >= 0, got {exp.penalty_s}", path=p, field="penalty_s")
    c = exp.cpu
    if not (c.min_millicores > 0 and c.step_millicores > 0 and c.max_millicores >= c.min_millicores):
        raise InputError(
            f"expected 0 < min_millicores <= max_millicores and step_millicores > 0, got "
            f"min={c.min_millicores:g}, step={c.step_millicores:g}, max={c.max_millicores:g}",
            path=p,
            field="cpu",
        )
    span = (c.max_millicores - c.min_millicores) / c.step_millicores
    if abs(span - round(span)) > 1e-9:
        raise InputError(
            f"max_millicores ({c.max_millicores:g}) is not reachable from min_millicores ({c.min_millicores:g}) "
            f"in steps of {c.step_millicores:g}",
            path=p,
            field="cpu.max_millicores",
        )
    pl = exp.planner
    if not 0 < pl.discount <= 1:
        raise InputError(f"expected 0 < discount <= 1, got {pl.discount}", path=p, field="planner.discount")
    if pl.horizon < 1:
        raise InputError(f"expected horizon >= 1, got {pl.horizon}", path=p, field="planner.horizon")
    if pl.length_punishment <= 0:
        raise InputError(f"expected length_punishment > 0, got {pl.length_punishment}", path=p, field="planner.length_punishment")
    if pl.dp_max_segment < 1:
        raise InputError(f"expected dp_max_segment >= 1, got {pl.dp_max_segment}", path=p, field="planner.dp_max_segment")
    if exp.forecast.horizon < pl.horizon:
        raise InputError(
            f"forecast horizon {exp.forecast.horizon} is shorter than the planner horizon {pl.horizon}",
            path=p,
            field="forecast.horizon",
        )
    lo, hi = exp.workload_range
    if not hi > lo:
        raise InputError(f"expected low < high, got {list(exp.workload_range)}", path=p, field="workload_range")


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    path = Path(path)
    if not path.is_file():
        raise InputError("experiment file not found", path=path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    exp = Experiment(name=path.stem)
    exp.path = path.resolve()
    _apply(exp, data, "", path)
    validate(exp)
    if overrides:
        apply_overrides(exp, overrides)
    return exp

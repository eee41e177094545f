"""The grid a profile covers: CPU levels x workload sizes x repeats, its checks, and its cells in the order
the runner measures them; and what a run over it reports (:class:`GridReport`, its :class:`Failure` s),
which the runner and the profile's metadata both use (so they sit here, below both)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError
from ..inputs.job import Job, Task
from ..inputs.settings import MAX_MAGNITUDE
from .cgroups import CFS_PERIOD_US, MIN_QUOTA_US

DEFAULT_CPU_MILLICORES = (250, 500, 750, 1000, 1500, 2000)
DEFAULT_WORKLOADS = (10, 20, 30, 40, 50)
DEFAULT_REPEATS = 2
DEFAULT_TIMEOUT_S = 60.0

Cell = tuple[str, float, float, int]  # (task, workload, cpu_millicores, repeat)


@dataclass(frozen=True)
class Grid:
    cpu_millicores: tuple[float, ...] = DEFAULT_CPU_MILLICORES
    workloads: tuple[float, ...] = DEFAULT_WORKLOADS
    repeats: int = DEFAULT_REPEATS

    @property
    def size(self) -> int:
        return len(self.cpu_millicores) * len(self.workloads) * self.repeats

    def as_dict(self) -> dict:
        return {
            "cpu_millicores": [level_number(c) for c in self.cpu_millicores],
            "workloads": [level_number(w) for w in self.workloads],
            "repeats": self.repeats,
        }


def level_number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def level_text(x: float) -> str:
    return str(level_number(x))


def parse_levels(text: str | Sequence[float], option: str) -> tuple[float, ...]:
    """A comma-separated list of positive numbers (``250,500,1000``), as the CLI takes grid levels."""
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise InputError(f"expected a comma-separated list of numbers, got {text!r}", field=option)
        values = []
        for p in parts:
            try:
                values.append(float(p))
            except ValueError:
                raise InputError(f"expected a number, got {p!r} (in {text!r})", field=option) from None
    else:
        values = [float(v) for v in text]
    return tuple(values)


def validate_grid(grid: Grid, cores: int | None = None) -> Grid:
    """Check a grid before any run: at least 2 distinct positive levels on each axis (the profile
    interpolates between them), CPU levels the kernel can enforce (and, given the machine's `cores`, no
    more than it has), whole repeats. Returns it sorted."""
    for option, values in (("--cpu", grid.cpu_millicores), ("--workloads", grid.workloads)):
        for v in values:
            if not math.isfinite(v) or v <= 0:
                raise InputError(
                    f"expected positive numbers, got {level_text(v) if math.isfinite(v) else v}", field=option
                )
            if v > MAX_MAGNITUDE:  # a typo: a run of 1e308 units never ends, nor fits an integer
                raise InputError(f"expected numbers of at most {MAX_MAGNITUDE:g}, got {v:g}", field=option)
        dupes = sorted({v for v in values if list(values).count(v) > 1})
        if dupes:
            raise InputError(f"duplicate level(s) {', '.join(level_text(d) for d in dupes)}", field=option)
        if len(values) < 2:
            raise InputError(
                f"expected at least 2 levels (the profile interpolates between them), got {len(values)}",
                field=option,
            )
    min_m = MIN_QUOTA_US * 1000 / CFS_PERIOD_US
    for c in grid.cpu_millicores:
        if c < min_m:
            raise InputError(
                f"{level_text(c)}m is below the smallest CPU quota the kernel accepts ({min_m:g}m = "
                f"{MIN_QUOTA_US} us per {CFS_PERIOD_US} us)",
                field="--cpu",
            )
        if not float(c).is_integer():
            raise InputError(f"expected whole millicores, got {c:g}", field="--cpu")
        if cores is not None and c > cores * 1000:
            raise InputError(
                f"{level_text(c)}m is more CPU than this machine has ({cores} CPUs = {cores * 1000}m): a quota "
                "above it limits nothing, so its runs would measure the machine, not the level",
                field="--cpu",
            )
    if not isinstance(grid.repeats, int) or isinstance(grid.repeats, bool) or grid.repeats < 1:
        raise InputError(f"expected a whole number >= 1, got {grid.repeats!r}", field="--repeats")
    return Grid(tuple(sorted(grid.cpu_millicores)), tuple(sorted(grid.workloads)), grid.repeats)


def select_tasks(job: Job, names: Sequence[str] | None) -> list[Task]:
    if not names:
        return list(job.tasks)
    if (twice := next((n for i, n in enumerate(names) if n in names[:i]), None)) is not None:
        raise InputError(f"task '{twice}' is named twice", field="--tasks")
    for n in names:
        job.task(n)  # unknown name: InputError listing the job's tasks
    return [t for t in job.tasks if t.name in names]


def plan_cells(tasks: Sequence[Task], grid: Grid) -> list[Cell]:
    """Repeat-major order: a whole first pass over the grid before any second repeat, so a partial
    profile is soon a complete one-repeat grid, and the repeats of a cell are minutes apart (less
    correlated noise)."""
    return [
        (t.name, float(w), float(c), r)
        for r in range(grid.repeats)
        for t in tasks
        for w in grid.workloads
        for c in grid.cpu_millicores
    ]


@dataclass
class Failure:
    """A cell that could not be measured: when and why."""

    task: str
    workload: float
    cpu_millicores: float
    repeat: int
    reason: str
    date: str


@dataclass
class GridReport:
    """What one `profile run` did: cells planned, skipped (already measured), measured and failed."""

    profile: Path
    planned: int  # cells of the requested grid
    skipped: int  # already in the file
    measured: int = 0
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    wall_s: float = 0.0

    @property
    def missing(self) -> int:
        return self.planned - self.skipped - self.measured

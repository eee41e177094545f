"""BSP job specifications: the tasks, their stress-ng stressors and their workload series.

A job file is TOML::

    name = "thesis-8"
    workers = 2                      # stress-ng instances per task (optional, default 1)

    [[task]]
    name = "affinity"
    stressor = "affinity"            # any stress-ng stressor
    ops_per_unit = 40                # bogo-ops per workload unit: ops = ops_per_unit * workload
    series = { file = "../datasets/nyc_taxi.csv", first_row = 0, last_row = 1998 }

Paths are relative to the job file. Rows count data rows from 0 (the header is not a row), both ends
included; `last_row` may be left out to mean "to the end of the file".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError
from .settings import load_settings, read_toml, setting
from .stressors import KNOWN_STRESSORS


@dataclass(frozen=True)
class SeriesRef:
    """Where a task's workload series lives: a `timestamp,value` CSV and an inclusive row range."""

    file: Path
    first_row: int = 0
    last_row: int | None = None


@dataclass(frozen=True)
class Task:
    name: str
    stressor: str
    ops_per_unit: float
    series: SeriesRef
    workers: int = 1

    def stress_ng_args(self, workload: float, stress_ng: str = "stress-ng") -> list[str]:
        """The argument list (never a shell string) that runs `workload` units of this task."""
        ops = max(1, int(round(self.ops_per_unit * workload)))
        return [
            stress_ng,
            f"--{self.stressor}",
            str(self.workers),
            f"--{self.stressor}-ops",
            str(ops),
            "--quiet",
        ]


@dataclass(frozen=True)
class Job:
    name: str
    tasks: tuple[Task, ...]
    path: Path | None = None
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise InputError(
            f"unknown task '{name}'; the job has {', '.join(self.task_names)}", path=self.path
        )


@dataclass
class SeriesSpec:
    """A task's `series = {file, first_row, last_row}` table as written in the job file."""

    file: str = setting()
    first_row: int = setting(0, ge=0)
    last_row: int | None = setting(None, ge=0)


@dataclass
class TaskSpec:
    """One `[[task]]` table as written in the job file."""

    name: str = setting()
    stressor: str = setting()
    ops_per_unit: float = setting(gt=0)
    series: SeriesSpec = setting()
    workers: int | None = setting(None, ge=1)  # None: the job's `workers`


@dataclass
class JobFile:
    """A job file's top level; every key of it and of its `[[task]]` tables is checked."""

    name: str | None = None  # None: the file's stem
    description: str = ""
    workers: int = setting(1, ge=1)
    task: list[TaskSpec] = setting(default_factory=list)

    def validate(self, path: str | Path | None = None) -> None:
        if not self.task:
            raise InputError("the job has no tasks; add at least one [[task]] table", path=path, field="task")
        seen: set[str] = set()
        for i, t in enumerate(self.task):
            if t.name in seen:
                raise InputError(f"duplicate task name '{t.name}'", path=path, field=f"task[{i}].name")
            seen.add(t.name)
            if t.stressor not in KNOWN_STRESSORS:
                raise InputError(
                    f"unknown stress-ng stressor '{t.stressor}' in task '{t.name}' "
                    "(see `stress-ng --stressors` for the names)",
                    path=path,
                    field=f"task[{i}].stressor",
                )
            first, last = t.series.first_row, t.series.last_row
            if last is not None and last < first:
                raise InputError(
                    f"expected 0 <= first_row <= last_row in task '{t.name}', got {first!r}..{last!r}",
                    path=path,
                    field=f"task[{i}].series",
                )


def load_job(path: str | Path) -> Job:
    """Read and validate a job file; every problem is an InputError naming the file and field."""
    path = Path(path)
    spec = load_settings(JobFile, read_toml(path, "job"), path=path)
    tasks = tuple(
        Task(
            name=t.name,
            stressor=t.stressor,
            ops_per_unit=t.ops_per_unit,
            series=SeriesRef(
                file=(path.parent / t.series.file).resolve(), first_row=t.series.first_row, last_row=t.series.last_row
            ),
            workers=t.workers if t.workers is not None else spec.workers,
        )
        for t in spec.task
    )
    return Job(name=spec.name if spec.name is not None else path.stem, tasks=tasks, path=path, description=spec.description)

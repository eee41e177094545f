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

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError
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


def _require(table: dict, key: str, kind, path: Path, where: str):
    if key not in table:
        raise InputError(f"missing required field in {where}", path=path, field=key)
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(
            f"expected {kind.__name__} in {where}, got {value!r}", path=path, field=key
        )
    return value


def load_job(path: str | Path) -> Job:
    """Read and validate a job file; every problem is an InputError naming the file and field."""
    path = Path(path)
    if not path.is_file():
        raise InputError("job file not found", path=path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    name = data.get("name", path.stem)
    workers = data.get("workers", 1)
    if not isinstance(workers, int) or workers < 1:
        raise InputError(f"expected a positive integer, got {workers!r}", path=path, field="workers")
    raw_tasks = data.get("task", [])
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise InputError("the job has no tasks; add at least one [[task]] table", path=path, field="task")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, t in enumerate(raw_tasks):
        where = f"task #{i + 1}"
        tname = _require(t, "name", str, path, where)
        where = f"task '{tname}'"
        if tname in seen:
            raise InputError(f"duplicate task name '{tname}'", path=path, field=f"task[{i}].name")
        seen.add(tname)
        stressor = _require(t, "stressor", str, path, where)
        if stressor not in KNOWN_STRESSORS:
            raise InputError(
                f"unknown stress-ng stressor '{stressor}' in {where} "
                "(see `stress-ng --stressors` for the names)",
                path=path,
                field=f"task[{i}].stressor",
            )
        ops = _require(t, "ops_per_unit", float, path, where)
        if not ops > 0:
            raise InputError(f"expected ops_per_unit > 0 in {where}", path=path, field=f"task[{i}].ops_per_unit")
        s = t.get("series")
        if not isinstance(s, dict):
            raise InputError(
                f"expected a table {{file, first_row, last_row}} in {where}",
                path=path,
                field=f"task[{i}].series",
            )
        sfile = _require(s, "file", str, path, f"{where}.series")
        first = s.get("first_row", 0)
        last = s.get("last_row")
        if not isinstance(first, int) or first < 0 or (last is not None and (not isinstance(last, int) or last < first)):
            raise InputError(
                f"expected 0 <= first_row <= last_row in {where}, got {first!r}..{last!r}",
                path=path,
                field=f"task[{i}].series",
            )
        tworkers = t.get("workers", workers)
        if not isinstance(tworkers, int) or tworkers < 1:
            raise InputError(f"expected a positive integer in {where}", path=path, field=f"task[{i}].workers")
        tasks.append(
            Task(
                name=tname,
                stressor=stressor,
                ops_per_unit=ops,
                series=SeriesRef(file=(path.parent / sfile).resolve(), first_row=first, last_row=last),
                workers=tworkers,
            )
        )
    return Job(name=name, tasks=tuple(tasks), path=path, description=data.get("description", ""))

"""BSP job specifications: the tasks, what each runs (a stress-ng stressor or the user's own program) and
their workload series.

A job file is TOML::

    name = "thesis-8"
    workers = 2                      # stress-ng instances per task (optional, default 1)

    [[task]]
    name = "affinity"
    stressor = "affinity"            # any stress-ng stressor
    ops_per_unit = 40                # bogo-ops per workload unit: ops = ops_per_unit * workload
    series = { file = "../datasets/nyc_taxi.csv", first_row = 0, last_row = 1998 }

A task may instead run the user's own program every superstep, as an argument list (never a shell)::

    [[task]]
    name = "kernel"
    command = ["python3", "kernel.py", "--size", "{workload}"]
    series = { file = "kernel.csv" }   # optional: without it the workloads are those the task reports

`{workload}`, `{step}`, `{task}`, `{run_dir}` and `{python}` (the Python running bsp-planner) are
substituted in every argument, and the program gets BSP_WORKLOAD, BSP_STEP, BSP_TASK in its environment.
Its wall time is the step's duration; a non-zero exit is the task's failure (with its stderr tail); one
JSON line `{"workload": 37.5}` on its stdout is the step's observed workload.

A task may wait for others inside every step (``after = ["l0", "l1"]``: a hub that computes once its
leaves' values have arrived), so a step lasts as long as the longest chain of waiting tasks, not as its
slowest task; and it may have its own CPU floor and ceiling (``min_millicores``, ``max_millicores``, on the
experiment's CPU grid). docs/tasks.md describes both.

`{job_dir}` (the job file's folder), `{port}` (a free loopback TCP port chosen for this task when the run
starts; also BSP_PORT in its environment), `{port:NAME}` (the port of task or service NAME) and
`{host:NAME}` (the address of service NAME) are substituted too (:mod:`bsp_planner.inputs.placeholders`).
Relative paths resolve against the job file's folder: a series file, a program named with a `/`, and any
later argument that names an existing file there (`cmd_task.py`, `scripts/run.py`); the programs run in a scratch folder.

A task that keeps its state in memory (every `process` task) is never recreated: its CPU limit changes in
place. `restorable = true` says that its program restores from its own checkpoint when restarted, so a
run it failed may be resumed.

Services are programs the tasks need running (a broker, a database), started before the tasks and
stopped after them, never given a CPU quota or a workload::

    [[service]]
    name = "broker"
    command = ["{python}", "-m", "my.broker", "--port", "{port}"]
    ready = { tcp_port = "{port}" }        # or ready = { log_line = "<regex matched against its output>" }
    ready_timeout_s = 30                  # optional
    env = { LOG_LEVEL = "warning" }       # optional
    on_failure = "fail"                   # or "restart" (up to max_restarts, default 3)
    ends_run = false                      # true: the application's driver; its exit with status 0 ends the run

On Kubernetes a command or process task may name its container image (``image = "registry/app:1.2"``):
the task's pod runs that image, and its `command`/`process` paths are the image's (never resolved
against the job file). The image must contain bsp-planner (docs/kubernetes.md says why and how).

Series rows count data rows from 0 (the header is not a row), both ends included; `last_row` may be
left out to mean "to the end of the file".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError
from ..core.structure import StepStructure
from .job_specs import JobFile
from .names import check_name
from .placeholders import port_refs
from .settings import load_settings, read_toml


@dataclass(frozen=True)
class SeriesRef:
    """Where a task's workload series lives: a `timestamp,value` CSV and an inclusive row range."""

    file: Path
    first_row: int = 0
    last_row: int | None = None


def format_workload(workload: float) -> str:
    """A workload as a command argument: an integer where it is one ("37"), else a short decimal."""
    w = float(workload)
    return str(int(w)) if w.is_integer() else f"{w:.6g}"


def substitute(arg: str, values: dict[str, str]) -> str:
    """`{workload}` etc. replaced in one argument; other braces are left alone (no str.format: a
    program's own `{...}` arguments, e.g. JSON, pass through)."""
    for k, v in values.items():
        arg = arg.replace("{" + k + "}", v)
    return arg


@dataclass(frozen=True)
class Task:
    name: str
    stressor: str | None
    ops_per_unit: float
    series: SeriesRef | None
    workers: int = 1
    command: tuple[str, ...] | None = None  # the user's program, run afresh every step
    # the user's long-running process (bsp_planner.task); () : the image's own program (ENTRYPOINT/CMD), an
    # `image` task without `command` or `process`, which only the kubernetes backend runs
    process: tuple[str, ...] | None = None
    image: str | None = None  # Kubernetes: the container image the task's pod runs (command/process tasks)
    restorable: bool = False  # its program restores from its own checkpoint when restarted (a run may resume)
    job_dir: str = ""  # `{job_dir}`: the job file's folder (absolute)
    after: tuple[str, ...] = ()  # the tasks it waits for inside every step (docs/tasks.md)
    min_millicores: float | None = None  # its CPU floor; None: the experiment's cpu.min_millicores
    max_millicores: float | None = None  # its CPU ceiling; None: the experiment's cpu.max_millicores

    @property
    def kind(self) -> str:
        """'stressor', 'command' or 'process' (an image run as built is a process)."""
        return "command" if self.command else "process" if self.process is not None else "stressor"

    @property
    def runs_image_entrypoint(self) -> bool:
        """A process task whose program is its image's own ENTRYPOINT/CMD (no `process` given)."""
        return self.process == () and self.image is not None

    def identity(self) -> dict:
        """What makes two measurements of this task comparable (kept in a profile's metadata and a run)."""
        image = {"image": self.image} if self.image else {}
        if self.command:
            return {"command": list(self.command), "workers": self.workers, **image}
        if self.process is not None:
            return {"process": list(self.process), "workers": self.workers, **image}
        return {"stressor": self.stressor, "ops_per_unit": self.ops_per_unit, "workers": self.workers}

    def step_args(
        self,
        workload: float,
        step: int = 0,
        *,
        stress_ng: str = "stress-ng",
        run_dir: str = ".",
        run_values: dict[str, str] | None = None,
    ) -> list[str]:
        """The argument list (never a shell string) that runs step `step` with `workload` units;
        `run_values`: the run-wide placeholders (`{port}`, `{port:NAME}`, `{job_dir}`, see placeholders)."""
        if self.command:
            values = {
                **(run_values or {}),
                "workload": format_workload(workload),
                "step": str(int(step)),
                "task": self.name,
                "run_dir": str(run_dir),
                "python": sys.executable,
            }
            return [substitute(a, values) for a in self.command]
        return self.stress_ng_args(workload, stress_ng=stress_ng)

    def step_env(self, workload: float, step: int = 0) -> dict[str, str]:
        """What a command task's program finds in its environment (added to the caller's)."""
        return {"BSP_WORKLOAD": format_workload(workload), "BSP_STEP": str(int(step)), "BSP_TASK": self.name}

    def stress_ng_args(self, workload: float, stress_ng: str = "stress-ng") -> list[str]:
        """The stress-ng argument list that runs `workload` units of this (stressor) task."""
        if not self.stressor:
            raise InputError(f"task '{self.name}' runs a {self.kind}, not a stress-ng stressor", field="stressor")
        ops = max(1, int(round(self.ops_per_unit * workload)))
        return [stress_ng, f"--{self.stressor}", str(self.workers), f"--{self.stressor}-ops", str(ops), "--quiet"]


@dataclass(frozen=True)
class Service:
    """A program the tasks need running (a broker): started before them, stopped after, no CPU quota."""

    name: str
    command: tuple[str, ...]
    ready_tcp_port: str | None = None  # ready once this port (placeholders allowed) accepts a connection
    ready_log_line: str | None = None  # ready once its output has a line matching this regex
    ready_timeout_s: float = 30.0
    env: dict[str, str] = field(default_factory=dict)
    on_failure: str = "fail"  # "fail": the run fails; "restart": restarted, up to max_restarts times
    max_restarts: int = 3
    ends_run: bool = False  # the application's driver: its exit with status 0 is the application's end

    def args(self, values: dict[str, str]) -> list[str]:
        return [substitute(a, values) for a in self.command]


@dataclass(frozen=True)
class Job:
    name: str
    tasks: tuple[Task, ...]
    path: Path | None = None
    sync: str = "barrier"  # "barrier": our ZooKeeper barrier; "observe": the application syncs itself
    services: tuple[Service, ...] = ()

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    @property
    def job_dir(self) -> str:
        """`{job_dir}`: the job file's folder (absolute), "" for a job built in memory."""
        return str(self.path.resolve().parent) if self.path is not None else ""

    @property
    def port_names(self) -> list[str]:
        """Who gets a `{port}` when the run starts: every task and service."""
        return self.task_names + [s.name for s in self.services]

    @property
    def structure(self) -> StepStructure:
        """Which tasks wait for which inside a step, from the tasks' `after` (checked acyclic on load)."""
        return StepStructure.from_names(self.task_names, {t.name: t.after for t in self.tasks})

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise InputError(f"unknown task '{name}'; the job has {', '.join(self.task_names)}", path=self.path)


def load_job(path: str | Path) -> Job:
    """Read and validate a job file; every problem is an InputError naming the file and field."""
    path = Path(path)
    spec = load_settings(JobFile, read_toml(path, "job"), path=path, typed=True)
    names = [("task", i, t.name) for i, t in enumerate(spec.task)]
    names += [("service", i, sv.name) for i, sv in enumerate(spec.service)]
    for kind, i, name in names:  # they name files (a service's log), cgroups and znodes
        check_name(name, kind, path=path, field=f"{kind}[{i}].name")
    tasks = tuple(
        Task(
            name=t.name,
            stressor=t.stressor,
            ops_per_unit=t.ops_per_unit if t.ops_per_unit is not None else 1.0,
            series=None
            if t.series is None
            else SeriesRef(
                file=(path.parent / t.series.file).resolve(), first_row=t.series.first_row, last_row=t.series.last_row
            ),
            workers=t.workers if t.workers is not None else spec.workers,
            command=_program(t.command, path, in_image=t.image is not None),
            process=() if t.image_only else _program(t.process, path, in_image=t.image is not None),
            image=t.image,
            restorable=t.restorable,
            job_dir=str(path.resolve().parent),
            after=tuple(t.after),
            min_millicores=t.min_millicores,
            max_millicores=t.max_millicores,
        )
        for t in spec.task
    )
    for i, sv in enumerate(spec.service):
        _check_service(sv, i, path)
    services = tuple(
        Service(
            name=sv.name,
            command=_program(sv.command, path) or (),
            ready_tcp_port=None if sv.ready is None or sv.ready.tcp_port is None else str(sv.ready.tcp_port).strip(),
            ready_log_line=None if sv.ready is None else sv.ready.log_line,
            ready_timeout_s=sv.ready_timeout_s,
            env=dict(sv.env),
            on_failure=sv.on_failure,
            max_restarts=sv.max_restarts,
            ends_run=sv.ends_run,
        )
        for sv in spec.service
    )
    return Job(
        name=spec.name if spec.name is not None else path.stem,
        tasks=tasks,
        path=path,
        sync=spec.sync,
        services=services,
    )


def _check_service(sv, i: int, path: Path) -> None:
    """What a service's table must hold beyond its types (`ServiceSpec` in job_specs): a port number written
    as text in range as the number is; a `ready` port the service itself opens (it is started and waited
    for before any task, and ready only once it listens there itself); no NUL byte, which no program's
    argument or environment can hold."""

    def bad(message: str, where: str) -> InputError:
        return InputError(f"service '{sv.name}': {message}", path=path, field=f"service[{i}]{where}")

    port = sv.ready.tcp_port if sv.ready is not None else None
    if isinstance(port, str):
        text = port.strip()
        if text.isdigit() and not 0 < int(text) < 65536:
            raise bad(
                f'expected a TCP port 1..65535 or a placeholder such as "{{port}}", got {port!r}', ".ready.tcp_port"
            )
        others = [ref for ref in port_refs(text) if ref != sv.name]
        if others:
            raise bad(
                f"ready on the port of {others[0]!r}, which this service does not open (a task starts after every "
                "service; another service is ready before this one starts); a service is ready once it listens on "
                'its own port: ready = { tcp_port = "{port}" }',
                ".ready.tcp_port",
            )
    for where, texts in ((".command", sv.command), (".env", [*sv.env, *sv.env.values()])):
        nul = next((t for t in texts if "\0" in t), None)
        if nul is not None:
            raise bad(f"a NUL byte in {nul!r}; no program's argument or environment can hold one", where)


def _program(argv: list[str] | None, job_path: Path, *, in_image: bool = False) -> tuple[str, ...] | None:
    """Relative paths resolved as the module docstring says (a bare program name is looked up on PATH
    when run; an option or a placeholder is no file); an image task's paths are the image's: left as written."""
    if argv is None:
        return None
    if in_image:
        return tuple(argv)
    base = job_path.parent
    prog = argv[0]
    if "/" in prog and "{" not in prog and not Path(prog).is_absolute():
        prog = str((base / prog).resolve())
    rest = [_job_file_arg(a, base) for a in argv[1:]]
    return (prog, *rest)


def _job_file_arg(arg: str, base: Path) -> str:
    if not arg or arg.startswith("-") or "{" in arg or "=" in arg or Path(arg).is_absolute():
        return arg
    try:
        candidate = base / arg
        return str(candidate.resolve()) if candidate.is_file() else arg
    except (OSError, ValueError):
        return arg

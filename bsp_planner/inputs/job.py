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
substituted in every argument, and the program gets
BSP_WORKLOAD, BSP_STEP, BSP_TASK in its environment. Its wall time is the step's duration; a non-zero
exit is the task's failure (with its stderr tail); one JSON line `{"workload": 37.5}` on its stdout is
the step's observed workload. A program named with a `/` is relative to the job file.

`{job_dir}` (the job file's folder), `{port}` (a free loopback TCP port chosen for this task when the run
starts; also BSP_PORT in its environment), `{port:NAME}` (the port of task or service NAME) and
`{host:NAME}` (the address of service NAME) are substituted too (:mod:`bsp_planner.inputs.placeholders`).
Relative paths resolve against the job file's folder: a program named with a `/`, and any later argument
that names an existing file there (`cmd_task.py`, `scripts/run.py`); the programs run in a scratch folder.

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

On Kubernetes a command or process task may name its container image (``image = "registry/app:1.2"``):
the task's pod runs that image, and its `command`/`process` paths are the image's (never resolved
against the job file). The image must contain bsp-planner (docs/kubernetes.md says why and how).

Paths are relative to the job file. Rows count data rows from 0 (the header is not a row), both ends
included; `last_row` may be left out to mean "to the end of the file".
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError
from ..core.stressors import KNOWN_STRESSORS
from .settings import load_settings, read_toml, setting

TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class SeriesRef:
    """Where a task's workload series lives: a `timestamp,value` CSV and an inclusive row range."""

    file: Path
    first_row: int = 0
    last_row: int | None = None


PLACEHOLDERS = ("workload", "step", "task", "run_dir", "python", "job_dir", "port", "port:NAME", "host:NAME")

# A container image reference: [registry[:port]/]path[:tag][@algorithm:hex] (the grammar of
# distribution/reference, lowercase path components, a tag of at most 128 word characters, '.' and '-').
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REGISTRY = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
)
IMAGE_REFERENCE = re.compile(
    rf"^{_IMAGE_REGISTRY}{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def image_problem(image: str) -> str | None:
    """Why `image` is not a container image reference (None if it is one)."""
    if not image.strip():
        return "an empty image name"
    if image != image.strip() or any(c.isspace() for c in image):
        return f"{image!r} contains whitespace"
    if len(image) > 255 + 128 + 80:
        return f"{image[:40]!r}... is too long for an image reference"
    if not IMAGE_REFERENCE.match(image):
        return (
            f"{image!r} is not an image reference (expected [registry[:port]/]name[:tag][@sha256:digest], "
            "the name in lowercase, e.g. ghcr.io/me/kernel:1.2)"
        )
    return None


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

    @property
    def stateful(self) -> bool:
        """A long-running program that keeps its state in memory: recreating it would lose that state."""
        return self.kind == "process"

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
        return [
            stress_ng,
            f"--{self.stressor}",
            str(self.workers),
            f"--{self.stressor}-ops",
            str(ops),
            "--quiet",
        ]


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

    def args(self, values: dict[str, str]) -> list[str]:
        return [substitute(a, values) for a in self.command]


@dataclass(frozen=True)
class Job:
    name: str
    tasks: tuple[Task, ...]
    path: Path | None = None
    description: str = ""
    extra: dict = field(default_factory=dict)
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

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise InputError(f"unknown task '{name}'; the job has {', '.join(self.task_names)}", path=self.path)


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
    stressor: str | None = setting(None)
    ops_per_unit: float | None = setting(None, gt=0)  # stressor tasks only
    command: list[str] | None = setting(None, min_items=1)
    process: list[str] | None = setting(None, min_items=1)
    series: SeriesSpec | None = setting(None)  # command/process tasks: optional (workloads observed)
    image: str | None = setting(None)  # Kubernetes: the container image of a command/process task
    workers: int | None = setting(None, ge=1)  # None: the job's `workers`
    restorable: bool = setting(False)  # its program restores from its own checkpoint when restarted


@dataclass
class ReadySpec:
    """A service's `ready = { tcp_port = ... }` or `ready = { log_line = ... }`."""

    tcp_port: int | str | None = setting(None)
    log_line: str | None = setting(None)


@dataclass
class ServiceSpec:
    """One `[[service]]` table as written in the job file."""

    name: str = setting()
    command: list[str] = setting(min_items=1)
    ready: ReadySpec | None = setting(None)  # None: ready once started
    ready_timeout_s: float = setting(30.0, gt=0)
    env: dict[str, str] = setting(default_factory=dict)
    on_failure: str = setting("fail", choices=("fail", "restart"))
    max_restarts: int = setting(3, ge=0)


@dataclass
class JobFile:
    """A job file's top level; every key of it and of its `[[task]]` tables is checked."""

    name: str | None = None  # None: the file's stem
    description: str = ""
    workers: int = setting(1, ge=1)
    sync: str = setting("barrier", choices=("barrier", "observe"))
    task: list[TaskSpec] = setting(default_factory=list)
    service: list[ServiceSpec] = setting(default_factory=list)

    def validate(self, path: str | Path | None = None) -> None:
        if not self.task:
            raise InputError("the job has no tasks; add at least one [[task]] table", path=path, field="task")
        self._check_services(path)
        seen: set[str] = set()
        if self.sync == "observe" and any(t.process is None and not _image_only(t) for t in self.task):
            raise InputError(
                'sync = "observe" needs every task to be a `process` (the application synchronises itself; '
                "our worker runs stressors and commands under our barrier)",
                path=path,
                field="sync",
            )
        for i, t in enumerate(self.task):
            if not TASK_NAME.fullmatch(t.name):  # it names files (forecasts, logs), cgroups and znodes
                raise InputError(
                    f"expected a task name of letters, digits, '_', '-' or '.' (at most 63, not starting with "
                    f"'.' or '-'), got {t.name!r}",
                    path=path,
                    field=f"task[{i}].name",
                )
            if t.name in seen:
                raise InputError(f"duplicate task name '{t.name}'", path=path, field=f"task[{i}].name")
            seen.add(t.name)
            kinds = [k for k in ("stressor", "command", "process") if getattr(t, k) is not None]
            if _image_only(t):  # the image's own ENTRYPOINT/CMD is the task's long-running process
                kinds = ["process"]
            if len(kinds) != 1:
                raise InputError(
                    f"task '{t.name}' must give exactly one of stressor, command or process"
                    + (f", not {' and '.join(kinds)}" if kinds else ""),
                    path=path,
                    field=f"task[{i}]",
                )
            for k in ("command", "process"):
                argv = getattr(t, k)
                if argv is not None and (not argv[0].strip() or any("\0" in a for a in argv)):
                    raise InputError(
                        f"expected a program and its arguments in task '{t.name}', got {argv!r}",
                        path=path,
                        field=f"task[{i}].{k}",
                    )
            if t.image is not None:
                self._check_image(t, i, kinds[0], path)
            if t.stressor is None:
                if t.ops_per_unit is not None:
                    raise InputError(
                        f"ops_per_unit applies to stressor tasks only; task '{t.name}' runs a {kinds[0]}",
                        path=path,
                        field=f"task[{i}].ops_per_unit",
                    )
                if t.series is not None:
                    self._check_rows(t, i, path)
                continue
            if t.ops_per_unit is None:
                raise InputError(
                    f"task '{t.name}' needs ops_per_unit (bogo-ops per workload unit)",
                    path=path,
                    field=f"task[{i}].ops_per_unit",
                )
            if t.series is None:
                raise InputError(
                    f"task '{t.name}' needs a series = {{ file = ... }}", path=path, field=f"task[{i}].series"
                )
            if t.stressor not in KNOWN_STRESSORS:
                raise InputError(
                    f"unknown stress-ng stressor '{t.stressor}' in task '{t.name}' "
                    "(see `stress-ng --stressors` for the names)",
                    path=path,
                    field=f"task[{i}].stressor",
                )
            self._check_rows(t, i, path)

    def _check_services(self, path) -> None:
        """Unique names among tasks and services, runnable commands, a sound readiness check, and every
        `{port:NAME}` naming a task or service of the job."""
        names = [t.name for t in self.task]
        for i, sv in enumerate(self.service):
            where = f"service[{i}]"
            if not sv.name.strip() or sv.name in names:
                raise InputError(
                    f"expected a service name unique among the job's tasks and services, got {sv.name!r}",
                    path=path,
                    field=f"{where}.name",
                )
            names.append(sv.name)
            if not sv.command[0].strip() or any("\0" in a for a in sv.command):
                raise InputError(
                    f"expected a program and its arguments in service '{sv.name}', got {sv.command!r}",
                    path=path,
                    field=f"{where}.command",
                )
            if sv.ready is not None:
                r = sv.ready
                if (r.tcp_port is None) == (r.log_line is None):
                    raise InputError(
                        f"service '{sv.name}': expected ready = {{ tcp_port = ... }} or ready = {{ log_line = ... }}, "
                        "exactly one of them",
                        path=path,
                        field=f"{where}.ready",
                    )
                if isinstance(r.tcp_port, int) and not 0 < r.tcp_port < 65536:
                    raise InputError(
                        f'expected a TCP port 1..65535 or a placeholder such as "{{port}}", got {r.tcp_port!r}',
                        path=path,
                        field=f"{where}.ready.tcp_port",
                    )
                if isinstance(r.tcp_port, str) and not re.fullmatch(r"\s*(\d+|\{port(:[^{}]+)?\})\s*", r.tcp_port):
                    raise InputError(
                        f'expected a TCP port or a placeholder such as "{{port}}" or "{{port:NAME}}", got {r.tcp_port!r}',
                        path=path,
                        field=f"{where}.ready.tcp_port",
                    )
                if r.log_line is not None:
                    try:
                        re.compile(r.log_line)
                    except re.error as exc:
                        raise InputError(
                            f"service '{sv.name}': expected a regular expression, got {r.log_line!r} ({exc})",
                            path=path,
                            field=f"{where}.ready.log_line",
                        ) from None
            bad_env = [k for k in sv.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
            if bad_env:
                raise InputError(
                    f"service '{sv.name}': expected environment variable names, got {bad_env[0]!r}",
                    path=path,
                    field=f"{where}.env",
                )
        from .placeholders import host_refs, port_refs

        services = [sv.name for sv in self.service]

        def check_refs(args, where: str) -> None:
            for a in args:
                for ref in port_refs(a):
                    if ref not in names:
                        raise InputError(
                            f"{{port:{ref}}} names no task or service of the job (known: {', '.join(names)})",
                            path=path,
                            field=where,
                        )
                for ref in host_refs(a):
                    if ref not in services:
                        raise InputError(
                            f"{{host:{ref}}} names no service of the job (services: {', '.join(services) or 'none'})",
                            path=path,
                            field=where,
                        )

        for i, t in enumerate(self.task):
            for k in ("command", "process"):
                check_refs(getattr(t, k) or [], f"task[{i}].{k}")
        for i, sv in enumerate(self.service):
            check_refs(sv.command, f"service[{i}].command")
            check_refs(sv.env.values(), f"service[{i}].env")
            if sv.ready is not None and isinstance(sv.ready.tcp_port, str):
                check_refs([sv.ready.tcp_port], f"service[{i}].ready.tcp_port")

    @staticmethod
    def _check_image(t: TaskSpec, i: int, kind: str, path) -> None:
        assert t.image is not None  # the caller checks
        if kind == "stressor":
            raise InputError(
                f"task '{t.name}' gives an image but runs a stress-ng stressor: `image` goes with `command`, with "
                "`process`, or alone (the image runs as built); stressor tasks run in the run's image, --image",
                path=path,
                field=f"task[{i}].image",
            )
        problem = image_problem(t.image)
        if problem:
            raise InputError(f"task '{t.name}': {problem}", path=path, field=f"task[{i}].image")

    @staticmethod
    def _check_rows(t: TaskSpec, i: int, path) -> None:
        assert t.series is not None  # the callers check
        first, last = t.series.first_row, t.series.last_row
        if last is not None and last < first:
            raise InputError(
                f"expected 0 <= first_row <= last_row in task '{t.name}', got {first!r}..{last!r}",
                path=path,
                field=f"task[{i}].series",
            )


def _image_only(t: TaskSpec) -> bool:
    """An `image` without stressor, command or process: the task runs the image as built (its ENTRYPOINT
    and CMD), a long-running program that joins the run through bsp_planner.task (a `process` task)."""
    return t.image is not None and t.stressor is None and t.command is None and t.process is None


def load_job(path: str | Path) -> Job:
    """Read and validate a job file; every problem is an InputError naming the file and field."""
    path = Path(path)
    spec = load_settings(JobFile, read_toml(path, "job"), path=path, typed=True)
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
            process=() if _image_only(t) else _program(t.process, path, in_image=t.image is not None),
            image=t.image,
            restorable=t.restorable,
            job_dir=str(path.resolve().parent),
        )
        for t in spec.task
    )
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
        )
        for sv in spec.service
    )
    return Job(
        name=spec.name if spec.name is not None else path.stem,
        tasks=tasks,
        path=path,
        description=spec.description,
        sync=spec.sync,
        services=services,
    )


def _program(argv: list[str] | None, job_path: Path, *, in_image: bool = False) -> tuple[str, ...] | None:
    """Relative paths resolved against the job file's folder, because the programs run in a scratch folder:
    a program named with a `/` (a bare name is looked up on PATH when run), and every later argument that
    names an existing file there (`cmd_task.py`, `scripts/sim.py`; not an option, not a placeholder).
    In an image task the paths are the image's: left as written."""
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


def missing_series(job: Job) -> list[str]:
    """The tasks without a series: their workloads are observed as the job runs."""
    return [t.name for t in job.tasks if t.series is None]

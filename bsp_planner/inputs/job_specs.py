"""A job file as written: one settings dataclass per table (`[[task]]`, `[[service]]`, the top level) and
the rules that tie their fields together; :func:`bsp_planner.inputs.job.load_job` turns them into a Job."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError, InputWarning
from ..core.stressors import KNOWN_STRESSORS
from ..core.structure import StepStructure, StructureError
from .placeholders import KNOWN_NAMES, host_refs, port_refs, unknown_placeholders
from .settings import setting

TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}")

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


def _argv_ok(argv: list[str]) -> bool:
    """A program and its arguments: a program name that is not blank, no NUL byte anywhere."""
    return bool(argv[0].strip()) and not any("\0" in a for a in argv)


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
    after: list[str] = setting(default_factory=list)  # the tasks it waits for inside every step
    min_millicores: float | None = setting(None, gt=0)  # its CPU floor (None: the experiment's minimum)
    max_millicores: float | None = setting(None, gt=0)  # its CPU ceiling (None: the experiment's maximum)

    @property
    def image_only(self) -> bool:
        """An `image` without stressor, command or process: the task runs the image as built (its ENTRYPOINT
        and CMD), a long-running program that joins the run through bsp_planner.task (a `process` task)."""
        return self.image is not None and self.stressor is None and self.command is None and self.process is None

    def check(self, i: int, path: str | Path | None) -> None:
        """The rules of one task table (`i`: its place in the file, for the errors)."""

        def bad(message: str, where: str = "") -> InputError:
            return InputError(message, path=path, field=f"task[{i}]{where}")

        if not TASK_NAME.fullmatch(self.name):  # it names files (forecasts, logs), cgroups and znodes
            raise bad(
                f"expected a task name of letters, digits, '_', '-' or '.' (at most 63, not starting with "
                f"'.' or '-'), got {self.name!r}",
                ".name",
            )
        kinds = [k for k in ("stressor", "command", "process") if getattr(self, k) is not None]
        if self.image_only:  # the image's own ENTRYPOINT/CMD is the task's long-running process
            kinds = ["process"]
        if len(kinds) != 1:
            raise bad(
                f"task '{self.name}' must give exactly one of stressor, command or process"
                + (f", not {' and '.join(kinds)}" if kinds else "")
            )
        for k in ("command", "process"):
            argv = getattr(self, k)
            if argv is not None and not _argv_ok(argv):
                raise bad(f"expected a program and its arguments in task '{self.name}', got {argv!r}", f".{k}")
        if self.image is not None:
            if kinds[0] == "stressor":
                raise bad(
                    f"task '{self.name}' gives an image but runs a stress-ng stressor: `image` goes with `command`, "
                    "with `process`, or alone (the image runs as built); stressor tasks run in the run's image, "
                    "--image",
                    ".image",
                )
            if problem := image_problem(self.image):
                raise bad(f"task '{self.name}': {problem}", ".image")
        if self.stressor is None:
            if self.ops_per_unit is not None:
                raise bad(
                    f"ops_per_unit applies to stressor tasks only; task '{self.name}' runs a {kinds[0]}",
                    ".ops_per_unit",
                )
        elif self.ops_per_unit is None:
            raise bad(f"task '{self.name}' needs ops_per_unit (bogo-ops per workload unit)", ".ops_per_unit")
        elif self.series is None:
            raise bad(f"task '{self.name}' needs a series = {{ file = ... }}", ".series")
        elif self.stressor not in KNOWN_STRESSORS:
            raise bad(
                f"unknown stress-ng stressor '{self.stressor}' in task '{self.name}' "
                "(see `stress-ng --stressors` for the names)",
                ".stressor",
            )
        low, high = self.min_millicores, self.max_millicores
        if low is not None and high is not None and low > high:
            raise bad(
                f"expected min_millicores <= max_millicores in task '{self.name}', got {low:g} > {high:g}",
                ".min_millicores",
            )
        if (
            self.series is not None
            and self.series.last_row is not None
            and self.series.last_row < self.series.first_row
        ):
            raise bad(
                f"expected 0 <= first_row <= last_row in task '{self.name}', got "
                f"{self.series.first_row!r}..{self.series.last_row!r}",
                ".series",
            )


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
    ends_run: bool = setting(False)  # the application's driver: its exit with status 0 ends the run

    def check(self, i: int, path: str | Path | None, taken: list[str]) -> None:
        """A runnable command and a sound readiness check; `taken`: the names of the tasks and services before it."""

        def bad(message: str, where: str) -> InputError:
            return InputError(message, path=path, field=f"service[{i}]{where}")

        if not self.name.strip() or self.name in taken:
            raise bad(f"expected a service name unique among the job's tasks and services, got {self.name!r}", ".name")
        if not _argv_ok(self.command):
            raise bad(
                f"expected a program and its arguments in service '{self.name}', got {self.command!r}", ".command"
            )
        r = self.ready
        if r is not None:
            if (r.tcp_port is None) == (r.log_line is None):
                raise bad(
                    f"service '{self.name}': expected ready = {{ tcp_port = ... }} or ready = {{ log_line = ... }}, "
                    "exactly one of them",
                    ".ready",
                )
            if isinstance(r.tcp_port, int) and not 0 < r.tcp_port < 65536:
                raise bad(
                    f'expected a TCP port 1..65535 or a placeholder such as "{{port}}", got {r.tcp_port!r}',
                    ".ready.tcp_port",
                )
            if isinstance(r.tcp_port, str) and not re.fullmatch(r"\s*(\d+|\{port(:[^{}]+)?\})\s*", r.tcp_port):
                raise bad(
                    f'expected a TCP port or a placeholder such as "{{port}}" or "{{port:NAME}}", got {r.tcp_port!r}',
                    ".ready.tcp_port",
                )
            if r.log_line is not None:
                try:
                    re.compile(r.log_line)
                except re.error as exc:
                    raise bad(
                        f"service '{self.name}': expected a regular expression, got {r.log_line!r} ({exc})",
                        ".ready.log_line",
                    ) from None
        bad_env = [k for k in self.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad_env:
            raise bad(f"service '{self.name}': expected environment variable names, got {bad_env[0]!r}", ".env")


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
        names = [t.name for t in self.task]
        for i, sv in enumerate(self.service):
            sv.check(i, path, names)
            names.append(sv.name)
        self._check_refs(path, names)
        if self.sync == "observe" and any(t.process is None and not t.image_only for t in self.task):
            raise InputError(
                'sync = "observe" needs every task to be a `process` (the application synchronises itself; '
                "our worker runs stressors and commands under our barrier)",
                path=path,
                field="sync",
            )
        seen: set[str] = set()
        for i, t in enumerate(self.task):
            if t.name in seen:
                raise InputError(f"duplicate task name '{t.name}'", path=path, field=f"task[{i}].name")
            t.check(i, path)
            seen.add(t.name)
        self._check_after(path)

    def _check_after(self, path: str | Path | None) -> None:
        """Every `after` names another task of the job, and the tasks never wait for each other in a cycle."""
        names = [t.name for t in self.task]
        for i, t in enumerate(self.task):
            for ref in t.after:
                if ref == t.name:
                    raise InputError(f"task '{t.name}' waits for itself", path=path, field=f"task[{i}].after")
                if ref not in names:
                    raise InputError(
                        f"after names '{ref}', no task of the job (tasks: {', '.join(names)})",
                        path=path,
                        field=f"task[{i}].after",
                    )
        try:
            StepStructure.from_names(names, {t.name: t.after for t in self.task})
        except StructureError as exc:
            i = exc.task if exc.task is not None else 0
            cycle = " waits for ".join(_cycle_through(names, {t.name: t.after for t in self.task}, names[i]))
            raise InputError(
                f"the tasks wait for each other in a cycle ({cycle}); `after` must leave some task first",
                path=path,
                field=f"task[{i}].after",
            ) from None

    def _check_refs(self, path: str | Path | None, names: list[str]) -> None:
        """Every `{port:NAME}` names a task or service of the job, every `{host:NAME}` a service."""
        services = [sv.name for sv in self.service]
        places = [
            (getattr(t, k) or [], f"task[{i}].{k}") for i, t in enumerate(self.task) for k in ("command", "process")
        ]
        for i, sv in enumerate(self.service):
            places += [(sv.command, f"service[{i}].command"), (sv.env.values(), f"service[{i}].env")]
            if sv.ready is not None and isinstance(sv.ready.tcp_port, str):
                places.append(([sv.ready.tcp_port], f"service[{i}].ready.tcp_port"))
        checks = (
            (port_refs, "port", names, f"no task or service of the job (known: {', '.join(names)})"),
            (host_refs, "host", services, f"no service of the job (services: {', '.join(services) or 'none'})"),
        )
        for args, where in places:
            for a in args:
                for odd in unknown_placeholders(a):
                    warnings.warn(
                        f"{path}: {where}: {odd!r} is not a placeholder bsp-planner replaces (known: "
                        + ", ".join(f"{{{n}}}" for n in KNOWN_NAMES)
                        + ", {port:NAME}, {host:NAME}); it reaches the program as written",
                        InputWarning,
                        stacklevel=2,
                    )
                for refs, kind, known, what in checks:
                    for ref in refs(a):
                        if ref not in known:
                            raise InputError(f"{{{kind}:{ref}}} names {what}", path=path, field=where)


def _cycle_through(names: list[str], after: dict[str, list[str]], start: str) -> list[str]:
    """A cycle of `after` reached from `start`, as names in waiting order (first name repeated at the end)."""
    path: list[str] = []
    node = start
    while node not in path:
        path.append(node)
        nxt = [p for p in after.get(node, []) if p in names]
        if not nxt:
            return [start]
        # follow a predecessor that still leads into a cycle
        node = next((p for p in nxt if _reaches_cycle(p, after, set())), nxt[0])
    cycle = path[path.index(node) :]
    return [*cycle, cycle[0]]


def _reaches_cycle(node: str, after: dict[str, list[str]], on_path: set[str]) -> bool:
    if node in on_path:
        return True
    return any(_reaches_cycle(p, after, on_path | {node}) for p in after.get(node, []))

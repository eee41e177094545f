"""The run's znode tree and the values the protocol writes there: compact JSON, each checked against its
schema when read (a malformed value raises :class:`MalformedValue` naming the znode and the field)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError

DEFAULT_PARENT = "/bsp-planner/runs"
FORMAT = 1
MAX_VALUE_BYTES = 64 * 1024
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class MalformedValue(InputError):
    """A value read from ZooKeeper is not what the protocol writes there."""


class RootHeld(InputError):
    """The run's root path belongs to another run, or another coordinator holds it."""


# -- values -----------------------------------------------------------------------------------------
def encode(value: dict) -> bytes:
    """Compact JSON; floats as Python's shortest repr, so every finite value round-trips exactly."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False, sort_keys=True).encode()


def decode(path: str, raw: bytes | None) -> dict:
    if raw is None or len(raw) == 0:
        raise MalformedValue(f"malformed value in ZooKeeper at {path}: empty", field=path)
    if len(raw) > MAX_VALUE_BYTES:
        raise MalformedValue(f"malformed value in ZooKeeper at {path}: {len(raw)} bytes", field=path)
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedValue(f"malformed value in ZooKeeper at {path}: not JSON ({exc})", field=path) from None
    if not isinstance(value, dict):
        raise MalformedValue(f"malformed value in ZooKeeper at {path}: expected an object", field=path)
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def _bad(path: str, key: str, expected: str, got: Any) -> MalformedValue:
    return MalformedValue(
        f"malformed value in ZooKeeper at {path}: field '{key}': expected {expected}, got {got!r}"[:400], field=path
    )


def get_int(path: str, v: dict, key: str, lo: int | None = None, hi: int | None = None) -> int:
    if key not in v:
        raise _bad(path, key, "an integer", None)
    x = v[key]
    if not isinstance(x, int) or isinstance(x, bool) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _bad(path, key, f"an integer in [{lo}, {hi}]", x)
    return x


def get_float(path: str, v: dict, key: str, lo: float | None = None, hi: float | None = None) -> float:
    if key not in v:
        raise _bad(path, key, "a number", None)
    x = v[key]
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise _bad(path, key, "a finite number", x)
    x = float(x)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _bad(
            path, key, f"a number in [{-math.inf if lo is None else lo:g}, {math.inf if hi is None else hi:g}]", x
        )
    return x


def get_str(path: str, v: dict, key: str, pattern: re.Pattern | None = None) -> str:
    if key not in v:
        raise _bad(path, key, "a string", None)
    x = v[key]
    if not isinstance(x, str) or len(x) > 1000 or (pattern is not None and not pattern.match(x)):
        raise _bad(path, key, "a string" + (f" matching {pattern.pattern}" if pattern else ""), x)
    return x


def check_task_name(name: str, where: Path | str | None = None) -> str:
    if not TASK_NAME.match(name):
        raise InputError(
            f"task name {name!r} cannot name a znode or cgroup: use letters, digits, '_', '-', '.' (100 at most)",
            path=where,
            field="task.name",
        )
    return name


# -- the tree ---------------------------------------------------------------------------------------
def step_name(t: int) -> str:
    return f"{t:010d}"


@dataclass(frozen=True)
class RunPaths:
    root: str

    def __post_init__(self) -> None:
        r = self.root
        if not r.startswith("/") or any(p in ("", ".", "..") for p in r.split("/")[1:]):  # no //, no trailing /
            raise InputError(
                f"expected an absolute znode path like /bsp-planner/runs/NAME, got {r!r}", field="--zk-root"
            )

    @property
    def lock(self) -> str:
        return f"{self.root}/lock"

    @property
    def members(self) -> str:
        return f"{self.root}/members"

    def member(self, task: str) -> str:
        return f"{self.root}/members/{task}"

    @property
    def tasks(self) -> str:
        return f"{self.root}/tasks"

    def task(self, task: str) -> str:
        return f"{self.root}/tasks/{task}"

    def steps(self, task: str) -> str:
        return f"{self.root}/tasks/{task}/steps"

    def step(self, task: str, t: int) -> str:
        return f"{self.root}/tasks/{task}/steps/{step_name(t)}"

    def results(self, task: str) -> str:
        return f"{self.root}/tasks/{task}/results"

    def result(self, task: str, t: int) -> str:
        return f"{self.root}/tasks/{task}/results/{step_name(t)}"

    def checkpoint(self, task: str) -> str:
        return f"{self.root}/tasks/{task}/checkpoint"

    @property
    def barriers(self) -> str:
        return f"{self.root}/barrier"

    def barrier(self, t: int) -> str:
        return f"{self.root}/barrier/{step_name(t)}"


# -- values the protocol writes, and their checks ----------------------------------------------------
#: the step barriers a run may use (:mod:`.barrier`); "double" when a run's
#: description names none (written before the counting barrier existed)
BARRIER_KINDS = ("double", "counting")


def run_value(
    run_id: str,
    job_name: str,
    tasks: list[dict],
    workload_range: tuple[float, float],
    steps: int,
    barrier: str = "double",
) -> dict:
    return {
        "format": FORMAT,
        "run_id": run_id,
        "job": job_name,
        "tasks": tasks,
        "workload_range": [float(workload_range[0]), float(workload_range[1])],
        "steps": int(steps),
        "barrier": barrier,  # every task passes the steps' barriers the same way
    }


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    job: str
    tasks: dict[str, dict]  # name -> {"stressor", "ops_per_unit", "workers"}
    workload_range: tuple[float, float]
    steps: int
    barrier: str = "double"  # one of BARRIER_KINDS


def parse_run(path: str, v: dict) -> RunInfo:
    from ..core.stressors import KNOWN_STRESSORS

    fmt = get_int(path, v, "format", 1, 1000)
    if fmt != FORMAT:
        raise _bad(path, "format", f"format {FORMAT} (this bsp-planner)", fmt)
    run_id = get_str(path, v, "run_id", re.compile(r"^[A-Za-z0-9_.-]{1,100}$"))
    job = get_str(path, v, "job")
    raw = v.get("tasks")
    if not isinstance(raw, list) or not raw or len(raw) > 10000:
        raise _bad(path, "tasks", "a non-empty list", raw)
    tasks: dict[str, dict] = {}
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise _bad(path, f"tasks[{i}]", "an object", t)
        name = get_str(path, t, "name", TASK_NAME)
        command = t.get("command", t.get("process"))
        if command is not None:
            if not (
                isinstance(command, list)
                and (command or "command" not in t)  # process = []: an image run as built (Kubernetes)
                and len(command) <= 4096
                and all(isinstance(a, str) for a in command)
            ):
                raise _bad(
                    path,
                    f"tasks[{i}].{'command' if 'command' in t else 'process'}",
                    "a list of strings (a program and its arguments)",
                    command,
                )
            stressor = None
        else:
            stressor = get_str(path, t, "stressor")
            if stressor not in KNOWN_STRESSORS:
                raise _bad(path, f"tasks[{i}].stressor", "a stress-ng stressor", stressor)
        tasks[name] = {
            "stressor": stressor,
            "command": t.get("command"),
            "process": t.get("process"),
            "ops_per_unit": get_float(path, t, "ops_per_unit", 1e-12, 1e12) if command is None else 1.0,
            "workers": get_int(path, t, "workers", 1, 1024),
        }
    wr = v.get("workload_range")
    if not (
        isinstance(wr, list)
        and len(wr) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in wr)
        and 0 <= wr[0] < wr[1]
    ):
        raise _bad(path, "workload_range", "[low, high] with 0 <= low < high", wr)
    steps = get_int(path, v, "steps", 1, 10**9)
    barrier = v.get("barrier", "double")
    if barrier not in BARRIER_KINDS:
        raise _bad(path, "barrier", " or ".join(BARRIER_KINDS), barrier)
    return RunInfo(run_id, job, tasks, (float(wr[0]), float(wr[1])), steps, barrier)


def step_value(t: int, workload: float) -> dict:
    return {"step": int(t), "workload": float(workload)}


def stop_value(t: int) -> dict:
    return {"step": int(t), "stop": True}


def parse_step(path: str, v: dict, t: int, workload_range: tuple[float, float]) -> float | None:
    """The workload of step t, or None for a stop order."""
    if get_int(path, v, "step", 0) != t:
        raise _bad(path, "step", f"step {t}", v.get("step"))
    if v.get("stop") is True:
        return None
    lo, hi = workload_range
    return get_float(path, v, "workload", lo - 1e-9 * max(1.0, hi), hi + 1e-9 * max(1.0, hi))


def result_value(
    t: int,
    duration_s: float,
    enter_wait_s: float,
    incarnation: int,
    finished_at: float,
    workload: float | None = None,
    next_workload: float | None = None,
    cpu_s: float | None = None,
    *,
    started_at: float | None = None,
) -> dict:
    """A task's report of step t; `workload`/`next_workload`: what the task observed (None: not reported);
    `finished_at` / `started_at`: time.time() when its compute ended / started, on the task's clock."""
    optional = {"workload": workload, "next_workload": next_workload, "cpu_s": cpu_s, "started_at": started_at}
    return {
        "step": int(t),
        "duration_s": float(duration_s),
        "enter_wait_s": float(enter_wait_s),
        "incarnation": int(incarnation),
        "finished_at": float(finished_at),
        **{k: float(x) for k, x in optional.items() if x is not None},
    }


#: a reported workload above this is refused as absurd (no BSP task has 10^9 units of work per step)
MAX_WORKLOAD = 1e9


def check_workload(value: Any, what: str, key: str = "workload", error: type[InputError] = InputError) -> float:
    """A reported workload (`key`): a finite number in 0..MAX_WORKLOAD, else `error` naming `what` (task and step)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= float(value) <= MAX_WORKLOAD:
        raise error(f"{what} reported {key} {value!r}; expected a finite number in 0..{MAX_WORKLOAD:g}", field=key)
    return float(value)


MAX_DURATION_S = 7 * 24 * 3600.0


def parse_result(path: str, v: dict, t: int) -> dict:
    if get_int(path, v, "step", 0) != t:
        raise _bad(path, "step", f"step {t}", v.get("step"))
    out = {
        "duration_s": get_float(path, v, "duration_s", 0.0, MAX_DURATION_S),
        "enter_wait_s": get_float(path, v, "enter_wait_s", 0.0, MAX_DURATION_S),
        "incarnation": get_int(path, v, "incarnation", 0),
        "finished_at": get_float(path, v, "finished_at", 0.0),
    }
    for k, name in (("workload", "observed_workload"), ("next_workload", "next_workload")):
        if k in v:
            out[name] = check_workload(v[k], f"malformed value in ZooKeeper at {path}: the task", k, MalformedValue)
    return out | {
        k: get_float(path, v, k, 0.0, hi) for k, hi in (("cpu_s", MAX_DURATION_S), ("started_at", None)) if k in v
    }


def checkpoint_value(last_completed: int, incarnation: int) -> dict:
    return {"last_completed": int(last_completed), "incarnation": int(incarnation)}


def parse_checkpoint(path: str, v: dict) -> int:
    return get_int(path, v, "last_completed", -1)


def member_value(incarnation: int, pid: int, host: str, next_step: int) -> dict:
    return {"incarnation": int(incarnation), "pid": int(pid), "host": host[:200], "next_step": int(next_step)}


def parse_member(path: str, v: dict) -> dict:
    return {
        "incarnation": get_int(path, v, "incarnation", 0),
        "pid": get_int(path, v, "pid", 0),
        "host": get_str(path, v, "host"),
        "next_step": get_int(path, v, "next_step", 0),
    }

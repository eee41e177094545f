"""Coordination over ZooKeeper (kazoo): the run's znode tree, its ACLs, validated values, the step barrier.

One run owns one subtree, ``ROOT`` (``--zk-root``, by default ``/bsp-planner/runs/<run-id>``)::

    ROOT                         run description (JSON): tasks, stressors, ops per unit, workload range
    ROOT/lock/<...>__lock__<n>   kazoo's Lock recipe: the one live coordinator (pid, host, instance)
    ROOT/members/<task>          ephemeral: the task's worker is up (incarnation, pid, next step)
    ROOT/tasks/<task>/steps/<t>  the task's workload for step t (JSON; {"stop": true} ends the worker)
    ROOT/tasks/<task>/results/<t>  what the worker measured in step t (duration, enter wait)
    ROOT/tasks/<task>/checkpoint   the worker's state: the last superstep it completed
    ROOT/barrier/<t>/enter/<task>, ROOT/barrier/<t>/go      the double barrier of step t: entering...
    ROOT/barrier/<t>/leave/<task>, ROOT/barrier/<t>/done    ...and leaving

Every node of the run carries a digest ACL for the run's credentials only (``user:password`` from a file
or the environment, never from the command line), so another client can neither enter a barrier nor
rewrite a workload. Every value is compact JSON, checked against a schema when read: a malformed value
raises :class:`MalformedValue` naming the znode and the field.

Writes are idempotent (a create that finds its node is treated as done, after checking the node says the
same thing) and retried through connection loss, so a ZooKeeper restart inside the session timeout is
invisible to the protocol; waits re-check on every reconnect, since kazoo does not re-register watches
with a restarted server.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError

ENV_HOSTS = "BSP_PLANNER_ZOOKEEPER"
ENV_AUTH = "BSP_PLANNER_ZK_AUTH"  # user:password
ENV_AUTH_FILE = "BSP_PLANNER_ZK_AUTH_FILE"  # a file holding user:password
DEFAULT_HOSTS = "127.0.0.1:2181"
DEFAULT_PARENT = "/bsp-planner/runs"
FORMAT = 1
MAX_VALUE_BYTES = 64 * 1024
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
RECHECK_S = 1.0  # a wait re-reads its node at least this often, whatever the watches do

log = logging.getLogger("bsp_planner.runtime")

#: what to do about an unreachable ZooKeeper, on this machine and from a pod
LOCAL_HINT = "start a local server with `bsp-planner zk start` or point --zookeeper (or $BSP_PLANNER_ZOOKEEPER) at a running ensemble"
POD_HINT = (
    "this worker runs in a Kubernetes pod, which reaches ZooKeeper at the address the coordinator passed with "
    "--worker-zookeeper (default zookeeper.<namespace>.svc:2181): deploy the ZooKeeper of jobs/k8s in the run's "
    "namespace, or rerun with --worker-zookeeper HOST:PORT naming a server the pods can reach"
)


class ZkUnavailable(InputError):
    """ZooKeeper cannot be reached (at start, or for longer than the run's bounded wait)."""


class MalformedValue(InputError):
    """A value read from ZooKeeper is not what the protocol writes there."""


class RootHeld(InputError):
    """The run's root path belongs to another run, or another coordinator holds it."""


def quiet_kazoo(level: int = logging.CRITICAL) -> None:
    """kazoo logs every dropped connection; a run reports what matters itself."""
    logging.getLogger("kazoo").setLevel(level)
    if not logging.getLogger("kazoo").handlers:
        logging.getLogger("kazoo").addHandler(logging.NullHandler())
    logging.getLogger("kazoo").propagate = False


# -- credentials ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(user={self.user!r}, password=***)"

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    def acl(self) -> list:
        from kazoo.security import make_digest_acl

        return [make_digest_acl(self.user, self.password, all=True)]

    def parent_acl(self) -> list:
        """For shared parents (/bsp-planner, /bsp-planner/runs): anyone may read them, add a run and
        remove an *empty* run node (ZooKeeper deletes only childless nodes), so runs with different
        credentials can share them; a run's own subtree stays private (its nodes carry :meth:`acl`)."""
        from kazoo.security import ACL, Id, Permissions, make_digest_acl

        world = Permissions.READ | Permissions.CREATE | Permissions.DELETE
        return [make_digest_acl(self.user, self.password, all=True), ACL(world, Id("world", "anyone"))]


def parse_credentials(text: str, where: str) -> Credentials:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    user, sep, password = line.partition(":")
    if not sep or not user or not password or any(c.isspace() for c in user):
        raise InputError(f"expected one line `user:password` in {where}", field="zk-auth")
    return Credentials(user, password)


def read_credentials_file(path: str | Path) -> Credentials:
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"cannot read the ZooKeeper credentials file: {exc.strerror}", path=path, field="zk-auth") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(
            f"the credentials file is readable by other users (mode {stat.filemode(st.st_mode)}); `chmod 600 {path}`",
            path=path,
            field="zk-auth",
        )
    return parse_credentials(path.read_text(), str(path))


def load_credentials(file: str | Path | None = None, env: dict | None = None) -> Credentials | None:
    """From --zk-auth-file, else $BSP_PLANNER_ZK_AUTH_FILE, else $BSP_PLANNER_ZK_AUTH; None if none."""
    env = os.environ if env is None else env
    if file is not None:
        return read_credentials_file(file)
    if env.get(ENV_AUTH_FILE):
        return read_credentials_file(env[ENV_AUTH_FILE])
    if env.get(ENV_AUTH):
        return parse_credentials(env[ENV_AUTH], f"${ENV_AUTH}")
    return None


def generate_credentials() -> Credentials:
    return Credentials("bsp-planner", secrets.token_urlsafe(24))


def write_credentials_file(path: Path, creds: Credentials) -> Path:
    """Write user:password to a new file only its owner may read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{creds.user}:{creds.password}\n")
    os.chmod(path, 0o600)
    return path


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
    return MalformedValue(f"malformed value in ZooKeeper at {path}: field '{key}': expected {expected}, got {got!r}"[:400], field=path)


def get_int(path: str, v: dict, key: str, lo: int | None = None, hi: int | None = None, default: Any = ...) -> int:
    if key not in v:
        if default is not ...:
            return default
        raise _bad(path, key, "an integer", None)
    x = v[key]
    if not isinstance(x, int) or isinstance(x, bool) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _bad(path, key, f"an integer in [{lo}, {hi}]", x)
    return x


def get_float(path: str, v: dict, key: str, lo: float | None = None, hi: float | None = None, default: Any = ...) -> float:
    if key not in v:
        if default is not ...:
            return default
        raise _bad(path, key, "a number", None)
    x = v[key]
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise _bad(path, key, "a finite number", x)
    x = float(x)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _bad(path, key, f"a number in [{lo:g}, {hi:g}]", x)
    return x


def get_str(path: str, v: dict, key: str, pattern: re.Pattern | None = None, default: Any = ...) -> str:
    if key not in v:
        if default is not ...:
            return default
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
        if not r.startswith("/") or r.endswith("/") or "//" in r or any(p in (".", "..") for p in r.split("/")[1:]) or r == "/":
            raise InputError(f"expected an absolute znode path like /bsp-planner/runs/NAME, got {r!r}", field="--zk-root")

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
def run_value(run_id: str, job_name: str, tasks: list[dict], workload_range: tuple[float, float], steps: int) -> dict:
    return {
        "format": FORMAT,
        "run_id": run_id,
        "job": job_name,
        "tasks": tasks,
        "workload_range": [float(workload_range[0]), float(workload_range[1])],
        "steps": int(steps),
    }


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    job: str
    tasks: dict[str, dict]  # name -> {"stressor", "ops_per_unit", "workers"}
    workload_range: tuple[float, float]
    steps: int


def parse_run(path: str, v: dict) -> RunInfo:
    from ..stressors import KNOWN_STRESSORS

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
        stressor = get_str(path, t, "stressor")
        if stressor not in KNOWN_STRESSORS:
            raise _bad(path, f"tasks[{i}].stressor", "a stress-ng stressor", stressor)
        tasks[name] = {
            "stressor": stressor,
            "ops_per_unit": get_float(path, t, "ops_per_unit", 1e-12, 1e12),
            "workers": get_int(path, t, "workers", 1, 1024),
        }
    wr = v.get("workload_range")
    if not (isinstance(wr, list) and len(wr) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in wr) and 0 <= wr[0] < wr[1]):
        raise _bad(path, "workload_range", "[low, high] with 0 <= low < high", wr)
    steps = get_int(path, v, "steps", 1, 10**9)
    return RunInfo(run_id, job, tasks, (float(wr[0]), float(wr[1])), steps)


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


def result_value(t: int, duration_s: float, enter_wait_s: float, incarnation: int, finished_at: float) -> dict:
    return {
        "step": int(t),
        "duration_s": float(duration_s),
        "enter_wait_s": float(enter_wait_s),
        "incarnation": int(incarnation),
        "finished_at": float(finished_at),
    }


MAX_DURATION_S = 7 * 24 * 3600.0


def parse_result(path: str, v: dict, t: int) -> dict:
    if get_int(path, v, "step", 0) != t:
        raise _bad(path, "step", f"step {t}", v.get("step"))
    return {
        "duration_s": get_float(path, v, "duration_s", 0.0, MAX_DURATION_S),
        "enter_wait_s": get_float(path, v, "enter_wait_s", 0.0, MAX_DURATION_S),
        "incarnation": get_int(path, v, "incarnation", 0),
        "finished_at": get_float(path, v, "finished_at", 0.0),
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


# -- the session ------------------------------------------------------------------------------------
class ZkSession:
    """A kazoo client holding the run's credentials: bounded connect, retried idempotent writes, waits
    that survive reconnects, and a record of how long the connection has been down."""

    def __init__(
        self,
        hosts: str,
        creds: Credentials,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 15.0,
        op_deadline_s: float = 60.0,
        unreachable_hint: str = LOCAL_HINT,
    ) -> None:
        from kazoo.client import KazooClient

        quiet_kazoo()
        self.hosts = hosts
        self.creds = creds
        self.connect_timeout_s = connect_timeout_s
        self.unreachable_hint = unreachable_hint
        self.op_deadline_s = op_deadline_s
        self.acl = creds.acl()
        try:
            self.client = KazooClient(
                hosts=hosts,
                timeout=session_timeout_s,
                auth_data=creds.auth_data,
                default_acl=self.acl,
                connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5, "max_jitter": 0.2},
            )
        except ValueError as exc:
            raise InputError(
                f"expected a ZooKeeper connection string host:port[,host:port...], got {hosts!r} ({exc})", field="--zookeeper"
            ) from None
        self._wakers: set[threading.Event] = set()
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.lost = 0  # sessions lost (expired) so far
        self.reconnects = 0
        self._listeners: list[Callable[[str], None]] = []
        self.client.add_listener(self._on_state)

    # -- connection ------------------------------------------------------------------------------
    def start(self) -> ZkSession:
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            self.client.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            self._abandon()
            raise ZkUnavailable(
                f"cannot reach ZooKeeper at {self.hosts} after {self.connect_timeout_s:g} s; {self.unreachable_hint}",
                field="--zookeeper",
            ) from None
        except Exception as exc:  # a malformed host string, an unknown host name
            self._abandon()
            raise ZkUnavailable(f"cannot connect to ZooKeeper at {self.hosts!r}: {exc}", field="--zookeeper") from None
        return self

    def _abandon(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception:
            pass

    def close(self) -> None:
        self._abandon()

    def add_listener(self, fn: Callable[[str], None]) -> None:
        self._listeners.append(fn)

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState

        now = time.monotonic()
        if state == KazooState.CONNECTED:
            if self.down_since is not None:
                self.reconnects += 1
            self.down_since = None
            self.wake_all()
        else:
            if self.down_since is None:
                self.down_since = now
            if state == KazooState.LOST:
                self.lost += 1
        for fn in self._listeners:
            try:
                fn(str(state))
            except Exception:  # a listener must never break kazoo's thread
                log.exception("state listener failed")

    @property
    def connected(self) -> bool:
        return self.client.connected

    def down_for(self) -> float:
        return 0.0 if self.down_since is None else time.monotonic() - self.down_since

    def session_id(self) -> int | None:
        cid = self.client.client_id
        return cid[0] if cid else None

    def wake_all(self) -> None:
        with self._lock:
            for ev in self._wakers:
                ev.set()

    # -- retried operations ------------------------------------------------------------------------
    def retry(self, fn: Callable, *args, deadline_s: float | None = None, **kwargs):
        """Run a kazoo call, retrying through connection loss for up to the op deadline."""
        from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
        from kazoo.handlers.threading import KazooTimeoutError

        deadline = time.monotonic() + (self.op_deadline_s if deadline_s is None else deadline_s)
        delay = 0.02
        while True:
            remaining = deadline - time.monotonic()
            try:
                if not self.client.connected:
                    # kazoo would queue the request and block without a timeout until it reconnects
                    raise ConnectionLoss()
                return self._invoke(fn, args, kwargs, max(0.05, remaining))
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise ZkUnavailable(
                        f"lost ZooKeeper at {self.hosts} for more than {self.op_deadline_s if deadline_s is None else deadline_s:g} s "
                        f"({type(exc).__name__})",
                        field="--zookeeper",
                    ) from None
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(0.5, delay * 1.5)

    def _invoke(self, fn: Callable, args: tuple, kwargs: dict, timeout_s: float):
        """A kazoo call with a timeout: the client's `*_async` twin where there is one."""
        name = getattr(fn, "__name__", "")
        owner = getattr(fn, "__self__", None)
        if owner is self.client and name in ("create", "exists", "get", "get_children", "set", "delete") and not kwargs.get("recursive"):
            return getattr(self.client, f"{name}_async")(*args, **kwargs).get(timeout=timeout_s)
        return fn(*args, **kwargs)

    def create(self, path: str, value: dict | None = None, *, ephemeral: bool = False, makepath: bool = False, acl=None) -> bool:
        """Create a node; False if it already existed (an earlier try of the same write, or a restart)."""
        from kazoo.exceptions import NodeExistsError

        data = encode(value) if value is not None else b""
        try:
            self.retry(self.client.create, path, data, acl=acl or self.acl, ephemeral=ephemeral, makepath=makepath)
            return True
        except NodeExistsError:
            return False

    def ensure_path(self, path: str, acl=None) -> None:
        """Create path and its missing parents (parents get `acl`, default the run's)."""
        from kazoo.exceptions import NodeExistsError

        parts = path.strip("/").split("/")
        cur = ""
        for p in parts:
            cur += "/" + p
            if self.retry(self.client.exists, cur) is None:
                try:
                    self.retry(self.client.create, cur, b"", acl=acl or self.acl)
                except NodeExistsError:
                    pass

    def get(self, path: str, watch=None) -> dict | None:
        """The node's JSON value (not yet checked against a schema), or None if there is no node."""
        from kazoo.exceptions import NoNodeError

        try:
            raw, _ = self.retry(self.client.get, path, watch=watch)
        except NoNodeError:
            return None
        return decode(path, raw)

    def exists(self, path: str, watch=None) -> bool:
        return self.retry(self.client.exists, path, watch=watch) is not None

    def children(self, path: str, watch=None) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return self.retry(self.client.get_children, path, watch=watch)
        except NoNodeError:
            return []

    def set(self, path: str, value: dict) -> None:
        self.retry(self.client.set, path, encode(value))

    def delete_tree(self, path: str, batch: int = 200) -> None:
        """Delete a subtree, leaves first, `batch` deletes per ZooKeeper transaction."""
        from kazoo.exceptions import NoNodeError

        order: list[str] = []

        def walk(p: str) -> None:
            for c in self.children(p):
                walk(f"{p}/{c}")
            order.append(p)

        if not self.exists(path):
            return
        walk(path)
        for i in range(0, len(order), batch):
            results = self.commit([("delete", p) for p in order[i : i + batch]])
            if any(isinstance(r, Exception) for r in results):
                for p in order[i : i + batch]:  # someone raced us (or a retried batch half-applied): one by one
                    try:
                        self.retry(self.client.delete, p)
                    except NoNodeError:
                        pass

    def commit(self, ops: list[tuple]) -> list:
        """Run [('create', path, value), ('set', path, value), ('delete', path)] as one transaction;
        returns kazoo's per-operation results (an exception object for each failed one: all or none
        are applied). A retry after a connection loss builds the transaction afresh."""

        def attempt():
            tx = self.client.transaction()
            for op in ops:
                if op[0] == "create":
                    tx.create(op[1], encode(op[2]) if op[2] is not None else b"", acl=self.acl)
                elif op[0] == "set":
                    tx.set_data(op[1], encode(op[2]))
                elif op[0] == "delete":
                    tx.delete(op[1])
                else:
                    raise ValueError(op[0])
            return tx.commit_async().get(timeout=max(1.0, self.op_deadline_s))

        return self.retry(attempt)

    # -- waiting ---------------------------------------------------------------------------------
    def wait_for(
        self,
        check: Callable[[Callable], Any],
        timeout_s: float | None = None,
        *,
        interrupt: Callable[[], bool] | None = None,
        tick_s: float = RECHECK_S,
    ) -> Any:
        """Call check(watch) until it returns something other than None; `watch` wakes the wait early.

        Returns the value, or None after timeout_s or once interrupt() is true (checked every tick).
        """
        ev = threading.Event()

        def watch(_event=None) -> None:
            ev.set()

        with self._lock:
            self._wakers.add(ev)
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                ev.clear()
                value = check(watch)
                if value is not None:
                    return value
                if interrupt is not None and interrupt():
                    return None
                remaining = tick_s if deadline is None else min(tick_s, deadline - time.monotonic())
                if remaining <= 0:
                    return None
                ev.wait(remaining)
        finally:
            with self._lock:
                self._wakers.discard(ev)

    def wait_exists(self, path: str, timeout_s: float | None = None, **kw) -> bool:
        """Until `path` exists. Its creation event is proof enough (no second read)."""
        created: list[bool] = []

        def check(watch):
            if created:
                return True

            def on_event(event) -> None:
                if event.type == "CREATED":
                    created.append(True)
                watch(event)

            return True if self.exists(path, watch=on_event) else None

        return bool(self.wait_for(check, timeout_s, **kw))


# -- the double barrier of one superstep ------------------------------------------------------------
class StepBarrier:
    """Double barrier for step t among a fixed set of named participants (kazoo's DoubleBarrier, per step
    and restartable).

    Entering creates ``enter/<name>``; whoever then counts every participant there creates ``go``, and
    everyone waits for ``go``. Leaving is the same with ``leave/<name>`` and ``done``. The nodes are
    persistent and creating one twice is harmless, so a participant restarted inside a step simply enters
    (and leaves) again: when the others have passed already, ``go`` is there and it goes straight through.
    The coordinator creates ``barrier/<t>``, ``enter`` and ``leave`` when it publishes the step.
    """

    def __init__(self, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]) -> None:
        self.session = session
        self.t = t
        self.base = paths.barrier(t)
        self.participants = frozenset(participants)

    @property
    def go_path(self) -> str:
        return f"{self.base}/go"

    @property
    def done_path(self) -> str:
        return f"{self.base}/done"

    def setup_ops(self) -> list[tuple]:
        return [("create", self.base, None), ("create", f"{self.base}/enter", None), ("create", f"{self.base}/leave", None)]

    def _pass(self, phase: str, flag: str, name: str, timeout_s: float | None, interrupt) -> float:
        if name not in self.participants:
            raise InputError(f"{name!r} is not a participant of this barrier", field="task")
        t0 = time.perf_counter()
        s = self.session
        flag_path = f"{self.base}/{flag}"
        if self._fast_pass(phase, flag_path, name, timeout_s):
            return time.perf_counter() - t0
        s.create(f"{self.base}/{phase}/{name}", {"step": self.t})

        def check(watch):
            if s.exists(flag_path, watch=watch):
                return True
            stat = s.retry(s.client.exists, f"{self.base}/{phase}")
            if stat is not None and stat.numChildren >= len(self.participants):
                here = self.participants.intersection(s.children(f"{self.base}/{phase}"))
                if len(here) == len(self.participants):
                    s.create(flag_path, {"step": self.t})
                    return True
            return None

        if s.wait_for(check, timeout_s, interrupt=interrupt) is None:
            raise TimeoutError(f"step {self.t}: {phase} barrier not passed within {timeout_s} s")
        return time.perf_counter() - t0

    def _fast_pass(self, phase: str, flag_path: str, name: str, timeout_s: float | None) -> bool:
        """The common case in one round trip: create our node, count the phase's children, watch the flag,
        pipelined (one session's requests are served in order, so the count includes our node and the one
        whose node came last sees them all). False on any trouble: the caller's loop takes over."""
        from kazoo.exceptions import KazooException, NodeExistsError

        s = self.session
        client = s.client
        ev = threading.Event()
        seen: list[str] = []

        def on_flag(event) -> None:
            seen.append(event.type)
            ev.set()

        try:
            f_create = client.create_async(f"{self.base}/{phase}/{name}", encode({"step": self.t}), acl=s.acl)
            f_count = client.exists_async(f"{self.base}/{phase}")  # numChildren, not n names: O(n) not O(n^2)
            f_flag = client.exists_async(flag_path, watch=on_flag)
            try:
                f_create.get(timeout=5)
            except NodeExistsError:
                pass
            count = f_count.get(timeout=5)
            if f_flag.get(timeout=5) is not None:
                return True
            n = len(self.participants)
            if count is not None and count.numChildren >= n:
                # the last one in. Only the run's credentials may add children and only participants'
                # names are written, so n children are the n participants; more would be an anomaly:
                # then look at the names
                if count.numChildren == n:
                    here = self.participants
                else:
                    here = self.participants.intersection(client.get_children_async(f"{self.base}/{phase}").get(timeout=5))
                if len(here) == n:
                    try:
                        client.create_async(flag_path, encode({"step": self.t}), acl=s.acl).get(timeout=5)
                    except NodeExistsError:
                        pass
                    return True
        except (KazooException, Exception):  # connection trouble: the robust loop retries
            return False
        # wait for the last participant's flag; the loop below re-checks after reconnects
        with s._lock:
            s._wakers.add(ev)
        try:
            wait = RECHECK_S if timeout_s is None else min(RECHECK_S, timeout_s)
            if not ev.wait(wait):
                return False
            # the flag's creation is the release itself; anything else (a reconnect) is checked
            return "CREATED" in seen or s.exists(flag_path)
        finally:
            with s._lock:
                s._wakers.discard(ev)

    def enter(self, name: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Enter; returns once every participant has entered (the wait, in seconds)."""
        return self._pass("enter", "go", name, timeout_s, interrupt)

    def leave(self, name: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Leave; returns once every participant has left (the wait, in seconds)."""
        return self._pass("leave", "done", name, timeout_s, interrupt)

    def is_done(self, watch=None) -> bool:
        return self.session.exists(self.done_path, watch=watch)

    def cleanup_ops(self) -> list[tuple]:
        """Deletes of this step's barrier nodes, for one transaction once everyone is past it."""
        s = self.session
        ops: list[tuple] = []
        for phase, flag in (("enter", "go"), ("leave", "done")):
            for c in s.children(f"{self.base}/{phase}"):
                ops.append(("delete", f"{self.base}/{phase}/{c}"))
            ops.append(("delete", f"{self.base}/{phase}"))
            if s.exists(f"{self.base}/{flag}"):
                ops.append(("delete", f"{self.base}/{flag}"))
        ops.append(("delete", self.base))
        return ops

"""A kazoo session for a live run: bounded connect, retried idempotent writes, waits that survive
reconnects (kazoo does not re-register watches with a restarted server), and how long it has been down."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from ..core.errors import InputError
from .credentials import Credentials
from .schema import decode, encode

ENV_HOSTS = "BSP_PLANNER_ZOOKEEPER"
DEFAULT_HOSTS = "127.0.0.1:2181"
RECHECK_S = 1.0  # a wait re-reads its node at least this often, whatever the watches do
ASYNC_TWINS = ("create", "ensure_path", "exists", "get", "get_children", "set", "delete")  # kazoo's *_async calls

log = logging.getLogger("bsp_planner.runtime")

#: what to do about an unreachable ZooKeeper, on this machine and from a pod
LOCAL_HINT = (
    "start a local server with `bsp-planner zk start` or point --zookeeper (or $BSP_PLANNER_ZOOKEEPER) at a "
    "running ensemble"
)
POD_HINT = (
    "this worker runs in a Kubernetes pod, which reaches ZooKeeper at the address the coordinator passed with "
    "--worker-zookeeper (default zookeeper.<namespace>.svc:2181): deploy the ZooKeeper of jobs/k8s in the run's "
    "namespace, or rerun with --worker-zookeeper HOST:PORT naming a server the pods can reach"
)


class ZkUnavailable(InputError):
    """ZooKeeper cannot be reached (at start, or for longer than the run's bounded wait)."""


def quiet_kazoo() -> None:
    """kazoo logs every dropped connection; a run reports what matters itself."""
    kazoo_log = logging.getLogger("kazoo")
    kazoo_log.setLevel(logging.CRITICAL)
    if not kazoo_log.handlers:
        kazoo_log.addHandler(logging.NullHandler())
    kazoo_log.propagate = False


# -- the session ------------------------------------------------------------------------------------
class ZkSession:
    """A kazoo client holding the run's credentials (see the module docstring)."""

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
                f"expected a ZooKeeper connection string host:port[,host:port...], got {hosts!r} ({exc})",
                field="--zookeeper",
            ) from None
        self._wakers: set[threading.Event] = set()
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.lost = 0  # sessions lost (expired) so far
        self._listeners: list[Callable[[str], None]] = []
        self.client.add_listener(self._on_state)

    # -- connection ------------------------------------------------------------------------------
    def start(self) -> ZkSession:
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            self.client.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            self.close()
            raise ZkUnavailable(
                f"cannot reach ZooKeeper at {self.hosts} after {self.connect_timeout_s:g} s; {self.unreachable_hint}",
                field="--zookeeper",
            ) from None
        except Exception as exc:  # a malformed host string, an unknown host name
            self.close()
            raise ZkUnavailable(f"cannot connect to ZooKeeper at {self.hosts!r}: {exc}", field="--zookeeper") from None
        return self

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()

    def add_listener(self, fn: Callable[[str], None]) -> None:
        self._listeners.append(fn)

    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState

        now = time.monotonic()
        if state == KazooState.CONNECTED:
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
                        f"lost ZooKeeper at {self.hosts} for more than "
                        f"{self.op_deadline_s if deadline_s is None else deadline_s:g} s "
                        f"({type(exc).__name__})",
                        field="--zookeeper",
                    ) from None
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(0.5, delay * 1.5)

    def _invoke(self, fn: Callable, args: tuple, kwargs: dict, timeout_s: float):
        """A kazoo call with a timeout: the client's `*_async` twin where there is one."""
        name = getattr(fn, "__name__", "")
        if getattr(fn, "__self__", None) is self.client and name in ASYNC_TWINS:
            return getattr(self.client, f"{name}_async")(*args, **kwargs).get(timeout=timeout_s)
        return fn(*args, **kwargs)

    def create(self, path: str, value: dict | None = None, *, ephemeral: bool = False) -> bool:
        """Create a node; False if it already existed (an earlier try of the same write, or a restart)."""
        from kazoo.exceptions import NodeExistsError

        data = encode(value) if value is not None else b""
        try:
            self.retry(self.client.create, path, data, acl=self.acl, ephemeral=ephemeral)
            return True
        except NodeExistsError:
            return False

    def ensure_path(self, path: str, acl=None) -> None:
        """Create path and its missing parents (parents get `acl`, default the run's)."""
        self.retry(self.client.ensure_path, path, acl=acl or self.acl)

    def get(self, path: str, watch=None) -> dict | None:
        """The node's JSON value (not yet checked against a schema), or None if there is no node."""
        from kazoo.exceptions import NoNodeError

        try:
            raw, _ = self.retry(self.client.get, path, watch=watch)
        except NoNodeError:
            return None
        return decode(path, raw)

    def prefetch(self, path: str) -> Prefetch:
        """Ask for the node's value now without waiting for it (one request, pipelined behind whatever this
        session sent before); `Prefetch.value()` later gives it. For values read right after a wait that
        the request can overlap, such as a task's next publication behind its barrier's leave."""
        pending = None
        with contextlib.suppress(Exception):  # a request that cannot even be queued: the caller reads the node itself
            pending = self.client.get_async(path) if self.client.connected else None
        return Prefetch(path, pending)

    def exists(self, path: str, watch=None) -> bool:
        return self.retry(self.client.exists, path, watch=watch) is not None

    def exists_async(self, path: str, watch: Callable, done: Callable[[bool], None]) -> None:
        """Ask whether `path` exists, leaving `watch` on it, without waiting for the answer: done(exists) is
        called on kazoo's completion thread. A request that fails (a lost connection) calls nothing: for
        followers that never block kazoo's threads on a round trip, and whose caller has its own check."""

        def answered(result) -> None:
            with contextlib.suppress(Exception):  # failed: see above
                done(result.get_nowait() is not None)

        with contextlib.suppress(Exception):
            self.client.exists_async(path, watch=watch).rawlink(answered)

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
                    with contextlib.suppress(NoNodeError):
                        self.retry(self.client.delete, p)

    def commit(self, ops: list[tuple]) -> list:
        """Run [('create', path, value), ('set', path, value), ('delete', path)] as one transaction;
        returns kazoo's per-operation results (an exception object for each failed one: all or none
        are applied). A retry after a connection loss builds the transaction afresh."""

        def attempt():
            return self.transaction(ops).commit_async().get(timeout=max(1.0, self.op_deadline_s))

        return self.retry(attempt)

    def transaction(self, ops: list[tuple]):
        """A kazoo transaction holding `ops` (as :meth:`commit` takes them), not yet committed: the caller
        may add to it and commit it asynchronously (pipelined with other requests)."""
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
        return tx

    # -- waiting ---------------------------------------------------------------------------------
    def wait_for(
        self,
        check: Callable[[Callable], Any],
        timeout_s: float | None = None,
        *,
        interrupt: Callable[[], bool] | None = None,
        tick_s: float = RECHECK_S,
    ) -> Any:
        """Call check(watch) until it returns something other than None (`watch` wakes the wait early) and
        return that; None after timeout_s or once interrupt() is true (checked every tick)."""
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


class Prefetch:
    """A node's value asked for ahead of need (`ZkSession.prefetch`)."""

    MISSING: ClassVar[object] = object()  # not known: the node did not exist yet, or the request failed

    def __init__(self, path: str, pending) -> None:
        self.path, self._pending = path, pending

    def value(self, timeout_s: float) -> dict | object:
        """The node's JSON value as it was when the request was served, or `Prefetch.MISSING`."""
        if self._pending is None:
            return Prefetch.MISSING
        try:
            raw, _ = self._pending.get(timeout=timeout_s)
        except Exception:  # no node yet, a lost connection, a timeout: the caller falls back to reading it
            return Prefetch.MISSING
        return decode(self.path, raw)

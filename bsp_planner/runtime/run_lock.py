"""The one coordinator of a run: kazoo's Lock recipe under the run's root, and the liveness check that a
resume (or a second start) must pass before it touches anything of the run.

The lock lives at ``ROOT/lock``; each contender is an ephemeral sequential node whose value names its
coordinator (pid, host, instance). The lowest node holds the lock, and it vanishes with its holder's
ZooKeeper session, so a run is held exactly as long as a coordinator of it is alive.

A coordinator killed with SIGKILL leaves its node until its session expires (the session timeout). Rather
than waiting that long, a contender removes a holder that is provably gone: one whose run.json says it
ended (``ended_instance``), or one on this host whose pid no longer exists. A holder on another host
(a coordinator pod) cannot be checked that way, so the contender waits for its session to expire, up to
``wait_s``; a holder still there after that is alive, and the contender is refused (:class:`RunHeld`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from dataclasses import dataclass

from ..core.errors import InputError
from ..core.leftovers import running

LOCK_NODE = re.compile(r"__lock__(\d{10})$")


class RunHeld(InputError):
    """Another coordinator, alive, holds the run."""


@dataclass(frozen=True)
class Holder:
    """One contender of the run's lock: its znode and the coordinator it names."""

    node: str
    sequence: int
    pid: int | None
    host: str | None
    instance: str | None
    session_id: int

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}" if self.pid is not None else "an unidentified coordinator"


class RunLock:
    """The run's lock at ``path`` (e.g. "/bsp-planner/runs/x/lock"), taken by :meth:`acquire`."""

    def __init__(self, session, path: str, run_id: str, instance: str) -> None:
        self.session = session
        self.path = path
        self.run_id = run_id
        self.instance = instance
        self.identity = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id, "instance": instance}
        self._lock = None

    # -- who holds it ------------------------------------------------------------------------------
    def holders(self) -> list[Holder]:
        """The contenders in lock order (the first holds the lock); empty when nobody holds the run."""
        from kazoo.exceptions import NoNodeError

        s = self.session
        found = []
        for child in s.children(self.path):
            m = LOCK_NODE.search(child)
            if m is None:
                continue
            try:
                raw, stat = s.retry(s.client.get, f"{self.path}/{child}")
            except NoNodeError:
                continue
            ident = None
            with contextlib.suppress(UnicodeDecodeError, ValueError):
                ident = json.loads(raw.decode() or "{}")
            ident = ident if isinstance(ident, dict) else {}
            pid = ident.get("pid") if isinstance(ident.get("pid"), int) else None
            host = ident.get("host") if isinstance(ident.get("host"), str) else None
            inst = ident.get("instance") if isinstance(ident.get("instance"), str) else None
            found.append(Holder(child, int(m.group(1)), pid, host, inst, stat.ephemeralOwner))
        return sorted(found, key=lambda h: h.sequence)

    def _gone(self, h: Holder, ended_instance: str | None) -> bool:
        if h.session_id == self.session.session_id():
            return False  # our own node
        if ended_instance is not None and h.instance == ended_instance:
            return True
        return h.host == socket.gethostname() and h.pid is not None and not running(h.pid)

    def _definitely_alive(self, h: Holder) -> bool:
        """A holder on this host whose process runs: no need to wait for its session to tell."""
        return h.host == socket.gethostname() and h.pid is not None and running(h.pid) and h.pid != os.getpid()

    # -- taking it ---------------------------------------------------------------------------------
    def acquire(self, wait_s: float, ended_instance: str | None = None) -> None:
        """Take the run's lock, removing holders that are provably gone and waiting up to `wait_s` for
        one whose liveness only its session can tell; :class:`RunHeld` if a live coordinator holds it."""
        from kazoo.exceptions import LockTimeout, NoNodeError
        from kazoo.recipe.lock import Lock

        s = self.session
        deadline = time.monotonic() + wait_s
        lock = Lock(s.client, self.path, identifier=json.dumps(self.identity, separators=(",", ":")))
        while True:
            try:
                # a short, bounded try: kazoo's own retry would wait for a lost server without end
                got = lock.acquire(blocking=True, timeout=0.2)
            except LockTimeout:
                got = False
            if got:
                self._lock = lock
                return
            others = [h for h in self.holders() if h.session_id != s.session_id()]
            stale = [h for h in others if self._gone(h, ended_instance)]
            for h in stale:
                with contextlib.suppress(NoNodeError):
                    s.retry(s.client.delete, f"{self.path}/{h.node}")
            if stale:
                continue
            live = next((h for h in others if self._definitely_alive(h)), None)
            if live is not None or time.monotonic() > deadline:
                holder = live or (others[0] if others else None)
                who = holder.describe() if holder else "another coordinator"
                raise RunHeld(
                    f"run {self.run_id!r} is being coordinated by {who} (its ZooKeeper session is alive); "
                    "nothing was changed. Wait for it to end, or stop it (Ctrl-C or kill: it stops resumable) "
                    f"and then `bsp-planner run --resume {self.run_id}`",
                    field="--resume",
                )

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.is_acquired

    def release(self) -> None:
        """Delete our contender node, within the session's bounded retry (kazoo's own release would wait
        for a lost server without end); if ZooKeeper is gone, closing the session frees the lock."""
        lock, self._lock = self._lock, None
        if lock is None or lock.node is None:
            return
        lock.is_acquired = False
        if not self.session.connected:
            return
        with contextlib.suppress(Exception):  # gone already, or the server went: the node goes with the session
            self.session.retry(self.session.client.delete, f"{self.path}/{lock.node}", deadline_s=2.0)

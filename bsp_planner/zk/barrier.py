"""The barrier of one superstep, over a :class:`~.session.ZkSession`: :class:`StepBarrier`, whose participants
count each other, or :class:`CountingBarrier`, which the coordinator counts and releases (:func:`step_barrier`)."""

from __future__ import annotations

import contextlib
import threading
import time

from ..core.errors import InputError
from .schema import BARRIER_KINDS, RunPaths, encode
from .session import RECHECK_S, ZkSession


class ArrivalRefused(Exception):
    """ZooKeeper refused an arrival's transaction for another reason than a node already there (the
    step's report refers to a node that is gone): not a connection problem, so not retried."""


class BarrierNodes:
    """The nodes of step t's barrier: ``barrier/<t>/{enter,leave}/<name>`` and the flags ``go`` and
    ``done``, made when the step is published and removed in one transaction once everyone is past it.
    Shared by :class:`StepBarrier` and :class:`CountingBarrier`, which differ only in who counts the arrivals."""

    PHASES = {"enter": "go", "leave": "done"}

    def __init__(self, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]) -> None:
        self.session = session
        self.t = t
        self.base = paths.barrier(t)
        self.participants = frozenset(participants)

    def flag_path(self, phase: str) -> str:
        return f"{self.base}/{self.PHASES[phase]}"

    @property
    def go_path(self) -> str:
        return self.flag_path("enter")

    def setup_ops(self) -> list[tuple]:
        return [("create", path, None) for path in (self.base, f"{self.base}/enter", f"{self.base}/leave")]

    def arrival_async(self, phase: str, name: str, with_ops: list[tuple] | None = None):
        """Send our arrival at `phase` (``<phase>/<name>``), in one transaction with `with_ops` if any (e.g.
        the step's report: both or neither, in the one round trip the arrival costs anyway); a future for
        :meth:`settle_arrival`."""
        s = self.session
        path, data = f"{self.base}/{phase}/{name}", encode({"step": self.t})
        if not with_ops:
            return s.client.create_async(path, data, acl=s.acl)
        tx = s.transaction(with_ops)
        tx.create(path, data, acl=s.acl)
        return tx.commit_async()

    def settle_arrival(
        self, future, phase: str, name: str, timeout_s: float, with_ops: list[tuple] | None = None
    ) -> None:
        """Wait for :meth:`arrival_async`'s answer (`with_ops`: the operations sent with the arrival). A node
        already there is an earlier try's that went through before a connection loss, or another
        incarnation's report of the step: what is missing is sent alone (the arrival, or the operations,
        where only the arrival was there). Any other refusal raises ArrivalRefused; connection trouble
        raises kazoo's exceptions (the caller retries)."""
        from kazoo.exceptions import NodeExistsError, RolledBackError

        def first_failure(results: list) -> tuple[int, Exception] | None:  # a NodeExistsError, else refused
            failed = [
                (i, r) for i, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, RolledBackError)
            ]
            if failed and not isinstance(failed[0][1], NodeExistsError):
                raise ArrivalRefused(f"step {self.t}: {phase} of {name} refused by ZooKeeper: {failed[0][1]!r}")
            return failed[0] if failed else None

        try:
            results = future.get(timeout=timeout_s)
        except NodeExistsError:
            return
        failed = first_failure(results) if isinstance(results, list) else None
        if failed is not None and failed[0] == len(results) - 1:  # only the arrival was there: its operations go alone
            first_failure(self.session.transaction(with_ops or []).commit_async().get(timeout=timeout_s))
        elif failed is not None:
            self.settle_arrival(self.arrival_async(phase, name), phase, name, timeout_s)

    def enter(self, name: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Returns once every participant has entered (the wait, in seconds)."""
        return self._timed_pass("enter", name, timeout_s, interrupt)

    def leave(
        self, name: str, timeout_s: float | None = None, interrupt=None, with_ops: list[tuple] | None = None
    ) -> float:
        """Leave, committing `with_ops` (the step's report) in one transaction with the arrival; returns
        once every participant has left (the wait, in seconds)."""
        return self._timed_pass("leave", name, timeout_s, interrupt, with_ops)

    def is_done(self, watch=None) -> bool:
        return self.session.exists(self.flag_path("leave"), watch=watch)

    def _timed_pass(self, phase: str, name: str, timeout_s: float | None, interrupt, with_ops=None) -> float:
        if name not in self.participants:
            raise InputError(f"{name!r} is not a participant of this barrier", field="task")
        t0 = time.perf_counter()
        self._pass(phase, name, timeout_s, interrupt, with_ops)
        return time.perf_counter() - t0

    def _pass(self, phase: str, name: str, timeout_s: float | None, interrupt, with_ops: list[tuple] | None) -> None:
        """Arrive at `phase` and return once it is released (TimeoutError after `timeout_s`)."""
        raise NotImplementedError

    def cleanup_ops(self) -> list[tuple]:
        """Deletes of this step's barrier nodes, for one transaction once everyone is past it."""
        s, base = self.session, self.base
        paths: list[str] = []  # leaves first
        for phase, flag in self.PHASES.items():
            paths += [*(f"{base}/{phase}/{c}" for c in s.children(f"{base}/{phase}")), f"{base}/{phase}"]
            paths += [f"{base}/{flag}"] if s.exists(f"{base}/{flag}") else []
        return [("delete", p) for p in [*paths, base]]


class StepBarrier(BarrierNodes):
    """Double barrier for step t among a fixed set of named participants (kazoo's DoubleBarrier, per step
    and restartable).

    Entering creates ``enter/<name>``; whoever then counts every participant there creates ``go``, and
    everyone waits for ``go``. Leaving is the same with ``leave/<name>`` and ``done``. The nodes are
    persistent and creating one twice is harmless, so a participant restarted inside a step simply enters
    (and leaves) again: when the others have passed already, ``go`` is there and it goes straight through.
    """

    def _pass(self, phase: str, name: str, timeout_s: float | None, interrupt, with_ops: list[tuple] | None) -> None:
        s = self.session
        flag_path = self.flag_path(phase)
        arrived: list[bool] = []
        if self._fast_pass(phase, flag_path, name, timeout_s, with_ops, arrived):
            return
        if not arrived:  # the fast pass did not get our arrival through: send it (with its operations) again
            s.retry(
                lambda: self.settle_arrival(
                    self.arrival_async(phase, name, with_ops), phase, name, s.op_deadline_s, with_ops
                )
            )

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

    def _fast_pass(
        self, phase: str, flag_path: str, name: str, timeout_s: float | None, with_ops, arrived: list[bool]
    ) -> bool:
        """The common case in one round trip: create our node, count the phase's children, watch the flag,
        pipelined (one session's requests are served in order, so the count includes our node and the one
        whose node came last sees them all). False on any trouble: the caller's loop takes over."""
        from kazoo.exceptions import NodeExistsError

        s = self.session
        client = s.client
        ev = threading.Event()
        seen: list[str] = []

        def on_flag(event) -> None:
            seen.append(event.type)
            ev.set()

        try:
            f_create = self.arrival_async(phase, name, with_ops)
            f_count = client.exists_async(f"{self.base}/{phase}")  # numChildren, not n names: O(n) not O(n^2)
            f_flag = client.exists_async(flag_path, watch=on_flag)
            self.settle_arrival(f_create, phase, name, 5, with_ops)
            arrived.append(True)
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
                    here = self.participants.intersection(
                        client.get_children_async(f"{self.base}/{phase}").get(timeout=5)
                    )
                if len(here) == n:
                    with contextlib.suppress(NodeExistsError):
                        client.create_async(flag_path, encode({"step": self.t}), acl=s.acl).get(timeout=5)
                    return True
        except ArrivalRefused:
            raise
        except Exception:  # connection trouble: the robust loop retries
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


class CountingBarrier(BarrierNodes):
    """Double barrier for step t among a fixed set of named participants, released by one counter.

    Participants never look at each other. To pass a phase (``enter`` or ``leave``) a participant sends,
    pipelined in one round trip:

    - ``create barrier/<t>/<phase>/<name>`` (its arrival: one write), and
    - ``exists barrier/<t>/<go|done>`` with a watch (one read),

    and then waits for the one notification that the flag was created. The counter (the coordinator,
    :meth:`release`) holds a child watch on ``barrier/<t>/<phase>``; each time it fires it reads the
    children once, and when every participant is there it creates the flag with the count in it.

    Cost per participant per step (both phases): **4 requests (2 writes, 2 reads) in 2 round trips and 2
    notifications**, independent of the number n of participants, against 6-7 requests and 3
    notifications for :class:`StepBarrier` (whose every participant also reads the phase
    node's child count, and whose last one in creates the flag). The counter's cost per phase is
    k ``getChildren`` reads of O(n) bytes each plus 1 write, where k <= n is the number of separate
    bursts of arrivals it sees (arrivals landing while it reads are batched into the next read); the
    server's cost per step stays linear in n (2n writes, n watch notifications per phase), which no
    ZooKeeper barrier in which every participant writes can avoid.

    Why named, persistent arrival nodes rather than sequential or ephemeral ones: a create retried after
    a connection loss (a ZooKeeper restart) finds its own node and is a no-op, so an arrival is never
    counted twice (a sequential node would be created again under a new number), and an arrival survives
    the participant's session (an ephemeral one would vanish with a participant that crashed after
    arriving, un-arriving it). A participant that dies before arriving blocks the phase; the counter
    names it (:meth:`missing`), and :meth:`absent` says which of those have also lost their ephemeral
    membership node, i.e. are dead rather than slow.

    The participant side is :class:`BarrierNodes`', as :class:`StepBarrier`'s; the counter side (``release``,
    ``poll``, ``run_step``, ``missing``, ``absent``) must run somewhere (the coordinator) for anyone to pass.
    """

    def __init__(self, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]) -> None:
        super().__init__(session, paths, t, participants)
        if not self.participants:
            raise InputError("a barrier needs at least one participant", field="task")
        self._released: set[str] = set()  # phases this counter has released (or found released)

    # -- participant side (enter, leave: the counter releases each phase once all have arrived) -------------
    def _pass(self, phase: str, name: str, timeout_s: float | None, interrupt, with_ops: list[tuple] | None) -> None:
        s = self.session
        client = s.client
        flag_path = self.flag_path(phase)
        arrived: list[bool] = []
        released: list[bool] = []

        def check(watch):
            if released:  # the flag's creation event is the release itself: no second read
                return True

            def on_flag(event) -> None:
                if event.type == "CREATED":
                    released.append(True)
                watch(event)

            if not client.connected:
                return None  # kazoo would queue the requests without a bound; wait for the reconnect
            try:
                # one round trip: the server answers a session's requests in order
                f_arrive = None if arrived else self.arrival_async(phase, name, with_ops)
                f_flag = client.exists_async(flag_path, watch=on_flag)
                if f_arrive is not None:
                    self.settle_arrival(f_arrive, phase, name, s.op_deadline_s, with_ops)  # earlier tries' nodes: ours
                    arrived.append(True)
                return True if f_flag.get(timeout=s.op_deadline_s) is not None else None
            except ArrivalRefused:
                raise
            except Exception:  # connection trouble: re-check on reconnect or tick
                return None

        if s.wait_for(check, timeout_s, interrupt=interrupt) is None:
            raise TimeoutError(f"step {self.t}: {phase} barrier not released within {timeout_s} s")

    # -- counter side ----------------------------------------------------------------------------------
    def arrived(self, phase: str, watch=None) -> frozenset[str]:
        """The participants whose arrival node for `phase` exists (one getChildren)."""
        return self.participants.intersection(self.session.children(f"{self.base}/{phase}", watch=watch))

    def missing(self, phase: str) -> list[str]:
        """Participants that have not arrived at `phase` yet, sorted."""
        return sorted(self.participants - self.arrived(phase))

    def absent(self, phase: str, member_path) -> list[str]:
        """Of the missing participants, those whose ephemeral membership node (``member_path(name)``, e.g.
        :meth:`RunPaths.member`) is gone: their session ended, so they will not arrive by themselves."""
        return [n for n in self.missing(phase) if not self.session.exists(member_path(n))]

    def _try_release(self, phase: str, watch=None) -> bool:
        """One look (one getChildren, arming `watch` on the phase's children): if every participant has
        arrived, create the phase's flag (idempotent: a resumed counter finds it) and say True."""
        n = len(self.participants)
        if len(self.arrived(phase, watch=watch)) < n:
            return False
        self.session.create(self.flag_path(phase), {"step": self.t, "arrived": n})
        return True

    def release(self, phase: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Count arrivals at `phase` and create its flag once all participants are there; returns the
        seconds it waited. Raises TimeoutError naming the missing participants after `timeout_s`."""
        t0 = time.perf_counter()
        if self.session.wait_for(lambda w: self._try_release(phase, w) or None, timeout_s, interrupt=interrupt) is None:
            raise self._timeout(phase, timeout_s)
        self._released.add(phase)
        return time.perf_counter() - t0

    def poll(self, watch=None) -> bool:
        """Non-blocking, for a counter that waits on other things too (the coordinator's step wait):
        release whichever phase is complete; True once both are released. `watch` is armed on the
        children of the phase still open, so call it again when it fires (``ZkSession.wait_for``)."""
        for phase in self.PHASES:
            if phase in self._released:
                continue
            if not self._try_release(phase, watch):
                return False
            self._released.add(phase)
        return True

    def run_step(self, timeout_s: float | None = None, interrupt=None) -> float:
        """The counter's whole step: release ``enter``, then ``leave``; returns the seconds it waited."""
        t0 = time.perf_counter()
        if self.session.wait_for(lambda w: self.poll(w) or None, timeout_s, interrupt=interrupt) is None:
            raise self._timeout("enter" if "enter" not in self._released else "leave", timeout_s)
        return time.perf_counter() - t0

    def _timeout(self, phase: str, timeout_s: float | None) -> TimeoutError:
        missing = self.missing(phase)
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return TimeoutError(
            f"step {self.t}: {phase} barrier: {len(missing)} of {len(self.participants)} participants missing after "
            f"{timeout_s} s: {shown}"
        )


def step_barrier(
    kind: str, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]
) -> StepBarrier | CountingBarrier:
    """Step t's barrier of the run's kind: "double" (participants count themselves: :class:`StepBarrier`)
    or "counting" (the coordinator counts and releases: :class:`CountingBarrier`)."""
    if kind == "counting":
        return CountingBarrier(session, paths, t, participants)
    if kind == "double":
        return StepBarrier(session, paths, t, participants)
    raise ValueError(f"unknown barrier kind {kind!r} (expected {' or '.join(BARRIER_KINDS)})")

"""A step barrier counted by the coordinator: one write and one notification per participant and phase."""

from __future__ import annotations

import time

from ..core.errors import InputError
from .barrier import ArrivalRefused, BarrierNodes
from .schema import RunPaths
from .session import ZkSession


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
    notifications for :class:`~.barrier.StepBarrier` (whose every participant also reads the phase
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

    Interface: the participant side (``enter``, ``leave``, ``is_done``, ``setup_ops``, ``cleanup_ops``,
    ``go_path``, ``done_path``) matches :class:`~.barrier.StepBarrier`; the counter side (``release``,
    ``poll``, ``run_step``, ``missing``, ``absent``) is new and must run somewhere (the coordinator) for any participant to pass.
    """

    def __init__(self, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]) -> None:
        super().__init__(session, paths, t, participants)
        if not self.participants:
            raise InputError("a barrier needs at least one participant", field="task")
        self._released: set[str] = set()  # phases this counter has released (or found released)

    # -- participant side ----------------------------------------------------------------------------
    def enter(self, name: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Enter; returns once the counter has seen every participant enter (the wait, in seconds)."""
        return self._arrive("enter", name, timeout_s, interrupt)

    def leave(
        self, name: str, timeout_s: float | None = None, interrupt=None, with_ops: list[tuple] | None = None
    ) -> float:
        """Leave, committing `with_ops` (the step's report) in one transaction with the arrival; returns
        once the counter has seen every participant leave (the wait, in seconds)."""
        return self._arrive("leave", name, timeout_s, interrupt, with_ops)

    def _arrive(
        self, phase: str, name: str, timeout_s: float | None, interrupt, with_ops: list[tuple] | None = None
    ) -> float:
        from kazoo.exceptions import KazooException

        if name not in self.participants:
            raise InputError(f"{name!r} is not a participant of this barrier", field="task")
        t0 = time.perf_counter()
        s = self.session
        client = s.client
        flag_path = f"{self.base}/{self.PHASES[phase]}"
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
            except (KazooException, Exception):  # connection trouble: re-check on reconnect or tick
                return None

        if s.wait_for(check, timeout_s, interrupt=interrupt) is None:
            raise TimeoutError(f"step {self.t}: {phase} barrier not released within {timeout_s} s")
        return time.perf_counter() - t0

    def is_done(self, watch=None) -> bool:
        return self.session.exists(self.done_path, watch=watch)

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
        self.session.create(f"{self.base}/{self.PHASES[phase]}", {"step": self.t, "arrived": n})
        return True

    def release(self, phase: str, timeout_s: float | None = None, interrupt=None) -> float:
        """Count arrivals at `phase` and create its flag once all participants are there; returns the
        seconds it waited. Raises TimeoutError naming the missing participants after `timeout_s`."""
        t0 = time.perf_counter()
        if (
            self.session.wait_for(
                lambda watch: True if self._try_release(phase, watch) else None, timeout_s, interrupt=interrupt
            )
            is None
        ):
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
        if (
            self.session.wait_for(lambda watch: True if self.poll(watch) else None, timeout_s, interrupt=interrupt)
            is None
        ):
            raise self._timeout("enter" if "enter" not in self._released else "leave", timeout_s)
        return time.perf_counter() - t0

    def _timeout(self, phase: str, timeout_s: float | None) -> TimeoutError:
        missing = self.missing(phase)
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return TimeoutError(
            f"step {self.t}: {phase} barrier: {len(missing)} of {len(self.participants)} participants missing after "
            f"{timeout_s} s: {shown}"
        )

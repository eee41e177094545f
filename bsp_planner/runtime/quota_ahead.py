"""Each task's quota for its next step, put in place the moment its own report of the step before arrives
(observe mode, in place).

In observe mode the tasks go on to their next step without waiting for the coordinator, and a task that
is not the slowest runs ahead of the others, by more than one step where the application lets it (a HELICS
ring). Step s is decided once step s-1 was observed whole (or, with a decision lead, step s-2), so when a
task reports step s-1 the decision for step s is often not made yet. `QuotaKeeper` follows every task's
reports (a chain of ZooKeeper watches, one report after the other, on kazoo's event thread) and puts the
task under its quota for the step it now runs at once: the decision's where step s is decided, else the
configuration the planner's latest plan holds for step s (`Decision.plan`: mpc plans a horizon; for a
planner with no plan beyond its step, its latest decision). When step s's decision lands, a task still in
step s whose plan quota differs is corrected; one that already left step s ran it on the plan's quota.

The order: a task's quota changes only after its own report of the step before, never during the step it
still runs. The tasks in place may be in different steps, so their quotas may for that moment sum above
the budget (by at most the increases of the tasks in later steps), while every step of every task runs
under a configuration whose sum never exceeds it. Where a decision changes several tasks at once they are
written shrinking first.

What happened to each task's quota of each step is kept (`placements(step)`): when it was put in place
after the task's report (``quota_at``, time.time(); written or already right), from what (``quota_from``:
"decision" or "plan"), whether that was a write (``quota_written``), ``replanned_at`` where a newer plan
changed it, and where the decision then changed a plan's quota: ``corrected_at`` (the task still in the
step) or ``ran_on_plan`` (it had left the step).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import numpy as np


class QuotaKeeper:
    """tasks: the run's tasks in the planner's order; in_place: task -> its CPU level now (the executor's
    own dict, kept up to date by `write`); first_step: the step every task starts in; write(task, level):
    puts a quota in place (the backend's in-place resize; called with the lock held, from either thread)."""

    def __init__(
        self, tasks: list[str], in_place: dict[str, int], first_step: int, write: Callable[[str, int], None]
    ) -> None:
        self.tasks = list(tasks)
        self.in_place = in_place
        self.write = write
        self.lock = threading.Lock()
        self.at = dict.fromkeys(self.tasks, first_step)  # the step each task runs now (its last report + 1)
        self.signalled = dict.fromkeys(self.tasks, first_step - 1)  # the latest step each task signalled
        self.decided: dict[int, dict[str, int]] = {}  # step -> the decision's levels
        self.planned: dict[int, dict[str, int]] = {}  # step -> the latest plan's levels
        self.placed: dict[tuple[str, int], dict] = {}  # (task, step) -> what happened to its quota (above)
        self.write_s: dict[int, float] = {}  # step -> the seconds its quotas' writes took
        self.written: dict[int, set[str]] = {}  # step -> the tasks whose quota for it was written
        self.error: BaseException | None = None  # a write that failed on the watch's thread, raised by check()
        self.closed = False

    # -- what a task's quota for a step is --------------------------------------------------------
    def _wanted(self, task: str, step: int) -> tuple[int, str]:
        if step in self.decided:
            return self.decided[step][task], "decision"
        if step in self.planned:
            return self.planned[step][task], "plan"
        latest = max(self.decided) if self.decided else None
        return (self.decided[latest][task] if latest is not None else self.in_place[task]), "plan"

    def _write(self, task: str, level: int, step: int) -> bool:
        """Write `task`'s quota for `step` if it is not in place already; True if it wrote."""
        if self.in_place[task] == level:
            return False
        t0 = time.perf_counter()
        self.write(task, level)
        self.write_s[step] = self.write_s.get(step, 0.0) + time.perf_counter() - t0
        self.written.setdefault(step, set()).add(task)
        return True

    def _refresh(self, tasks: list[str]) -> None:
        """Put `tasks` under what is now known of the steps they run (shrinking first): a task whose quota
        of its step was placed from a plan is corrected where the decision differs (``corrected_at``), or
        re-planned where a newer plan does (``replanned_at``)."""
        wanted = {t: self._wanted(t, self.at[t]) for t in tasks}
        for task in sorted(tasks, key=lambda t: wanted[t][0] - self.in_place[t]):
            level, source = wanted[task]
            step = self.at[task]
            if self._write(task, level, step) and (task, step) in self.placed:
                key = "corrected_at" if source == "decision" else "replanned_at"
                self.placed[task, step].setdefault(key, time.time())

    # -- events -----------------------------------------------------------------------------------
    def on_report(self, task: str, step: int, via: str = "report") -> None:
        """`task` reported `step` (`via`: "report", its report in ZooKeeper, or "signal", its step signal
        ahead of it: runtime/step_signals.py): its quota for step + 1 now (from any thread; a step already
        seen, or an earlier one, changes nothing). Steps are placed in order: a signal of a later step than
        the task is known to run (one before it was lost: sent before the coordinator listened) waits for
        the report of the step in between, which then takes the signalled steps up at once."""
        with self.lock:
            if via == "signal":
                self.signalled[task] = max(self.signalled[task], step)
                if step != self.at[task]:
                    return
            elif self.at[task] > step:
                return
            self._ended(task, step, via)
            while self.at[task] <= self.signalled[task]:  # signalled ahead of this report
                self._ended(task, self.at[task], "signal")

    def _ended(self, task: str, step: int, via: str) -> None:
        """`task` ended `step`: its quota for step + 1 in place (the lock held)."""
        if self.closed:
            return
        if (task, step) in self.placed:  # what it ran its step with, to the end
            self.placed[task, step]["level_run"] = self.in_place[task]
        self.at[task] = nxt = step + 1
        level, source = self._wanted(task, nxt)
        try:
            wrote = self._write(task, level, nxt)
        except Exception as exc:  # kazoo's thread must not die of it: the main loop raises it
            self.error = self.error or exc
            return
        self.placed[task, nxt] = {
            "quota_at": time.time(),
            "quota_from": source,
            "quota_written": wrote,
            "quota_on": via,
        }

    def plan(self, step: int, rows: dict[int, dict[str, int]]) -> None:
        """The latest plan: step -> task -> level for `step` and after (steps decided already keep their
        decision); tasks running a step it covers go under it now."""
        with self.lock:
            self.planned = {s: levels for s, levels in rows.items() if s not in self.decided}
            self._refresh([t for t in self.tasks if self.at[t] >= step and self.at[t] not in self.decided])

    def decide(self, step: int, levels: dict[str, int]) -> None:
        """Step's decision: tasks in step or past it go under what is now known of their step (a task still
        in it gets the decision, correcting a plan's quota); a task that ran step on another quota than the
        decision's is marked (``ran_on_plan``); tasks not yet in it get it on their report."""
        with self.lock:
            self.decided[step] = dict(levels)
            self.planned.pop(step, None)
            # steps two behind are logged already (their placements read), and no task is in them any more
            for old in [s for s in self.decided if s < step - 2]:
                del self.decided[old]
                self.write_s.pop(old, None)
                self.written.pop(old, None)
            for key in [k for k in self.placed if k[1] < step - 2]:
                del self.placed[key]
            for task in self.tasks:
                placed = self.placed.get((task, step))
                if placed is not None and placed.get("level_run", levels[task]) != levels[task]:
                    placed["ran_on_plan"] = True
            self._refresh([t for t in self.tasks if self.at[t] >= step])

    # -- ZooKeeper ---------------------------------------------------------------------------------
    def follow(self, exists_async: Callable[..., None], result_path: Callable[[str, int], str], task: str) -> None:
        """Follow `task`'s reports one after the other from the step it runs now: exists_async(path, watch,
        done) is the session's (:meth:`ZkSession.exists_async`); each report found or created is `on_report`,
        and the next one is watched. Nothing here waits on a round trip: kazoo runs every task's watch
        events on one thread, so a follower that re-armed synchronously would hold the other tasks' reports
        behind its own request (under load, several round trips for the last task of a step)."""

        moved_past = [self.at[task] - 1]  # the last step whose report this follower went on from
        guard = threading.Lock()  # the watch's thread and the answers' thread may both see a report

        def arm(step: int) -> None:
            if not self.closed:
                exists_async(result_path(task, step), watcher(step), lambda found: answered(step, found))

        def answered(step: int, found: bool) -> None:
            if found:
                reported(step)

        def reported(step: int) -> None:
            self.on_report(task, step)  # nothing if the main loop's own check saw the report first
            with guard:  # the chain goes on once per report, whoever saw it first
                if step <= moved_past[0]:
                    return
                moved_past[0] = step
            arm(step + 1)

        def watcher(step: int) -> Callable:
            def on_event(event) -> None:
                if getattr(event, "type", None) == "CREATED":
                    reported(step)

            return on_event

        arm(self.at[task])

    def check(self) -> None:
        """Raise what a write on the watch's thread raised."""
        if self.error is not None:
            raise self.error

    def placements(self, step: int) -> dict[str, dict]:
        """task -> what happened to its quota of `step` (see the module docstring)."""
        with self.lock:
            return {t: dict(p) for t in self.tasks if (p := self.placed.get((t, step))) is not None}

    def step_writes(self, step: int) -> tuple[float, list[str]]:
        """(the seconds the writes of step's quotas took, the tasks written) so far."""
        with self.lock:
            return self.write_s.get(step, 0.0), sorted(self.written.get(step, ()), key=self.tasks.index)

    def close(self) -> None:
        with contextlib.suppress(Exception), self.lock:
            self.closed = True


def plan_rows(step: int, rows: np.ndarray, tasks: list[str]) -> dict[int, dict[str, int]]:
    """(k, tasks) plan rows from `step` on -> step -> task -> level."""
    return {step + k: {t: int(rows[k, i]) for i, t in enumerate(tasks)} for k in range(rows.shape[0])}


def plan_timing(rec: dict, placements: dict[str, dict] | None) -> None:
    """Add to step record `rec` (after `runlog.quota_timing`, which times ``quota_at``) what happened to each
    task's quota of the step (`QuotaKeeper.placements`): ``quota_from`` ("decision", or "plan" where the
    step was not decided when the task reported the step before), ``quota_written`` (False: the quota in
    place was already that one), ``quota_on`` (what told it the step before had ended: "signal", the
    task's step signal, or "report"), ``replanned_at`` (a newer plan changed it), and where the decision
    changed a plan's quota, ``corrected_at`` with ``correction_latency_s`` (the task's report of the step
    before to the decision's quota in place) and ``corrected_share`` (the fraction of its step run before
    then), or ``ran_on_plan`` (the task ended the step before the decision landed). The step's own
    ``plan_corrections`` / ``ran_on_plan`` count them."""
    if not placements:
        return
    for x in rec["tasks"]:
        p = placements.get(x["task"])
        if p is None:
            continue
        x["quota_from"], x["quota_written"] = p["quota_from"], bool(p["quota_written"])
        x["quota_on"] = p["quota_on"]
        if "replanned_at" in p:
            x["replanned_at"] = p["replanned_at"]
        if "corrected_at" in p:
            x["corrected_at"] = p["corrected_at"]
            if "decision_latency_s" in x:
                x["correction_latency_s"] = x["decision_latency_s"] + max(0.0, p["corrected_at"] - p["quota_at"])
            if "started_at" in x and "finished_at" in x and x["finished_at"] > x["started_at"]:
                share = (p["corrected_at"] - x["started_at"]) / (x["finished_at"] - x["started_at"])
                x["corrected_share"] = min(1.0, max(0.0, share))
        if p.get("ran_on_plan"):
            x["ran_on_plan"] = True
    rec["plan_corrections"] = sum("corrected_at" in x for x in rec["tasks"])
    rec["ran_on_plan"] = sum(bool(x.get("ran_on_plan")) for x in rec["tasks"])

"""The live side of the one step loop: `LiveSteps` is the `bsp_planner.loop.Executor` of a live run.

``apply`` starts the tasks (the first step this coordinator runs) or reconfigures them; ``observe``
publishes the step's workloads to ZooKeeper and waits for its end (restarting workers that die). In
observe mode, in place, each task's quota for its next step is put in place as its own report arrives
(`quota_ahead.QuotaKeeper`): ``plan`` hands over the planner's plan for the steps not decided yet, and,
with a decision lead, ``prepare`` the next step's configuration while the step before still runs. A step's
time is the coordinator's publication to its release; in observe mode, where the tasks start a step before
the coordinator publishes it, the tasks' own clocks (`clock_step_s`). What the run log keeps beyond a
`StepObservation` (release time, restarts, each task's report) rides along in `LiveObservation.details`.

A step's observation is made from the tasks' reports exactly as it is made again from the run log on
resume (`observation_of`), so a resumed run learns from the same numbers the first one did.
:func:`run_logged` runs a coordinator's remaining steps this way, appending each to the run log as it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np

from ..core.steps import StepObservation
from ..loop import InvalidDecision, Replanned
from .executor import LiveExecutor, RunFailed
from .quota_ahead import plan_timing
from .run_store import RunStoreUnwritable
from .runlog import RunLog, effective_workloads, quota_timing, step_record, step_time_s


@dataclass(frozen=True)
class LiveObservation(StepObservation):
    """A `StepObservation` with what the run log records beyond it (see `runlog.step_record`)."""

    details: dict[str, Any] = field(default_factory=dict)


def observation_of(t: int, reports: list[dict], given: np.ndarray, step_s: float) -> StepObservation:
    """Step t as the loop learns from it. reports: each task's result (its duration_s and, where it
    reported them, observed_workload and next_workload), in the job's order; given: (tasks,) the
    workloads the tasks were told (what counts where a task reported none); step_s: the step's time."""
    return StepObservation(
        t,
        np.array([r["duration_s"] for r in reports], dtype=np.float64),
        effective_workloads(reports, given),
        float(step_s),
        np.array([r.get("next_workload", np.nan) for r in reports], dtype=np.float64),
    )


def clock_step_s(
    reports: list[dict], previous_end: float | None, resumed_at: float | None = None
) -> tuple[float, float] | None:
    """A self-synchronising (observe) step on the tasks' own clocks: (its time, its end). It ends when its
    last task ends, and starts when the step before it ended (previous_end: the last end of the step
    before, as logged) or, for the first step, when its first task started; so the steps add up to the
    application's wall time, whatever it does between its steps (its own exchange and synchronisation).

    The first step of a resumed run (resumed_at: time.time() this coordinator started the tasks again)
    never counts the time the run was stopped: a task's clock that began before the resume (a report of
    the interrupted run, or a program's own timing across its restart) counts from the resume, and the
    step lasts as long as its slowest task so counted.
    None where a task's report has no start (an older task library), or the clocks disagree."""
    if not all("started_at" in r and "finished_at" in r for r in reports):
        return None
    end = max(float(r["finished_at"]) for r in reports)
    if resumed_at is not None:
        spans = []
        for r in reports:
            started, finished = float(r["started_at"]), float(r["finished_at"])
            spans.append(finished - (max(started, resumed_at) if finished > resumed_at else started))
        slowest = max(spans)
        return (slowest, end) if slowest > 0 else None
    start = min(float(r["started_at"]) for r in reports) if previous_end is None else previous_end
    return (end - start, end) if end > start else None


def wall_step_s(wall_s: float, reports: list[dict], resumed: bool) -> float:
    """The step's time: publication to release; a step resumed after an interruption had been running
    before it was published again, so it lasted at least as long as its slowest task."""
    slowest = max(float(r["duration_s"]) for r in reports)
    return max(wall_s, slowest) if resumed else wall_s


@dataclass(eq=False)
class LiveSteps:
    """Executor (see `bsp_planner.loop`) over a `LiveExecutor`.

    first_step: the first step this coordinator runs (where the tasks are started);
    millicores(levels) -> (tasks,) CPU of a configuration; budget_millicores: what a configuration
    may sum to; given_workloads(t) -> (tasks,) what the tasks are told for step t;
    before_reconfigure(): called before every reconfiguration (retakes a lost coordinator lock).
    """

    executor: LiveExecutor
    _: KW_ONLY
    first_step: int
    millicores: Callable[[np.ndarray], np.ndarray]
    budget_millicores: float
    given_workloads: Callable[[int], np.ndarray]
    workload_range: tuple[float, float]
    before_reconfigure: Callable[[], None]
    say: Callable[[str], None]
    planner_name: str = "planner"
    # step_ran(step, started_at): step ran, its first task starting at started_at (time.time(); the
    # publication where the tasks report no start): a service that ended before then is judged (services.py)
    step_ran: Callable[[int, float], None] = lambda step, started_at: None
    previous_end: float | None = field(default=None, init=False)  # observe mode: the last step's end, tasks' clocks
    start_s: float | None = field(default=None, init=False)  # the seconds the workers took to start (first_step)
    resumed_at: float | None = field(default=None, init=False)  # a resumed run: time.time() its tasks started again
    # (step, {task: time.time() its quota for that step was in place}) of the last reconfiguration
    quota_at: tuple[int, dict[str, float]] = field(default=(-1, {}), init=False)

    @property
    def n_tasks(self) -> int:
        return len(self.executor.tasks)

    def started_what(self) -> str:
        """What starting the tasks started: "3 processes" (a process task is the user's own program),
        "2 workers" (a worker runs a stressor or a command each step), or both."""
        programs = sum(t in self.executor.processes for t in self.executor.tasks)
        workers = self.n_tasks - programs
        kinds = [(programs, "process", "processes"), (workers, "worker", "workers")]
        return " and ".join(f"{n} {one if n == 1 else many}" for n, one, many in kinds if n)

    def method(self, step: int, reconfigured: bool) -> str | None:
        """How step's configuration was put in place, as it really happened: 'start' at the first step
        this coordinator runs where the configuration changed (a resumed run: its workers were started
        under the new one), else the method of a reconfiguration ('recreate' if the backend recreated any
        task, e.g. after a refused resize), else None."""
        if step == self.first_step:
            return "start" if reconfigured else None
        if not reconfigured:
            return None
        methods = set(self.executor.last_methods.values())
        return "recreate" if "recreate" in methods else (methods.pop() if methods else None)

    def _check_budget(self, step: int, levels: np.ndarray) -> None:
        total = float(np.sum(self.millicores(levels)))
        if total > self.budget_millicores + 1e-6:
            raise RunFailed(f"planner {self.planner_name} asked for {total:g}m at step {step}, over the budget")

    def _quotas_on_reports(self) -> bool:
        """Observe mode, in place: each task's quota is put in place as its own report arrives."""
        return self.executor.sync == "observe" and self.executor.settings.reconfigure == "in-place"

    def prepare(self, step: int, levels: np.ndarray, reconfigure: bool) -> None:
        """Step's configuration, decided while step - 1 runs: in observe mode, in place, each task's quota
        is written as the task reports step - 1 (see `LiveExecutor.prepare_ahead`); otherwise ``apply``
        does everything, as without a lead."""
        self._check_budget(step, levels)
        if step > self.first_step and self._quotas_on_reports():
            self.before_reconfigure()
            self.executor.prepare_ahead(levels, step)

    def plan(self, step: int, rows: np.ndarray) -> None:
        """rows (k, tasks): the planner's plan for step and the k - 1 steps after it; in observe mode, in
        place, a task that reports a step before the next one is decided goes under the plan's quota."""
        if self._quotas_on_reports():
            for k, row in enumerate(rows):
                self._check_budget(step + k, row)
            self.executor.plan_ahead(step, rows)

    def apply(self, step: int, levels: np.ndarray, reconfigure: bool) -> float:
        self.executor.check_stop()  # a stop asked for during the last step ends the run here, between steps
        self._check_budget(step, levels)
        if step == self.first_step:
            self.resumed_at = time.time() if step > 0 else None
            self.start_s = start_s = self.executor.start_all(levels, step)
            self.say(
                f"started {self.started_what()} in {start_s:.2f} s" + (f" (resuming at step {step})" if step else "")
            )
            # a resumed run whose configuration changed here started its workers under it: the change cost
            # their start (method() says so), not a resize
            return start_s if reconfigure else 0.0
        self.before_reconfigure()
        seconds, _ = self.executor.reconfigure(levels, step)
        self.quota_at = (step, dict(self.executor.quota_at))
        if step in self.executor.replanned:  # the nodes lost room: another configuration runs this step
            raise Replanned(np.asarray(self.executor.replanned[step]["levels"]), seconds)
        return seconds

    def observe(self, step: int) -> LiveObservation:
        ex = self.executor
        given = np.asarray(self.given_workloads(step), dtype=np.float64)
        t_pub, published_at = time.perf_counter(), time.time()
        fresh = ex.publish(step, given, self.workload_range)
        published = time.perf_counter()
        # the barrier of two steps back is no longer read by anyone: removed while the tasks compute, off
        # the path between two steps
        ex.cleanup_barrier(step - 2)
        outcome = ex.wait_step(step)
        wall_s = time.perf_counter() - t_pub
        reports = ex.results(step)
        starts = [float(r["started_at"]) for r in reports if "started_at" in r]
        self.step_ran(step, min(starts) if len(starts) == len(reports) else published_at)
        step_s = wall_step_s(wall_s, reports, not fresh)
        resumed_at = self.resumed_at if step == self.first_step else None
        clocked = clock_step_s(reports, self.previous_end, resumed_at) if ex.sync == "observe" else None
        if clocked is not None:  # the tasks ran the step before the coordinator saw it: their clocks tell
            step_s, self.previous_end = clocked
        obs = observation_of(step, reports, given, step_s)
        details = {
            "publish_s": published - t_pub,
            "released_at": outcome.released_at,
            "reports": reports,
            "restarts": outcome.restarts,
            "resumed": not fresh,
            "given": given,
            "quota_at": self.quota_at[1] if self.quota_at[0] == step else {},
        }
        if ex.keeper is not None:  # each task's quota of this step, as it happened (QuotaKeeper.placements)
            placed = ex.keeper.placements(step)
            details["quota_at"] = {t: p["quota_at"] for t, p in placed.items()}
            details["placements"] = placed
        return LiveObservation(obs.step, obs.duration_s, obs.workloads, obs.step_s, obs.next_workloads, details)


def run_logged(run, loop, records: list[dict], runlog: RunLog) -> None:
    """The remaining steps of `run` (the coordinator) through the one step loop on its live executor; every
    step is appended to `records` and to the run log (flushed) as it ends."""
    ex = run.executor
    ex.replan = lambda step, current, why: run.replan(loop, step, current, why)  # on the nodes' free CPU
    ex.noticed = run.watchers.noticed  # a task's failure, as it happens
    steps = LiveSteps(
        ex,
        first_step=len(records),
        millicores=run.scen.cpu.to_millicores,
        budget_millicores=run.exp.cpu.budget_millicores,
        given_workloads=run._given_workloads,
        workload_range=run.exp.workload_range,
        before_reconfigure=run._relock_if_lost,
        say=run.say,
        planner_name=loop.planner.name,
        step_ran=lambda step, at: run.services.step_started(step, at, run._check_stop) if run.services else None,
    )

    def log_step(step) -> None:
        t, obs = step.step, step.observation
        d = obs.details
        args = (step.action, step.levels, step.reconfigured, step.reconfigure_s, step.decision_ms, obs.step_s)
        rec = step_record(run, t, *args, **{k: v for k, v in d.items() if k != "placements"})
        quota_timing(rec, records[-1] if records else None)
        plan_timing(rec, d.get("placements"))
        # what really happened (reconfig_s: its cost): a resumed run's first step started its workers
        rec["reconfig_method"] = steps.method(t, step.reconfigured)
        if t == steps.first_step:
            rec["start_s"] = steps.start_s
        elif step.reconfigured and len(set(ex.last_methods.values())) > 1:
            rec["reconfig_methods"] = dict(ex.last_methods)  # some tasks fell back to another method
        if ex.last_batches and step.reconfigured:
            rec["resize_batches"] = list(ex.last_batches)  # in place: each batch's tasks and seconds
        if t in ex.replanned:
            rec["replanned"] = {k: v for k, v in ex.replanned[t].items() if k != "levels"}
        if step.learning is not None:
            rec["learning"] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in step.learning.items()}
            rec["learned_step_s"] = step_time_s(np.asarray(step.learning["predicted_before_s"]), run.ctx.structure)
        try:
            runlog.append(rec)
        except OSError as exc:
            raise RunStoreUnwritable(
                f"step {t} ran but cannot be written to the run log {runlog.jsonl}: {exc.strerror or exc}"
            ) from None
        records.append(rec)
        run.watchers.step_logged(rec)
        restarts = sum(d["restarts"].values())
        run.say(
            f"step {t:4d}: {rec['step_s']:.3f} s (predicted {rec['predicted_step_s']:.3f} s)"
            + (f", reconfigured in {step.reconfigure_s:.3f} s" if step.reconfigured else "")
            + (f", {restarts} restart(s)" if restarts else "")
        )

    try:
        loop.run(steps, on_step=log_step)
    except InvalidDecision as exc:
        raise RunFailed(str(exc)) from None

"""The one step loop of every run, simulated or live: planner decides -> executor applies -> observe -> learn.

Before step t the planner sees what the run's predictions say about steps t..t+H-1 and the
configuration step t-1 ran with, and returns a Decision. The executor puts that configuration in
place (a change after the first step is a reconfiguration and costs what the executor says), runs
or waits for step t, and reports what it measured. The predictions then learn from that measurement
(online forecasts extend their history with the observed workloads; a learning performance model
corrects its durations), so the next decision uses everything seen so far.

The loop imports neither kazoo nor the Kubernetes client: a live executor (barriers, cgroup quotas,
pods) lives under ``runtime/`` and plugs in through the protocol below.

Executor protocol (what a live executor implements; `simulate/executor.py` is the reference)
------------------------------------------------------------------------------------------
``n_tasks: int``
    Tasks of the job, in the job's order: every per-task array below has this length.
``apply(step, levels, reconfigure) -> float``
    Called once before each step with the planner's configuration for it: ``levels`` (tasks,) int64
    CPU level indices (the run's `CpuLevels` turns them into millicores: ``cpu.to_millicores(levels)``);
    ``reconfigure`` is True when the configuration differs from the previous step's (never on the
    first step the loop runs). The executor makes it so (rewrite cgroup quotas, resize or recreate
    pods) and returns the seconds that reconfiguration cost (0.0 when ``reconfigure`` is False): the
    simulated executor charges the experiment's penalty; a live one returns what it measured.
``observe(step) -> StepObservation``
    Runs step ``step`` to its end (or waits for the tasks to report it) and returns what was measured:
    each task's compute ``duration_s`` (tasks,) in seconds, the ``workloads`` (tasks,) each task ran
    (on the workload scale; reported by the tasks in a live run), the step's wall time ``step_s``
    (barrier to barrier; the slowest task's duration in simulation) and optionally ``next_workloads``
    (tasks,) the tasks announced for step+1 (NaN where unknown).

``prepare(step, levels, reconfigure) -> None`` (optional)
    Only with a decision lead (``StepLoop(decide_ahead=True)``): the configuration of ``step`` decided
    ahead, while step - 1 still runs (before ``observe(step - 1)``), with ``reconfigure`` as ``apply``
    would get it. The executor may begin putting it in place as each task finishes step - 1 (a live
    observe-mode run writes a task's quota the moment its own report arrives); ``apply(step, ...)`` with
    the same configuration still follows ``observe(step - 1)`` and finishes whatever is not in place yet.
    An executor without it gets ``apply`` alone, as without a lead.
``plan(step, rows) -> None`` (optional)
    Called just before ``apply(step, ...)`` (or ``prepare(step, ...)``) with ``rows`` (k, tasks) int64: the
    configurations the planner's plan holds for ``step`` (row 0, the decision itself) and the k - 1 steps
    after it (`Decision.plan`; a planner with no plan beyond the step gives one row). A live observe-mode
    run puts a task that reports a step before the next one is decided under the plan's configuration for
    it at once, and corrects it when that step's decision lands (`runtime/quota_ahead.py`).

``observe`` may raise `StepsEnded` where the application owns its length (a self-synchronising job
whose tasks all left before reporting the step): the run is complete after the step before, and the
loop's result covers the steps that ran.

Both may raise `InputError` (a task failed, a report was malformed): the loop stops there, and the
steps already reported through ``on_step`` stay recorded, so a live run can resume from the next step
(`StepLoop.replay`, then `StepLoop.run`).

Decision lead (``decide_ahead``)
-------------------------------
Without a lead, step t is decided once step t-1 was observed: decide(t) -> apply(t) -> observe(t) ->
learn(t). With it (the default for jobs that synchronise themselves, where a task goes on to its next
step without waiting for the coordinator), step t+1 is decided before step t is observed, from everything
observed through step t-1, and handed to ``prepare``: decide(t) -> apply(t) -> decide(t+1) ->
prepare(t+1) -> observe(t) -> learn(t) -> apply(t+1) -> decide(t+2) ... The planner still gets the
configuration step t runs with as ``current``; the predictions fill row t+1 from a history that ends at
step t-1 (``before_step`` is then one step ahead of what was observed), and the planners that read the
run's observations read them as of step t-1 (`planners.observed.Observations.lead_steps`). `simulate`
runs the same loop with the same lead, so a simulated and a live run decide alike.

Every observation is checked before anything learns from it: a NaN, infinite, negative or zero
duration, or a NaN/infinite/negative workload, is refused with the task and step named.

Predictions protocol (optional; None: the planning context already holds every prediction)
-----------------------------------------------------------------------------------------
``before_step(step)`` makes row ``step`` of the context's predicted durations known (from the history
observed so far: through step - 1, or through step - 2 with a decision lead);
``after_step(step, levels, observation) -> dict | None`` learns from the step and returns a record for
the report (e.g. predicted vs measured durations before and after learning).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .core.errors import InputError
from .core.steps import StepObservation, StrategyResult
from .planners.base import Planner, PlanningContext
from .planners.observed import EXTRAS_KEY as OBSERVATIONS_KEY


@runtime_checkable
class Executor(Protocol):
    """Applies a configuration and runs one step; see the module docstring for the contract."""

    n_tasks: int

    def apply(self, step: int, levels: np.ndarray, reconfigure: bool) -> float: ...

    # optional: prepare(step, levels, reconfigure) -> None, called with a decision lead (see the docstring)

    def observe(self, step: int) -> StepObservation: ...


class Predictions(Protocol):
    """Predictions made step by step from what was observed (see the module docstring)."""

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int, levels: np.ndarray, observation: StepObservation) -> dict | None: ...


@dataclass(frozen=True)
class StepRecord:
    """One step as the loop saw it: what was decided, what it cost, what was measured."""

    step: int
    action: int  # 0 = keep, j = configure for j steps
    levels: np.ndarray  # (tasks,) CPU level indices the step ran with
    reconfigured: bool
    reconfigure_s: float  # what the reconfiguration before this step cost (0.0 if none)
    decision_ms: float
    observation: StepObservation
    learning: dict | None = None  # what after_step returned


def check_observation(obs: StepObservation, step: int, task_names: list[str] | None = None) -> None:
    """Refuse measurements nothing should learn from, naming the task and step."""
    names = task_names or [f"#{i}" for i in range(len(obs.duration_s))]
    d = np.asarray(obs.duration_s, dtype=np.float64)
    w = np.asarray(obs.workloads, dtype=np.float64)
    if d.shape != (len(names),) or w.shape != (len(names),):
        raise InputError(
            f"step {step}: expected a duration and a workload for each of the {len(names)} tasks, got shapes "
            f"{d.shape} and {w.shape}",
            field="observation",
        )
    if obs.step != step:
        raise InputError(f"step {step}: the executor reported step {obs.step}", field="observation")
    for i, name in enumerate(names):
        if not (np.isfinite(d[i]) and d[i] > 0):
            raise InputError(
                f"task '{name}', step {step}: measured duration {float(d[i])!r} s is not a finite positive number of seconds",
                field="duration_s",
            )
        if not (np.isfinite(w[i]) and w[i] >= 0):
            raise InputError(
                f"task '{name}', step {step}: reported workload {float(w[i])!r} is not a finite non-negative number",
                field="workload",
            )


class StepsEnded(Exception):
    """Raised by an executor's ``observe(step)``: the application ended on its own before `step` (every
    task left without running it), so the run is complete after step - 1."""

    def __init__(self, step: int) -> None:
        super().__init__(f"the application ended after step {step - 1}")
        self.step = step


class Replanned(Exception):
    """Raised by an executor's ``apply(step, ...)``: the platform could not take the configuration (a live
    run's node lost free CPU), so the run re-planned and applied `levels` instead, in `reconfigure_s`
    seconds; the loop's planner and context are already the re-planned ones."""

    def __init__(self, levels: np.ndarray, reconfigure_s: float) -> None:
        super().__init__("re-planned")
        self.levels, self.reconfigure_s = np.asarray(levels, dtype=np.int64), float(reconfigure_s)


class InvalidDecision(ValueError):
    """A planner returned a configuration the run cannot use (wrong shape, a level off the grid)."""


class ReplayMismatch(Exception):
    """Replaying the planner over logged steps gave another configuration than the log holds."""

    def __init__(self, step: int, replayed: list[int], logged: list[int]) -> None:
        super().__init__(
            f"replaying the planner gives {replayed} at step {step}, the run log has {logged}; "
            "the run cannot be resumed with the same plan"
        )
        self.step = step


class StepLoop:
    """The loop of one run: ``StepLoop(planner, ctx, ...)`` resets the planner; ``replay(history)`` brings
    it (and the predictions) to where a resumed run stopped; ``run(executor)`` runs the remaining steps.
    A live run replays its run log before it touches anything, so a mismatch is refused before any task starts.
    """

    def __init__(
        self,
        planner: Planner,
        ctx: PlanningContext,
        *,
        mode: str = "perfect",
        predictions: Predictions | None = None,
        task_names: list[str] | None = None,
        decide_ahead: bool = False,
    ) -> None:
        self.planner, self.ctx, self.mode = planner, ctx, mode
        self.predictions, self.task_names = predictions, task_names
        self.decide_ahead = decide_ahead
        observations = ctx.extras.get(OBSERVATIONS_KEY)
        if observations is not None:  # a decision made ahead reads them one step earlier
            observations.lead_steps = 1 if decide_ahead else 0
        t0 = time.perf_counter()
        planner.reset(ctx)
        self.prepare_ms = (time.perf_counter() - t0) * 1e3  # offline planning before the first step
        self.next_step = 0
        self.current: np.ndarray | None = None  # the configuration the last step ran with
        # with a lead: (action, levels, decision_ms, plan) of step next_step, decided before step next_step - 1
        # was observed (by replay, for the step a resumed run starts with)
        self.ahead: tuple[int, np.ndarray, float, np.ndarray] | None = None

    def _decide(self, t: int, current: np.ndarray | None) -> tuple[int, np.ndarray, float, np.ndarray]:
        """(action, levels (tasks,), decision_ms, plan (k, tasks): the planner's configurations for steps
        t..t+k-1, row 0 being levels) for step t; current: the configuration step t-1 runs with."""
        if self.predictions is not None:
            self.predictions.before_step(t)
        t1 = time.perf_counter()
        d = self.planner.decide(t, current)
        decision_ms = (time.perf_counter() - t1) * 1e3
        new = np.asarray(d.levels, dtype=np.int64)
        if new.shape != (self.ctx.n_tasks,) or np.any(new < 0) or np.any(new > self.ctx.max_level.max()):
            raise InvalidDecision(f"planner {self.planner.name} returned an invalid configuration {new!r} at step {t}")
        plan = new[None, :] if d.plan is None else np.asarray(d.plan, dtype=np.int64)
        if plan.ndim != 2 or plan.shape[1] != new.size or not np.array_equal(plan[0], new):
            raise InvalidDecision(f"planner {self.planner.name}'s plan at step {t} does not start with its decision")
        if np.any(plan < 0) or np.any(plan > self.ctx.max_level.max()):
            raise InvalidDecision(f"planner {self.planner.name} returned an invalid plan {plan!r} at step {t}")
        return int(d.action), new, decision_ms, plan

    def _learn(self, t: int, levels: np.ndarray, obs: StepObservation) -> dict | None:
        check_observation(obs, t, self.task_names)
        return self.predictions.after_step(t, levels, obs) if self.predictions is not None else None

    def replay(self, history: Iterable[tuple[np.ndarray, StepObservation]]) -> np.ndarray | None:
        """history: the logged steps from step 0, each (levels (tasks,), what it measured). Makes every
        decision again (ReplayMismatch where it differs from the log) and learns from each measurement, so
        the next decision is the one an uninterrupted run would make; returns the last logged levels (or None)."""
        for levels, obs in history:
            t = self.next_step
            _, new, _, _ = self.ahead or self._decide(t, self.current)
            logged = np.asarray(levels, dtype=np.int64)
            if not np.array_equal(new, logged):
                raise ReplayMismatch(t, new.tolist(), logged.tolist())
            # in the order the run made them: step t+1 was decided before step t was observed
            self.ahead = self._decide(t + 1, new) if self.decide_ahead and t + 1 < self.ctx.steps else None
            self._learn(t, new, obs)
            self.current = new
            self.next_step = t + 1
        return self.current

    def run(self, executor: Executor, on_step: Callable[[StepRecord], None] | None = None) -> StrategyResult:
        """Run steps next_step..ctx.steps-1 on `executor`; the result covers those steps. on_step: called
        after every step (a live run appends it to its run log and flushes)."""
        n = self.ctx.n_tasks
        if executor.n_tasks != n:
            raise ValueError(f"the executor runs {executor.n_tasks} tasks but the plan has {n}")
        first = self.next_step
        count = self.ctx.steps - first
        levels = np.empty((count, n), dtype=np.int64)
        decision_ms = np.empty(count)
        actions = np.empty(count, dtype=np.int64)
        reconfigured = np.zeros(count, dtype=bool)
        step_s = np.empty(count)
        reconfigure_s = np.zeros(count)
        learning: list[dict] = []
        prepare = getattr(executor, "prepare", None)
        plan = getattr(executor, "plan", None)
        for k, t in enumerate(range(first, self.ctx.steps)):
            actions[k], new, decision_ms[k], rows = self.ahead or self._decide(t, self.current)
            self.ahead = None
            reconfigured[k] = self.current is not None and not np.array_equal(new, self.current)
            if plan is not None:
                plan(t, rows)
            try:
                reconfigure_s[k] = executor.apply(t, new, bool(reconfigured[k]))
            except Replanned as r:  # the executor applied another configuration: the one step t runs with
                new, reconfigure_s[k] = r.levels, r.reconfigure_s
                reconfigured[k] = self.current is not None and not np.array_equal(new, self.current)
            if self.decide_ahead and t + 1 < self.ctx.steps:  # step t+1, from what was observed through t-1
                self.ahead = self._decide(t + 1, new)
                if plan is not None:
                    plan(t + 1, self.ahead[3])
                if prepare is not None:
                    prepare(t + 1, self.ahead[1], not np.array_equal(self.ahead[1], new))
            try:
                obs = executor.observe(t)
            except StepsEnded:  # the application's own length: the steps that ran are the run
                count = k
                break
            record = self._learn(t, new, obs)
            if record is not None:
                learning.append(record)
            levels[k] = self.current = new
            self.next_step = t + 1
            step_s[k] = obs.step_s
            if on_step is not None:
                on_step(
                    StepRecord(
                        t,
                        int(actions[k]),
                        new,
                        bool(reconfigured[k]),
                        float(reconfigure_s[k]),
                        float(decision_ms[k]),
                        obs,
                        record,
                    )
                )
        notes: dict = {"reconfigure_s": reconfigure_s[:count]}
        if learning:
            notes["learning"] = learning
        return StrategyResult(
            strategy=self.planner.name,
            mode=self.mode,
            levels=levels[:count],
            step_s=step_s[:count],
            reconfigured=reconfigured[:count],
            penalty_s=self.ctx.penalty_s,
            decision_ms=decision_ms[:count],
            actions=actions[:count],
            prepare_ms=self.prepare_ms,
            notes=notes,
        )


def run_loop(
    planner: Planner,
    ctx: PlanningContext,
    executor: Executor,
    *,
    mode: str = "perfect",
    predictions: Predictions | None = None,
    task_names: list[str] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    decide_ahead: bool = False,
) -> StrategyResult:
    """Run `planner` over every step of `ctx` on `executor` (a simulation: `StepLoop` without history)."""
    loop = StepLoop(planner, ctx, mode=mode, predictions=predictions, task_names=task_names, decide_ahead=decide_ahead)
    return loop.run(executor, on_step)

"""The decision lead (`StepLoop(decide_ahead=True)`): step t+1 is decided before step t is observed, from
what was observed through step t-1, handed to the executor's optional `prepare`, and replayed in the same
order on resume; `simulate` uses it for jobs that synchronise themselves."""

from dataclasses import replace

import numpy as np
import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.loop import StepLoop, StepObservation, run_loop
from bsp_planner.planners.base import Decision, make_planner
from bsp_planner.simulate.executor import SimulatedExecutor
from bsp_planner.simulate.runs import step_predictions
from bsp_planner.simulate.scenario import build_scenario

from synthetic import write_experiment


class Journal:
    """A planner, predictions and executor that write every call into one list, in order."""

    def __init__(self, n_tasks: int, with_prepare: bool) -> None:
        self.calls: list[tuple] = []
        self.n_tasks = n_tasks
        if with_prepare:
            self.prepare = lambda step, levels, reconfigure: self.calls.append(
                ("prepare", step, levels.tolist(), reconfigure)
            )

    # planner
    name = "journal"

    def reset(self, ctx) -> None:
        pass

    def decide(self, t, current):
        self.calls.append(("decide", t, None if current is None else current.tolist()))
        return Decision(1, np.full(self.n_tasks, t % 2, dtype=np.int64))  # alternates: every step reconfigures

    # predictions
    def before_step(self, step) -> None:
        self.calls.append(("before_step", step))

    def after_step(self, step, levels, observation):
        self.calls.append(("after_step", step))
        return None

    # executor
    def apply(self, step, levels, reconfigure) -> float:
        self.calls.append(("apply", step, levels.tolist(), reconfigure))
        return 0.0

    def observe(self, step) -> StepObservation:
        self.calls.append(("observe", step))
        return StepObservation(step, np.ones(self.n_tasks), np.ones(self.n_tasks), 1.0)


@pytest.fixture
def small_ctx(tmp_path, synthetic_profile):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=3, modes=["perfect"]))
    return build_scenario(exp).contexts["perfect"]


@pytest.mark.parametrize("with_prepare", [True, False])
def test_with_a_lead_step_t_plus_1_is_decided_and_prepared_before_step_t_is_observed(small_ctx, with_prepare):
    j = Journal(small_ctx.n_tasks, with_prepare)
    n = small_ctx.n_tasks
    zeros, ones = [0] * n, [1] * n
    StepLoop(j, small_ctx, predictions=j, decide_ahead=True).run(j)
    prepared = [("prepare", 1, ones, True), ("prepare", 2, zeros, True)] if with_prepare else [(), ()]
    expected = [
        ("before_step", 0),
        ("decide", 0, None),
        ("apply", 0, zeros, False),
        ("before_step", 1),
        ("decide", 1, zeros),  # `current` is the configuration step 0 runs with
        prepared[0],
        ("observe", 0),
        ("after_step", 0),
        ("apply", 1, ones, True),
        ("before_step", 2),
        ("decide", 2, ones),
        prepared[1],
        ("observe", 1),
        ("after_step", 1),
        ("apply", 2, zeros, True),
        ("observe", 2),  # the last step: nothing left to decide ahead
        ("after_step", 2),
    ]
    assert j.calls == [c for c in expected if c]


def test_without_a_lead_the_order_is_unchanged(small_ctx):
    j = Journal(small_ctx.n_tasks, with_prepare=True)
    StepLoop(j, small_ctx, predictions=j).run(j)
    names = [c[0] for c in j.calls]
    assert "prepare" not in names
    assert names[:8] == ["before_step", "decide", "apply", "observe", "after_step", "before_step", "decide", "apply"]


class ChangedAt:
    """The simulated executor, but step `at`'s observed workloads are other (valid) ones."""

    def __init__(self, inner: SimulatedExecutor, at: int) -> None:
        self.inner, self.at, self.n_tasks = inner, at, inner.n_tasks

    def apply(self, step, levels, reconfigure):
        return self.inner.apply(step, levels, reconfigure)

    def observe(self, step):
        obs = self.inner.observe(step)
        if step == self.at:
            obs = replace(obs, workloads=np.where(obs.workloads > 30, 10.0, 50.0))  # far from what ran
        return obs


@pytest.mark.parametrize("strategy", ["mpc", "reactive", "mpc-risk"])
def test_the_decision_made_ahead_does_not_see_the_step_it_runs_beside(tmp_path, synthetic_profile, strategy):
    """Changing what step t reported changes no decision up to step t+1 with the lead; without it, the
    decision for t+1 follows the report (so this test can tell the two apart)."""
    exp = load_experiment(
        write_experiment(
            tmp_path, synthetic_profile, steps=24, modes=["forecast"], online=True, forecast__source="persistence"
        )
    )
    scen = build_scenario(exp)
    at = 8

    def levels(decide_ahead: bool, changed: bool):
        ctx, predictions = step_predictions(scen, "forecast")
        executor = SimulatedExecutor(scen.actual, scen.actual_workloads, ctx.penalty_s)
        ex = ChangedAt(executor, at) if changed else executor
        planner = make_planner(strategy, exp.planner)
        return run_loop(planner, ctx, ex, predictions=predictions, decide_ahead=decide_ahead).levels

    ahead, ahead_changed = levels(True, False), levels(True, True)
    assert np.array_equal(ahead[: at + 2], ahead_changed[: at + 2])
    assert not np.array_equal(ahead[at + 2 :], ahead_changed[at + 2 :])  # step t+2 on does see it
    plain, plain_changed = levels(False, False), levels(False, True)
    assert np.array_equal(plain[: at + 1], plain_changed[: at + 1])
    assert not np.array_equal(plain[at + 1], plain_changed[at + 1])


@pytest.mark.parametrize("strategy", ["mpc", "reactive", "mpc-risk"])
def test_a_resumed_run_with_a_lead_makes_the_decisions_an_uninterrupted_run_makes(
    tmp_path, synthetic_profile, strategy
):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=30, modes=["forecast"], online=True))
    scen = build_scenario(exp)

    def executor():
        return SimulatedExecutor(scen.actual, scen.actual_workloads, exp.penalty_s)

    logged = []
    ctx, predictions = step_predictions(scen, "forecast")
    whole = run_loop(
        make_planner(strategy, exp.planner),
        ctx,
        executor(),
        predictions=predictions,
        on_step=logged.append,
        decide_ahead=True,
    )
    stop = 13
    ctx, predictions = step_predictions(scen, "forecast")
    loop = StepLoop(make_planner(strategy, exp.planner), ctx, predictions=predictions, decide_ahead=True)
    current = loop.replay((r.levels, r.observation) for r in logged[:stop])
    assert np.array_equal(current, whole.levels[stop - 1]) and loop.next_step == stop
    rest = loop.run(executor())
    assert np.array_equal(rest.levels, whole.levels[stop:])
    assert np.array_equal(rest.step_s, whole.step_s[stop:])


def test_quotas_ahead_are_written_per_report_shrinking_first_and_never_before_the_report():
    """The live executor's writes ahead (observe mode): only tasks that reported, shrinking before growing
    among reports seen together, each once; a write that failed on ZooKeeper's thread surfaces in finish()."""
    from types import SimpleNamespace

    from bsp_planner.runtime.quota_ahead import QuotasAhead

    levels = {"grow": 2, "shrink": 6, "late": 3, "same": 4}
    written: list[tuple[str, int]] = []

    def write(task, level):
        written.append((task, level))
        levels[task] = level

    ahead = QuotasAhead(5, {"grow": 6, "shrink": 2, "late": 1}, levels, write)
    ahead.on_report("grow", "shrink", "same")  # reported step 4 together; "late" still runs it
    assert written == [("shrink", 2), ("grow", 6)]
    ahead.watcher("late")(SimpleNamespace(type="CHANGED"))  # not its report's creation
    ahead.on_report("grow")  # seen again by the main loop: written once
    assert written == [("shrink", 2), ("grow", 6)]
    ahead.watcher("late")(SimpleNamespace(type="CREATED"))
    assert written[-1] == ("late", 1) and len(written) == 3
    quota_at, seconds = ahead.finish()
    assert set(quota_at) == {"shrink", "grow", "late"} and seconds >= 0
    assert quota_at["shrink"] <= quota_at["grow"] <= quota_at["late"]

    def refuse(task, level):
        raise OSError(f"cannot write {task}'s quota")

    failing = QuotasAhead(5, {"grow": 6}, dict(levels), refuse)
    failing.watcher("grow")(SimpleNamespace(type="CREATED"))  # on kazoo's thread: must not raise there
    with pytest.raises(OSError, match="grow's quota"):
        failing.finish()
    closed = QuotasAhead(5, {"grow": 7}, dict(levels), write)
    closed.finish()
    closed.on_report("grow")  # the main loop took over: nothing more is written ahead
    assert len(written) == 3

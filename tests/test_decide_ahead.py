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


def test_each_tasks_next_quota_is_placed_on_its_own_report_from_the_decision_or_the_plan():
    """The live executor's quotas in observe mode (`QuotaKeeper`): a task's quota for step s goes in on its
    own report of step s-1, never before; the decision's where step s is decided, else the latest plan's;
    the decision, when it lands, corrects a task still in the step and marks one that ran the step on the
    plan's quota; a decision changing several tasks at once writes the shrinking ones first; a write that
    failed on ZooKeeper's thread surfaces in check()."""
    from types import SimpleNamespace

    from bsp_planner.runtime.quota_ahead import QuotaKeeper, plan_rows

    tasks = ["a", "b", "c"]
    levels = {"a": 2, "b": 2, "c": 2}
    written: list[tuple[str, int]] = []

    def write(task, level):
        written.append((task, level))
        levels[task] = level

    keeper = QuotaKeeper(tasks, levels, 0, write)
    keeper.decide(0, {"a": 2, "b": 2, "c": 2})
    keeper.plan(0, plan_rows(0, np.array([[2, 2, 2], [3, 1, 2], [4, 1, 1]]), tasks))
    assert written == []  # nobody reported: every task still runs step 0
    keeper.on_report("a", 0)  # a runs ahead: step 1 is not decided, the plan holds 3 for it
    assert written == [("a", 3)]
    keeper.on_report("a", 1)  # and further: the plan's step 2
    assert written[-1] == ("a", 4)
    keeper.on_report("a", 0)  # an old report seen again (the main loop's check): nothing
    keeper.on_report("b", 0)
    assert written[-1] == ("b", 1)
    # step 1's decision differs from the plan for a (already past step 1) and for b (still in step 1)
    keeper.decide(1, {"a": 2, "b": 2, "c": 2})
    assert written[-1] == ("b", 2)  # corrected; a is in step 2, whose plan still holds 4; c still in step 0
    keeper.on_report("c", 0)  # c's step 1 is decided now: the decision's, nothing to write (2 already)
    assert written[-1] == ("b", 2)
    step1 = keeper.placements(1)
    assert step1["a"]["quota_from"] == "plan" and step1["a"].get("ran_on_plan")
    assert step1["b"]["quota_from"] == "plan" and "corrected_at" in step1["b"] and not step1["b"].get("ran_on_plan")
    assert step1["c"]["quota_from"] == "decision" and not step1["c"]["quota_written"]
    assert step1["a"]["quota_at"] <= step1["b"]["quota_at"] <= step1["b"]["corrected_at"] <= step1["c"]["quota_at"]
    # one decision moving two tasks already in its step: the shrinking one first
    keeper.on_report("b", 1)
    keeper.on_report("c", 1)
    n = len(written)
    keeper.decide(2, {"a": 1, "b": 1, "c": 5})
    assert written[n:] == [("a", 1), ("c", 5)] or written[n:] == [("a", 1), ("b", 1), ("c", 5)]
    assert [t for t, _ in written[n:]].index("c") == len(written[n:]) - 1
    seconds, moved = keeper.step_writes(2)
    assert seconds >= 0 and "c" in moved

    def refuse(task, level):
        raise OSError(f"cannot write {task}'s quota")

    failing = QuotaKeeper(tasks, {"a": 2, "b": 2, "c": 2}, 0, refuse)
    failing.decide(0, {"a": 2, "b": 2, "c": 2})
    failing.plan(0, plan_rows(0, np.array([[2, 2, 2], [3, 2, 2]]), tasks))
    failing.on_report("a", 0)  # as on kazoo's thread: must not raise there
    with pytest.raises(OSError, match="a's quota"):
        failing.check()
    keeper.close()
    n = len(written)
    keeper.on_report("a", 2)  # the run ended: nothing more is written
    assert len(written) == n
    # the ZooKeeper side: each report's creation, one after the other
    nodes: set[str] = set()
    watches: dict[str, object] = {}

    def exists(path, watch, done):  # as ZkSession.exists_async: the answer comes later, on another thread
        watches[path] = watch
        answers.append(lambda: done(path in nodes))

    answers: list = []

    follower = QuotaKeeper(["a"], {"a": 2}, 0, write)
    follower.decide(0, {"a": 2})
    follower.plan(0, plan_rows(0, np.array([[2], [6], [7]]), ["a"]))
    nodes.add("a/0")
    n = len(written)
    follower.follow(exists, lambda t, s: f"{t}/{s}", "a")
    assert len(written) == n and "a/1" not in watches  # nothing waited for the answer
    answers.pop()()  # step 0 already reported: step 1's quota now
    assert levels["a"] == 6 and "a/1" in watches
    answers.pop()()  # step 1 not reported yet
    watches["a/1"](SimpleNamespace(type="CHANGED"))  # not a creation
    assert levels["a"] == 6
    nodes.add("a/1")
    watches["a/1"](SimpleNamespace(type="CREATED"))
    assert levels["a"] == 7 and "a/2" in watches and len(answers) == 1
    watches["a/1"](SimpleNamespace(type="CREATED"))  # the same report seen twice: one chain goes on
    assert len(answers) == 1
    answers.pop()()  # step 2 not reported yet
    nodes.add("a/2")
    follower.on_report("a", 2)  # the main loop's own check saw it first: the chain must still go on
    watches["a/2"](SimpleNamespace(type="CREATED"))
    assert "a/3" in watches and len(answers) == 1

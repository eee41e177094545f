"""The one step loop: it runs every planner exactly as the simulator always has, refuses bad
measurements naming the task and step, and plans step by step when predictions are made online."""

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.core.steps import StepObservation
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.loop import Executor, run_loop
from bsp_planner.planners import PLANNERS
from bsp_planner.planners.base import make_planner
from bsp_planner.simulate.executor import SimulatedExecutor
from bsp_planner.simulate.runs import check_strategies, run_strategy
from bsp_planner.simulate.scenario import build_scenario

from synthetic import write_experiment


def reference_simulation(planner, ctx, actual):
    """The simulator's loop as it was before the step loop existed, kept here as the reference: decide
    every step, then charge the slowest task at the actual durations, and the penalty per change."""
    planner.reset(ctx)
    n, m = ctx.n_tasks, ctx.steps
    levels = np.empty((m, n), dtype=np.int64)
    actions = np.empty(m, dtype=np.int64)
    reconfigured = np.zeros(m, dtype=bool)
    current = None
    for t in range(m):
        d = planner.decide(t, current)
        new = np.asarray(d.levels, dtype=np.int64)
        reconfigured[t] = current is not None and not np.array_equal(new, current)
        levels[t] = current = new
        actions[t] = d.action
    step_s = actual[np.arange(n)[None, :], levels, np.arange(m)[:, None]].max(axis=1)
    return levels, actions, reconfigured, step_s


def every_registered_strategy():
    out = []
    for name in PLANNERS.names():
        if name == "static":
            out.append("static:3")
        elif name == "rl":
            continue  # rl:PATH is dqn with a file; dqn covers it
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("mode", ["perfect", "forecast"])
def test_loop_with_the_simulated_executor_equals_the_simulator_for_every_strategy(tmp_path, synthetic_profile, mode):
    strategies = every_registered_strategy()
    if "dqn" in strategies:
        pytest.importorskip("stable_baselines3")
    exp = load_experiment(
        write_experiment(tmp_path, synthetic_profile, steps=40, strategies=strategies, modes=[mode], penalty_s=0.3)
    )
    scen = build_scenario(exp)
    ctx = scen.contexts[mode]
    for s in strategies:
        ref_levels, ref_actions, ref_reconf, ref_step_s = reference_simulation(
            make_planner(s, exp.planner), ctx, scen.actual
        )
        executor = SimulatedExecutor(scen.actual, scen.actual_workloads, exp.penalty_s)
        seen = []
        r = run_loop(make_planner(s, exp.planner), ctx, executor, mode=mode, on_step=seen.append)
        assert np.array_equal(r.levels, ref_levels), s
        assert np.array_equal(r.actions, ref_actions), s
        assert np.array_equal(r.reconfigured, ref_reconf), s
        assert np.array_equal(r.step_s, ref_step_s), s  # bit for bit
        assert r.total_s == ref_step_s.sum() + ref_reconf.sum() * exp.penalty_s
        # what the simulate command runs is the same loop
        via_cli = run_strategy(scen, s, mode)
        assert np.array_equal(via_cli.step_s, r.step_s) and np.array_equal(via_cli.levels, r.levels), s
        # every step was reported as it happened, with the workloads the tasks ran
        assert [rec.step for rec in seen] == list(range(exp.steps))
        assert np.array_equal(seen[7].observation.workloads, scen.actual_workloads[:, 7])
        assert sum(rec.reconfigure_s for rec in seen) == pytest.approx(r.checkpoint_s)


def test_simulated_executor_satisfies_the_protocol(tmp_path, synthetic_profile):
    scen = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, steps=5)))
    ex = SimulatedExecutor(scen.actual, scen.actual_workloads, 0.5)
    assert isinstance(ex, Executor)
    assert ex.apply(0, np.zeros(8, dtype=np.int64), False) == 0.0
    assert ex.apply(1, np.ones(8, dtype=np.int64), True) == 0.5
    obs = ex.observe(1)
    assert obs.step_s == obs.duration_s.max() == scen.actual[:, 1, 1].max()


class Corrupting:
    """A simulated executor that reports one bad measurement (a broken clock, a misbehaving task)."""

    def __init__(self, inner, step, task, duration=None, workload=None):
        self.inner, self.step, self.task, self.duration, self.workload = inner, step, task, duration, workload
        self.n_tasks = inner.n_tasks

    def apply(self, step, levels, reconfigure):
        return self.inner.apply(step, levels, reconfigure)

    def observe(self, step):
        obs = self.inner.observe(step)
        if step != self.step:
            return obs
        d, w = obs.duration_s.copy(), obs.workloads.copy()
        if self.duration is not None:
            d[self.task] = self.duration
        if self.workload is not None:
            w[self.task] = self.workload
        return StepObservation(step, d, w, float(np.nanmax(d)))


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"duration": float("nan")}, "measured duration nan"),
        ({"duration": -0.5}, "measured duration -0.5"),
        ({"duration": 0.0}, "measured duration 0.0"),
        ({"duration": float("inf")}, "measured duration inf"),
        ({"workload": float("nan")}, "reported workload nan"),
        ({"workload": -3.0}, "reported workload -3.0"),
    ],
)
def test_bad_measurements_are_refused_naming_task_and_step(tmp_path, synthetic_profile, bad, needle):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=12, modes=["perfect"]))
    scen = build_scenario(exp)
    ex = Corrupting(SimulatedExecutor(scen.actual, scen.actual_workloads, exp.penalty_s), step=6, task=2, **bad)
    seen = []
    with pytest.raises(InputError) as err:
        run_loop(
            make_planner("mpc", exp.planner),
            scen.contexts["perfect"],
            ex,
            task_names=scen.task_names,
            on_step=seen.append,
        )
    msg = str(err.value)
    assert "task 'bsearch', step 6" in msg and needle in msg, msg
    assert [r.step for r in seen] == list(range(6)), "the steps before the bad one stay reported"


def test_offline_planners_are_refused_when_planning_step_by_step(tmp_path, synthetic_profile):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, strategies=["mpc", "dp", "floor"], online=True))
    with pytest.raises(
        InputError, match=r"strategy dp plans the whole job before the first step.*online = true"
    ) as err:
        check_strategies(exp.strategies, exp)
    assert err.value.field == "strategies"
    check_strategies(["mpc", "static:2", "exppo", "floor", "optimum"], exp)


def test_the_loop_and_the_simulated_executor_import_neither_kazoo_nor_kubernetes():
    import subprocess
    import sys

    code = (
        "import sys, bsp_planner.loop, bsp_planner.simulate.executor, bsp_planner.simulate.predictions, "
        "bsp_planner.model.learning, bsp_planner.simulate.online; "
        "bad = [m for m in ('kazoo', 'kubernetes') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("strategy", ["mpc", "static:3", "mpc-risk"])
def test_a_run_resumed_from_its_log_makes_the_decisions_an_uninterrupted_run_makes(
    tmp_path, synthetic_profile, strategy
):
    """What `run --resume` relies on: replaying the logged steps puts planner and predictions where the
    interrupted run left them, so the remaining steps are planned exactly as without the interruption."""
    from bsp_planner.loop import StepLoop

    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=30, modes=["forecast"], penalty_s=0.3))
    scen = build_scenario(exp)
    ctx = scen.contexts["forecast"]

    def executor():
        return SimulatedExecutor(scen.actual, scen.actual_workloads, exp.penalty_s)

    logged = []
    whole = run_loop(make_planner(strategy, exp.planner), ctx, executor(), mode="forecast", on_step=logged.append)
    stop = 13  # the run was interrupted after step 12
    loop = StepLoop(make_planner(strategy, exp.planner), ctx, mode="forecast", task_names=scen.task_names)
    current = loop.replay((r.levels, r.observation) for r in logged[:stop])
    assert np.array_equal(current, whole.levels[stop - 1]) and loop.next_step == stop
    rest = loop.run(executor())
    assert np.array_equal(rest.levels, whole.levels[stop:])
    assert np.array_equal(rest.reconfigured, whole.reconfigured[stop:])
    assert np.array_equal(rest.step_s, whole.step_s[stop:])


def test_a_log_the_planner_would_not_have_written_is_refused_at_the_step_it_differs(tmp_path, synthetic_profile):
    from bsp_planner.loop import ReplayMismatch, StepLoop

    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=12, modes=["perfect"]))
    scen = build_scenario(exp)
    ctx = scen.contexts["perfect"]
    logged = []
    run_loop(
        make_planner("mpc", exp.planner),
        ctx,
        SimulatedExecutor(scen.actual, scen.actual_workloads, exp.penalty_s),
        on_step=logged.append,
    )
    history = [(r.levels.copy(), r.observation) for r in logged[:6]]
    history[4][0][1] = (history[4][0][1] + 1) % (int(ctx.max_level[1]) + 1)  # someone else's plan at step 4
    loop = StepLoop(make_planner("mpc", exp.planner), ctx)
    with pytest.raises(ReplayMismatch, match="at step 4") as err:
        loop.replay(history)
    assert err.value.step == 4 and loop.next_step == 4

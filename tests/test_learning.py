"""The performance model that learns from what it measures: a wrong profile converges to the true
durations within a few steps, the plan catches up with the one made on the true profile, and
measurements nothing should learn from are refused with the task and step named."""

import csv
import json
import shutil
import sys

import numpy as np
import pytest

from bsp_planner import cli
from bsp_planner.core.errors import InputError
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.loop import run_loop
from bsp_planner.model.learning import DurationCorrection, LearningSettings
from bsp_planner.planners.base import make_planner
from bsp_planner.simulate.executor import SimulatedExecutor
from bsp_planner.simulate.runs import run_strategy, step_predictions
from bsp_planner.simulate.scenario import build_scenario

from synthetic import THESIS_TASKS, write_experiment
from zk_fixtures import assert_nothing_left, needs_tasks, settings

# 40% off, both ways: half the tasks profiled 1.4x too slow, half 0.6x (too fast).
FACTORS = {t: (1.4 if i % 2 == 0 else 0.6) for i, t in enumerate(THESIS_TASKS)}


def scaled_profile(src, dst, factors):
    dst.parent.mkdir(parents=True, exist_ok=True)
    rows = list(csv.DictReader(src.open()))
    with dst.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            r["duration_s"] = f"{float(r['duration_s']) * factors[r['task']]:.6f}"
            w.writerow(r)
    return dst


def errors_by_step(result):
    """(steps, tasks) relative error of the prediction made before each step, at the point it ran."""
    recs = result.notes["learning"]
    return np.stack([np.abs(r["predicted_before_s"] / r["measured_s"] - 1) for r in recs])


@pytest.mark.parametrize("mode", ["perfect", "forecast"])
def test_a_wrong_profile_converges_and_the_plan_catches_up(tmp_path, synthetic_profile, mode):
    wrong = scaled_profile(synthetic_profile, tmp_path / "wrong" / "profile.csv", FACTORS)
    common = {"steps": 80, "modes": [mode], "strategies": ["mpc"], "penalty_s": 0.3}
    truth = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, **common)))
    learned = build_scenario(
        load_experiment(write_experiment(tmp_path, wrong, learn=True, true_profile=str(synthetic_profile), **common))
    )
    blind = build_scenario(
        load_experiment(write_experiment(tmp_path, wrong, true_profile=str(synthetic_profile), **common))
    )
    assert np.array_equal(learned.actual, truth.actual), "the simulated tasks follow the true profile"
    r = run_strategy(learned, "mpc", mode)
    err = errors_by_step(r)
    assert err[0].max() == pytest.approx(0.4, abs=1e-3)  # the first prediction is the profile's
    assert err[15:].max() < 0.05, err.max(axis=1)
    factor = r.notes["learning"][-1]["factor"]
    np.testing.assert_allclose(factor, [1 / FACTORS[t] for t in THESIS_TASKS], rtol=0.05)
    best = run_strategy(truth, "mpc", mode).total_s
    assert abs(r.total_s / best - 1) < 0.05
    # without learning, the same wrong profile costs more than the learning run
    assert run_strategy(blind, "mpc", mode).total_s > r.total_s


def test_learning_record_reports_before_and_after(tmp_path, synthetic_profile):
    wrong = scaled_profile(synthetic_profile, tmp_path / "wrong" / "profile.csv", FACTORS)
    exp = load_experiment(
        write_experiment(
            tmp_path,
            wrong,
            steps=10,
            modes=["perfect"],
            strategies=["static:2"],
            learn=True,
            true_profile=str(synthetic_profile),
        )
    )
    r = run_strategy(build_scenario(exp), "static:2", "perfect")
    first = r.notes["learning"][0]
    assert np.array_equal(
        first["predicted_before_s"] / first["measured_s"], [FACTORS[t] for t in THESIS_TASKS]
    ) or np.allclose(first["predicted_before_s"] / first["measured_s"], [FACTORS[t] for t in THESIS_TASKS], rtol=1e-9)
    # one measurement moves every task's prediction towards it, not past it
    before = np.log(first["predicted_before_s"] / first["measured_s"])
    after = np.log(first["predicted_after_s"] / first["measured_s"])
    assert np.all(np.abs(after) < 0.8 * np.abs(before)) and np.all(np.sign(after) == np.sign(before))


def test_simulate_learn_writes_learning_csv(tmp_path, synthetic_profile, monkeypatch, capsys):
    wrong = scaled_profile(synthetic_profile, tmp_path / "wrong" / "profile.csv", FACTORS)
    exp = write_experiment(tmp_path, wrong, steps=20, modes=["perfect"], strategies=["mpc", "floor"])
    monkeypatch.setattr(
        sys, "argv", ["bsp-planner", "simulate", str(exp), "-q", "--learn", "--true-profile", str(synthetic_profile)]
    )
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert not done.value.code, capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "out" / "learning.csv").open()))
    assert len(rows) == 20 * 8  # mpc only: the floor is a bound, it measures nothing
    last = [r for r in rows if r["step"] == "19"]
    assert all(abs(float(r["error_before_pct"])) < 5 for r in last)


W, CPU = np.array([30.0, 30.0]), np.array([1000.0, 1000.0])


def test_correction_converges_on_a_synthetic_ratio():
    c = DurationCorrection(["a", "b"], LearningSettings(window=20, prior_weight=1.0))
    prior = np.array([2.0, 1.0])
    c.update(0, prior, prior * np.array([1 / 1.4, 1.4]), W, CPU)
    # with flat slopes, one measurement moves the correction halfway (in log): prior_weight 1
    np.testing.assert_allclose(c.factors, [(1 / 1.4) ** 0.5, 1.4**0.5], rtol=1e-12)
    for step in range(1, 30):
        c.update(step, prior, prior * np.array([1 / 1.4, 1.4]), W, CPU)
    np.testing.assert_allclose(c.factors, [1 / 1.4, 1.4], rtol=0.02)


def test_correction_learns_a_gap_that_grows_with_cpu():
    """A profile from another machine class: the true/profile ratio is 1.4 * (cpu/1000)^0.15, which one
    factor per task cannot fit; the CPU slope of the correction does."""
    rng = np.random.default_rng(0)
    c = DurationCorrection(["a"], LearningSettings(window=20))
    for step in range(40):
        cpu = rng.choice([250.0, 500.0, 1000.0, 2000.0], size=1)
        w = rng.uniform(10, 50, size=1)
        c.update(step, np.array([1.0]), 1.4 * (cpu / 1000) ** 0.15, w, cpu)
    for cpu in (250.0, 2000.0):
        assert c.factor_at(np.array([30.0]), np.array([cpu]))[0] == pytest.approx(1.4 * (cpu / 1000) ** 0.15, rel=0.03)


def test_a_machine_wide_cpu_gap_is_learned_from_all_tasks_at_once():
    """Four tasks, each seen at two CPU levels only, with the gap 1.4 x (cpu/1000)^0.15 every task shares:
    the shared slope predicts each task at a level it never ran at (2000m) from eight steps."""
    c = DurationCorrection(list("abcd"), LearningSettings(slope_weight=0.0, prior_weight=0.0))
    seen = {0: (250.0, 500.0), 1: (500.0, 750.0), 2: (750.0, 1000.0), 3: (1000.0, 1500.0)}
    scale = np.array([1.0, 2.0, 0.5, 1.0])  # each task's own level must not leak into the slope
    for step in range(8):
        cpu = np.array([seen[i][step % 2] for i in range(4)])
        c.update(step, np.ones(4), scale * 1.4 * (cpu / 1000) ** 0.15, np.full(4, 30.0), cpu)
    # the truth is a straight line in log cpu: the shared fit recovers it exactly
    np.testing.assert_allclose(c.shared_slopes, [0.15, 0.0, 0.0], atol=1e-9)
    at_2000 = c.factor_at(np.full(4, 30.0), np.full(4, 2000.0))
    np.testing.assert_allclose(at_2000, scale * 1.4 * 2**0.15, rtol=1e-9)


def test_tasks_off_by_different_factors_at_different_cpus_fake_no_slope():
    """x1.4 at 250m and x0.6 at 2000m is two tasks' levels, not a CPU shape: every slope stays 0."""
    c = DurationCorrection(["slow", "fast"])
    cpu, w = np.array([250.0, 2000.0]), np.array([20.0, 40.0])
    for step in range(10):
        c.update(step, np.ones(2), np.array([1.4, 0.6]), w, cpu)
    assert np.array_equal(c.shared_slopes, np.zeros(3)) and np.array_equal(c.slopes, np.zeros((2, 3)))


def test_a_gap_linear_in_inverse_cpu_is_followed_by_the_curvature():
    """1.4x at 250m down to 1.0x at 2000m, linear in 1/cpu (not a straight line in log cpu): within 2% at
    every profiled level once the tasks have spread over them."""
    rng = np.random.default_rng(1)
    levels = np.array([250.0, 500.0, 750.0, 1000.0, 1500.0, 2000.0])

    def gap(cpu):
        return 1.0 + 0.4 * (250 / cpu - 0.125) / 0.875

    c = DurationCorrection(list("abcdefgh"), cpu_ref=707.0)
    for step in range(15):
        cpu = rng.choice(levels, size=8)
        c.update(step, np.ones(8), gap(cpu), rng.uniform(10, 50, size=8), cpu)
    for level in levels:
        got = c.factor_at(np.full(8, 30.0), np.full(8, level))
        assert np.all(np.abs(got / gap(level) - 1) < 0.03), (level, got / gap(level))


def test_a_task_unlike_the_others_gets_its_own_cpu_shape():
    """Seven tasks with a flat gap, one whose gap grows with CPU: spread over the levels, that task's
    correction leaves the shared shape (nearly flat) for its own, and the others stay flat."""
    rng = np.random.default_rng(2)
    slope = np.array([0.0] * 7 + [0.3])
    c = DurationCorrection(list("abcdefgh"))
    for step in range(150):
        cpu = rng.choice([250.0, 500.0, 1000.0, 2000.0], size=8)
        c.update(step, np.ones(8), 1.2 * (cpu / 1000) ** slope, np.full(8, 30.0), cpu)
    for cpu in (250.0, 2000.0):
        got = c.factor_at(np.full(8, 30.0), np.full(8, cpu))
        truth = 1.2 * (cpu / 1000) ** slope
        assert np.all(np.abs(got / truth - 1) < 0.03), (cpu, got / truth)
    assert abs(c.shared_slopes[0]) < 0.1 < c.slopes[7, 0]


@pytest.mark.parametrize(
    "measured, needle",
    [
        (float("nan"), "measured duration nan s"),
        (-1.0, "measured duration -1.0 s"),
        (0.0, "measured duration 0.0 s"),
        (5000.0, "x); a measurement more than 10x off is refused as absurd"),
        (1e-6, "a measurement more than 10x off is refused as absurd"),
    ],
)
def test_bad_measurements_are_refused_before_anything_is_learned(measured, needle):
    c = DurationCorrection(["a", "b"])
    c.update(0, np.array([1.0, 1.0]), np.array([1.1, 0.9]), W, CPU)
    before = c.factors.copy()
    with pytest.raises(InputError) as err:
        c.update(7, np.array([1.0, 1.0]), np.array([1.0, measured]), W, CPU)
    assert "task 'b', step 7" in str(err.value) and needle in str(err.value)
    assert np.array_equal(c.factors, before), "nothing learned from a refused step"


def test_an_absurd_measurement_stops_a_learning_run_naming_task_and_step(tmp_path, synthetic_profile):
    exp = load_experiment(
        write_experiment(tmp_path, synthetic_profile, steps=12, modes=["perfect"], strategies=["mpc"], learn=True)
    )
    scen = build_scenario(exp)
    actual = scen.actual.copy()
    actual[5, :, 4] *= 1000  # task 'memcpy' at step 4: a thousand times its profile
    ctx, predictions = step_predictions(scen, "perfect")
    with pytest.raises(InputError, match=r"task 'memcpy', step 4: measured .* refused as absurd"):
        run_loop(
            make_planner("mpc"),
            ctx,
            SimulatedExecutor(actual, scen.actual_workloads, 0.3),
            predictions=predictions,
            task_names=scen.task_names,
        )


def test_learning_settings_are_checked_by_the_settings_loader(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, steps=5)
    monkeypatch.setattr(
        sys, "argv", ["bsp-planner", "simulate", str(exp), "-q", "--learn", "--set", "learning.max_ratio=1"]
    )
    with pytest.raises(SystemExit) as done:
        cli.main()
    err = " ".join(capsys.readouterr().err.split())
    assert done.value.code == 2 and "learning.max_ratio" in err, err
    assert not (tmp_path / "out").exists()


def test_a_later_run_without_learning_removes_the_old_learning_csv(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, steps=8, modes=["perfect"], strategies=["mpc"])
    for extra in (["--learn"], []):
        monkeypatch.setattr(sys, "argv", ["bsp-planner", "simulate", str(exp), "-q", *extra])
        with pytest.raises(SystemExit) as done:
            cli.main()
        assert not done.value.code
        assert (tmp_path / "out" / "learning.csv").exists() == bool(extra)
        assert ("learning.csv" in capsys.readouterr().out) == bool(extra)


def test_a_profile_from_another_machine_class_converges(tmp_path, synthetic_profile):
    """The wrong profile's gap grows with CPU (1.4 x (cpu/1000m)^0.15): one factor per task cannot fit
    it; the correction's CPU slope, shared by the tasks, does within 15 steps."""
    rows = list(csv.DictReader(synthetic_profile.open()))
    wrong = tmp_path / "wrong" / "profile.csv"
    wrong.parent.mkdir()
    with wrong.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            r["duration_s"] = f"{float(r['duration_s']) * 1.4 * (float(r['cpu_millicores']) / 1000) ** 0.15:.6f}"
            w.writerow(r)
    common = dict(steps=150, modes=["perfect"], strategies=["mpc"], penalty_s=0.3)
    learned = build_scenario(
        load_experiment(write_experiment(tmp_path, wrong, learn=True, true_profile=str(synthetic_profile), **common))
    )
    truth = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, **common)))
    r = run_strategy(learned, "mpc", "perfect")
    err = errors_by_step(r)
    assert err[0].max() > 0.25
    assert err[15:].max() < 0.05, err.max(axis=1)  # the goal: below 5% within 15 steps, and staying there
    assert abs(r.total_s / run_strategy(truth, "mpc", "perfect").total_s - 1) < 0.02


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_wrong_profile_converges_on_a_real_run(tmp_path, zk_server, creds_file):
    """The shipped kernel-3 job (three real programs under cgroup quotas, ZooKeeper barriers), planned on
    its profile x0.25 with `--learn`: after ten measured steps the model's predictions are far closer to
    the measured durations than the profile's first ones. (The error is taken in log, median over the tasks
    of the last three steps, so a burst of load on the shared machine in one step cannot decide it;
    how close it gets, and how fast, is benchmarks/bench_learning_live.py's.) The profile is made too
    fast, not too slow: load on a shared machine only lengthens what the tasks measure, so the first
    error grows with load instead of vanishing (a profile x4 measured 2.5x slow looked nearly right, and
    CI saw that); the refusal of absurd measurements is widened for the same reason."""
    from bsp_planner.inputs.shipped import data_dir
    from bsp_planner.runtime.coordinator import Coordinator

    data = data_dir()
    wrong = scaled_profile(
        data / "profiles" / "kernel-3" / "profile.csv",
        tmp_path / "wrong" / "profile.csv",
        {t: 0.25 for t in ("k-taxi", "k-temp", "k-art")},
    )
    shutil.copy(data / "profiles" / "kernel-3" / "profile.meta.json", wrong.parent)
    text = (data / "experiments" / "kernel-3.toml").read_text()
    text = text.replace('job = "../jobs/kernel-3.toml"', f'job = "{data / "jobs" / "kernel-3.toml"}"')
    text = text.replace('profile = "../profiles/kernel-3/profile.csv"', f'profile = "{wrong}"')
    text = text.replace("steps = 20", "steps = 10").replace('output = "out/kernel-3"', f'output = "{tmp_path}/out"')
    exp = tmp_path / "exp.toml"
    exp.write_text(text)
    learn = ["learn=true", "learning.max_ratio=1000"]
    run = settings(exp, zk_server, creds_file, planner="mpc", reconfigure="in-place", overrides=learn)
    result = Coordinator(run, "learnlive", tmp_path / "runs").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(10))
    log_err = [
        np.abs(np.log(np.array(r["learning"]["predicted_before_s"]) / np.array(r["learning"]["measured_s"])))
        for r in records
    ]
    first, last = np.median(log_err[0]), np.median(np.concatenate(log_err[-3:]))
    assert first > 1.0, "the profile x0.25 is far off what the tasks measure (at least 4x, more under load)"
    assert last < 0.5 * first, (first, last, [np.round(e, 2).tolist() for e in log_err])
    assert_nothing_left("learnlive")

"""A live run's accounting of workloads the tasks report (issue 22): the summary's simulated and floor
rows, the per-task predictions and steps.csv are made at the workloads the tasks ran, not at the ones
assigned or guessed before the run; a learning run's summary compares the steps with its learned model.

The live loop runs here on the simulated executor (the same `StepLoop` and the same `step_record` /
`write_summary` a live coordinator uses), so the truth is known exactly and no ZooKeeper is needed."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from bsp_planner.loop import StepLoop
from bsp_planner.planners.base import make_planner
from bsp_planner.runtime.coordinator import Coordinator, RunSettings
from bsp_planner.runtime.runlog import RunLog, step_record
from bsp_planner.runtime.summary import write_summary
from bsp_planner.simulate.executor import SimulatedExecutor

from cli_run import run_cli
from zk_fixtures import DATA, EXPERIMENT, write_profile

PROCESS = '[[task]]\nname = "{name}"\nprocess = ["{python}", "-c", "pass"]\n'
SERIES = 'series = {{ file = "{data}/nyc_taxi.csv", first_row = 0, last_row = 1998 }}\n'


def observed_experiment(folder: Path, steps: int, series_task: bool = False) -> Path:
    """Three process tasks a, b, c without series (their workloads are what they report); with
    series_task, task a has a series (a job mixing both)."""
    folder.mkdir(parents=True, exist_ok=True)
    tasks = ""
    for name in "abc":
        tasks += PROCESS.format(name=name, python=sys.executable)
        if series_task and name == "a":
            tasks += SERIES.format(data=DATA / "datasets")
    (folder / "job.toml").write_text('name = "obs"\n' + tasks)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, penalty=0.05))
    return exp


def coordinator(tmp_path: Path, exp: Path, planner: str, overrides: list[str]) -> Coordinator:
    creds = tmp_path / "creds"
    creds.write_text("u:p\n")
    creds.chmod(0o600)
    s = RunSettings(
        experiment=str(exp),
        zookeeper="127.0.0.1:1",
        zk_auth=f"file:{creds}",
        planner=planner,
        mode="forecast",
        overrides=overrides,
        reconfigure="in-place",
    )
    coord = Coordinator(s, "acct", tmp_path / "runs")
    coord.run_dir.mkdir(parents=True)
    coord._load()
    return coord


def run_simulated_live(coord: Coordinator, true_w: np.ndarray, slow: float = 1.0) -> list[dict]:
    """The coordinator's loop with the simulated executor: the tasks run (and report) true_w (tasks,
    steps) and take `slow` x the profile's durations; every step recorded as the coordinator records it."""
    model = coord.scen.model
    actual = slow * model.durations(true_w)
    loop = StepLoop(
        make_planner(coord.settings.planner, coord.exp.planner),
        coord.ctx,
        mode=coord.settings.mode,
        predictions=coord.predictions,
        task_names=coord.tasks,
    )
    executor = SimulatedExecutor(actual, true_w, coord.ctx.penalty_s)
    told: dict[int, np.ndarray] = {}
    observe = executor.observe

    def observe_told(t: int):  # what a live step tells the tasks, read before the step as LiveSteps does
        told[t] = coord._given_workloads(t)
        return observe(t)

    executor.observe = observe_told  # type: ignore[method-assign]
    records: list[dict] = []

    def on_step(step) -> None:
        obs = step.observation
        given = told[step.step]
        reports = [
            {
                "duration_s": float(obs.duration_s[i]),
                "enter_wait_s": 0.0,
                "incarnation": 0,
                "finished_at": 0.0,
                **({"observed_workload": float(true_w[i, step.step])} if coord.job.tasks[i].series is None else {}),
            }
            for i in range(len(coord.tasks))
        ]
        rec = step_record(
            coord, step.step, step.action, step.levels, step.reconfigured, step.reconfigure_s,
            step.decision_ms, obs.step_s, 0.0, 0.0, reports, {}, False, given,
        )  # fmt: skip
        if step.learning is not None:  # as live_steps records it
            rec["learning"] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in step.learning.items()}
            rec["learned_step_s"] = float(np.max(step.learning["predicted_before_s"]))
        records.append(rec)

    # what a live executor hands the loop: the reported workloads where the tasks report them
    loop.run(executor, on_step=on_step)
    return records


def test_the_summary_charges_the_plan_at_the_workloads_the_tasks_reported(tmp_path):
    exp = observed_experiment(tmp_path / "exp", steps=8)
    coord = coordinator(tmp_path, exp, "mpc", ["online=true", "forecast.source=persistence"])
    rng = np.random.default_rng(3)
    true_w = rng.uniform(10, 18, (3, 8))  # far below the range's middle (30), which nothing reported
    records = run_simulated_live(coord, true_w)
    summary, paths = write_summary(coord, records, 0.0)
    live = summary["live_total_s"]
    # the simulator's plan charged at what the tasks ran is exactly what ran: 0% error, not -50%
    assert summary["same_plan_as_simulated"]
    assert summary["simulated_total_s"] == pytest.approx(live, rel=1e-6)
    floor = next(r for r in summary["rows"] if r["strategy"] == "floor")
    assert floor["total_s"] <= live + 1e-9
    assert summary["step_error_pct"]["max_abs"] == pytest.approx(0.0, abs=1e-6)
    # the record's per-task predictions are at the reported workloads, and steps.csv names both workloads
    for rec in records:
        for x in rec["tasks"]:
            assert x["predicted_s"] == pytest.approx(x["measured_s"])
    RunLog(coord.run_dir, coord.tasks).rewrite(records)
    rows = list(csv.DictReader((coord.run_dir / "steps.csv").open()))
    assert float(rows[3]["reported_b"]) == pytest.approx(true_w[1, 3], rel=1e-5)
    assert float(rows[3]["assigned_b"]) == pytest.approx(true_w[1, 2], rel=1e-5)  # persistence: last step's report
    assert float(rows[0]["assigned_b"]) == 30.0  # nothing reported yet: the range's middle


def test_a_job_mixing_series_and_observed_tasks_keeps_its_series_online(tmp_path):
    exp = observed_experiment(tmp_path / "exp", steps=6, series_task=True)
    coord = coordinator(tmp_path, exp, "mpc", ["online=true", "forecast.source=persistence"])
    series = coord.scen.actual_workloads[0]
    assert len(set(np.round(series, 6))) > 1  # the shipped series varies
    true_w = np.vstack([series, np.full(6, 15.0), np.full(6, 45.0)])
    records = run_simulated_live(coord, true_w)
    assigned_a = [rec["tasks"][0]["workload"] for rec in records]
    assert assigned_a == pytest.approx(list(series))  # told its series, not a forecast of it
    summary, _ = write_summary(coord, records, 0.0)
    assert summary["simulated_total_s"] == pytest.approx(summary["live_total_s"], rel=1e-6)


def test_a_learning_run_reports_its_learned_models_error_beside_the_profiles(tmp_path):
    exp = observed_experiment(tmp_path / "exp", steps=12)
    coord = coordinator(
        tmp_path, exp, "mpc", ["online=true", "learn=true", "forecast.source=persistence", "learning.max_ratio=10"]
    )
    true_w = np.full((3, 12), 25.0)
    records = run_simulated_live(coord, true_w, slow=1.5)  # the tasks run 50% slower than profiled
    summary, paths = write_summary(coord, records, 0.0)
    assert summary["compute_error_pct"] == pytest.approx(50.0, abs=0.5)  # against the profile
    learned = summary["learned_step_error_pct_second_half"]["mean_abs"]
    assert learned < 10.0  # the learned model caught up
    md = paths["md"].read_text()
    assert "against the learned model" in md
    # the simulated total is charged at what the model knew before each step: the same plan, so the
    # learned model's step predictions summed (no reconfiguration is priced twice), within its error
    assert summary["same_plan_as_simulated"]
    sim_row = next(r for r in summary["rows"] if r["strategy"] == "mpc (simulated)")
    assert sim_row["compute_s"] == pytest.approx(sum(r["learned_step_s"] for r in records), rel=1e-3)
    # the profile's total beside it, 50% off as the machine is; the learned one off only while it learns
    assert summary["total_error_profile_pct"] == pytest.approx(50.0, abs=2.0)
    assert 0 < summary["total_error_pct"] < summary["total_error_profile_pct"] / 4
    assert summary["simulated_total_profile_s"] > summary["simulated_total_s"] / 1.5 - 1e-9
    assert "charged at the learned model's durations before each step" in md


def test_a_run_without_learning_is_simulated_on_its_profile_alone(tmp_path):
    exp = observed_experiment(tmp_path / "exp", steps=6)
    coord = coordinator(tmp_path, exp, "mpc", ["online=true", "forecast.source=persistence"])
    records = run_simulated_live(coord, np.full((3, 6), 25.0), slow=1.5)
    summary, paths = write_summary(coord, records, 0.0)
    assert summary["total_error_pct"] == pytest.approx(50.0, abs=2.0)  # the profile is all it knows
    assert "total_error_profile_pct" not in summary and "learned model" not in paths["md"].read_text()


def test_simulate_refuses_unknown_workloads_and_replays_an_earlier_runs(tmp_path, monkeypatch, capsys):
    exp = observed_experiment(tmp_path / "exp", steps=6)
    # online, the old way invented the middle of the range for every task and step: refused, naming the fix
    args = [
        "simulate",
        str(exp),
        "-q",
        "--mode",
        "forecast",
        "--online",
        "-s",
        "even,mpc",
        "--set",
        "forecast.source=persistence",
    ]
    code, _, err = run_cli([*args, "-o", tmp_path / "o1"], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "task 'a' has no series" in err and "--actual runs/<run-id>" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o1").exists()
    # a live run's folder is a trace of what its tasks ran
    coord = coordinator(tmp_path, exp, "mpc", ["online=true", "forecast.source=persistence"])
    true_w = np.random.default_rng(5).uniform(10, 50, (3, 6))
    RunLog(coord.run_dir, coord.tasks).rewrite(run_simulated_live(coord, true_w))
    code, out, err = run_cli(
        [
            "simulate",
            str(exp),
            "-q",
            "--mode",
            "perfect",
            "-s",
            "even",
            "--actual",
            str(coord.run_dir),
            "-o",
            tmp_path / "o2",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    even = next(
        r for r in json.loads((tmp_path / "o2" / "comparison.json").read_text())["results"] if r["strategy"] == "even"
    )
    level = coord.scen.cpu.level_of(500)  # 1500m over 3 tasks
    expected = coord.scen.model.durations(true_w)[:, level, :].max(axis=0).sum()
    assert even["total_s"] == pytest.approx(expected, abs=5e-4)


def test_a_run_folder_with_too_few_steps_is_refused_as_a_trace(tmp_path, monkeypatch, capsys):
    exp = observed_experiment(tmp_path / "exp", steps=6)
    coord = coordinator(tmp_path, exp, "mpc", ["online=true", "forecast.source=persistence"])
    RunLog(coord.run_dir, coord.tasks).rewrite(run_simulated_live(coord, np.full((3, 6), 20.0))[:4])
    args = ["simulate", str(exp), "-q", "--mode", "perfect", "-s", "even", "--actual", str(coord.run_dir)]
    code, _, err = run_cli([*args, "-o", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--actual" in err and "the run logged 4 steps but the experiment needs 6" in err, err
    code, _, err = run_cli([*args, "--steps", "4", "-o", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err

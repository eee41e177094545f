"""`bsp-planner simulate` end to end, and every bad input it must refuse cleanly."""

import json
import math

import numpy as np
import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.simulate.runs import run_strategy
from bsp_planner.simulate.scenario import build_scenario

from cli_run import run_cli
from synthetic import DATA, THESIS_TASKS, write_experiment, write_profile


def test_simulate_writes_the_comparison(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile)
    code, out, err = run_cli(["simulate", str(exp), "-q"], monkeypatch, capsys)
    assert code == 0, err
    assert "static:4" in out and "perfect" in out and "forecast" in out
    results = json.loads((tmp_path / "out" / "comparison.json").read_text())["results"]
    assert {(r["strategy"], r["mode"]) for r in results} == {
        (s, m) for s in ["exppo", "static:1", "static:4", "dp", "mpc", "floor"] for m in ["perfect", "forecast"]
    }
    for r in results:
        assert math.isclose(r["total_s"], r["compute_s"] + r["checkpoint_s"], rel_tol=1e-6)
        assert r["vs_floor_pct"] >= -1e-6
    for name in ["comparison.csv", "comparison.md", "steps.csv", "comparison.png"]:
        assert (tmp_path / "out" / name).stat().st_size > 0
    steps = (tmp_path / "out" / "steps.csv").read_text().splitlines()
    assert len(steps) == 1 + 12 * 60


def test_cli_overrides_reach_the_run(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile)
    code, out, err = run_cli(
        [
            "simulate",
            str(exp),
            "-q",
            "--strategies",
            "mpc,floor",
            "--mode",
            "perfect",
            "--steps",
            "25",
            "--penalty",
            "1000",
            "--set",
            "planner.horizon=5",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    results = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert results["meta"]["settings"]["planner"]["horizon"] == 5
    mpc = [r for r in results["results"] if r["strategy"] == "mpc"][0]
    assert mpc["checkpoints"] == 0  # a 1000 s penalty is never worth paying
    assert len(results["results"]) == 2


def test_perfect_knowledge_beats_forecasts_for_dp(tmp_path, synthetic_profile):
    exp = load_experiment(write_experiment(tmp_path, synthetic_profile, steps=80))
    scen = build_scenario(exp)
    perfect = run_strategy(scen, "dp", "perfect").total_s
    forecast = run_strategy(scen, "dp", "forecast").total_s
    assert perfect <= forecast + 1e-9


def test_replayed_trace_and_forecast_files(tmp_path, synthetic_profile, monkeypatch, capsys):
    from bsp_planner.forecasting.files import write_forecasts, write_trace

    steps = 30
    trace = np.full((8, steps), 30.0)
    trace[0] = 45.0  # a recorded trace where one task is always heavy
    write_trace(tmp_path / "trace", THESIS_TASKS, trace)
    write_forecasts(tmp_path / "fc", THESIS_TASKS, np.repeat(trace[:, :, None], 20, axis=2), {"forecaster": "recorded"})
    exp = write_experiment(tmp_path, synthetic_profile, steps=steps, strategies=["static:1", "floor"])
    code, out, err = run_cli(
        ["simulate", str(exp), "-q", "--actual", str(tmp_path / "trace"), "--forecasts", str(tmp_path / "fc")],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    assert "recorded" in out
    results = json.loads((tmp_path / "out" / "comparison.json").read_text())["results"]
    by = {(r["strategy"], r["mode"]): r for r in results}
    # Forecasts equal to the replayed truth make forecast mode identical to perfect mode.
    assert by[("static:1", "forecast")]["total_s"] == pytest.approx(by[("static:1", "perfect")]["total_s"])


# ---------------------------------------------------------------- bad inputs


def profile_rows(path):
    return path.read_text().splitlines()


def rewrite_line(path, index, new):
    lines = profile_rows(path)
    lines[index] = new
    path.write_text("\n".join(lines) + "\n")


def expect_error(tmp_path, exp, monkeypatch, capsys, *needles, extra=()):
    code, out, err = run_cli(["simulate", str(exp), "-q", *extra], monkeypatch, capsys)
    assert code == 2, (out, err)
    text = " ".join(err.split())
    for n in needles:
        assert n in text, text
    assert not (tmp_path / "out").exists(), "no partial output on bad input"
    return text


@pytest.mark.parametrize(
    "line, field",
    [
        ("affinity,10,250,nan,0", "duration_s"),
        ("affinity,10,250,-1.5,0", "duration_s"),
        ("affinity,10,250,0,0", "duration_s"),
        ("affinity,10,250,fast,0", "duration_s"),
        ("affinity,10,250,1e300,0", "duration_s"),  # a number, but no duration: 300-digit totals
        ("affinity,1e300,250,1.0,0", "workload"),
        ("affinity,ten,250,1.0,0", "workload"),
    ],
)
def test_profile_bad_values(tmp_path, monkeypatch, capsys, line, field):
    prof = write_profile(tmp_path / "p" / "profile.csv")
    rewrite_line(prof, 1, line)
    exp = write_experiment(tmp_path, prof)
    expect_error(tmp_path, exp, monkeypatch, capsys, "profile.csv", "line 2", field)


def test_profile_missing_grid_cell(tmp_path, monkeypatch, capsys):
    prof = write_profile(tmp_path / "p" / "profile.csv")
    lines = [line for line in profile_rows(prof) if not line.startswith("cap,30,750,")]
    prof.write_text("\n".join(lines) + "\n")
    exp = write_experiment(tmp_path, prof)
    expect_error(tmp_path, exp, monkeypatch, capsys, "profile.csv", "cap", "workload 30, 750m")


def test_profile_duplicate_row(tmp_path, monkeypatch, capsys):
    prof = write_profile(tmp_path / "p" / "profile.csv")
    lines = profile_rows(prof)
    lines.insert(5, lines[1])
    prof.write_text("\n".join(lines) + "\n")
    exp = write_experiment(tmp_path, prof)
    expect_error(tmp_path, exp, monkeypatch, capsys, "profile.csv", "line 6", "duplicate row", "first on line 2")


def test_job_task_absent_from_the_profile(tmp_path, monkeypatch, capsys):
    prof = write_profile(tmp_path / "p" / "profile.csv", tasks=THESIS_TASKS[1:])
    exp = write_experiment(tmp_path, prof)
    expect_error(tmp_path, exp, monkeypatch, capsys, "profile.csv", "affinity", "absent from the profile")


def test_profile_with_more_tasks_than_the_job_is_usable(tmp_path, monkeypatch, capsys):
    prof = write_profile(tmp_path / "p" / "profile.csv", tasks=THESIS_TASKS + ["cpu"])
    exp = write_experiment(tmp_path, prof, strategies=["mpc", "floor"])
    code, _, err = run_cli(["simulate", str(exp), "-q"], monkeypatch, capsys)
    assert code == 0, err


def write_job(tmp_path, body):
    job = tmp_path / "job.toml"
    job.write_text(body)
    return job


def test_job_without_tasks(tmp_path, synthetic_profile, monkeypatch, capsys):
    job = write_job(tmp_path, 'name = "empty"\n')
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job))
    expect_error(tmp_path, exp, monkeypatch, capsys, "job.toml", "no tasks")


def test_job_with_unknown_stressor(tmp_path, synthetic_profile, monkeypatch, capsys):
    body = (DATA / "jobs" / "thesis-8.toml").read_text().replace('stressor = "cap"', 'stressor = "capp"')
    body = body.replace("../datasets/", str(DATA / "datasets") + "/")
    job = write_job(tmp_path, body)
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job))
    expect_error(
        tmp_path, exp, monkeypatch, capsys, "job.toml", "task[3].stressor", "unknown stress-ng stressor 'capp'"
    )


def test_dataset_shorter_than_the_job(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, steps=5000)
    expect_error(tmp_path, exp, monkeypatch, capsys, "exp.toml", "field 'steps'", "test steps")


def test_a_start_past_the_dataset_names_start(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, start=99999)
    expect_error(tmp_path, exp, monkeypatch, capsys, "exp.toml", "field 'start'", "test steps")


def test_budget_below_tasks_times_min(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, cpu__budget_millicores=1500)
    expect_error(tmp_path, exp, monkeypatch, capsys, "exp.toml", "cpu.budget_millicores", "below 8 tasks x min 250m")


@pytest.mark.parametrize("field, value", [("cpu__min_millicores", 100), ("cpu__max_millicores", 2500)])
def test_levels_off_the_profile_grid(tmp_path, synthetic_profile, monkeypatch, capsys, field, value):
    exp = write_experiment(tmp_path, synthetic_profile, **{field: value})
    expect_error(tmp_path, exp, monkeypatch, capsys, "exp.toml", field.replace("__", "."), "outside the CPU range")


def test_off_grid_levels_allowed_when_clamping(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(
        tmp_path, synthetic_profile, cpu__max_millicores=2500, out_of_grid="clamp", strategies=["floor"]
    )
    code, out, err = run_cli(["simulate", str(exp), "-q"], monkeypatch, capsys)
    assert code == 0, err


def test_forecasts_shorter_than_the_horizon(tmp_path, synthetic_profile, monkeypatch, capsys):
    from bsp_planner.forecasting.files import write_forecasts

    write_forecasts(tmp_path / "fc", THESIS_TASKS, np.full((8, 60, 5), 30.0))
    exp = write_experiment(tmp_path, synthetic_profile, forecast__source=str(tmp_path / "fc"))
    expect_error(tmp_path, exp, monkeypatch, capsys, "affinity.csv", "line 1", "cover 5 steps ahead", "horizon is 20")


def test_forecasts_of_the_wrong_shape(tmp_path, synthetic_profile, monkeypatch, capsys):
    from bsp_planner.forecasting.files import write_forecasts

    write_forecasts(tmp_path / "fc", THESIS_TASKS, np.full((8, 30, 20), 30.0))  # 30 rows, 60 steps needed
    exp = write_experiment(tmp_path, synthetic_profile, forecast__source=str(tmp_path / "fc"))
    expect_error(tmp_path, exp, monkeypatch, capsys, "affinity.csv", "30 forecast rows")
    (tmp_path / "fc" / "cap.csv").write_text("h0,h1\n1,2,3\n")
    write_forecasts(tmp_path / "fc", THESIS_TASKS[:3], np.full((3, 60, 20), 30.0))
    expect_error(tmp_path, exp, monkeypatch, capsys, "cap.csv")


def test_unknown_setting_and_bad_override(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, budgett=3)
    expect_error(tmp_path, exp, monkeypatch, capsys, "exp.toml", "field 'budgett'", "unknown setting")
    exp = write_experiment(tmp_path, synthetic_profile)
    expect_error(tmp_path, exp, monkeypatch, capsys, "field 'steps'", "expected int", extra=("--set", "steps=many"))
    expect_error(tmp_path, exp, monkeypatch, capsys, "unknown strategy 'magic'", extra=("--strategies", "mpc,magic"))


def test_bad_input_leaves_earlier_results_intact(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["floor"])
    assert run_cli(["simulate", str(exp), "-q"], monkeypatch, capsys)[0] == 0
    before = (tmp_path / "out" / "comparison.json").read_text()
    code, _, err = run_cli(["simulate", str(exp), "-q", "--set", "cpu.budget_millicores=10"], monkeypatch, capsys)
    assert code == 2 and "budget" in err
    assert (tmp_path / "out" / "comparison.json").read_text() == before

"""Issue 16's non-runtime cases: every bad input refused cleanly (exit 2, file/flag and field named),
results never clobbered, and the suspicious-but-usable ones warned about."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from bsp_planner import cli
from bsp_planner.core.errors import InputError, InputWarning
from bsp_planner.forecasting.files import write_trace
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.profiles import load_profile, metadata_path

from cli_run import run_cli
from synthetic import DATA, THESIS_TASKS, write_experiment, write_profile

FAST = ["-q", "--steps", "5", "--strategies", "mpc,floor", "--mode", "perfect"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def experiment(tmp_path, synthetic_profile):
    return write_experiment(tmp_path, synthetic_profile, strategies=["mpc", "floor"], modes=["perfect"], steps=5)


@pytest.fixture
def earlier(tmp_path, experiment, monkeypatch, capsys):
    """A folder of results from an earlier good run, and its bytes."""
    code, _, err = run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)
    assert code == 0, err
    return tmp_path / "out", snapshot(tmp_path / "out")


# -- numbers: NaN and infinity are refused at every boundary ----------------------------------------
@pytest.mark.parametrize(
    "args, needles",
    [
        (["--budget", "inf"], ["--budget", "cpu.budget_millicores", "finite"]),
        (["--set", "cpu.budget_millicores=nan"], ["--set", "cpu.budget_millicores", "finite"]),
        (["--penalty", "nan"], ["--penalty", "penalty_s", "finite"]),
        (["--penalty", "-1"], ["--penalty", "penalty_s", ">= 0"]),
        (["--set", "planner.discount=inf"], ["--set", "planner.discount"]),
        (["--steps", "0"], ["--steps", "field 'steps'", ">= 1"]),
        (["--set", "forecast.online_min_history_steps=3"], ["--set", "forecast.online_min_history_steps", ">= 4"]),
        (
            ["--set", "forecast.online_trend_min_history_steps=2"],
            ["--set", "forecast.online_trend_min_history_steps", ">= 3"],
        ),
        (["--set", "forecast.online_refit_every_steps=0"], ["--set", "forecast.online_refit_every_steps", ">= 1"]),
        (["--set", "forecast.online_select_window_steps=x"], ["--set", "forecast.online_select_window_steps"]),
        (["--set", "forecast.online_fit_window_steps=2.5"], ["--set", "forecast.online_fit_window_steps"]),
        (["--set", "planner.decide_ahead=yes"], ["--set", "planner.decide_ahead", "true or false"]),
        (["--set", "planner.decide_ahead=1"], ["--set", "planner.decide_ahead"]),
    ],
)
def test_non_finite_and_out_of_range_flags_leave_earlier_results_intact(
    args, needles, earlier, experiment, monkeypatch, capsys
):
    out, before = earlier
    code, _, err = run_cli(["simulate", experiment, "-q", *args], monkeypatch, capsys)
    assert code == 2, err
    for n in needles:
        assert n in err, err
    assert snapshot(out) == before


def test_a_bad_online_forecast_setting_in_the_file_names_the_file_and_field(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile)
    exp.write_text(exp.read_text().replace("[forecast]", "[forecast]\nonline_refit_every_steps = -2", 1))
    code, out, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "exp.toml" in err and "forecast.online_refit_every_steps" in err and ">= 1" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ['"true"', "1", '"maybe"', "[true]"])
def test_a_decision_lead_that_is_not_true_or_false_names_the_file_and_field(
    value, tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile)
    exp.write_text(exp.read_text().replace("[planner]", f"[planner]\ndecide_ahead = {value}", 1))
    code, out, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "exp.toml" in err and "planner.decide_ahead" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_nan_in_an_experiment_file_names_the_file(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile)
    exp.write_text(exp.read_text().replace("penalty_s = 1.0", "penalty_s = nan"))
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "exp.toml" in err and "penalty_s" in err and "finite" in err


def test_duplicated_strategy_is_refused(experiment, monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(["simulate", experiment, "-q", "--strategies", "mpc,floor,mpc"], monkeypatch, capsys)
    assert code == 2 and "'mpc' is listed more than once" in err and "strategies" in err
    code, _, err = run_cli(
        ["simulate", experiment, "-q", "--mode", "perfect", "--mode", "perfect"], monkeypatch, capsys
    )
    assert code == 2 and "mode 'perfect' is listed more than once" in err and "field 'modes'" in err
    assert not (tmp_path / "out").exists()


# -- job files --------------------------------------------------------------------------------------
def write_job(tmp_path: Path, series: str, extra: str = "", tasks=("affinity",)) -> Path:
    body = ['name = "small"']
    for t in tasks:
        body += ["[[task]]", f'name = "{t}"', f'stressor = "{t}"', "ops_per_unit = 10", f"series = {series}", extra]
    job = tmp_path / "job.toml"
    job.write_text("\n".join(body) + "\n")
    return job


NYC = str(DATA / "datasets" / "nyc_taxi.csv")


def test_unknown_key_in_a_task_table_is_refused(tmp_path):
    job = write_job(tmp_path, f'{{ file = "{NYC}" }}', extra="worker = 1")
    with pytest.raises(InputError) as err:
        load_job(job)
    assert "job.toml" in str(err.value) and "task[0].worker" in str(err.value) and "workers" in str(err.value)


def test_unknown_key_in_a_series_table_is_refused(tmp_path):
    job = write_job(tmp_path, f'{{ file = "{NYC}", first = 3 }}')
    with pytest.raises(InputError, match=r"task\[0\]\.series\.first"):
        load_job(job)


@pytest.mark.parametrize(
    "series, needles",
    [
        (f'{{ file = "{NYC}", first_row = 100000 }}', ["nyc_taxi.csv", "first_row", "starts at row 100000"]),
        (f'{{ file = "{NYC}", first_row = 5, last_row = 5 }}', ["nyc_taxi.csv", "1 row(s)", "at least 4"]),
        (f'{{ file = "{NYC}", first_row = -1 }}', ["job.toml", "task[0].series.first_row", ">= 0"]),
    ],
)
def test_job_slices_beyond_the_file_or_too_short(series, needles, tmp_path, synthetic_profile, monkeypatch, capsys):
    job = write_job(tmp_path, series)
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), steps=5)
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("forecaster, rows", [("seasonal-naive", 100), ("persistence", 30)])
def test_series_shorter_than_a_baseline_needs(forecaster, rows, tmp_path, synthetic_profile, monkeypatch, capsys):
    job = write_job(tmp_path, f'{{ file = "{NYC}", first_row = 0, last_row = {rows - 1} }}')
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), steps=10, strategies=["mpc", "floor"])
    code, _, err = run_cli(
        ["simulate", exp, "-q", "--forecasts", forecaster, "--mode", "forecast"], monkeypatch, capsys
    )
    assert code == 2, err
    assert "nyc_taxi.csv" in err and "forecast.horizon" in err and f"the {forecaster} forecaster needs" in err


# -- profiles ---------------------------------------------------------------------------------------
def test_truncated_profile_metadata(experiment, synthetic_profile, monkeypatch, capsys):
    metadata_path(synthetic_profile).write_text('{"format": 1, "tasks": {"affin')
    code, _, err = run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)
    assert code == 2 and "profile.meta.json" in err and "not readable JSON" in err


def test_simulate_refuses_a_job_the_profile_did_not_time(experiment, synthetic_profile, monkeypatch, capsys):
    job = load_job(DATA / "jobs" / "thesis-8.toml")
    tasks = {t.name: {"stressor": t.stressor, "ops_per_unit": t.ops_per_unit, "workers": t.workers} for t in job.tasks}
    metadata_path(synthetic_profile).write_text(json.dumps({"tasks": tasks}))
    assert run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)[0] == 0  # the same job: fine
    tasks["cap"]["ops_per_unit"] = 1.0
    metadata_path(synthetic_profile).write_text(json.dumps({"tasks": tasks}))
    code, _, err = run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)
    assert code == 2 and "thesis-8.toml" in err and "task[3].ops_per_unit" in err and "ops_per_unit=1.0" in err


def test_grossly_non_monotone_profile_warns(tmp_path, monkeypatch, capsys):
    prof = write_profile(tmp_path / "p" / "profile.csv")
    lines = prof.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("cap,30,2000,"))
    task, w, c, d, r = lines[i].split(",")
    lines[i] = ",".join([task, w, c, f"{float(d) * 40:.5f}", r])  # 10x+ slower with the most CPU
    prof.write_text("\n".join(lines) + "\n")
    with pytest.warns(InputWarning, match=r"task 'cap' at workload 30 .* slower with more CPU"):
        load_profile(prof)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_profile(write_profile(tmp_path / "q" / "profile.csv"))  # 3% noise: no warning
    exp = write_experiment(tmp_path, prof, strategies=["floor"], modes=["perfect"], steps=5)
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 0 and "warning:" in err and "task 'cap'" in err


def test_appending_another_job_or_grid_warns_and_keeps_the_metadata(tmp_path):
    from bsp_planner.inputs.job import Job, SeriesRef, Task
    from bsp_planner.profiling.local import RunResult
    from bsp_planner.profiling.runner import Grid, run_grid

    class Fake:
        name = "fake"

        def check(self, tasks, job_path=None):
            pass

        def info(self):
            return {"backend": self.name}

        def run(self, task, workload, cpu, timeout_s):
            return RunResult(0.01 * workload * 1000 / cpu)

    def job(name, task):
        return Job(name=name, tasks=(Task(task, "cpu", 100.0, SeriesRef(Path("x.csv")), 1),), path=Path(f"{name}.toml"))

    out = tmp_path / "profile.csv"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_grid(job("first", "a"), out, Grid((500, 1000), (10, 20), 1), Fake(), progress=False)
        run_grid(job("first", "a"), out, Grid((500, 1000), (10, 20), 2), Fake(), progress=False)  # resume: silent
    with pytest.warns(InputWarning, match="measured for job 'first'; appending rows of job 'second'"):
        run_grid(job("second", "b"), out, Grid((500, 1000), (10, 20), 1), Fake(), progress=False)
    meta = json.loads(metadata_path(out).read_text())
    assert meta["job"]["name"] == "first" and [j["name"] for j in meta["jobs"]] == ["first", "second"]
    with pytest.warns(InputWarning, match="another grid"):
        run_grid(job("first", "a"), out, Grid((500, 1500), (10, 20), 1), Fake(), progress=False)


# -- replayed traces --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, needle", [(-3.0, "expected a workload >= 0"), (70.0, "inside the profile's grid [10, 50]")]
)
def test_replayed_workloads_negative_or_off_the_grid(value, needle, tmp_path, experiment, monkeypatch, capsys):
    w = np.full((len(THESIS_TASKS), 5), 30.0)
    w[2, 3] = value
    write_trace(tmp_path / "trace", THESIS_TASKS, w)
    code, _, err = run_cli(["simulate", experiment, "-q", "--actual", tmp_path / "trace"], monkeypatch, capsys)
    assert code == 2 and "bsearch.csv" in err and "line 5" in err and needle in err, err
    if value > 0:  # extrapolation allowed: the same trace is simulated (clipped to the workload range)
        code, _, err = run_cli(
            ["simulate", experiment, "-q", "--actual", tmp_path / "trace", "--set", "out_of_grid=clamp"],
            monkeypatch,
            capsys,
        )
        assert code == 0, err


# -- output locations, checked before any work ------------------------------------------------------
@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the simulation starts: output problems must be found before."""
    import bsp_planner.simulate.scenario as scenario

    def boom(exp):
        raise AssertionError("the simulation started before the output location was checked")

    monkeypatch.setattr(scenario, "build_scenario", boom)


def test_out_naming_a_file_a_path_under_a_file_or_an_unwritable_place(
    tmp_path, experiment, no_work, monkeypatch, capsys
):
    a_file = tmp_path / "results.txt"
    a_file.write_text("keep me")
    for out, needle in (
        (a_file, "existing file"),
        (a_file / "sub", "is a file, not a folder"),
        (Path("/proc/bsp-planner-test/out"), "cannot write into /proc"),
    ):
        code, _, err = run_cli(["simulate", experiment, "-q", "--out", out], monkeypatch, capsys)
        assert code == 2 and str(out) in err and "--out" in err and needle in err, err
    assert a_file.read_text() == "keep me"


def test_experiment_output_naming_a_file(tmp_path, synthetic_profile, no_work, monkeypatch, capsys):
    (tmp_path / "taken").write_text("x")
    exp = write_experiment(tmp_path, synthetic_profile, output=str(tmp_path / "taken"))
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "field 'output'" in err and "existing file" in err


def test_profile_run_out_under_a_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("x")
    code, _, err = run_cli(
        [
            "profile",
            "run",
            "--job",
            DATA / "jobs" / "thesis-8.toml",
            "--out",
            tmp_path / "f" / "profile.csv",
            "--repeats",
            "1",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "--out" in err and "is a file, not a folder" in err, err


# -- results are published together, only after everything succeeded ------------------------------
def test_a_crash_while_writing_results_leaves_the_folder_byte_identical(earlier, experiment, monkeypatch, capsys):
    import bsp_planner.simulate.report as report

    out, before = earlier

    def broken_chart(*a, **k):
        raise RuntimeError("chart failed")

    monkeypatch.setattr(report, "bar_chart", broken_chart)
    monkeypatch.setattr(sys, "argv", ["bsp-planner", "simulate", str(experiment), "-q", "--penalty", "5"])
    with pytest.raises(RuntimeError, match="chart failed"):
        cli.main()
    assert snapshot(out) == before
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".out.staging")] == []


def test_a_new_output_folder_appears_whole(tmp_path, experiment, monkeypatch, capsys):
    code, _, err = run_cli(["simulate", experiment, "-q", "--out", tmp_path / "new" / "deep"], monkeypatch, capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "new" / "deep").iterdir()) == [
        "comparison.csv",
        "comparison.json",
        "comparison.md",
        "comparison.png",
        "steps.csv",
    ]


def test_forecaster_settings_from_the_command_line_are_checked_before_any_work(monkeypatch, capsys):
    code, out, err = run_cli(["forecast", "train", "-f", "lstm", "--set", "units=abc"], monkeypatch, capsys)
    assert code == 2 and "field 'lstm.units'" in err and "expected int" in err and "--set" in err
    assert "training" not in out + err
    code, _, err = run_cli(["forecast", "train", "-f", "lstm", "--set", "lstm.val_fraction=nan"], monkeypatch, capsys)
    assert code == 2 and "lstm.val_fraction" in err and "finite" in err
    code, _, err = run_cli(
        ["forecast", "evaluate", "-f", "persistence", "--set", "persistence.x=1"], monkeypatch, capsys
    )
    assert code == 2 and "takes no settings" in err


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--start", "-1"], ["field 'start'", ">= 0", "--start"]),
        (["--steps", "0"], ["field 'steps'", ">= 1", "--steps"]),
    ],
)
def test_forecast_predict_refuses_a_bad_start_or_steps_first(args, needles, tmp_path, monkeypatch, capsys):
    """Refused naming the flag, in one line, before the series are read (no gap filling reported) or a file made."""
    out_dir = tmp_path / "forecasts"
    code, out, err = run_cli(["forecast", "predict", *args, "-o", out_dir], monkeypatch, capsys)
    assert code == 2 and all(n in err for n in needles), err
    assert "gaps" not in out + err and err.count("error") == 1 and not out_dir.exists()


# -- live runs: refused before ZooKeeper is reached and before the run folder is made -----------------
UNREACHABLE = ["--zookeeper", "127.0.0.1:1", "--zk-wait", "1", "-q"]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--barrier", "X"], ["field '--barrier'", "expected one of double, counting, got 'X'"]),
        (["--mode", "sometimes"], ["field '--mode'", "expected one of perfect, forecast"]),
        (["--cpu-weight", "max"], ["field '--cpu-weight'", "expected one of guaranteed, workers"]),
        (["--backend", "cloud"], ["field '--backend'", "expected one of local, kubernetes, k8s"]),
        (["--step-timeout", "nan"], ["field '--step-timeout'", "positive, finite number of seconds"]),
        (["--step-timeout", "1e300"], ["field '--step-timeout'", "expected a number <= 604800"]),
        (["--zk-wait", "nan"], ["field '--zk-wait'", "finite"]),
        (["--zk-wait", "1e300"], ["field '--zk-wait'", "expected a number <= 604800"]),
        (["--session-timeout", "0"], ["field '--session-timeout'", "expected a number > 0"]),
        (["--session-timeout", "1e300"], ["field '--session-timeout'", "expected a number <= 3600"]),
        (["--planner", "bogus"], ["field '--planner'", "unknown strategy 'bogus'"]),
        (["--planner", "dp", "--online"], ["field '--planner'", "plans the whole job before the first step"]),
        (["--steps", "0"], ["--steps", "field 'steps'", ">= 1"]),
        (["--set", "nope=1"], ["--set", "unknown setting"]),
        (["--steps", "1000000000"], ["field '--steps'", "has 1000 test steps", "start + steps = 1000000000"]),
        (["--set", "start=999"], ["field '--set'", "start + steps = 1019"]),
        (["--backend", "kubernetes", "--pending-timeout", "nan"], ["field '--pending-timeout'", "positive, finite"]),
        (["--pending-timeout", "-1"], ["field '--pending-timeout'", "positive, finite"]),  # the local backend too
        (["--cfs-period-us", "1e308"], ["'--cfs-period-us'"]),
    ],
)
def test_a_bad_run_option_is_refused_naming_it_before_anything_is_made(args, needles, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    code, _, err = run_cli(["run", "--runs-dir", runs, *UNREACHABLE, *args], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not runs.exists(), "nothing made for a refused run"


def test_run_files_that_are_missing_or_of_the_wrong_kind(tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    runs = tmp_path / "runs"
    for args, needles in (
        (["--job", tmp_path / "nope.toml"], ["nope.toml", "job file not found"]),
        (["--job", tmp_path / "a-folder"], ["a-folder", "expected a job file, this is a folder"]),
        (["--zk-auth-file", tmp_path / "nope"], ["field '--zk-auth-file'", "not found; expected a file"]),
        (["--zk-auth-file", tmp_path / "a-folder"], ["field '--zk-auth-file'", "a folder; expected a file"]),
    ):
        code, _, err = run_cli(["run", "--runs-dir", runs, *UNREACHABLE, *args], monkeypatch, capsys)
        assert code == 2 and all(n in err for n in needles), err
        assert not runs.exists()
    code, _, err = run_cli(["run", "--runs-dir", tmp_path / "a-file", *UNREACHABLE], monkeypatch, capsys)
    assert code == 2 and "field '--runs-dir'" in err and "existing file" in err, err


# -- profile run's process options: bounded, so that a typo cannot start a profile that never ends -----
@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("--warmup-steps", "-1", "expected a number >= 0"),
        ("--warmup-steps", "1000000000", "expected a number <= 10000"),
        ("--measure-steps", "0", "expected a number >= 1"),
        ("--measure-steps", "1000000000", "expected a number <= 10000"),
        ("--min-measure-s", "-1", "expected a number >= 0"),
        ("--min-measure-s", "nan", "finite"),
        ("--min-measure-s", "1e9", "expected a number <= 3600"),
    ],
)
def test_profile_run_process_options_out_of_range(option, value, needle, tmp_path, monkeypatch, capsys):
    out = tmp_path / "p" / "profile.csv"
    args = ["profile", "run", "--job", DATA / "jobs" / "particles-3.toml", "--out", out, "--repeats", "1"]
    code, _, err = run_cli([*args, "--cpu", "500,1000", "--workloads", "10,20", option, value], monkeypatch, capsys)
    assert code == 2 and f"field '{option}'" in err and needle in err, err
    assert not out.parent.exists()


# -- forecast: --horizon 0 is refused, never taken for "not given" ------------------------------------
@pytest.mark.parametrize("command", ["train", "evaluate", "predict"])
def test_forecast_horizon_zero_or_negative_is_refused(command, tmp_path, monkeypatch, capsys):
    from bsp_planner.forecasting.pipeline import DEFAULT_MODEL_ROOT

    shipped = snapshot(DEFAULT_MODEL_ROOT)
    extra = ["--shipped"] if command == "train" else []
    for value in ("0", "-1"):
        code, out, err = run_cli(["forecast", command, "-H", value, *extra], monkeypatch, capsys)
        assert code == 2 and "--horizon" in err and "expected a number >= 1" in err, err
        assert "training" not in out + err
    assert snapshot(DEFAULT_MODEL_ROOT) == shipped, "the shipped models are untouched"


def test_forecast_train_refuses_a_forecaster_with_nothing_to_train_first(monkeypatch, capsys):
    code, out, err = run_cli(["forecast", "train", "--shipped", "-f", "persistence"], monkeypatch, capsys)
    assert code == 2 and "field '--forecaster'" in err and "nothing to train" in err
    assert "gaps" not in out, "refused before any series was read"


# -- issue 24: what was silently accepted, and messages that did not say what was wrong -------------
@pytest.mark.parametrize("line, field", [('steps = "5"', "steps"), ('online = "true"', "online")])
def test_a_quoted_number_or_boolean_in_a_settings_file_is_refused(line, field, experiment, monkeypatch, capsys):
    key = line.split(" ")[0]
    text = "\n".join(ln for ln in experiment.read_text().splitlines() if not ln.startswith(f"{key} "))
    experiment.write_text(f"{line}\n{text}\n")
    code, _, err = run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)
    assert code == 2 and f"field '{field}'" in err and "without quotes" in err, err
    # the same text from the command line is parsed: a flag is always text
    experiment.write_text(text + "\n")
    code, _, err = run_cli(
        ["simulate", experiment, "-q", "--set", f"{line.replace(' ', '').replace(chr(34), '')}"], monkeypatch, capsys
    )
    assert code == 0, err


@pytest.mark.parametrize("name", ["../../x", "a/b", "", ".hidden", "with space"])
def test_a_task_name_that_is_not_a_plain_name_is_refused_where_the_job_is_read(name, tmp_path):
    series = DATA / "datasets" / "nyc_taxi.csv"
    path = tmp_path / "job.toml"
    path.write_text(
        f'[[task]]\nname = "{name}"\nstressor = "cpu"\nops_per_unit = 1\nseries = {{ file = "{series}" }}\n'
    )
    with pytest.raises(InputError, match=r"task\[0\]\.name") as exc:
        load_job(path)
    assert "expected a task name" in str(exc.value)


def test_a_job_without_tasks_prints_its_task_table_as_written(tmp_path, experiment, monkeypatch, capsys):
    job = tmp_path / "empty-job.toml"
    job.write_text('name = "nothing"\n')
    code, _, err = run_cli(["simulate", experiment, "-q", "--set", f"job={job}"], monkeypatch, capsys)
    assert code == 2 and "[[task]]" in err, err  # not eaten as Rich markup


def test_an_experiment_with_a_byte_order_mark_is_read(experiment, monkeypatch, capsys):
    experiment.write_bytes(b"\xef\xbb\xbf" + experiment.read_bytes())
    code, _, err = run_cli(["simulate", experiment, "-q"], monkeypatch, capsys)
    assert code == 0, err


def test_a_series_and_a_profile_with_a_byte_order_mark_are_read(tmp_path, synthetic_profile):
    from bsp_planner.inputs.series import read_series_csv

    synthetic_profile.write_bytes(b"\xef\xbb\xbf" + synthetic_profile.read_bytes())
    assert load_profile(synthetic_profile).tasks
    series = tmp_path / "s.csv"
    series.write_bytes(b"\xef\xbb\xbf" + (DATA / "datasets" / "nyc_taxi.csv").read_bytes())
    assert len(read_series_csv(series)[1]) > 100


def test_an_empty_experiment_says_it_is_empty(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    code, _, err = run_cli(["simulate", empty, "-q"], monkeypatch, capsys)
    assert code == 2 and "empty" in err and "job" in err and "max_millicores" not in err, err


def test_an_experiment_that_is_a_folder_or_a_symlink_loop_says_so(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "exp.toml"
    folder.mkdir()
    code, _, err = run_cli(["simulate", folder, "-q"], monkeypatch, capsys)
    assert code == 2 and "this is a folder" in err and "not found" not in err, err
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    code, _, err = run_cli(["simulate", loop, "-q"], monkeypatch, capsys)
    assert code == 2 and "loop" in err and "not found" not in err, err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-s", "mpc,mpc"], "(from --strategies mpc,mpc)"),
        (["--set", "workload_range=50,10"], "(from --set workload_range=50,10)"),
        (["--budget", "100"], "(from --budget 100"),
    ],
)
def test_a_value_given_by_a_flag_is_blamed_on_the_flag_not_the_file(args, needle, experiment, monkeypatch, capsys):
    code, _, err = run_cli(["simulate", experiment, "-q", *args], monkeypatch, capsys)
    assert code == 2 and needle in err and str(experiment) not in err, err


def _forecast_files(folder: Path, value: float) -> Path:
    import csv

    folder.mkdir(parents=True)
    for t in THESIS_TASKS:
        with (folder / f"{t}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([f"h{h}" for h in range(20)])
            w.writerows([[value] * 20 for _ in range(400)])
    return folder


def test_a_relative_forecasts_folder_is_read_from_the_working_directory(tmp_path, experiment, monkeypatch, capsys):
    _forecast_files(tmp_path / "elsewhere" / "fc", 30.0)  # a folder the experiment's folder has not
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = run_cli(
        ["simulate", experiment, "-q", "--mode", "forecast", "--forecasts", "fc", "--steps", "5"], monkeypatch, capsys
    )
    assert code == 0, err


def test_forecasts_far_outside_the_workload_range_are_warned_about(tmp_path, experiment, monkeypatch, capsys):
    folder = _forecast_files(tmp_path / "fc", 3000.0)  # x100 the range's values
    code, _, err = run_cli(
        ["simulate", experiment, "-q", "--mode", "forecast", "--forecasts", folder, "--steps", "5"], monkeypatch, capsys
    )
    assert code == 0, err
    assert "far outside the workload range" in err


def test_an_extreme_value_in_a_training_half_is_warned_about(tmp_path):
    from bsp_planner.inputs.series import WorkloadScaler

    train = np.linspace(100.0, 200.0, 500)
    train[42] = 1e300
    with pytest.warns(InputWarning, match="far outside the others"):
        scaler = WorkloadScaler.fit(train, 10, 50, source=tmp_path / "s.csv")
    assert np.all(scaler.transform(np.delete(train, 42)) == 10.0)  # what the warning is about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WorkloadScaler.fit(np.linspace(100.0, 200.0, 500), 10, 50)  # an ordinary series: quiet


def test_profile_metadata_that_is_a_folder_is_refused(synthetic_profile, monkeypatch, capsys):
    meta = metadata_path(synthetic_profile)
    if meta.exists():
        meta.unlink()
    meta.mkdir()
    with pytest.raises(InputError, match="this is a folder"):
        load_profile(synthetic_profile)


def test_a_huge_inversion_warning_prints_a_short_ratio(tmp_path):
    from bsp_planner.inputs.profiles import TaskProfile, warn_non_monotone

    d = np.array([[1.0, 1e300], [1.0, 0.5]])
    p = TaskProfile("t", np.array([10.0, 20.0]), np.array([250.0, 500.0]), d, repeats=1)
    with pytest.warns(InputWarning) as rec:
        warn_non_monotone({"t": p}, tmp_path / "p.csv")
    assert len(str(rec[0].message)) < 300


def test_profile_run_refuses_levels_above_the_machines_cpus_whatever_their_number(tmp_path, monkeypatch, capsys):
    import os

    cores = len(os.sched_getaffinity(0))
    big = cores * 1000 + 1000
    for levels in (f"500,{big}", f"{big},{big + 1000}"):
        code, _, err = run_cli(
            ["profile", "run", "--out", tmp_path / "p.csv", "--cpu", levels, "--workloads", "10,20"],
            monkeypatch,
            capsys,
        )
        assert code == 2 and "--cpu" in err and "more CPU than this machine has" in err, err
    assert not (tmp_path / "p.csv").exists()


def _run_json(tmp_path: Path, experiment: Path) -> Path:
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    settings = {"experiment": str(experiment), "planner": "mpc", "mode": "perfect"}
    (runs / "r1" / "run.json").write_text(json.dumps({"status": "interrupted", "settings": settings}))
    (runs / "r1" / "zk-auth").write_text("bsp:secret\n")
    (runs / "r1" / "zk-auth").chmod(0o600)
    return runs


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--planner", "exppo"], "--planner mpc"),
        (["--mode", "forecast"], "--mode perfect"),
        (["--steps", "9"], "--steps"),
        (["--set", "penalty_s=3"], "--set"),
    ],
)
def test_resume_refuses_options_that_would_change_the_run(
    args, needle, tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(
        tmp_path, synthetic_profile, strategies=["mpc"], modes=["perfect"], cpu__budget_millicores=2000
    )
    runs = _run_json(tmp_path, exp)
    code, _, err = run_cli(["run", "--resume", "r1", "--runs-dir", runs, *args], monkeypatch, capsys)
    assert code == 2 and "resumed run keeps its own settings" in err and needle in err, err


def test_a_worker_join_error_names_its_options_not_the_task_environment():
    from bsp_planner.runtime.worker import _as_worker_options
    from bsp_planner.task import TaskJoinError

    exc = TaskJoinError("no run at /r in ZooKeeper h:1 ($BSP_RUN_ID=None)", field="BSP_RUN_ID")
    text = _as_worker_options(exc)
    assert "--root" in text and "BSP_RUN_ID" not in text


def test_a_profile_with_rows_its_metadata_grid_never_listed_is_warned_about(synthetic_profile):
    meta = metadata_path(synthetic_profile)
    loaded = load_profile(synthetic_profile)
    cpus = sorted({float(c) for p in loaded.tasks.values() for c in p.cpu_millicores})
    workloads = sorted({float(w) for p in loaded.tasks.values() for w in p.workloads})
    meta.write_text(json.dumps({"grid": {"cpu_millicores": cpus[:-1], "workloads": workloads}}))
    with pytest.warns(InputWarning, match=f"has rows at {cpus[-1]:g}"):
        load_profile(synthetic_profile)
    meta.write_text(json.dumps({"grid": {"cpu_millicores": cpus, "workloads": workloads}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_profile(synthetic_profile)  # a grid that lists every level: quiet


@pytest.mark.parametrize(
    "lines, field, needle",
    [
        ({"b": 'after = ["zz"]'}, "task[1].after", "'zz', no task of the job"),
        ({"a": 'after = ["a"]'}, "task[0].after", "waits for itself"),
        ({"a": 'after = ["b"]', "b": 'after = ["a"]'}, "task[0].after", "cycle (a waits for b waits for a)"),
        ({"a": 'after = "b"'}, "task[0].after", "list of str"),
        ({"a": "after = [1]"}, "task[0].after", "str"),
        ({"a": "min_millicores = 0"}, "task[0].min_millicores", "> 0"),
        ({"a": 'max_millicores = "1000"'}, "task[0].max_millicores", "without quotes"),
        ({"a": "min_millicores = 2000\nmax_millicores = 1000"}, "task[0].min_millicores", "min_millicores <="),
    ],
)
def test_bad_step_structure_or_cpu_bounds_in_a_job(
    lines, field, needle, tmp_path, synthetic_profile, monkeypatch, capsys
):
    body = ['name = "small"']
    for t in ("a", "b", "c"):
        body += ["[[task]]", f'name = "{t}"', 'stressor = "cpu"', "ops_per_unit = 10", f'series = {{ file = "{NYC}" }}']
        body += [lines.get(t, "")]
    job = tmp_path / "job.toml"
    job.write_text("\n".join(body) + "\n")
    with pytest.raises(InputError) as err:
        load_job(job)
    message = str(err.value)
    assert "job.toml" in message and field in message and needle in message, message
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), steps=5)
    code, _, err_text = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and field in err_text and "Traceback" not in err_text, err_text


@pytest.mark.parametrize("line", ["min_millicores = 100", "max_millicores = 3000", "max_millicores = 1025"])
def test_a_task_cpu_bound_off_the_experiment_grid(line, tmp_path, synthetic_profile, monkeypatch, capsys):
    job = write_job(tmp_path, f'{{ file = "{NYC}" }}', extra=line)
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), steps=5)
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    field = line.split(" ")[0]
    assert code == 2 and f"task[0].{field}" in err and "250 to 2000 in steps of 50" in err, err


def test_task_cpu_floors_beyond_the_budget(tmp_path, synthetic_profile, monkeypatch, capsys):
    job = write_job(tmp_path, f'{{ file = "{NYC}" }}', extra="min_millicores = 2000", tasks=THESIS_TASKS[:5])
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), steps=5)
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "task.min_millicores" in err and "10000m" in err and "8000m" in err, err


BAD_NAMES = ["../../x", "../zk-auth", "x}y", "my broker", "", ".hidden", "a/b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_service_name_outside_the_name_rule_is_refused_before_any_work(
    name, tmp_path, synthetic_profile, monkeypatch, capsys
):
    job = write_job(tmp_path, f'{{ file = "{NYC}" }}')
    job.write_text(job.read_text() + f'[[service]]\nname = "{name}"\ncommand = ["sleep", "5"]\n')
    with pytest.raises(InputError, match=r"service\[0\]\.name") as err:
        load_job(job)
    assert "job.toml" in str(err.value) and repr(name) in str(err.value)
    exp = write_experiment(tmp_path, synthetic_profile, job=str(job), strategies=["static:1"], modes=["perfect"])
    code, out, errors = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "service[0].name" in errors and "Traceback" not in errors
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["x}y", "my task", "", "../t"])
def test_a_task_name_outside_the_name_rule_is_refused(name, tmp_path):
    job = write_job(tmp_path, f'{{ file = "{NYC}" }}', tasks=(name,))
    with pytest.raises(InputError, match=r"task\[0\]\.name"):
        load_job(job)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_node_name_outside_the_name_rule_exits_2(name, tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["static:1"], modes=["perfect"])
    exp.write_text(exp.read_text() + f'\n[[node]]\nname = "{name}"\ncpu_millicores = 16000\n')
    code, _, errors = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "node[0].name" in errors and "letters, digits" in errors and "Traceback" not in errors
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../../x", "x}y", "my broker", ".a"])
def test_a_pair_profile_naming_a_task_outside_the_rule(name, tmp_path):
    from bsp_planner.inputs.pair_profiles import COLUMNS, load_pair_profile

    pairs = tmp_path / "pairs.csv"
    pairs.write_text(",".join(COLUMNS) + f'\naffinity,"{name}",1.2,1.0,1.2,3,1000,20\n')
    with pytest.raises(InputError, match="letters, digits") as err:
        load_pair_profile(pairs)
    assert err.value.line == 2 and "co_task" in str(err.value)


@pytest.mark.parametrize("run_id", ["../../x", "x}y", "my run", "", ".x"])
def test_a_run_id_outside_the_rule(run_id):
    from bsp_planner.runtime.run_store import check_run_id

    with pytest.raises(InputError, match="--run-id"):
        check_run_id(run_id)


# -- issue 32: a replayed run folder must be a whole run of numbers ----------------------------------
def write_run_folder(folder: Path, steps: int = 5, workload: float = 30.0) -> Path:
    """A live run's folder as `--actual` reads it: steps.jsonl, one record per step, every task at `workload`."""
    folder.mkdir(parents=True)
    records = [
        {"step": k, "tasks": [{"task": t, "workload": workload, "observed_workload": workload} for t in THESIS_TASKS]}
        for k in range(steps)
    ]
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def damage_run_log(folder: Path, how: str) -> None:
    path = folder / "steps.jsonl"
    lines = path.read_text().splitlines()
    if how == "missing":
        del lines[2]
        lines.append(lines[-1].replace('"step": 4', '"step": 5'))
    elif how == "twice":
        lines.insert(2, lines[1])
    else:  # a reported workload that is not a number: NaN, text, null, a boolean
        rec = json.loads(lines[3])
        rec["tasks"][1]["observed_workload"] = {"nan": float("nan"), "text": "many", "null": None, "bool": True}[how]
        lines[3] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "how, needles",
    [
        ("missing", ["line 3", "field 'step'", "expected step 2, got 3"]),
        ("twice", ["line 3", "field 'step'", "expected step 2, got 1", "logged twice"]),
        ("nan", ["line 4", "observed_workload", "expected a finite number, got nan"]),
        ("text", ["line 4", "observed_workload", "got 'many'"]),
        ("null", ["line 4", "observed_workload", "got None"]),
        ("bool", ["line 4", "observed_workload", "got True"]),
    ],
)
def test_a_replayed_run_folder_with_a_gap_a_duplicate_or_a_non_number(
    how, needles, tmp_path, experiment, monkeypatch, capsys
):
    run = write_run_folder(tmp_path / "runs" / "r1", steps=6)
    code, _, err = run_cli(["simulate", experiment, "-q", "--actual", run, "-o", tmp_path / "o1"], monkeypatch, capsys)
    assert code == 0, err  # the whole run replays
    damage_run_log(run, how)
    code, _, err = run_cli(["simulate", experiment, "-q", "--actual", run, "-o", tmp_path / "o2"], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err and "steps.jsonl" in err, err
    for n in needles:
        assert n in err, err
    assert not (tmp_path / "o2").exists()


def test_a_torn_last_line_of_a_replayed_run_is_dropped(tmp_path, experiment, monkeypatch, capsys):
    run = write_run_folder(tmp_path / "r", steps=6)
    with (run / "steps.jsonl").open("a") as fh:
        fh.write('{"step": 6, "tas')
    code, _, err = run_cli(["simulate", experiment, "-q", "--actual", run, "-o", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err


# -- issue 32: profile pairs checks its numbers and stress-ng before it makes a file -----------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workload", "inf"], "expected a positive finite workload of at most 1e+12, got inf"),
        (["--workload", "nan"], "expected a positive finite workload of at most 1e+12, got nan"),
        (["--stress-ng", "/no/such/stress-ng"], "stress-ng not found"),
    ],
)
def test_profile_pairs_refuses_before_making_any_file(args, needle, tmp_path, monkeypatch, capsys):
    out = tmp_path / "prof" / "pairs.csv"
    code, _, err = run_cli(["profile", "pairs", "--out", out, "--tasks", "affinity,atomic", *args], monkeypatch, capsys)
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "prof").exists()


@pytest.mark.parametrize("duration", ["nan", "-1", "0", "inf", "1e300"])
def test_a_pair_run_without_a_positive_duration_is_not_taken_as_measured(duration, tmp_path):
    from bsp_planner.profiling.pairs import RUN_COLUMNS, _read_runs

    runs = tmp_path / "pairs.runs.csv"
    runs.write_text(",".join(RUN_COLUMNS) + f"\natomic,,20,1000,0,0.25\natomic,affinity,20,1000,0,{duration}\n")
    with pytest.raises(InputError, match="expected a positive number of seconds") as err:
        _read_runs(runs, 20.0, 1000.0)
    assert err.value.line == 3 and "pairs.runs.csv" in str(err.value) and "duration_s" in str(err.value)


@pytest.mark.parametrize("slowdown", ["1e300", "0.001", "1000"])
def test_a_pair_slowdown_beyond_any_co_run_is_refused(slowdown, tmp_path):
    from bsp_planner.inputs.pair_profiles import COLUMNS, load_pair_profile

    pairs = tmp_path / "pairs.csv"
    pairs.write_text(
        ",".join(COLUMNS) + f"\naffinity,atomic,1.2,1.0,1.2,3,1000,20\natomic,affinity,{slowdown},1,1,3,1000,20\n"
    )
    with pytest.raises(InputError, match=r"slowdown: expected a factor in \[0.1, 100\]") as err:
        load_pair_profile(pairs)
    assert err.value.line == 3


@pytest.mark.parametrize("column, row", [("runs", "1.2,1,1,1e300,1000,20"), ("workload", "1.2,1,1,3,1000,1e300")])
def test_a_pair_profile_number_too_large_is_refused_naming_the_line(column, row, tmp_path):
    from bsp_planner.inputs.pair_profiles import COLUMNS, load_pair_profile

    pairs = tmp_path / "pairs.csv"
    pairs.write_text(",".join(COLUMNS) + f"\naffinity,atomic,1.2,1.0,1.2,3,1000,20\natomic,affinity,{row}\n")
    with pytest.raises(InputError, match=f"{column}: expected at most 1e\\+12") as err:
        load_pair_profile(pairs)
    assert err.value.line == 3


# -- issue 32: --set cannot set [[node]], in every command that takes --set ----------------------------
@pytest.mark.parametrize("command", [["simulate"], ["run"], ["rl", "evaluate"]])
@pytest.mark.parametrize("item", ["node=x", "node.cpu_millicores=4000", "node=[]"])
def test_set_node_is_refused_as_a_list_of_tables(command, item, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli([*command, "--set", item], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err and "[[node]] is a list of tables" in err, err
    assert "field 'node" in err and list(tmp_path.iterdir()) == []


# -- issue 32: forecast --set ensemble.weights reaches the ensemble asked for, one weight per member ------
def test_ensemble_weights_from_the_command_line_weigh_the_members(tmp_path, monkeypatch, capsys):
    name = "ensemble:persistence,seasonal-naive"
    rmse = {}
    for weights in ("1,0", "0,1"):
        args = ["forecast", "evaluate", "-f", name, "-f", "persistence", "-f", "seasonal-naive", "--task", "atomic"]
        code, out, err = run_cli(
            [*args, "--set", f"ensemble.weights={weights}", "--json", "-o", tmp_path / weights], monkeypatch, capsys
        )
        assert code == 0, err
        overall = json.loads(out)["overall"]  # stdout holds the JSON document only
        rmse[weights] = {k: v["mean_rmse"] for k, v in overall.items()}
    assert rmse["1,0"][name] == rmse["1,0"]["persistence"] != rmse["0,1"][name] == rmse["0,1"]["seasonal-naive"]


@pytest.mark.parametrize("forecaster, members", [("ensemble:persistence,seasonal-naive", 2), ("ensemble", 2)])
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_more_weights_than_members_are_refused_before_any_work(command, forecaster, members, monkeypatch, capsys):
    code, _, err = run_cli(
        ["forecast", command, "-f", forecaster, "--set", "ensemble.weights=1,1,1"], monkeypatch, capsys
    )
    assert code == 2 and f"expected {members} weights, one per member" in err and "got 3" in err, err
    assert "ensemble.weights" in err and "Traceback" not in err


@pytest.mark.parametrize("strategies", ["static:3,static:03", "static:2,floor,static:2.0"])
def test_one_strategy_spelt_two_ways_is_refused(strategies, experiment, monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(["simulate", experiment, "-q", "--strategies", strategies], monkeypatch, capsys)
    assert code == 2 and "is listed more than once" in err and "--strategies" in err, err
    assert not (tmp_path / "out").exists()


def test_rl_evaluate_refuses_an_unknown_strategy_before_any_forecast_work(monkeypatch, capsys):
    import bsp_planner.rl.train as train

    def boom(*args, **kwargs):
        raise AssertionError("the environment's data was built before the strategies were checked")

    monkeypatch.setattr(train, "build_data", boom)
    code, _, err = run_cli(["rl", "evaluate", "-s", "mpc,bogus"], monkeypatch, capsys)
    assert code == 2 and "unknown strategy 'bogus'" in err and "--strategies" in err and "Traceback" not in err, err


# -- issue 32: a series is one value per time, in time order -------------------------------------------
@pytest.mark.parametrize(
    "lines, needles",
    [
        (["2020-01-01 00:00:00,5", "2020-01-01 00:30:00,6", "2020-01-01 00:10:00,7"], ["line 4", "increasing order"]),
        (["2020-01-01 00:00:00,5", "2020-01-01 00:00:00,6"], ["line 3", "field 'timestamp'", "each once"]),
        (["2020-01-01 00:00:00,5,9"], ["line 2", "expected 2 columns, got 3"]),
    ],
)
def test_a_series_out_of_time_order_or_with_an_extra_column_is_refused(lines, needles, tmp_path):
    from bsp_planner.inputs.series import read_series_csv

    path = tmp_path / "s.csv"
    path.write_text("timestamp,value\n" + "\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_series_csv(path)
    for n in needles:
        assert n in str(err.value), err.value
    path.write_text("timestamp,value,extra\n2020-01-01 00:00:00,5,9\n")
    with pytest.raises(InputError, match="two columns"):
        read_series_csv(path)


# -- issue 32: what a one-pool or node experiment cannot use ---------------------------------------------
def test_reconfigure_cost_in_a_one_pool_experiment_is_warned_about_in_simulate(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["static:1"], modes=["perfect"], steps=5)
    code, _, err = run_cli(["simulate", exp, "-q", "-o", tmp_path / "o1"], monkeypatch, capsys)
    assert code == 0 and "reconfigure_cost" not in err, err
    exp.write_text(exp.read_text() + "\n[reconfigure_cost]\nin_place_s = 0.5\n")
    code, _, err = run_cli(["simulate", exp, "-q", "-o", tmp_path / "o2"], monkeypatch, capsys)
    assert code == 0 and "[reconfigure_cost] is not used by simulate in a one-pool experiment" in err, err
    assert "penalty_s (1 s)" in err and err.count("warning") == 1


def test_a_budget_above_every_nodes_cpu_together_is_refused(tmp_path, synthetic_profile, monkeypatch, capsys):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["static:1"], modes=["perfect"], steps=5)
    nodes = "".join(f'\n[[node]]\nname = "n{i}"\ncpu_millicores = 3000\n' for i in range(2))
    exp.write_text(exp.read_text() + nodes)  # 8000m budget, 6000m of nodes
    code, _, err = run_cli(["simulate", exp, "-q"], monkeypatch, capsys)
    assert code == 2 and "field 'cpu.budget_millicores'" in err and "8000m" in err and "(6000m)" in err, err
    assert not (tmp_path / "out").exists()
    code, _, err = run_cli(["simulate", exp, "-q", "--budget", "7000"], monkeypatch, capsys)
    assert code == 2 and "(from --budget 7000" in err, err
    exp.write_text(exp.read_text().replace("[cpu]", "[reconfigure_cost]\nin_place_s = 0.066\n\n[cpu]", 1))
    code, out, err = run_cli(["simulate", exp, "-q", "--budget", "6000"], monkeypatch, capsys)
    assert code == 0, err
    # the footer says what a change costs on nodes, not the penalty_s it never charges
    assert "a change in place 0.066 s, a task moved 1 s" in out and "penalty 1 s" not in out, out


# -- issue 32: placeholders bsp-planner does not know are warned about ----------------------------------
def test_an_unknown_or_unclosed_placeholder_is_warned_about(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(
        'name = "j"\n[[task]]\nname = "t"\nprocess = ["prog", "{jobdir}/x", "--port", "{PORT}", "{port:t", '
        '"{workload}", "${HOME}", "{\\"k\\": 1}", "{port:t}"]\n'
    )
    with pytest.warns(InputWarning) as caught:
        load_job(job)
    messages = [str(w.message) for w in caught if issubclass(w.category, InputWarning)]
    flagged = sorted(m.split("'")[1] for m in messages)
    assert flagged == ["{PORT}", "{jobdir}", "{port:t"], messages
    assert all("job.toml" in m and "task[0].process" in m and "reaches the program as written" in m for m in messages)


def test_the_shipped_jobs_hold_only_known_placeholders():
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        for job in sorted((DATA / "jobs").glob("*.toml")):
            load_job(job)


# -- issue 32: shipped traces and jobs by name, from any folder ------------------------------------------
def test_a_shipped_trace_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    from bsp_planner.inputs.shipped import data_dir, shipped_or_given

    monkeypatch.chdir(tmp_path)
    assert shipped_or_given(Path("particles-8"), "traces") == data_dir() / "traces" / "particles-8"
    assert shipped_or_given(Path("helics-4"), "jobs") == data_dir() / "jobs" / "helics-4.toml"
    (tmp_path / "particles-8").mkdir()  # a folder of that name here is the one meant
    assert shipped_or_given(Path("particles-8"), "traces") == Path("particles-8")
    (tmp_path / "particles-8").rmdir()
    assert shipped_or_given(Path("nope"), "traces") == Path("nope")
    args = ["simulate", "particles-8", "-q", "--mode", "perfect", "-s", "exppo", "--steps", "3"]
    code, _, err = run_cli([*args, "--actual", "particles-8", "-o", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err
    code, _, err = run_cli([*args, "--actual", "particles-3", "-o", tmp_path / "o3"], monkeypatch, capsys)
    assert code == 2 and "traces/particles-3" in err, err  # the shipped trace was read: it has other tasks


def test_the_helics_federation_without_helics_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    import importlib.util

    from bsp_planner.apps.helics import local

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "helics" else real(name, *a))
    with pytest.raises(SystemExit) as exc:
        local.main(["--federates", "2", "--steps", "2", "--out", str(tmp_path / "ring")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "the helics package is not installed" in err and "bsp-planner[cosim]" in err
    assert not (tmp_path / "ring").exists()


def test_a_warning_raised_in_every_worker_process_is_shown_once(experiment, monkeypatch, capsys):
    """The shipped agent was trained at a 0.3 s penalty; this experiment charges 1 s: one warning, not
    one per process or mode."""
    args = ["simulate", experiment, "-q", "-s", "dqn,floor", "--mode", "perfect", "--mode", "forecast", "-j", "2"]
    code, _, err = run_cli([*args, "--steps", "12"], monkeypatch, capsys)
    assert code == 0, err
    assert err.count("trained with a checkpoint penalty of 0.3 s") == 1 and "UserWarning" not in err, err


# -- issue 32: --json on the remaining commands that print a table ---------------------------------------
def test_profile_calibrate_json_is_one_document_on_stdout(monkeypatch, capsys):
    args = ["profile", "calibrate", "--tasks", "atomic", "--checks", "1", "--no-scaling", "--target-s", "0.1"]
    monkeypatch.setattr(sys, "argv", ["bsp-planner", *args, "--cpu", "1000", "--json"])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    doc = json.loads(out)  # nothing but the document
    (row,) = doc["tasks"]
    assert row["task"] == "atomic" and row["ops_per_unit"] > 0 and doc["cpu_millicores"] == 1000


@pytest.mark.slow
def test_forecast_train_json_is_one_document_on_stdout(tmp_path, monkeypatch, capsys):
    args = ["forecast", "train", "-f", "lstm", "--task", "affinity", "--set", "epochs=1", "--models", tmp_path]
    code, out, err = run_cli([*args, "--json"], monkeypatch, capsys)
    assert code == 0, err
    doc = json.loads(out)  # nothing but the document on stdout
    (row,) = doc["models"]
    assert doc["job"] == "thesis-8" and row["task"] == "affinity" and row["epochs"] == 1
    assert (tmp_path / "thesis-8" / "lstm" / "affinity.json").is_file()


# -- every number a flag takes: of the wrong type, the parser's error is one line naming the flag ------------
WRONG_TYPE = [
    (["simulate", "--steps", "nan"], "--steps"),
    (["simulate", "--jobs", "abc"], "--jobs"),
    (["simulate", "--penalty", "abc"], "--penalty"),
    (["run", "--zk-wait", "abc"], "--zk-wait"),
    (["zk", "start", "--port", "1e308"], "--port"),
    (["profile", "run", "--out", "p.csv", "--repeats", "inf"], "--repeats"),
    (["profile", "pairs", "--out", "p.csv", "--cpu", "abc"], "--cpu"),
    (["forecast", "predict", "--horizon", "2.5"], "--horizon"),
    (["rl", "train", "--seed", "x"], "--seed"),
]


@pytest.mark.parametrize("args, flag", WRONG_TYPE, ids=[" ".join(a) for a, _ in WRONG_TYPE])
def test_a_flag_value_of_the_wrong_type_is_one_line_naming_the_flag(args, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bsp-planner", *args])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert len(err.strip().splitlines()) == 1, err  # not click's usage, hint and boxed panel
    assert err.startswith("error:") and f"'{flag}'" in err and "--help" in err
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_an_unknown_option_is_one_line(tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(["simulate", "--bogus"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: No such option: --bogus") and "simulate --help" in err


# -- a number too large for any setting: refused where it is read (a file, --set, a flag) ----------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--penalty", "1e300"], "field 'penalty_s'"),
        (["--set", "cpu.budget_millicores=1e300"], "field 'cpu.budget_millicores'"),
        (["--budget", "1e308"], "cpu.budget_millicores"),
        (["--set", "planner.horizon=10000000000000"], "field 'planner.horizon'"),
    ],
)
def test_a_number_too_large_for_any_setting_is_refused(args, needle, experiment, monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(["simulate", experiment, *FAST, *args, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and needle in err and "at most 1e+12" in err, err
    assert not (tmp_path / "o").exists()


def test_a_number_too_large_in_an_experiment_file_names_the_file(tmp_path, synthetic_profile, monkeypatch, capsys):
    experiment = write_experiment(tmp_path, synthetic_profile, penalty_s=1e300, strategies=["static:1", "floor"])
    code, _, err = run_cli(["simulate", experiment, *FAST, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and experiment.name in err and "penalty_s" in err and "at most 1e+12" in err, err


# -- the profile commands' numbers: every seconds, CPU and weight flag range-checked before any file ----
PROFILE_NUMBERS = [
    (cmd, flag, value)
    for cmd in ("run", "pairs", "calibrate")
    for flag, values in (
        ("--timeout", ["nan", "inf", "-1", "0", "1e308"]),
        ("--cpu-shares", ["-1", "1", "262145"]),
    )
    for value in values
] + [
    ("run", "--startup-timeout", "nan"),
    ("run", "--startup-timeout", "1e9"),
    ("run", "--parallel", "0"),
    ("run", "--workloads", "10,1e308"),
    ("run", "--cfs-period-us", "0"),
    ("pairs", "--cfs-period-us", "-1"),
    ("pairs", "--workload", "1e308"),
    ("calibrate", "--workload", "inf"),
    ("run", "--parallel", "-1"),
    ("pairs", "--cpu", "nan"),
    ("pairs", "--cpu", "-1"),
    ("pairs", "--cpu", "1e308"),
    ("calibrate", "--cpu", "1e308"),
    ("calibrate", "--cpu", "0"),
    ("calibrate", "--target-s", "inf"),
    ("calibrate", "--target-s", "1e308"),
]


@pytest.mark.parametrize("command, flag, value", PROFILE_NUMBERS)
def test_a_profile_number_out_of_range_is_refused_naming_its_flag(command, flag, value, tmp_path, monkeypatch, capsys):
    out = tmp_path / "p" / "profile.csv"
    where = [] if command == "calibrate" else ["--out", out]
    code, _, err = run_cli(["profile", command, *where, flag, value], monkeypatch, capsys)
    assert code == 2 and f"field '{flag}'" in err and "Traceback" not in err, err
    assert not out.parent.exists()
    assert list(tmp_path.iterdir()) == []

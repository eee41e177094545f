"""Online forecasting: forecasts made before every step from the history observed so far agree with
the offline forecast matrix where they must, and `simulate --online` reads no forecast file."""

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.forecasting.provider import forecast_matrix
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.series import load_job_series
from bsp_planner.simulate.online import OnlineForecasts, online_forecasts
from bsp_planner.simulate.runs import run_strategy
from bsp_planner.simulate.scenario import build_scenario

from cli_run import run_cli
from synthetic import DATA, write_experiment

JOB = DATA / "jobs" / "thesis-8.toml"


def step_by_step(online, workloads):
    """(tasks, steps, H): forecast before each step, then observe what the step ran."""
    rows = []
    for t in range(workloads.shape[1]):
        rows.append(online.forecast())
        online.observe(workloads[:, t])
    return np.stack(rows, axis=1)


@pytest.mark.parametrize("name", ["persistence", "seasonal-naive"])
@pytest.mark.parametrize("start", [0, 37])
def test_baselines_online_equal_their_offline_matrix_exactly(name, start):
    js = load_job_series(load_job(JOB))
    steps, h = 60, 20
    offline, _ = forecast_matrix(name, js, start, steps, h)
    online = step_by_step(online_forecasts(name, js, start, h), js.workloads(start, steps))
    assert np.array_equal(online, offline)


def test_online_forecasts_follow_what_was_observed_not_the_series():
    js = load_job_series(load_job(JOB))
    online = online_forecasts("persistence", js, 0, 5)
    online.observe(np.full(8, 33.0))
    assert np.array_equal(online.forecast(), np.full((8, 5), 33.0))
    # a fresh copy starts from the seed history again
    again = online.fresh()
    assert np.array_equal(
        again.forecast()[:, 0], np.array([js.history_workloads(i)[s.n_train - 1] for i, s in enumerate(js.series)])
    )


def test_lstm_online_equals_offline_predictions_from_the_same_history():
    pytest.importorskip("tensorflow")
    js = load_job_series(load_job(JOB))
    # memcpy's series has a gap in its timestamps between test steps 275 and 276 (filled on the grid):
    # forecasts made before, across and after it
    steps, h, start = 6, 20, 272
    online = online_forecasts("lstm", js, start, h, base_dir=DATA / "experiments", job=load_job(JOB))
    got = step_by_step(online, js.workloads(start, steps))
    # offline: the same fitted models asked for all origins at once on the whole series
    from bsp_planner.forecasting.pipeline import Workspace
    from bsp_planner.inputs.job import Job

    ws = Workspace.from_series(Job(name="thesis-8", tasks=()), js, gaps="fill", horizon=h)
    for i, p in enumerate(ws.prepared):
        f = online._histories[i].forecaster
        want = p.predict_rows_median(f, p.n_train + start + np.arange(steps))
        assert np.array_equal(got[i], want), p.task


def test_online_simulation_equals_offline_for_an_exact_forecaster(tmp_path, synthetic_profile):
    common = {"steps": 50, "modes": ["forecast"], "strategies": ["exppo", "static:3", "mpc", "floor"]}
    offline = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, **common)))
    online = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, online=True, **common)))
    assert online.forecast_label["forecast"] == "seasonal-naive (online)"
    for s in common["strategies"]:
        a, b = run_strategy(offline, s, "forecast"), run_strategy(online, s, "forecast")
        assert np.array_equal(a.levels, b.levels) and np.array_equal(a.step_s, b.step_s), s
        assert a.total_s == b.total_s


@pytest.mark.parametrize("strategy", ["mpc-risk", "mpc-adaptive", "mpc-scenario", "reactive"])
def test_planners_that_learn_their_error_plan_online_as_they_do_offline(tmp_path, synthetic_profile, strategy):
    """Online, the forecasts and the workloads they learn their error from arrive step by step; with a
    forecaster whose online forecasts equal its offline matrix, every decision must be the same."""
    common = {"steps": 90, "modes": ["forecast"], "strategies": ["mpc", strategy]}
    offline = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, **common)))
    online = build_scenario(load_experiment(write_experiment(tmp_path, synthetic_profile, online=True, **common)))
    a, b = run_strategy(offline, strategy, "forecast"), run_strategy(online, strategy, "forecast")
    assert np.array_equal(a.levels, b.levels) and a.total_s == b.total_s
    # and what it learned changed its plan: it is not simply mpc
    assert not np.array_equal(a.levels, run_strategy(offline, "mpc", "forecast").levels)


def test_online_refuses_a_folder_of_forecast_files(tmp_path, synthetic_profile):
    folder = tmp_path / "fc"
    folder.mkdir()
    exp = load_experiment(
        write_experiment(
            tmp_path,
            synthetic_profile,
            online=True,
            modes=["forecast"],
            strategies=["mpc"],
            forecast__source=str(folder),
        )
    )
    with pytest.raises(InputError, match="online forecasting needs a forecaster") as err:
        build_scenario(exp)
    assert err.value.field == "forecast.source"


def test_seeded_from_a_live_history():
    """A live run seeds the forecasters from whatever history it has, then grows it step by step."""
    from bsp_planner.forecasting.baselines import PersistenceForecaster

    fs = [PersistenceForecaster(horizon=3).fit(np.arange(10.0)) for _ in range(2)]
    online = OnlineForecasts.seeded(fs, [np.array([5.0, 6.0]), np.array([7.0])], 3, "persistence (online)")
    assert np.array_equal(online.forecast(), [[6.0] * 3, [7.0] * 3])
    online.observe(np.array([9.0, 4.0]))
    assert np.array_equal(online.forecast(), [[9.0] * 3, [4.0] * 3])


def test_simulate_online_leaves_out_the_experiments_offline_planners_but_refuses_named_ones(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile, steps=15, strategies=["mpc", "dp", "floor"])
    code, out, err = run_cli(["simulate", str(exp), "-q", "--online"], monkeypatch, capsys)
    assert code == 0, err
    assert "dp left out" in out and "seasonal-naive (online)" in out
    rows = (tmp_path / "out" / "comparison.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["mpc", "floor", "mpc", "floor"]
    code, out, err = run_cli(
        ["simulate", str(exp), "-q", "--online", "--strategies", "mpc,dp", "-o", str(tmp_path / "o2")],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "strategy dp plans the whole job before the first step" in err, err
    assert not (tmp_path / "o2").exists()

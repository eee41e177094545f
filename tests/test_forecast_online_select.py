"""online-select: the forecaster fitted on a run's own observed workloads, chosen per task by rolling
one-step error, with persistence until enough history exists; the default for observed tasks."""

from __future__ import annotations

import numpy as np
import pytest

from bsp_planner.forecasting.online_fits import InlineRefits
from bsp_planner.forecasting.online_select import OnlineSelectSettings
from bsp_planner.inputs.shipped import data_path
from bsp_planner.simulate.online import unseeded_online_forecasts


def star_leaf_loads(seed: int, steps: int = 160, leaves: int = 4) -> np.ndarray:
    """(leaves, steps): two overlapping periodic components whose phases differ per leaf (so the busiest
    leaf moves between leaves), plus seeded random bursts of a few steps and small noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    out = np.empty((leaves, steps))
    for i in range(leaves):
        phase = 2 * np.pi * i / leaves
        periodic = 30 + 8 * np.sin(2 * np.pi * t / 16 + phase) + 5 * np.sin(2 * np.pi * t / 6 + 2 * phase)
        bursts = np.zeros(steps)
        for s in np.flatnonzero(rng.random(steps) < 0.04):
            bursts[s : s + 3] += rng.uniform(4, 10)
        out[i] = periodic + bursts + rng.normal(0, 0.5, steps)
    return out


def run_online(loads: np.ndarray, background: bool = False, **settings) -> tuple[np.ndarray, list]:
    """Step by step as a run with no series: one-step forecasts (tasks, steps-1) for steps 1.., and the
    forecasters (their `chosen` candidates); refits in a worker process as a live run's if `background`."""
    online = unseeded_online_forecasts("online-select", len(loads), 4, (0.0, 60.0), settings=settings)
    if background:
        online.refit_in_background()
    got = []
    for t in range(loads.shape[1]):
        got.append(online.forecast()[:, 0])
        online.observe(loads[:, t])
    forecasters = [h.forecaster for h in online._histories]
    return np.array(got).T[:, 1:], forecasters


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_on_star_like_leaves_it_beats_persistence_by_a_quarter(seed):
    loads = star_leaf_loads(seed)
    forecasts, _ = run_online(loads)
    for leaf in range(len(loads)):
        truth, persistence = loads[leaf, 1:], loads[leaf, :-1]
        assert rmse(forecasts[leaf], truth) <= 0.75 * rmse(persistence, truth), leaf


def trace_loads(name: str) -> tuple[list[str], np.ndarray]:
    """A shipped trace's task names and (tasks, steps) workloads."""
    files = sorted((data_path("traces") / name).glob("*.csv"))
    return [f.stem for f in files], np.array([np.loadtxt(f, skiprows=1) for f in files])


def experiment_settings(name: str) -> dict:
    """The `online-select` settings a shipped experiment gives its runs."""
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.shipped import find_experiment

    return load_experiment(find_experiment(name)).forecast.online_select_settings()


@pytest.mark.slow
@pytest.mark.parametrize(
    "trace, experiment", [("helics-4", "helics-4"), ("helics-star-5", "helics-star-5"), ("helics-4-160", "helics-4")]
)
def test_on_the_shipped_federations_traces_no_worse_than_persistence_plus_two_percent(trace, experiment):
    # with the settings each shipped experiment runs it with (the star's leave persistence sooner)
    tasks, loads = trace_loads(trace)
    forecasts, forecasters = run_online(loads, **experiment_settings(experiment))
    for i, task in enumerate(tasks):
        truth, persistence = loads[i, 1:], loads[i, :-1]
        assert rmse(forecasts[i], truth) <= 1.02 * rmse(persistence, truth) + 1e-9, task


@pytest.mark.slow
def test_on_the_shipped_stars_recorded_160_steps_the_leaves_beat_persistence_by_a_quarter():
    tasks, loads = trace_loads("helics-star-5-160")
    forecasts, forecasters = run_online(loads, **experiment_settings("helics-star-5"))
    for i, task in enumerate(tasks):
        truth, persistence = loads[i, 1:], loads[i, :-1]
        limit = 1.02 if task == "hub" else 0.75
        assert rmse(forecasts[i], truth) <= limit * rmse(persistence, truth), task
    assert all("harmonic" in f.chosen for f in forecasters[1:])  # the leaves' periodic load is what it follows


def test_short_history_falls_back_to_persistence():
    loads = star_leaf_loads(3, steps=20)
    forecasts, forecasters = run_online(loads, min_history_steps=24, trend_min_history_steps=24)
    np.testing.assert_array_equal(forecasts, loads[:, :-1])
    assert all(set(f.chosen) == {"persistence"} for f in forecasters)


def test_a_smooth_load_is_followed_by_its_trend_within_a_few_steps_and_noise_keeps_persistence():
    # a hotspot passing through a task: a smooth rise and fall, long before any model can be fitted
    t = np.arange(30)
    smooth = 2 + 28 * np.exp(-0.5 * ((t - 15) / 4.0) ** 2)
    noise = 10 + np.random.default_rng(7).normal(0, 1, 30)
    forecasts, forecasters = run_online(np.array([smooth, noise]))
    first = forecasters[0].chosen.index("trend")
    assert first <= 8  # 4 values before the trend's first forecast, 3 of its errors before a choice
    late = slice(first, None)
    assert rmse(forecasts[0][late], smooth[1:][late]) <= 0.5 * rmse(smooth[:-1][late], smooth[1:][late])
    # white noise's changes do not persist: the choice keeps (about) persistence
    assert rmse(forecasts[1], noise[1:]) <= 1.02 * rmse(noise[:-1], noise[1:])


def test_the_first_forecast_is_the_middle_of_the_range_never_a_fit_on_placeholder_rows():
    online = unseeded_online_forecasts("online-select", 2, 3, (10.0, 50.0), settings={"min_history_steps": 4})
    np.testing.assert_array_equal(online.forecast(), np.full((2, 3), 30.0))


@pytest.mark.slow
def test_the_same_observations_give_the_same_forecasts():
    loads = star_leaf_loads(4, steps=70)
    a, fa = run_online(loads, min_history_steps=16)
    b, fb = run_online(loads, min_history_steps=16)
    np.testing.assert_array_equal(a, b)
    assert [f.chosen for f in fa] == [f.chosen for f in fb]
    assert any(set(f.chosen) - {"persistence"} for f in fa)  # a fitted model was chosen somewhere


def test_it_is_the_default_for_observed_tasks_only_and_its_settings_take_set(tmp_path):
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.shipped import find_experiment

    exp = load_experiment(
        find_experiment("helics-4"),
        [
            "forecast.online_refit_every_steps=3",
            "forecast.online_min_history_steps=12",
            "forecast.online_refit_lag_steps=2",
        ],
    )
    assert exp.forecast.source == "online-select"  # the shipped observed experiments name it
    exp.forecast.source = None
    assert exp.forecast.source_for(observed=True) == "online-select"
    assert exp.forecast.source_for(observed=False) == "seasonal-naive"
    chosen = OnlineSelectSettings.from_dict(exp.forecast.online_select_settings())
    assert (chosen.refit_every_steps, chosen.min_history_steps, chosen.refit_lag_steps) == (3, 12, 2)


SHORT = {"min_history_steps": 12, "refit_every_steps": 3, "refit_lag_steps": 2, "select_window_steps": 4}


@pytest.mark.slow
def test_refits_in_a_worker_process_give_what_simulate_gives():
    loads = star_leaf_loads(5, steps=45, leaves=2)
    in_place, fa = run_online(loads, **SHORT)
    background, fb = run_online(loads, background=True, **SHORT)
    np.testing.assert_array_equal(in_place, background)
    assert [f.chosen for f in fa] == [f.chosen for f in fb]
    assert any(set(f.chosen) - {"persistence"} for f in fa)


class RecordingRefits(InlineRefits):
    """Records at which origin each refit is started and first read; eager as a live run's, so each is
    read as soon as it may be."""

    eager = True

    def __init__(self, clock: list[int]) -> None:
        super().__init__()
        self.clock, self.started, self.read = clock, {}, {}

    def start(self, key, y, ar_lags):
        self.started.setdefault(key[0], self.clock[0])
        super().start(key, y, ar_lags)

    def result(self, key):
        self.read.setdefault(key[0], self.clock[0])
        return super().result(key)


def test_a_refit_started_at_step_t_is_used_from_step_t_plus_the_lag():
    loads = star_leaf_loads(6, steps=40, leaves=1)
    online = unseeded_online_forecasts("online-select", 1, 4, (0.0, 60.0), settings=SHORT)
    forecaster = online._histories[0].forecaster
    clock = [0]  # observed steps before the forecast being made
    forecaster.refits = RecordingRefits(clock)
    for t in range(loads.shape[1]):
        clock[0] = t
        online.forecast()
        online.observe(loads[:, t])
    first = forecaster.first_observed
    started = {r - first: t for r, t in forecaster.refits.started.items()}
    read = {r - first: t for r, t in forecaster.refits.read.items()}
    assert started == {r: r for r in range(12, 40, 3)}  # each started once its values are observed
    assert read == {r: r + 2 for r in range(12, 38, 3)}  # and first read 2 steps later

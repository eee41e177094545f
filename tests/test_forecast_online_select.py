"""online-select: the forecaster fitted on a run's own observed workloads, chosen per task by rolling
one-step error, with persistence until enough history exists; the default for observed tasks."""

from __future__ import annotations

import numpy as np
import pytest

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


def run_online(loads: np.ndarray, **settings) -> tuple[np.ndarray, list]:
    """Step by step as a run with no series: one-step forecasts (tasks, steps-1) for steps 1.., and the
    forecasters (their `chosen` candidates)."""
    online = unseeded_online_forecasts("online-select", len(loads), 4, (0.0, 60.0), settings=settings)
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


@pytest.mark.slow
def test_on_the_shipped_ring_trace_no_worse_than_persistence_plus_two_percent():
    folder = data_path("traces") / "helics-4"
    loads = np.array([np.loadtxt(folder / f"f{i}.csv", skiprows=1) for i in range(4)])
    forecasts, _ = run_online(loads)
    for task in range(len(loads)):
        truth, persistence = loads[task, 1:], loads[task, :-1]
        assert rmse(forecasts[task], truth) <= 1.02 * rmse(persistence, truth) + 1e-9, task


def test_short_history_falls_back_to_persistence():
    loads = star_leaf_loads(3, steps=20)
    forecasts, forecasters = run_online(loads, min_history_steps=24)
    np.testing.assert_array_equal(forecasts, loads[:, :-1])
    assert all(set(f.chosen) == {"persistence"} for f in forecasters)


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
        ["forecast.online_refit_every_steps=3", "forecast.online_min_history_steps=12"],
    )
    assert exp.forecast.source == "persistence"  # named: kept
    exp.forecast.source = None
    assert exp.forecast.source_for(observed=True) == "online-select"
    assert exp.forecast.source_for(observed=False) == "seasonal-naive"
    chosen = OnlineSelectSettings.from_dict(exp.forecast.online_select_settings())
    assert (chosen.refit_every_steps, chosen.min_history_steps) == (3, 12)

"""online-select's `harmonic` candidate: periods fitted by least squares from a short history, sinusoids
with harmonics at them, and an AR(1) on the rest (a decaying burst)."""

from __future__ import annotations

import numpy as np
import pytest

from bsp_planner.forecasting.online_fits import Harmonic, detect_seasons, fit_candidates, fit_periods


def two_components(steps: int, start: int = 0) -> np.ndarray:
    t = np.arange(start, start + steps, dtype=np.float64)
    return 10 + 6 * np.sin(2 * np.pi * t / 12) + 3 * np.sin(2 * np.pi * t / 7 + 1.0)


def test_it_finds_a_12_and_a_7_step_component_in_25_values_where_the_periodogram_cannot():
    y = two_components(25)
    assert sorted(fit_periods(y)) == pytest.approx([7.0, 12.0])
    assert sorted(detect_seasons(y)) != [7, 12]  # 1/(k/25) only: 12.5, 8.3, 6.25...


def test_it_continues_the_components_at_their_steps():
    y = two_components(40)
    model = Harmonic(y)
    assert np.allclose(model.forecast(y, 0, 3), two_components(3, start=40), atol=1e-6)
    # the same fit applied later (offset: the values start 10 steps into the fit window)
    later = two_components(50)
    assert np.allclose(model.forecast(later[10:], 10, 2), two_components(2, start=50), atol=1e-6)


def test_with_decaying_bursts_its_one_step_error_is_far_below_persistences():
    steps = 120
    rng = np.random.default_rng(0)
    burst = np.zeros(steps)
    for s in np.flatnonzero(rng.random(steps) < 0.15):
        burst[s:] += 5.0 * rng.uniform(0.5, 1.0) * 0.6 ** np.arange(steps - s)
    y = two_components(steps) + burst
    model = Harmonic(y[:60])  # fitted on the first half, applied to the second without refitting
    assert 0.3 < model.phi < 0.8  # the bursts' decay, roughly
    one_step = np.array([model.forecast(y[:o], 0, 1)[0] for o in range(60, steps)])
    error = np.sqrt(np.mean((one_step - y[60:]) ** 2))
    persistence = np.sqrt(np.mean((y[59:-1] - y[60:]) ** 2))
    assert error < 0.6 * persistence


def test_it_is_a_candidate_of_online_select_from_15_values():
    assert "harmonic" in fit_candidates(two_components(15), 4)
    assert "harmonic" not in fit_candidates(two_components(14), 4)

"""The weekly seasonal naive and the statistical baseline (MSTL, statsforecast) against the simpler
baselines, on synthetic series whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.forecasting.baselines import (
    PersistenceForecaster,
    SeasonalNaiveForecaster,
    SeasonalNaiveSettings,
    WeeklySeasonalNaiveForecaster,
)
from bsp_planner.forecasting.registry import FORECASTERS, default_settings

DAY = 24  # steps per day (hourly)
WEEK = 7 * DAY
H = 6


def weekly_pattern(n: int, seed: int = 0) -> np.ndarray:
    """A pure weekly pattern: every day differs, every week repeats exactly."""
    rng = np.random.default_rng(seed)
    week = 30 + 10 * rng.random(WEEK)
    return np.tile(week, n // WEEK + 1)[:n]


def rmse(f, series, origins) -> float:
    pred = f.predict_median(series, origins)
    truth = series[origins[:, None] + np.arange(f.horizon)[None, :]]
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def test_weekly_seasonal_naive_is_exact_on_a_pure_weekly_pattern_where_the_daily_one_is_not():
    x = weekly_pattern(8 * WEEK)
    train = x[: 4 * WEEK]
    origins = np.arange(4 * WEEK, len(x) - H)
    weekly = WeeklySeasonalNaiveForecaster(horizon=H, period=DAY).fit(train)
    daily = SeasonalNaiveForecaster(horizon=H, period=DAY).fit(train)
    assert weekly.season_ == WEEK and daily.season_ == DAY
    assert rmse(weekly, x, origins) == 0.0
    assert rmse(daily, x, origins) > 1.0
    # its quantiles come from its own (zero) errors: a degenerate interval at the truth
    q = weekly.predict_origins(x, origins[:5])
    np.testing.assert_allclose(q[0], q[-1])


def test_seasonal_naive_season_setting_week_and_steps():
    x = weekly_pattern(6 * WEEK)
    by_week = SeasonalNaiveForecaster(
        horizon=H, period=DAY, settings=SeasonalNaiveSettings.from_dict({"season": "week"})
    ).fit(x)
    by_steps = SeasonalNaiveForecaster(
        horizon=H, period=DAY, settings=SeasonalNaiveSettings.from_dict({"season": str(WEEK)})
    ).fit(x)
    o = np.arange(WEEK, 3 * WEEK)
    np.testing.assert_array_equal(by_week.predict_median(x, o), by_steps.predict_median(x, o))


def test_weekly_falls_back_to_the_day_when_the_training_half_holds_no_two_weeks():
    x = weekly_pattern(WEEK + 2 * DAY)
    f = WeeklySeasonalNaiveForecaster(horizon=H, period=DAY).fit(x)
    assert f.season_ == DAY


def test_seasonal_naive_never_reads_the_origin_or_later():
    x = weekly_pattern(5 * WEEK)
    f = WeeklySeasonalNaiveForecaster(horizon=WEEK + 3, period=DAY).fit(x[: 4 * WEEK])
    o = np.array([3 * WEEK])
    before = f.predict_median(x, o)
    y = x.copy()
    y[3 * WEEK :] = -999.0
    np.testing.assert_array_equal(f.predict_median(y, o), before)


@pytest.mark.parametrize("bad", [{"season": "month"}, {"season": 0}, {"season": True}, {"seasons": "day"}])
def test_bad_seasonal_naive_settings_name_the_field(bad):
    with pytest.raises(InputError) as e:
        SeasonalNaiveSettings.from_dict(bad)
    assert "season" in str(e.value)


def test_registry_knows_the_new_forecasters_and_their_settings():
    assert {"seasonal-naive-weekly", "mstl"} <= set(FORECASTERS)
    assert default_settings("seasonal-naive") == {"season": "day"}
    assert default_settings("seasonal-naive-weekly") == {"season": "week"}
    assert default_settings("mstl")["seasons"] == ["day", "week"]


# -- MSTL (statsforecast) -------------------------------------------------------------------------

statsforecast = pytest.importorskip("statsforecast")


def two_seasons(n: int, seed: int = 1, noise: float = 0.5) -> np.ndarray:
    """Daily + weekly cycles + a slow level + noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (
        30
        + 8 * np.sin(2 * np.pi * t / DAY)
        + 5 * np.sin(2 * np.pi * t / WEEK + 1.0)
        + 0.002 * t
        + noise * rng.standard_normal(n)
    )


def test_mstl_beats_persistence_and_the_daily_seasonal_naive_on_daily_plus_weekly_cycles():
    from bsp_planner.forecasting.statistical import MSTLForecaster

    x = two_seasons(8 * WEEK)
    train = x[: 5 * WEEK]
    origins = np.arange(5 * WEEK, len(x) - H, 5)
    m = MSTLForecaster(horizon=H, period=DAY).fit(train)
    assert m.seasons_ == (DAY, WEEK)
    e_mstl = rmse(m, x, origins)
    e_pers = rmse(PersistenceForecaster(horizon=H, period=DAY).fit(train), x, origins)
    e_day = rmse(SeasonalNaiveForecaster(horizon=H, period=DAY).fit(train), x, origins)
    assert e_mstl < 0.7 * min(e_pers, e_day)
    assert e_mstl < 1.5  # noise sd 0.5: within a few noise levels


def test_mstl_decomposition_with_loess_jumps_stays_within_noise_of_the_exact_one():
    """The decompositions evaluate STL's loess every k-th point (R's stl() default jumps, for speed);
    the seasonal total they give must stay far inside the series' noise of the exact one."""
    from statsforecast.mstl import mstl

    from bsp_planner.forecasting.statistical import stl_jumps

    x = two_seasons(6 * WEEK)  # noise sd 0.5
    exact = mstl(x, period=[DAY, WEEK])
    jumped = mstl(x, period=[DAY, WEEK], stl_kwargs=stl_jumps(DAY))
    seasonal = [f"seasonal{DAY}", f"seasonal{WEEK}"]
    diff = sum(np.asarray(jumped[k]) for k in seasonal) - sum(np.asarray(exact[k]) for k in seasonal)
    assert stl_jumps(DAY)["trend_jump"] > 1 and stl_jumps(DAY)["low_pass_jump"] > 1  # it does skip points
    assert np.max(np.abs(diff)) < 0.05


def test_mstl_never_reads_the_origin_or_later_and_gives_ordered_quantiles():
    from bsp_planner.forecasting.statistical import MSTLForecaster

    x = two_seasons(7 * WEEK)
    m = MSTLForecaster(horizon=H, period=DAY).fit(x[: 5 * WEEK])
    o = np.array([5 * WEEK + 7, 6 * WEEK + 1])
    before = m.predict_origins(x, o)
    y = x.copy()
    y[o[0] :] = 1e6
    after = MSTLForecaster(horizon=H, period=DAY).fit(x[: 5 * WEEK]).predict_origins(y, o[:1])
    np.testing.assert_allclose(after[:, 0], before[:, 0])
    assert np.all(np.diff(before, axis=0) >= 0)


def test_mstl_settings_are_checked():
    from bsp_planner.forecasting.statistical import MSTLSettings

    assert MSTLSettings.from_dict({"seasons": "day,336"}).seasons == ("day", 336)
    with pytest.raises(InputError, match="seasons"):
        MSTLSettings.from_dict({"seasons": ["fortnight"]})
    with pytest.raises(InputError, match="unknown mstl setting"):
        MSTLSettings.from_dict({"trend": "x"})

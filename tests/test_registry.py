"""One registry pattern for planners, bounds, allocators, forecasters and command groups; planners
take their own typed parameters."""

from __future__ import annotations

import numpy as np
import pytest

from bsp_planner.allocation import ALLOCATORS, make_allocator
from bsp_planner.core.errors import InputError
from bsp_planner.core.registry import Registry
from bsp_planner.inputs.experiment import PlannerSettings
from bsp_planner.planners import BOUNDS, PLANNERS
from bsp_planner.planners.base import make_planner
from bsp_planner.planners.dp import DpParams
from bsp_planner.planners.mpc import MpcParams


def test_registry_gets_lazily_and_names_the_known_parts():
    reg: Registry = Registry("widget", field="widgets")
    reg.register("json", "json:dumps")
    reg.register("direct", len)
    assert reg.names() == ["direct", "json"] and "json" in reg and list(reg) == ["json", "direct"]
    assert reg.get("json")({"a": 1}) == '{"a": 1}' and reg.get("direct") is len
    with pytest.raises(InputError, match=r"field 'widgets': unknown widget 'jsn'; known: direct, json"):
        reg.get("jsn")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("json", len)


def test_a_part_whose_module_is_absent_is_reported_not_raised():
    reg: Registry = Registry("widget")
    reg.register("gone", "bsp_planner.no_such_module:thing")
    with pytest.raises(InputError, match="not part of this installation"):
        reg.get("gone")
    assert list(reg.installed()) == []


def test_every_shipped_part_resolves():
    assert set(PLANNERS.names()) >= {"exppo", "static", "dp", "mpc", "rl", "dqn"}
    assert BOUNDS.names() == ["floor", "optimum"]
    assert {n: make_allocator(n).name for n in ALLOCATORS} == {
        "greedy": "greedy",
        "threshold": "threshold",
        "exact": "exact",
    }
    for name in ("exppo", "dp", "mpc", "static"):
        assert callable(PLANNERS.get(name))
    with pytest.raises(InputError, match="unknown allocator .magic.; known: exact, greedy"):
        make_allocator("magic")


def test_planners_take_their_own_typed_parameters():
    s = PlannerSettings(horizon=6, length_punishment=1.02, dp_max_segment=7)
    assert make_planner("mpc", s).params == MpcParams(horizon=6, length_punishment=1.02)
    assert make_planner("dp", s).params == DpParams(max_segment=7)
    assert make_planner("static:4", s).window == 4


def test_a_planner_plans_with_its_own_typed_parameters():
    """The context holds no planner knobs: a planner made without settings plans with the defaults,
    and one made with settings plans with those (here a shorter MPC horizon changes the plan)."""
    from test_planners import durations_from_work, perfect_context

    from bsp_planner.simulate.simulation import simulate

    rng = np.random.default_rng(0)
    actual = durations_from_work(rng.uniform(1, 10, (3, 12)))
    ctx = perfect_context(actual, 0.5, 4)
    default = simulate(make_planner("mpc"), ctx, actual)
    explicit_default = simulate(make_planner("mpc", PlannerSettings()), ctx, actual)
    assert np.array_equal(default.levels, explicit_default.levels)
    short = simulate(make_planner("mpc", PlannerSettings(horizon=1)), ctx, actual)
    assert not np.array_equal(short.levels, default.levels) or short.total_s != default.total_s


def test_forecasters_are_one_registry_and_only_the_learned_are_trained():
    from bsp_planner.forecasting.registry import FORECASTERS, default_settings, is_learned

    assert list(FORECASTERS) == [
        "lstm",
        "lstm-thesis",
        "persistence",
        "seasonal-naive",
        "seasonal-naive-weekly",
        "mstl",
        "online-select",
        "gbm",
        "ensemble",
        "ensemble-fit",
    ]
    assert [n for n in FORECASTERS if is_learned(n)] == ["lstm", "lstm-thesis", "gbm", "ensemble", "ensemble-fit"]
    assert default_settings("persistence") == {} and default_settings("lstm")["units"] == 32
    assert default_settings("seasonal-naive") == {"season": "day"}  # fitted on the spot, with settings
    with pytest.raises(
        InputError, match="unknown forecaster 'arima'; known: ensemble, ensemble-fit, gbm, lstm, lstm-thesis"
    ):
        is_learned("arima")

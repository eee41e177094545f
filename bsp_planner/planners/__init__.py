"""Planners and bounds, listed in one place.

A planner factory takes (the text after ':' in 'name:arg', the experiment's [planner] settings or None)
and returns a Planner; each planner picks its own typed parameters out of the settings. A bound takes
(context, actual durations, mode, settings or None) and returns a StrategyResult. Entries are imported
when first asked for, so optional parts (the RL agent's stack) cost nothing until used.

To add a planner: write its module and add one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.registry import Registry
from .base import PlannerFactory

if TYPE_CHECKING:
    from ..core.steps import StrategyResult

PLANNERS: Registry[PlannerFactory] = Registry("strategy", field="strategies")
PLANNERS.register("even", "bsp_planner.planners.even:EvenPlanner.from_spec")
PLANNERS.register("exppo", "bsp_planner.planners.even:ExppoPlanner.from_spec")
PLANNERS.register("static", "bsp_planner.planners.static:StaticWindowPlanner.from_spec")
PLANNERS.register("dp", "bsp_planner.planners.dp:DpPlanner.from_spec")
PLANNERS.register("mpc", "bsp_planner.planners.mpc:MpcPlanner.from_spec")
PLANNERS.register("rl", "bsp_planner.rl.planner:rl_planner")
PLANNERS.register("dqn", "bsp_planner.rl.planner:dqn_planner")
PLANNERS.register("mpc-risk", "bsp_planner.planners.risk:RiskAwareMpcPlanner.from_spec")
PLANNERS.register("mpc-adaptive", "bsp_planner.planners.risk:AdaptiveMpcPlanner.from_spec")
PLANNERS.register("mpc-scenario", "bsp_planner.planners.scenario_mpc:ScenarioMpcPlanner.from_spec")
PLANNERS.register("reactive", "bsp_planner.planners.reactive:ReactivePlanner.from_spec")
PLANNERS.register("mpc-place", "bsp_planner.planners.placement_mpc:PlacementMpcPlanner.from_spec")

#: Rows of the comparison computed from the actual durations, not by a planner.
BOUNDS: Registry[Callable[..., StrategyResult]] = Registry("bound", field="strategies")
BOUNDS.register("floor", "bsp_planner.planners.floor:floor_result")
BOUNDS.register("optimum", "bsp_planner.planners.optimum:optimum_result")

"""Strategies run over a built scenario: one row of the comparison each.

On one pool a planner runs through the step loop with the simulated executor. On a cluster of nodes
(`[[node]]`) a planner plans on the nodes (every change it makes fits them, so it is an in-place resize,
priced `in_place_s`); `STRATEGY/one-pool` plans as if the cluster were one machine and is replayed through
the same fit rules (a change that does not fit moves tasks: a recreate at `recreate_s`, never priced by its
planner, and a stop where a task cannot restore). The bounds take the nodes too; `optimum/one-pool` is the
one-pool optimum, whose distance to the node-constrained `optimum` is the price of nodes.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..core.steps import StrategyResult
from ..inputs.experiment import Experiment
from ..loop import run_loop
from ..model.cluster import ClusterExecutor, node_utilisation
from ..model.learning import LearnedDurations
from ..planners import BOUNDS, PLANNERS
from ..planners.base import PlanningContext, make_planner
from ..planners.observed import EXTRAS_KEY as OBSERVATIONS_KEY
from ..planners.observed import Observations
from ..planners.placement_mpc import CLUSTER_RUN
from .executor import SimulatedExecutor
from .predictions import OnlineConfigTable, StepPredictions, refuse_offline
from .scenario import Scenario, with_path
from .simulation import simulate

#: The suffix of a row planned as one pool and replayed on the nodes.
ONE_POOL = "/one-pool"


def step_predictions(scen: Scenario, mode: str) -> tuple[PlanningContext, StepPredictions]:
    """A fresh context for one online or learning run, and the predictions that fill it step by step."""
    exp = scen.experiment
    ctx = scen.make_context((exp.steps, scen.contexts[mode].configs.horizon))
    kind, source = scen.step_sources[mode]
    if kind == "online":
        source = source.fresh()
    model = LearnedDurations(scen.model, scen.task_names, exp.learning, exp.workload_range) if exp.learn else scen.model
    # what mpc-risk, mpc-adaptive, mpc-scenario and reactive learn from, filled as the run goes
    horizon = None if kind == "actual" else ctx.configs.horizon
    obs = Observations.stepwise(len(scen.task_names), exp.steps, horizon, model.durations, exp.workload_range)
    ctx.extras[OBSERVATIONS_KEY] = obs
    assert isinstance(ctx.configs, OnlineConfigTable)
    return ctx, StepPredictions(ctx.configs, (kind, source), model, exp.workload_range, obs)


def run_strategy(scen: Scenario, strategy: str, mode: str) -> StrategyResult:
    if scen.cluster is not None:
        return run_on_cluster(scen, strategy, mode)
    ctx = scen.contexts[mode]
    settings = scen.experiment.planner
    if strategy in BOUNDS:
        return BOUNDS.get(strategy)(ctx, scen.actual, mode, settings)
    planner = make_planner(strategy, settings)
    try:
        if mode in scen.step_sources:
            exp = scen.experiment
            refuse_offline(planner, "online = true" if exp.online else "learn = true")
            ctx, predictions = step_predictions(scen, mode)
            executor = SimulatedExecutor(scen.actual, scen.actual_workloads, ctx.penalty_s, ctx.structure)
            return run_loop(
                planner,
                ctx,
                executor,
                mode=mode,
                predictions=predictions,
                task_names=scen.task_names,
                decide_ahead=scen.decide_ahead,
            )
        return simulate(planner, ctx, scen.actual, mode, scen.actual_workloads, decide_ahead=scen.decide_ahead)
    except InputError as exc:
        raise with_path(exc, scen.experiment) from exc


def run_on_cluster(scen: Scenario, strategy: str, mode: str) -> StrategyResult:
    """One row of a multi-node comparison (see the module docstring)."""
    assert scen.cluster is not None and scen.placement is not None
    exp = scen.experiment
    in_place_s, recreate_s = scen.placement.in_place_s, scen.placement.recreate_s
    base, one_pool = (strategy[: -len(ONE_POOL)], True) if strategy.endswith(ONE_POOL) else (strategy, False)
    contexts = scen.one_pool_contexts if one_pool else scen.contexts
    if mode not in contexts:
        raise InputError(
            f"{strategy}: one-pool rows are simulated on fixed predictions only (not online or learning)",
            path=exp.path,
            field="strategies",
        )
    ctx = contexts[mode]
    if base in BOUNDS:
        result = BOUNDS.get(base)(ctx, scen.actual, mode, exp.planner)
        result.strategy = strategy
        # the one-pool bound is not replayed (its total is the bound): its plan on the nodes as placed,
        # whose peak above 100% is what one pool would need that the nodes do not have
        placement = np.broadcast_to(scen.cluster.node_of, result.levels.shape)
        used = scen.cpu.to_millicores(result.levels)
        result.notes["node_utilisation"] = node_utilisation(scen.cluster, used, placement)
        return result
    planner = make_planner(base, exp.planner)
    predictions = None
    try:
        if mode in scen.step_sources:
            refuse_offline(planner, "online = true" if exp.online else "learn = true")
            ctx, predictions = step_predictions(scen, mode)
        run: dict | None = None
        if not one_pool:  # a planner that moves tasks tells the executor where (planners/placement_mpc.py)
            run = {"cluster": scen.cluster, "recreate_s": recreate_s, "inner": exp.planner.allocator}
            ctx.extras[CLUSTER_RUN] = run
        inner = SimulatedExecutor(scen.actual, scen.actual_workloads, ctx.penalty_s, ctx.structure)
        executor = ClusterExecutor(inner, scen.cluster, scen.cpu, in_place_s, recreate_s, run)
        result = run_loop(
            planner,
            ctx,
            executor,
            mode=mode,
            predictions=predictions,
            task_names=scen.task_names,
            decide_ahead=scen.decide_ahead,
        )
    except InputError as exc:
        raise with_path(exc, exp) from exc
    result.strategy = strategy
    result.reconfigure_s = np.asarray(result.notes.pop("reconfigure_s"), dtype=np.float64)
    result.notes.update(executor.notes(result.levels))
    # a change the planner priced as in place but that needed a move (its own moves it priced)
    result.notes["unpriced_recreates"] = executor.recreates
    return result


def one_pool_strategies(scen: Scenario, strategies: list[str]) -> list[tuple[str, str]]:
    """The extra (mode, strategy) pairs of a multi-node comparison: every strategy but `floor` (and
    `mpc-place`, which as one pool is `mpc`) planned as one pool, in the modes planned on fixed predictions."""
    if scen.cluster is None:
        return []
    return [
        (m, s + ONE_POOL)
        for m in scen.experiment.modes
        if m in scen.one_pool_contexts
        for s in strategies
        if s not in ("floor", "mpc-place")  # mpc-place planned as one pool is mpc
    ]


def offline_strategies(strategies: list[str]) -> list[str]:
    """The strategies that plan the whole job before the first step (they need every prediction at once)."""
    return [
        s
        for s in strategies
        if s not in BOUNDS and getattr(getattr(PLANNERS.get(s.partition(":")[0]), "__self__", None), "offline", False)
    ]


def check_strategies(strategies: list[str], exp: Experiment | None = None) -> None:
    """Fail before any work if a strategy name is unknown, or (with an experiment that plans step by
    step: online or learn) if a strategy can only plan the whole job before the first step."""
    for s in strategies:
        if s not in BOUNDS:
            make_planner(s)
    if exp is not None and (exp.online or exp.learn):
        offline = offline_strategies(strategies)
        if offline:
            why = "online = true" if exp.online else "learn = true"
            many = len(offline) > 1
            raise InputError(
                f"strateg{'ies' if many else 'y'} {', '.join(offline)} plan{'' if many else 's'} the whole job "
                f"before the first step, so {'they' if many else 'it'} cannot run with {why} (predictions made "
                "step by step); leave them out with --strategies",
                path=exp.path,
                field="strategies",
            )

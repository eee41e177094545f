"""From an experiment file to arrays: the I/O edge in front of the planners and the simulator.

A Scenario holds, for one experiment, the actual workloads and durations and, per mode, the planning
context whose predicted durations come from perfect knowledge or from forecasts.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..allocation import make_allocator
from ..allocation.base import CpuLevels
from ..core.errors import InputError, InputWarning
from ..core.steps import StrategyResult
from ..forecasting.files import read_trace
from ..forecasting.provider import forecast_matrix
from ..inputs.experiment import Experiment
from ..inputs.job import Job, load_job
from ..inputs.profiles import check_job_matches, load_profile, metadata_path
from ..inputs.series import JobSeries, load_job_series
from ..loop import run_loop
from ..model import interference
from ..model.cluster import Cluster
from ..model.learning import LearnedDurations
from ..model.performance import DurationModel, InterferedDurations, PerformanceModel
from ..planners import BOUNDS
from ..planners.base import ConfigTable, PlanningContext, make_planner
from ..planners.observed import EXTRAS_KEY as OBSERVATIONS_KEY
from ..planners.observed import Observations
from ..planners.observed import attach as attach_observations
from . import node_runs as nodes
from .executor import SimulatedExecutor
from .online import online_forecasts, unseeded_online_forecasts
from .predictions import OnlineConfigTable, StepPredictions, refuse_offline, warn_if_far_outside
from .simulation import simulate


@dataclass
class Scenario:
    experiment: Experiment
    job: Job
    job_series: JobSeries | None  # None: the tasks have no series (workloads observed as the job runs)
    model: DurationModel
    cpu: CpuLevels
    actual_workloads: np.ndarray  # (tasks, steps)
    actual: np.ndarray  # (tasks, levels, steps) true durations
    # (tasks,) True where a task has a series (its workloads are assigned from it);
    # False where only the task knows them (it reports them as it runs)
    known_workloads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    contexts: dict[str, PlanningContext] = field(default_factory=dict)
    forecast_label: dict[str, str] = field(default_factory=dict)
    # Online or learning runs (see predictions.py): per mode, where each run's expected workloads come
    # from; each run gets a fresh context whose rows are made step by step.
    step_sources: dict[str, tuple] = field(default_factory=dict)
    true_model: DurationModel | None = None  # what the tasks really follow, when not the planning profile
    make_context: Callable | None = None  # predicted durations, or (steps, H) for an online table -> a context
    # [[node]]: the cluster the contexts plan on (None: one pool); and per mode the same predictions
    # planned as one pool, which the comparison replays through the nodes' fit rules (nodes.py).
    cluster: Cluster | None = None
    one_pool_contexts: dict[str, PlanningContext] = field(default_factory=dict)
    interference: str | None = None  # on nodes: the report's line about co-location interference

    @property
    def task_names(self) -> list[str]:
        return self.job.task_names


def _with_path(exc: InputError, exp: Experiment) -> InputError:
    return exc if exc.path else InputError(exc.message, path=exp.path, line=exc.line, field=exc.field)


def _static_windows(strategies: list[str]) -> list[int]:
    out = []
    for s in strategies:
        name, _, arg = s.partition(":")
        if name == "static" and arg.isdigit():
            out.append(int(arg))
    return out


def build_scenario(exp: Experiment) -> Scenario:
    try:
        return _build(exp)
    except InputError as exc:
        raise _with_path(exc, exp) from exc


def _build(exp: Experiment) -> Scenario:
    files = [("job", exp.job_path, "job"), ("profile", exp.profile_path, "profile")]
    if exp.true_profile:
        files.append(("true_profile", exp.true_profile_path, "true profile"))
    for fname, p, what in files:
        if not p.is_file():
            raise InputError(f"{what} file {str(p)!r} not found (or not a file)", path=exp.path, field=fname)
    job = load_job(exp.job_path)
    profile = load_profile(exp.profile_path)
    check_job_matches(profile.metadata, job, metadata_path(exp.profile_path))
    model = PerformanceModel(profile, job.task_names, exp.interpolation, exp.out_of_grid)
    c = exp.cpu
    top = max(c.max_millicores, c.exppo_max_millicores or c.max_millicores)
    cpu = CpuLevels(c.min_millicores, c.step_millicores, top, c.budget_millicores)
    n = len(job.tasks)
    budget_steps = cpu.budget_steps(n)
    if exp.out_of_grid == "error":
        lo, hi = profile.cpu_range
        for fname, value in (("cpu.min_millicores", c.min_millicores), ("cpu.max_millicores", top)):
            if not lo - 1e-9 <= value <= hi + 1e-9:
                raise InputError(
                    f"{value:g}m is outside the CPU range the profile measured [{lo:g}, {hi:g}] millicores; "
                    'choose levels inside it or set out_of_grid = "clamp" or "extrapolate"',
                    path=exp.path,
                    field=fname,
                )
        wlo, whi = profile.workload_range
        if exp.workload_range[0] < wlo - 1e-9 or exp.workload_range[1] > whi + 1e-9:
            raise InputError(
                f"workload range {list(exp.workload_range)} exceeds what the profile measured [{wlo:g}, {whi:g}]",
                path=exp.path,
                field="workload_range",
            )
    dm = model.at_levels(cpu.millicores)
    max_level = np.full(n, cpu.level_of(c.max_millicores))
    exppo_max = np.full(n, cpu.level_of(c.exppo_max_millicores)) if c.exppo_max_millicores else max_level
    observed = [t.name for t in job.tasks if t.series is None]  # workloads only the tasks know (they report them)
    if observed and not exp.online and not exp.forecast.actual:
        raise InputError(
            f"task '{observed[0]}' has no series (its workloads are the ones it reports as it runs), so there is "
            "nothing to plan from: replay a recorded trace of its workloads (`simulate --actual DIR` or "
            "forecast.actual, perfect mode), plan online (`--online` or online = true), or give every task a "
            "`series = { file = ... }`",
            path=job.path,
            field=f"{observed[0]}.series",
        )
    job_series = None if observed else load_job_series(job, exp.workload_range)
    if exp.forecast.actual:
        grid = profile.workload_range if exp.out_of_grid == "error" else None
        actual_w = read_trace(exp.resolve(exp.forecast.actual), job.task_names, exp.steps, exp.start, valid_range=grid)
        actual_w = _clip_trace(actual_w, exp, job.task_names)
    elif job_series is None:
        # a live run observes them; until then the middle of the range (a live summary charges the plan at
        # the workloads the tasks reported). Tasks with a series keep it (a job mixing both kinds).
        actual_w = np.full((n, exp.steps), sum(exp.workload_range) / 2)
        with_series = [i for i, t in enumerate(job.tasks) if t.series is not None]
        if with_series:
            part = dataclasses.replace(job, tasks=tuple(job.tasks[i] for i in with_series))
            actual_w[with_series] = load_job_series(part, exp.workload_range).workloads(
                exp.start, exp.steps, path=exp.path
            )
    else:
        actual_w = job_series.workloads(exp.start, exp.steps, path=exp.path)
    true_dm = None
    if exp.true_profile:
        true_profile = load_profile(exp.true_profile_path)
        check_job_matches(true_profile.metadata, job, metadata_path(exp.true_profile_path))
        true_dm = PerformanceModel(true_profile, job.task_names, exp.interpolation, exp.out_of_grid).at_levels(
            cpu.millicores
        )
    # What the tasks really take; the planner's own model (dm) predicts from the planning profile.
    actual = (true_dm or dm).durations(actual_w)
    planned_at_actual = actual if true_dm is None else dm.durations(actual_w)
    mid = np.full((n,), sum(exp.workload_range) / 2)
    known = np.array([t.series is not None for t in job.tasks], dtype=bool)
    scen = Scenario(exp, job, job_series, dm, cpu, actual_w, actual, known_workloads=known, true_model=true_dm)
    stepwise = exp.online or exp.learn
    # tasks that share a node slow each other (a pair profile, read once here), or not at all
    slowdown, measured = interference.pair_slowdown(exp, job.task_names) if exp.node else (None, 0)
    scen.cluster = nodes.cluster_of(exp, job, cpu, dm, job_series, actual_w, max_level, budget_steps, slowdown)
    if scen.cluster is not None:
        factor = interference.factors(slowdown, scen.cluster)
        scen.interference = interference.note(exp, scen.cluster, factor, measured, job.task_names)
        if factor is not None:  # at the initial placement: the truth and the planning model both carry it
            for table in {id(actual): actual, id(planned_at_actual): planned_at_actual}.values():
                table *= factor[:, None, None]
            dm = scen.model = InterferedDurations(dm, factor)
            if true_dm is not None:
                scen.true_model = InterferedDurations(true_dm, factor)
    limits = None if scen.cluster is None else scen.cluster.limits(cpu)

    def context(predicted: np.ndarray | tuple[int, int], one_pool: bool = False) -> PlanningContext:
        p = exp.planner
        configs: ConfigTable
        allocator = make_allocator(p.allocator) if limits is None or one_pool else nodes.allocator(p.allocator, limits)
        if isinstance(predicted, tuple):  # rows made step by step: (steps, H) -> an empty online table
            shape = (predicted[0], n, cpu.n_levels, predicted[1])
            configs = OnlineConfigTable(shape, allocator, max_level, budget_steps, p.discount)
        else:
            configs = ConfigTable(predicted, allocator, max_level, budget_steps, p.discount)
        return PlanningContext(
            steps=exp.steps,
            cpu=cpu,
            max_level=max_level,
            penalty_s=exp.penalty_s if limits is None else nodes.in_place_s(exp),
            configs=configs,
            discount=p.discount,
            mid_durations=dm.durations(mid[:, None])[:, :, 0],
            exppo_max_level=exppo_max,
            nodes=None if one_pool else limits,
        )

    for mode in exp.modes:
        if mode == "perfect":
            # Perfect knowledge: the forecast made before step t is the truth. Frames never reach past
            # the last step, so the edge padding below is never read.
            frames = [
                exp.forecast.horizon,
                exp.planner.horizon,
                exp.planner.dp_max_segment,
                exp.planner.optimum_max_segment,
            ]
            h = min(exp.steps, max(frames + _static_windows(exp.strategies)))
            scen.forecast_label[mode] = "perfect knowledge"
            fc = None
            if exp.learn:  # online forecasts mean nothing with perfect knowledge; learning does
                scen.step_sources[mode] = ("actual", actual_w)
                scen.contexts[mode] = context((exp.steps, h))
                continue
            padded = np.concatenate([planned_at_actual, np.repeat(planned_at_actual[:, :, -1:], h - 1, axis=2)], axis=2)
            predicted = sliding_window_view(padded, h, axis=2).transpose(2, 0, 1, 3)  # (steps, n, L, h), a view
        elif exp.online:
            # No forecast file: a forecaster predicts before every step from the history observed so far.
            if job_series is None:  # no history: forecasters seeded with the middle of the range follow the reports
                online = unseeded_online_forecasts(exp.forecast.source, n, exp.forecast.horizon, exp.workload_range)
            else:
                online = online_forecasts(
                    exp.forecast.source, job_series, exp.start, exp.forecast.horizon, base_dir=exp.resolve("."), job=job
                )
            scen.step_sources[mode] = ("online", online)
            scen.forecast_label[mode] = online.label
            scen.contexts[mode] = context((exp.steps, exp.forecast.horizon))
            continue
        else:
            if job_series is None:
                raise InputError(
                    f"task(s) {', '.join(observed)} have no series, so there is nothing to forecast before the run: "
                    'use modes = ["perfect"] with forecast.actual (a recorded trace), or online = true',
                    path=exp.path,
                    field="modes",
                )
            fc, label = forecast_matrix(
                exp.forecast.source, job_series, exp.start, exp.steps, exp.forecast.horizon, base_dir=exp.resolve(".")
            )
            warn_if_far_outside(fc, exp.workload_range, label, job_series.task_names)
            fc = np.clip(fc, *exp.workload_range)
            predicted = dm.durations(fc).transpose(2, 0, 1, 3)  # (steps, n, L, H)
            scen.forecast_label[mode] = label
            if stepwise:  # learning on fixed forecasts: rows still made step by step, by the learning model
                scen.step_sources[mode] = ("matrix", fc)
                scen.contexts[mode] = context((exp.steps, exp.forecast.horizon))
                continue
        scen.contexts[mode] = context(predicted)
        attach_observations(scen.contexts[mode], actual_w, fc, dm.durations, exp.workload_range)
        if limits is not None:
            scen.one_pool_contexts[mode] = context(predicted, one_pool=True)
            attach_observations(scen.one_pool_contexts[mode], actual_w, fc, dm.durations, exp.workload_range)
    scen.make_context = context
    return scen


def step_predictions(scen: Scenario, mode: str) -> tuple[PlanningContext, StepPredictions]:
    """A fresh context for one online or learning run, and the predictions that fill it step by step."""
    exp = scen.experiment
    proto = scen.contexts[mode]
    assert scen.make_context is not None
    ctx = scen.make_context((exp.steps, proto.configs.horizon))
    kind, source = scen.step_sources[mode]
    if kind == "online":
        source = source.fresh()
    model = LearnedDurations(scen.model, scen.task_names, exp.learning, exp.workload_range) if exp.learn else scen.model
    # what mpc-risk, mpc-adaptive, mpc-scenario and reactive learn from, filled as the run goes
    obs = Observations.stepwise(
        len(scen.task_names),
        exp.steps,
        None if kind == "actual" else ctx.configs.horizon,
        model.durations,
        exp.workload_range,
    )
    ctx.extras[OBSERVATIONS_KEY] = obs
    return ctx, StepPredictions(ctx.configs, (kind, source), model, exp.workload_range, obs)


def run_strategy(scen: Scenario, strategy: str, mode: str) -> StrategyResult:
    if scen.cluster is not None:
        return nodes.run_on_cluster(scen, strategy, mode, step_predictions)
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
            executor = SimulatedExecutor(scen.actual, scen.actual_workloads, ctx.penalty_s)
            return run_loop(planner, ctx, executor, mode=mode, predictions=predictions, task_names=scen.task_names)
        return simulate(planner, ctx, scen.actual, mode, scen.actual_workloads)
    except InputError as exc:
        raise _with_path(exc, scen.experiment) from exc


def offline_strategies(strategies: list[str]) -> list[str]:
    """The strategies that plan the whole job before the first step (they need every prediction at once)."""
    from ..planners import PLANNERS

    return [
        s
        for s in strategies
        if s not in BOUNDS and getattr(getattr(PLANNERS.get(s.partition(":")[0]), "__self__", None), "offline", False)
    ]


def _clip_trace(workloads: np.ndarray, exp: Experiment, task_names: list[str]) -> np.ndarray:
    """A replayed trace (tasks, steps) clipped to the experiment's workload_range, with one warning naming
    the tasks whose values were clipped and how many (a trace is used as recorded, so a value outside
    the range is worth knowing about: the simulation replays the range's bound instead)."""
    lo, hi = exp.workload_range
    outside = ((workloads < lo) | (workloads > hi)).sum(axis=1)
    if outside.any():
        tasks = ", ".join(f"{t} ({int(k)})" for t, k in zip(task_names, outside, strict=True) if k)
        warnings.warn(
            f"{exp.forecast.actual}: {int(outside.sum())} replayed workload(s) outside workload_range "
            f"[{lo:g}, {hi:g}] clipped to it: {tasks}",
            InputWarning,
            stacklevel=2,
        )
    return np.clip(workloads, lo, hi)


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
            raise InputError(
                f"strateg{'ies' if len(offline) > 1 else 'y'} {', '.join(offline)} "
                f"plan{'' if len(offline) > 1 else 's'} the whole job "
                f"before the first step, so {'they' if len(offline) > 1 else 'it'} cannot run with {why} (predictions "
                "made step by "
                "step); leave them out with --strategies",
                path=exp.path,
                field="strategies",
            )

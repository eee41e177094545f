"""Stage 1 of a scenario: the experiment's files read and checked once.

The job, its profile (and the true profile, if the tasks follow another), the workload series and the
workloads the tasks really run (their series' test half, a replayed trace, or the middle of the range for
tasks that only report theirs). Every check against the experiment happens here, before any model is built.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from ..allocation import make_allocator
from ..core.errors import InputError, InputWarning
from ..forecasting.files import read_trace
from ..inputs.experiment import Experiment
from ..inputs.job import Job, load_job
from ..inputs.profiles import Profile, check_job_matches, load_profile, metadata_path
from ..inputs.series import JobSeries, load_job_series


@dataclass(frozen=True)
class ScenarioInputs:
    experiment: Experiment
    job: Job
    profile: Profile
    true_profile: Profile | None  # what the tasks really follow, when not the planning profile
    job_series: JobSeries | None  # None: some task has no series (its workloads are observed as it runs)
    actual_workloads: np.ndarray  # (tasks, steps)
    known_workloads: np.ndarray  # (tasks,) True where a task has a series; False where only the task knows them
    observed: list[str]  # the tasks without a series


def read_inputs(exp: Experiment) -> ScenarioInputs:
    files = [("job", exp.job_path, "job"), ("profile", exp.profile_path, "profile")]
    if exp.true_profile:
        files.append(("true_profile", exp.true_profile_path, "true profile"))
    for fname, p, what in files:
        if not p.is_file():
            raise InputError(f"{what} file {str(p)!r} not found (or not a file)", path=exp.path, field=fname)
    job = load_job(exp.job_path)
    profile = load_profile(exp.profile_path)
    check_job_matches(profile.metadata, job, metadata_path(exp.profile_path))
    _check_task_cpu(exp, job)
    if exp.out_of_grid == "error":
        _check_inside_profile(exp, profile)
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
    actual_w = _actual_workloads(exp, job, profile, job_series)
    true_profile = None
    if exp.true_profile:
        true_profile = load_profile(exp.true_profile_path)
        check_job_matches(true_profile.metadata, job, metadata_path(exp.true_profile_path))
    known = np.array([t.series is not None for t in job.tasks], dtype=bool)
    make_allocator(exp.planner.allocator)  # an unknown name is refused before any model is built
    return ScenarioInputs(exp, job, profile, true_profile, job_series, actual_w, known, observed)


def _check_task_cpu(exp: Experiment, job: Job) -> None:
    """Each task's own CPU floor and ceiling lie on the experiment's CPU grid (min + k * step, up to max)."""
    c = exp.cpu
    for i, t in enumerate(job.tasks):
        for name in ("min_millicores", "max_millicores"):
            value = getattr(t, name)
            if value is None:
                continue
            k = (value - c.min_millicores) / c.step_millicores
            if not (c.min_millicores <= value <= c.max_millicores and abs(k - round(k)) < 1e-9):
                raise InputError(
                    f"task '{t.name}': expected {name} on the experiment's CPU grid ({c.min_millicores:g} to "
                    f"{c.max_millicores:g} in steps of {c.step_millicores:g}), got {value:g}",
                    path=job.path,
                    field=f"task[{i}].{name}",
                )


def _check_inside_profile(exp: Experiment, profile: Profile) -> None:
    c = exp.cpu
    top = max(c.max_millicores, c.exppo_max_millicores or c.max_millicores)
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


def _actual_workloads(exp: Experiment, job: Job, profile: Profile, job_series: JobSeries | None) -> np.ndarray:
    """(tasks, steps): what the tasks really run."""
    if exp.forecast.actual:
        grid = profile.workload_range if exp.out_of_grid == "error" else None
        actual_w = read_trace(exp.resolve(exp.forecast.actual), job.task_names, exp.steps, exp.start, valid_range=grid)
        return _clip_trace(actual_w, exp, job.task_names)
    if job_series is not None:
        return job_series.workloads(exp.start, exp.steps, path=exp.path)
    # a live run observes them; until then the middle of the range (a live summary charges the plan at
    # the workloads the tasks reported). Tasks with a series keep it (a job mixing both kinds).
    actual_w = np.full((len(job.tasks), exp.steps), sum(exp.workload_range) / 2)
    with_series = [i for i, t in enumerate(job.tasks) if t.series is not None]
    if with_series:
        part = dataclasses.replace(job, tasks=tuple(job.tasks[i] for i in with_series))
        actual_w[with_series] = load_job_series(part, exp.workload_range).workloads(exp.start, exp.steps, path=exp.path)
    return actual_w


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

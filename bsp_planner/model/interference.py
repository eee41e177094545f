"""Co-location interference in a simulation on nodes: the experiment's pair profile as a slowdown matrix
and the report's one line about it.

Without `interference.pairs` no interference is assumed (and the report says so); with it, the
performance model multiplies each task's duration by `performance.co_location_slowdown` at the
tasks' initial placement, which `cluster.place_balanced` chooses avoiding the pairs that hurt
(`placement = "aware"`) or not (`"blind"`). Shapes: slowdown (tasks, tasks); factor (tasks,).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import InputError
from ..inputs.pair_profiles import load_pair_profile

if TYPE_CHECKING:
    from ..inputs.experiment import Experiment
    from .cluster import Cluster

NONE_ASSUMED = (
    "interference: none assumed (no pair profile; `bsp-planner profile pairs` measures one, interference.pairs uses it)"
)


def pair_slowdown(exp: Experiment, task_names: list[str]) -> tuple[np.ndarray | None, int]:
    """The experiment's pair slowdowns (tasks, tasks) and how many ordered pairs of the job it measured;
    (None, 0) without a pair profile. A bad file is an InputError naming it (and the experiment field)."""
    path = exp.pairs_path
    if path is None:
        return None, 0
    try:
        profile = load_pair_profile(path)
    except InputError as exc:
        raise InputError(exc.message, path=exc.path, line=exc.line, field="interference.pairs") from exc
    measured = profile.measured(task_names)
    if measured == 0:
        raise InputError(
            f"the pair profile measured none of the job's tasks ({', '.join(task_names)}) together",
            path=path,
            field="interference.pairs",
        )
    return profile.matrix(task_names), measured


def note(exp: Experiment, cluster: Cluster, factor: np.ndarray | None, measured: int, task_names: list[str]) -> str:
    """The report's line about interference."""
    if factor is None:
        return NONE_ASSUMED
    n = len(task_names)
    worst = int(np.argmax(factor))
    how = "given" if cluster.placement == "given" else f"chosen {exp.interference.placement}"
    return (
        f"interference: pair profile {exp.interference.pairs} ({measured} of {n * (n - 1)} ordered pairs measured; "
        f"a task's slowdown = product of its co-located pairs'), placement {how}: mean x{float(factor.mean()):.2f}, "
        f"worst x{float(factor[worst]):.2f} ({task_names[worst]})"
    )

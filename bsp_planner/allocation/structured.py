"""Allocation under a job's own constraints: per-task CPU floors and a step structure.

A task's floor (`min_millicores`) is met by shifting its level axis: the inner allocator sees level 0 as
the task's floor, the budget less the steps the floors take, and its levels are shifted back. So every
allocator respects floors unchanged.

When tasks wait for each other inside a step (:class:`~bsp_planner.core.structure.StepStructure`), a
step is the critical path through them, not its slowest task; the greedy rule then judges each CPU step
by what it saves on the critical path (:func:`critical_path_greedy`): a task off the critical path gains
nothing. The other allocators assume the slowest task and refuse such a structure.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..core.structure import StepStructure
from .base import Allocator, batch_inputs


def critical_path_greedy(
    durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int, structure: StepStructure
) -> np.ndarray:
    """Greedy on the critical path: every task at level 0; while budget remains, give one CPU step to the
    task whose next level shortens the frame's weighted critical-path time most (ties: the lower index);
    when no step shortens it, to the task on the critical path at the most steps that can still grow,
    so budget is never left idle while someone could use it.

    durations (B, n, L, k) seconds; weights (B, k); max_level (n,). Returns levels (B, n)."""
    durations, weights, top, idle = batch_inputs(durations, weights, max_level, budget_steps)
    b, n, n_levels, k = durations.shape
    lvl = np.zeros((b, n), dtype=np.int64)
    if idle:
        return lvl
    bi = np.arange(b)[:, None, None]
    ti = np.arange(n)[None, :, None]
    ki = np.arange(k)[None, None, :]
    eye = np.eye(n, dtype=bool)[None, :, :, None]  # (1, candidate, task, 1)
    for _ in range(int(budget_steps)):
        can = lvl < top[None, :]
        if not can.any():
            break
        cur = durations[bi, ti, lvl[:, :, None], ki]  # (B, n, k)
        nxt = durations[bi, ti, np.minimum(lvl + 1, n_levels - 1)[:, :, None], ki]
        # candidate c raised by one level: (B, c, n, k)
        trial = np.where(eye, nxt[:, None, :, :], cur[:, None, :, :])
        now = (structure.step_time(cur, axis=1) * weights).sum(axis=-1)  # (B,)
        after = (structure.step_time(trial, axis=2) * weights[:, None, :]).sum(axis=-1)  # (B, c)
        gain = np.where(can, now[:, None] - after, -np.inf)
        on_path = (structure.critical(cur, axis=1) * (weights[:, None, :] > 0)).sum(axis=-1)  # (B, n)
        fallback = np.where(can, on_path, -1)
        best = gain.argmax(axis=1)
        choice = np.where(gain[np.arange(b), best] > 0, best, fallback.argmax(axis=1))
        live = can.any(axis=1)
        lvl[np.arange(b)[live], choice[live]] += 1
    return lvl


class JobConstrained(Allocator):
    """An allocator that respects each task's CPU floor (`min_level`, level indices) and plans on the job's
    step structure (critical-path greedy when the structure is not independent)."""

    def __init__(self, inner: Allocator, min_level: np.ndarray, structure: StepStructure) -> None:
        if not structure.is_independent and inner.name != "greedy":
            raise InputError(
                f"the {inner.name!r} allocator assumes a step lasts as long as its slowest task, but the job's "
                'tasks wait for each other (`after`); use planner.allocator = "greedy"',
                field="planner.allocator",
            )
        self.inner = inner
        self.name = inner.name
        self.min_level = np.asarray(min_level, dtype=np.int64)
        self.structure = structure

    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        durations = np.asarray(durations)
        n_levels = durations.shape[2]
        low = self.min_level
        spare = int(budget_steps) - int(low.sum())
        if spare < 0:
            raise InputError(
                f"the tasks' min_millicores take {int(low.sum())} CPU steps above the minimum, more than the "
                f"budget's {int(budget_steps)}",
                field="cpu.budget_millicores",
            )
        if low.any():
            shifted = np.minimum(np.arange(n_levels)[None, :] + low[:, None], n_levels - 1)  # (n, L)
            durations = np.take_along_axis(durations, shifted[None, :, :, None], axis=2)
        top = np.asarray(max_level, dtype=np.int64) - low
        if self.structure.is_independent:
            levels = self.inner.allocate_batch(durations, weights, top, spare)
        else:
            levels = critical_path_greedy(durations, weights, top, spare, self.structure)
        out: np.ndarray = levels + low[None, :]
        return out

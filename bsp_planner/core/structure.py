"""Which tasks wait for which inside one step, and the step time that follows from it.

Most BSP jobs are *independent* inside a step: every task computes at once and the step lasts as long as
its slowest task. A co-simulation shaped as a star is not: its hub computes after its leaves' values
arrive, so a step is the slowest leaf **plus** the hub. :class:`StepStructure` holds that graph (a DAG over
the tasks) and gives a step's time as the critical path through it; with no edges it is exactly the
maximum over tasks (the same floats), so jobs that declare nothing plan and simulate as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


class StructureError(ValueError):
    """The graph is not a DAG over the tasks (a cycle, a self-reference, an index out of range);
    `task`: the index of a task at fault, so a caller can name it."""

    def __init__(self, message: str, task: int | None = None) -> None:
        super().__init__(message)
        self.task = task


@dataclass(frozen=True)
class StepStructure:
    """`after[i]`: the indices of the tasks task i waits for inside every step (its predecessors).

    A task starts once all its predecessors have finished; a step ends when its last task does.
    """

    after: tuple[tuple[int, ...], ...]
    order: tuple[int, ...] = field(init=False, repr=False, compare=False)  # a topological order of the tasks

    def __post_init__(self) -> None:
        n = len(self.after)
        after = tuple(tuple(sorted({int(j) for j in preds})) for preds in self.after)
        for i, preds in enumerate(after):
            for j in preds:
                if not 0 <= j < n:
                    raise StructureError(f"task {i} waits for task {j}, but there are only {n} tasks", i)
                if j == i:
                    raise StructureError(f"task {i} waits for itself", i)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "order", _topological_order(after))

    @classmethod
    def independent(cls, n_tasks: int) -> StepStructure:
        """No task waits for another: a step lasts as long as its slowest task."""
        return cls(((),) * n_tasks)

    @classmethod
    def from_names(cls, names: Sequence[str], after: Mapping[str, Sequence[str]]) -> StepStructure:
        """From task names: `after[name]` lists the names `name` waits for (names not in `after`: none)."""
        index = {name: i for i, name in enumerate(names)}
        for name, preds in after.items():
            for p in [name, *preds]:
                if p not in index:
                    raise StructureError(f"unknown task '{p}' (tasks: {', '.join(names)})")
        return cls(tuple(tuple(index[p] for p in after.get(name, ())) for name in names))

    @property
    def n_tasks(self) -> int:
        return len(self.after)

    @property
    def is_independent(self) -> bool:
        return not any(self.after)

    def names(self, task_names: Sequence[str]) -> dict[str, list[str]]:
        """The graph by name, only tasks that wait for some other (the job file's `after` lists)."""
        return {task_names[i]: [task_names[j] for j in preds] for i, preds in enumerate(self.after) if preds}

    def finish_times(self, durations: np.ndarray, axis: int = -1) -> np.ndarray:
        """Each task's finish time from the step's start: finish_i = d_i + max over its predecessors' finish.

        `durations`: any shape with the tasks along `axis` (seconds); the result has the same shape.
        """
        d = np.moveaxis(np.asarray(durations, dtype=float), axis, -1)
        if d.shape[-1] != self.n_tasks:
            raise ValueError(f"expected {self.n_tasks} tasks along axis {axis}, got {d.shape[-1]}")
        finish = d.copy()
        for i in self.order:
            if self.after[i]:
                finish[..., i] = d[..., i] + finish[..., list(self.after[i])].max(axis=-1)
        return np.moveaxis(finish, -1, axis)

    def step_time(self, durations: np.ndarray, axis: int = -1) -> np.ndarray:
        """A step's time, the critical path through the graph: the latest finish over tasks.

        `durations`: any shape with the tasks along `axis`; that axis is reduced. With no edges this is
        exactly ``durations.max(axis=axis)``.
        """
        if self.is_independent:
            out: np.ndarray = np.asarray(durations).max(axis=axis)
            return out
        return self.finish_times(durations, axis).max(axis=axis)

    def critical(self, durations: np.ndarray, axis: int = -1, rtol: float = 1e-12) -> np.ndarray:
        """Which tasks lie on a critical path (bool, same shape as `durations`): shortening any other task
        cannot shorten the step. Independent: the tasks that tie the slowest."""
        d = np.moveaxis(np.asarray(durations, dtype=float), axis, -1)
        finish = self.finish_times(d)
        step = finish.max(axis=-1, keepdims=True)
        # latest finish each task may have without delaying the step, walked backwards through the graph
        latest = np.broadcast_to(step, finish.shape).copy()
        for i in reversed(self.order):
            for j in self.after[i]:
                latest[..., j] = np.minimum(latest[..., j], latest[..., i] - d[..., i])
        tol = rtol * np.maximum(1.0, np.abs(step))
        return np.moveaxis(finish >= latest - tol, -1, axis)


def _topological_order(after: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Kahn's order (lowest index first among the ready), or a StructureError naming a task on a cycle."""
    n = len(after)
    waiting = [len(preds) for preds in after]
    followers: list[list[int]] = [[] for _ in range(n)]
    for i, preds in enumerate(after):
        for j in preds:
            followers[j].append(i)
    ready = [i for i in range(n) if waiting[i] == 0]
    order: list[int] = []
    while ready:
        ready.sort()
        i = ready.pop(0)
        order.append(i)
        for k in followers[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
    if len(order) < n:
        stuck = min(i for i in range(n) if i not in order)
        raise StructureError(f"the tasks wait for each other in a cycle (task {stuck} is on or behind one)", stuck)
    return tuple(order)

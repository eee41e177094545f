"""Learning a job's step structure from when its tasks computed.

Given each task's wall-clock start and end of its compute in every step, task j is taken to wait for
task i when, in most steps, j starts only once i has ended (within a tolerance). That relation is
transitive in a pipeline (c starts after a ends when b sits between them), so only its transitive
reduction is kept: the direct waits. Independent tasks start together and overlap, so they get no edge;
a hub starts after its last leaf, so it waits for every leaf.

Timings files (`{run_dir}/timings-<task>.jsonl`): one JSON line per step, ``{"step": 3, "start": t0,
"end": t1}`` (wall-clock seconds; ``start_s``/``end_s`` are read too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.structure import StepStructure


def learn_structure(
    start_s: np.ndarray, end_s: np.ndarray, tolerance_s: float = 1e-3, agreement: float = 0.8
) -> StepStructure:
    """The direct waits between tasks, from when each computed.

    start_s, end_s: (steps, tasks) wall-clock seconds of each task's compute in each step (NaN where a
    step was not seen; such steps do not vote). tolerance_s: how far before i's end j may start and still
    count as after it (clock skew, reporting delay). agreement: the share of the steps seen by both tasks
    in which j must start after i ends (above one half, so two tasks never wait for each other)."""
    start_s, end_s = np.asarray(start_s, dtype=float), np.asarray(end_s, dtype=float)
    if start_s.shape != end_s.shape or start_s.ndim != 2:
        raise ValueError(
            f"expected start and end times of one shape (steps, tasks), got {start_s.shape}, {end_s.shape}"
        )
    if not 0.5 < agreement <= 1.0:
        raise ValueError(f"expected an agreement in (0.5, 1], got {agreement}")
    # follows[s, i, j]: in step s, j started once i had ended
    follows = start_s[:, None, :] >= end_s[:, :, None] - tolerance_s
    seen = np.isfinite(start_s[:, None, :]) & np.isfinite(end_s[:, :, None])
    votes = (follows & seen).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
    after = (votes >= agreement) & (seen.sum(axis=0) > 0)
    np.fill_diagonal(after, False)
    return StepStructure(
        tuple(tuple(int(i) for i in np.nonzero(_reduce(after)[:, j])[0]) for j in range(after.shape[0]))
    )


def _reduce(after: np.ndarray) -> np.ndarray:
    """Transitive reduction of after[i, j] (j waits for i): drop i -> j when i -> k -> j for some k."""
    n = after.shape[0]
    reach = after.copy()
    for k in range(n):  # Warshall: every wait, direct or through others
        reach |= reach[:, k : k + 1] & reach[k : k + 1, :]
    through = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0  # i reaches j through some k
    out: np.ndarray = after & ~through
    return out


def read_timings(run_dir: str | Path, task_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each task's `timings-<task>.jsonl` in `run_dir` -> (start_s, end_s), (steps, tasks), NaN where a task
    reported no such step. A file that is missing or not of that form is an InputError naming it."""
    rows: list[dict[int, tuple[float, float]]] = []
    for name in task_names:
        path = Path(run_dir) / f"timings-{name}.jsonl"
        if not path.is_file():
            raise InputError(f"no timings file for task '{name}' (expected {path.name})", path=path)
        steps: dict[int, tuple[float, float]] = {}
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                start = float(rec["start"] if "start" in rec else rec["start_s"])
                end = float(rec["end"] if "end" in rec else rec["end_s"])
                steps[int(rec["step"])] = (start, end)
            except (ValueError, KeyError, TypeError):
                raise InputError(
                    'expected one JSON object per line, {"step": N, "start": seconds, "end": seconds}, '
                    f"got {line[:80]!r}",
                    path=path,
                    field=f"line {lineno}",
                ) from None
        rows.append(steps)
    n_steps = 1 + max((s for r in rows for s in r), default=-1)
    start_s = np.full((n_steps, len(task_names)), np.nan)
    end_s = np.full_like(start_s, np.nan)
    for t, steps in enumerate(rows):
        for s, (a, b) in steps.items():
            if s >= 0:
                start_s[s, t], end_s[s, t] = a, b
    return start_s, end_s

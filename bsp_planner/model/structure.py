"""Learning a job's step structure from when its tasks computed.

Given each task's wall-clock start and end of its compute in every step, task j is taken to wait for
task i when, in most steps, j starts only once i has ended (within a tolerance). That relation is
transitive in a pipeline (c starts after a ends when b sits between them), so only its transitive
reduction is kept: the direct waits. Independent tasks start together and overlap, so they get no edge;
a hub starts after its last leaf, so it waits for every leaf. Starting after is not yet waiting: in a
federation whose members may run ahead (a HELICS ring), a fast task can end step t before a slow one
begins it. So a task keeps its waits only where it was held by them: in most steps it starts within
`max_gap_s` of its last predecessor's end.

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
    start_s: np.ndarray,
    end_s: np.ndarray,
    tolerance_s: float = 1e-3,
    agreement: float = 0.8,
    max_gap_s: float | None = None,
) -> StepStructure:
    """The direct waits between tasks, from when each computed.

    start_s, end_s: (steps, tasks) wall-clock seconds of each task's compute in each step (NaN where a
    step was not seen; such steps do not vote). tolerance_s: how far before i's end j may start and still
    count as after it (clock skew, reporting delay). agreement: the share of the steps seen by both tasks
    in which j must start after i ends (above one half, so two tasks never wait for each other).
    max_gap_s: how soon after its last predecessor's end a waiting task starts (the exchange of the values
    it waited for); None: a tenth of the median step (first start to last end)."""
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
    direct = _reduce(after)
    if max_gap_s is None:
        span = np.nanmax(end_s, axis=1) - np.nanmin(start_s, axis=1)
        max_gap_s = 0.1 * float(np.nanmedian(span)) if np.isfinite(span).any() else 0.0
    for j in range(direct.shape[0]):
        preds = np.nonzero(direct[:, j])[0]
        if preds.size:  # held by them: started soon after the last of them ended, in most steps
            gap = start_s[:, j] - end_s[:, preds].max(axis=1)
            seen_j = np.isfinite(gap)
            if not seen_j.any() or (gap[seen_j] <= max_gap_s + tolerance_s).mean() < agreement:
                direct[:, j] = False
    return StepStructure(tuple(tuple(int(i) for i in np.nonzero(direct[:, j])[0]) for j in range(direct.shape[0])))


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

"""The `exact` allocator: the configuration that minimises a frame's (weighted) predicted time, by MILP.

Every frame is solved by `exact_frame.solve_frame`, on the model of `exact_model` shrunk with the
bounds of `exact_bounds`, by HiGHS (`exact_highs`). Here: the allocator interface over it, with
frames seen before answered from a cache and incumbents shared between the frames of a batch.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import InputError
from .base import Allocator
from .exact_frame import FrameSolution, check_frame, solve_frame
from .floor import floor_levels
from .greedy import GreedyAllocator


@dataclass
class ExactStats:
    milps: int = 0  # frames that needed the MILP
    cache_hits: int = 0


@dataclass
class _Batch:
    """A batch of frames: durations (B, tasks, levels, k), weights (B, j), and per frame still to solve
    its cache key and the indices of its weighted steps."""

    durations: np.ndarray
    weights: np.ndarray
    max_level: np.ndarray  # (tasks,) as given
    M: np.ndarray  # (tasks,) within the table
    budget_steps: int
    keys: dict[int, bytes] = field(default_factory=dict)
    active: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int) -> _Batch:
        durations = np.asarray(durations, dtype=np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        if durations.ndim != 4 or weights.ndim != 2 or weights.shape[0] != durations.shape[0]:
            raise InputError(
                f"expected durations (B, tasks, levels, k) and weights (B, j), got {durations.shape} and {weights.shape}",
                field="durations",
            )
        max_level = np.asarray(max_level, dtype=np.int64)
        check_frame(durations[0], weights[0], max_level, budget_steps)  # also a frame beyond the horizon
        return cls(durations, weights, max_level, np.minimum(max_level, durations.shape[2] - 1), budget_steps)


class ExactAllocator(Allocator):
    """Allocator interface over `solve_frame`.

    Incumbents for a frame: greedy's configuration, recent exact solutions, and the solutions of its
    sub-frames solved before: cut the frame after m steps, and when both parts are in the cache, its
    optimum is at least the sum of theirs (one configuration serves both parts), a lower bound that
    often proves an incumbent optimal without a MILP. Offline planners solve j = 1, 2, ... in turn, and
    with perfect knowledge the frame [t+m, t+j) is exactly a part of [t, t+j); MPC's and padded batches
    hold their own sub-frames, so a batch is solved shortest frames first. Frames seen before are
    answered from the cache (keyed by a digest of the durations, weights relative to the first,
    levels and budget). Frames of one length are solved on `threads` threads (HiGHS releases the GIL);
    every frame's incumbents are fixed before its group starts, so results do not depend on thread
    timing.
    """

    name = "exact"

    def __init__(self, cache_size: int = 500_000, threads: int | None = None) -> None:
        self.cache_size = cache_size
        self.threads = max(1, min(4, os.cpu_count() or 1)) if threads is None else max(1, int(threads))
        self._cache: OrderedDict[bytes, tuple[np.ndarray, float]] = OrderedDict()  # levels, proven bound
        self._pool: deque[np.ndarray] = deque(maxlen=16)
        self._greedy = GreedyAllocator()
        self.stats = ExactStats()

    @staticmethod
    def _key(d: np.ndarray, w: np.ndarray, M: np.ndarray, budget: int) -> bytes:
        """Digest of a frame: durations of its weighted steps, weights relative to the first (a frame's
        optimum scales with its weights, so a sub-frame and the frame that starts there share a key)."""
        h = hashlib.blake2b(digest_size=20)
        rel = np.round(np.asarray(w, dtype=np.float64) / w[0], 12) if len(w) else np.zeros(0)
        for part in (
            np.int64(budget),
            np.ascontiguousarray(M, dtype=np.int64),
            rel,
            np.int64(d.shape[1]),
            np.ascontiguousarray(d),
        ):
            h.update(part.tobytes())
        return h.digest()

    @staticmethod
    def _splits(ka: int) -> list[int]:
        """Where to cut a frame of ka weighted steps for sub-frame bounds (all cuts for short frames)."""
        if ka <= 12:
            return list(range(1, ka))
        return sorted({1, 2, 3, ka // 3, ka // 2, (2 * ka) // 3, ka - 3, ka - 2, ka - 1})

    def _sub_frames(
        self, d: np.ndarray, w: np.ndarray, M: np.ndarray, budget: int
    ) -> tuple[float | None, list[np.ndarray]]:
        """Lower bound and incumbents from solved sub-frames: for a cut m, the frame's optimum is at
        least the optimum of its first m steps plus that of the rest (one configuration serves both),
        each known from the cache (a one-step part: its floor)."""
        ka = d.shape[2]
        floors = None
        best, cands = None, []
        for m in self._splits(ka):
            parts = []
            for a, b in ((0, m), (m, ka)):
                if b - a == 1:
                    if floors is None:
                        floors = floor_levels(d, M, budget)[1]
                    parts.append(w[a] * floors[a])
                    continue
                hit = self._cache.get(self._key(d[:, :, a:b], w[a:b], M, budget))
                if hit is None:
                    break
                cands.append(hit[0])
                parts.append(w[a] * hit[1])
            else:
                v = parts[0] + parts[1]
                best = v if best is None else max(best, v)
        return best, cands

    def allocate_batch(
        self, durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int
    ) -> np.ndarray:
        batch = _Batch.of(durations, weights, max_level, budget_steps)
        b, n = batch.durations.shape[:2]
        out = np.empty((b, n), dtype=np.int64)
        todo = self._answer_from_cache(batch, out)
        if todo:
            # Greedy is one vectorised pass over a batch (cheap per frame); for one or two frames the
            # starts that solve_frame always tries are as good and far cheaper.
            greedy: list[np.ndarray | None] = [None] * len(todo)
            if len(todo) >= 4:
                idx = np.array(todo)
                j = batch.weights.shape[1]
                greedy = list(
                    self._greedy.allocate_batch(
                        batch.durations[idx][:, :, :, :j], batch.weights[idx], batch.max_level, budget_steps
                    )
                )
            greedy_of = dict(zip(todo, greedy, strict=True))
            # Shorter frames first: a batch often holds the sub-frames of its longer frames (MPC's
            # windows, padded rows), whose solutions then bound and seed the longer ones.
            by_len: dict[int, list[int]] = {}
            for f in todo:
                by_len.setdefault(batch.active[f].size, []).append(f)
            for ka in sorted(by_len):
                self._solve_group(batch, by_len[ka], greedy_of, out)
        return out

    def _answer_from_cache(self, batch: _Batch, out: np.ndarray) -> list[int]:
        """Fill out[f] for every frame seen before; returns the others, noting their keys."""
        todo = []
        for f in range(batch.durations.shape[0]):
            act = np.nonzero(batch.weights[f] > 0)[0]
            key = self._key(batch.durations[f][:, :, act], batch.weights[f][act], batch.M, batch.budget_steps)
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                out[f] = hit[0]
                self.stats.cache_hits += 1
                continue
            todo.append(f)
            batch.keys[f], batch.active[f] = key, act
        return todo

    def _solve_group(
        self, batch: _Batch, frames: list[int], greedy_of: dict[int, np.ndarray | None], out: np.ndarray
    ) -> None:
        """Solve frames with the same number of weighted steps (on `threads` threads), each seeded with
        its sub-frames' solutions, greedy's configuration and the recent pool fixed before any starts."""
        d_all, w_all, M, budget_steps = batch.durations, batch.weights, batch.M, batch.budget_steps
        j = w_all.shape[1]
        pool = list(self._pool)
        jobs = []
        for f in frames:
            act = batch.active[f]
            g = greedy_of[f]
            lower: float | None = None
            subs: list[np.ndarray] = []
            if act.size > 1:
                lower, subs = self._sub_frames(d_all[f][:, :, act], w_all[f][act], M, budget_steps)
            cands = subs + ([] if g is None else [g]) + pool
            jobs.append((f, np.array(cands) if cands else None, lower))

        def run(job: tuple[int, np.ndarray | None, float | None]) -> FrameSolution:
            f, cands, lower = job
            return solve_frame(
                d_all[f][:, :, :j],
                w_all[f],
                batch.max_level,
                budget_steps,
                incumbents=cands,
                lower_bound=lower,
            )

        if self.threads > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(self.threads) as ex:
                sols = list(ex.map(run, jobs))
        else:
            sols = [run(job) for job in jobs]
        for (f, _, _), sol in zip(jobs, sols, strict=True):
            out[f] = sol.levels
            if sol.method == "milp":
                self.stats.milps += 1
            if not any(np.array_equal(p, sol.levels) for p in self._pool):
                self._pool.append(sol.levels.copy())  # the oldest drops out
            first_w = w_all[f][batch.active[f][0]] if batch.active[f].size else 1.0
            self._cache[batch.keys[f]] = (sol.levels.copy(), sol.bound / first_w)  # bound per unit first weight
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

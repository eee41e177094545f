"""The `exact` allocator: the configuration that minimises a frame's (weighted) predicted time, by MILP.

For a frame of k steps with weights w_k (discount**k, 0 for steps outside the frame), choose a level
l_i in 0..max_i for every task so that sum_k w_k max_i d[i, l_i, k] is minimal and sum_i l_i <= budget.
Solved with `scipy.optimize.milp` (HiGHS) on a formulation that uses durations being non-increasing
in CPU:

* y[i, l] in {0, 1}, l = lo_i+1..hi_i: "task i runs at level >= l" (y[i, l] >= y[i, l+1]); the level is
  lo_i + sum_l y[i, l] and the budget is sum_i lo_i + sum y <= budget.
* For every step k, the candidate step times are the table's own durations T_k,0 > T_k,1 > ...; a
  continuous v[k, t] in [0, 1] says "step k takes at most T_k,t" (v[k, t] >= v[k, t+1]). Reaching
  T_k,t needs every task at the level where its duration first drops to T_k,t or below:
  v[k, t] <= y[i, need_i(T_k,t)], written only where need_i changes (the chains imply the rest).
* Objective: sum_k w_k (T_k,top - sum_t (T_k,t-1 - T_k,t) v[k, t]), i.e. each step's time.

Without the budget row this is a closure problem (its LP is integral), so the LP bound is weak only
through the one budget row, far tighter than the textbook "one binary per task and level, z_k >= sum_l
d x" model (which is also built here, `formulation="assignment"`, for comparison and tests).

Before the solver runs, the model is shrunk with bounds from an incumbent (the best of: greedy's
configuration in batches, recent exact solutions, the same frame one step shorter, and the min-max
configuration of the frame's mean durations, then improved by local search; within ~0.05% of the
optimum and often optimal): with task i at level l, the others share budget - l, so step k takes at
least max(d[i, l, k], floor of the others at budget - l); a level whose bound over the frame exceeds
the incumbent's time cannot be optimal (three rounds; 60 levels typically shrink to 10-20 per task).
The incumbent's time is handed to HiGHS as its objective bound (pass-through option), so HiGHS prunes
every node that cannot beat it and mostly has to prove that nothing does. The better of the MILP
solution and the incumbent is returned and the gap is 1e-9, so `exact` is never worse than `greedy`.
Leftover budget (when more CPU would not shorten the frame) is handed out afterwards, which never
lengthens a step.

Frames with one weighted step are solved in closed form (the per-step min-max, as `floor`), frames
seen before come from a cache, and a solver failure or time limit raises `ExactSolverError` with the
best bound and gap: never a silent greedy answer.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp
from scipy.sparse import csr_array

from ..core.errors import InputError
from .base import Allocator, frame_time
from .floor import floor_levels
from .greedy import GreedyAllocator


def _quiet_highs_options() -> None:
    """Options beyond scipy's documented five are handed to HiGHS verbatim, with a warning we expect.
    A filter (re-)installed before each solve, not warnings.catch_warnings: that is not thread-safe,
    and batches run on threads; re-adding an identical filter replaces it, so the list does not grow."""
    warnings.filterwarnings("ignore", message="Unrecognized options detected", category=RuntimeWarning)


_quiet_highs_options()

#: Relative optimality gap HiGHS must close (of the frame's weighted time): numerically exact. With the
#: incumbent's time as objective bound HiGHS mostly proves "nothing below", so a looser gap saves nothing.
DEFAULT_REL_GAP = 1e-9
#: Seconds one frame may take before the solver gives up and ExactSolverError is raised.
DEFAULT_TIME_LIMIT_S = 60.0


class ExactSolverError(InputError):
    """The MILP did not finish: time limit, node limit or a solver failure, with what it had proved."""

    def __init__(self, message: str, *, bound: float | None = None, incumbent: float | None = None) -> None:
        self.bound = bound
        self.incumbent = incumbent
        super().__init__(message, field="planner.allocator")


@dataclass
class FrameSolution:
    levels: np.ndarray  # (tasks,) level indices
    value: float  # weighted frame time of `levels`
    bound: float  # proven lower bound on the frame's optimum (>= cutoff when nothing beat it)
    optimal: bool  # value is optimal within the gap (False: only `bound` was proved, see cutoff)
    method: str  # milp | incumbent (proved optimal by bounds) | bounds | single-step | all-max | empty | cutoff
    nodes: int = 0
    seconds: float = 0.0
    milp_seconds: float = 0.0


@dataclass
class ExactStats:
    frames: int = 0
    milps: int = 0
    cache_hits: int = 0
    closed_form: int = 0
    proved_by_bounds: int = 0
    improved_on_greedy: int = 0
    milp_seconds: float = 0.0
    seconds: float = 0.0
    nodes: int = 0
    milp_times: list[float] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------
# Bounds from per-step floors


def need_counts(d: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """d (n, L, k) non-increasing along L; thresholds (c, k). Returns (n, c, k): for every task, the
    number of levels whose duration exceeds the threshold, i.e. the first level that reaches it
    (L when none does)."""
    n, L, k = d.shape
    out = np.empty((n, thresholds.shape[0], k), dtype=np.int64)
    asc = d[:, ::-1, :]
    for i in range(n):
        for kk in range(k):
            out[i, :, kk] = L - np.searchsorted(asc[i, :, kk], thresholds[:, kk], side="right")
    return out


def floors_without_each_task(
    d: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every task i, the per-step floor of the other tasks when they share b budget steps:
    fm[i, b, k] = min over their configurations (levels in lo..hi, sum <= b) of their slowest time at
    step k (inf when b < the sum of their minimum levels). Also returns the floor of all tasks (k,).

    A time T is reachable at step k iff sum_j max(lo_j, need_j(T)) <= b with need_j(T) <= hi_j, so the
    floor is the smallest candidate T (one of the table's durations) that passes, found by a search
    over the candidates sorted by T, for all tasks, budgets and steps at once."""
    n, L, k = d.shape
    cand = np.sort(d.reshape(n * L, k), axis=0)  # (c, k) ascending
    c = cand.shape[0]
    unreachable = budget + 1  # more than any budget: a task that cannot reach T
    need = need_counts(d, cand)  # (n, c, k)
    need = np.maximum(need, lo[:, None, None])
    need = np.where(need > hi[:, None, None], unreachable, need)
    total = need.sum(axis=0)  # (c, k), non-increasing along c
    ok = total <= budget
    first = np.where(ok.any(axis=0), ok.argmax(axis=0), c - 1)
    floor_all = cand[first, np.arange(k)]
    others = np.minimum(total[None] - need, unreachable)  # (n, c, k), non-increasing along c
    # For each (i, k) and b: the first c with others <= b, by one search over -others with the
    # groups (i, k) laid end to end (integers, so the offsets are exact).
    g = n * k
    span = 2 * (unreachable + 1)
    offs = (np.arange(g, dtype=np.int64) * span).reshape(n, k, 1)
    arr = (-others.transpose(0, 2, 1) + offs).ravel()
    q = (-np.arange(budget + 1, dtype=np.int64)[None, None, :] + offs).ravel()
    pos = np.searchsorted(arr, q, side="left").reshape(n, k, budget + 1) - np.arange(g).reshape(n, k, 1) * c
    vals = np.where(pos < c, cand[np.minimum(pos, c - 1), np.arange(k)[None, :, None]], np.inf)
    return vals.transpose(0, 2, 1), floor_all  # (n, budget+1, k), (k,)


def level_bound_terms(d: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """G[i, l, k] = max(d[i, l, k], floor of the others at budget - l): a lower bound on step k's time
    whenever task i runs at level l (inf outside lo_i..hi_i). Returns (G, floor of all tasks)."""
    n, L, k = d.shape
    fm, floor_all = floors_without_each_task(d, lo, hi, budget)
    lv = np.arange(L)
    rest = np.clip(budget - lv, 0, budget)
    G = np.maximum(d, fm[:, rest, :])  # (n, L, k)
    bad = (lv[None, :] < lo[:, None]) | (lv[None, :] > hi[:, None]) | (lv[None, :] > budget)
    G[bad] = np.inf
    return G, floor_all


def shrink_levels(
    lb: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, limit: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Keep the levels whose bound lb[i, l] (n, L) does not exceed `limit`; then no task may take so
    much that the others cannot reach their lowest remaining level. Returns (lo, hi) or None if some
    task has no level left (nothing can beat `limit`)."""
    ok = lb <= limit
    if not np.all(ok.any(axis=1)):
        return None
    L = lb.shape[1]
    lo2 = np.maximum(lo, ok.argmax(axis=1))
    hi2 = np.minimum(hi, L - 1 - ok[:, ::-1].argmax(axis=1))
    hi2 = np.minimum(hi2, budget - (lo2.sum() - lo2))
    if np.any(hi2 < lo2) or lo2.sum() > budget:
        return None
    return lo2, hi2


def proportional_floor(d: np.ndarray, max_level: np.ndarray, budget: int, floor_k: np.ndarray) -> np.ndarray:
    """A start that sees across plateaus (where one more CPU step gains nothing but several do, which
    greedy and small moves cannot cross): every step aims at the same multiple a of its own floor,
    each task takes the fewest levels that reach a x floor_k at all its steps, and a is the smallest
    multiple (bisection) whose levels fit the budget."""

    def levels_for(a: float) -> np.ndarray:
        levels: np.ndarray = (d > a * floor_k[None, None, :]).sum(axis=1).max(axis=1)  # (n,)
        return levels

    lo, hi = 1.0, float(np.max(d[:, 0, :].max(axis=0) / floor_k)) * (1 + 1e-12) + 1e-12
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lv = levels_for(mid)
        if np.all(lv <= max_level) and lv.sum() <= budget:
            hi = mid
        else:
            lo = mid
    lv = levels_for(hi)
    if np.any(lv > max_level) or lv.sum() > budget:  # only rounding could get here: start from nothing
        return np.zeros_like(max_level)
    return lv


def _moves(
    n: int, pair_steps: tuple[int, ...] = (1, 2, 3, 5, 8), triple_steps: tuple[int, ...] = (1, 2, 3)
) -> tuple[np.ndarray, np.ndarray]:
    """Level changes that keep the budget: CPU steps from one task to another, and from one task to
    two others (or from two to one). Returns (pair moves, triple moves), each (moves, n)."""
    pairs = []
    for a in range(n):
        for b in range(n):
            if a != b:
                for dl in pair_steps:
                    v = np.zeros(n, dtype=np.int64)
                    v[a], v[b] = -dl, dl
                    pairs.append(v)
    triples = []
    for a in range(n):
        others = [x for x in range(n) if x != a]
        for bi in range(len(others)):
            for ci in range(bi + 1, len(others)):
                b, c = others[bi], others[ci]
                for d1 in triple_steps:
                    for d2 in triple_steps:
                        v = np.zeros(n, dtype=np.int64)
                        v[a], v[b], v[c] = -(d1 + d2), d1, d2
                        triples.append(v)
                        triples.append(-v)
    empty = np.zeros((0, n), dtype=np.int64)
    return (np.array(pairs) if pairs else empty), (np.array(triples) if triples else empty)


_MOVES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def local_search(
    d: np.ndarray, w: np.ndarray, levels: np.ndarray, max_level: np.ndarray, budget: int, max_rounds: int = 200
) -> tuple[np.ndarray, float]:
    """Improve a configuration by moving CPU steps between two tasks (or from unused budget) while the
    frame gets shorter, then, when no such move helps, between three; every candidate move of a round
    is evaluated at once. Only a better incumbent for the MILP (tighter bounds, earlier pruning);
    optimality is the MILP's job."""
    n = levels.size
    if n not in _MOVES:
        _MOVES[n] = _moves(n)
    pairs, triples = _MOVES[n]
    tasks = np.arange(n)[None, :]
    dw = d * w[None, None, :]  # weights are >= 0, so max_i(d) * w == max_i(d * w) step by step

    def times(cand: np.ndarray) -> np.ndarray:  # (P, n) -> (P,) weighted frame times
        weighted: np.ndarray = dw[tasks, cand].max(axis=1).sum(axis=1)
        return weighted

    gains = {id(pairs): pairs > 0, id(triples): triples > 0}
    lv = levels.copy()
    cur = float(times(lv[None])[0])
    eye = np.eye(n, dtype=np.int64)
    use_triples = False
    for _ in range(max_rounds):
        moves = triples if use_triples else pairs
        # More CPU shortens a step only for the task that is slowest there: moves that give CPU to a
        # task that is never the slowest cannot help, so only the slowest tasks receive.
        per_task = dw[np.arange(n), lv, :]  # (n, k)
        slowest = np.any(per_task >= per_task.max(axis=0, keepdims=True), axis=1)
        moves = moves[~np.any(gains[id(moves)] & ~slowest[None, :], axis=1)]
        cand = lv[None] + moves
        if lv.sum() < budget:
            cand = np.concatenate([cand, lv[None] + eye])
        ok = np.all(cand >= 0, axis=1) & np.all(cand <= max_level[None], axis=1) & (cand.sum(axis=1) <= budget)
        cand = cand[ok]
        if len(cand):
            vals = times(cand)
            j = int(np.argmin(vals))
            if vals[j] < cur - 1e-13 * abs(cur):
                lv, cur = cand[j], float(vals[j])
                use_triples = False
                continue
        if use_triples or not len(triples):
            break
        use_triples = True
    return lv, float(frame_time(d, lv, w))


# ----------------------------------------------------------------------------------------------------
# The MILP


@dataclass
class _Model:
    c: np.ndarray
    A: csr_array
    row_lo: np.ndarray
    row_hi: np.ndarray
    integrality: np.ndarray
    var_lo: np.ndarray
    var_hi: np.ndarray
    constant: float
    decode: Callable[[np.ndarray], np.ndarray]  # x -> levels


class _CooRows:
    """Constraint rows collected as COO pieces (row, column, value), numbered as they are added."""

    def __init__(self) -> None:
        self.R: list[np.ndarray] = []
        self.C: list[np.ndarray] = []
        self.V: list[np.ndarray] = []
        self.count = 0

    def add_pairs(self, a: np.ndarray, b: np.ndarray) -> None:
        """Rows x[a] - x[b] >= 0, one per pair."""
        m = a.size
        self.R.append(np.repeat(np.arange(self.count, self.count + m), 2))
        self.C.append(np.stack([a, b], axis=1).ravel())
        self.V.append(np.tile([1.0, -1.0], m))
        self.count += m

    def add_row(self, cols: np.ndarray, values: np.ndarray) -> int:
        """One row sum values * x[cols]; returns its index."""
        self.R.append(np.full(cols.size, self.count))
        self.C.append(cols)
        self.V.append(values)
        self.count += 1
        return self.count - 1

    def matrix(self, n_vars: int) -> csr_array:
        return csr_array(
            (np.concatenate(self.V), (np.concatenate(self.R), np.concatenate(self.C))), shape=(self.count, n_vars)
        )


@dataclass
class _Thresholds:
    """The candidate step times of the threshold model, all steps laid end to end: (nv,) arrays."""

    T: np.ndarray  # the thresholds, descending within each step
    step: np.ndarray  # the step each belongs to
    first_of_step: np.ndarray  # bool: the step's first (highest) threshold
    cost: np.ndarray  # objective coefficient of its v: -w_k (previous threshold - T)


def _step_thresholds(
    d: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, top: np.ndarray, bottom: np.ndarray
) -> _Thresholds:
    """Candidate thresholds per step: durations at allowed levels in [bottom, top), descending."""
    n, L, k = d.shape
    lv = np.arange(L)
    allowed = (lv[None, :, None] >= lo[:, None, None]) & (lv[None, :, None] <= hi[:, None, None])
    vals = np.where(allowed & (d < top[None, None, :]) & (d >= bottom[None, None, :]), d, np.nan)  # (n, L, k)
    flat = vals.transpose(2, 0, 1).reshape(k, n * L)
    step_of = np.repeat(np.arange(k), n * L)
    keep = ~np.isnan(flat.ravel())
    sv, sk = flat.ravel()[keep], step_of[keep]
    order = np.lexsort((-sv, sk))
    sv, sk = sv[order], sk[order]
    uniq = np.ones(sv.size, dtype=bool)
    uniq[1:] = (sk[1:] != sk[:-1]) | (sv[1:] != sv[:-1])
    T, Tk = sv[uniq], sk[uniq]
    first_of_step = np.ones(T.size, dtype=bool)
    first_of_step[1:] = Tk[1:] != Tk[:-1]
    prev_T = np.where(first_of_step, top[Tk], np.concatenate([[0.0], T[:-1]]))
    return _Thresholds(T, Tk, first_of_step, -w[Tk] * (prev_T - T))


def build_threshold_model(
    d: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, floor_k: np.ndarray
) -> _Model:
    """The closure + budget model described in the module docstring, on levels lo..hi."""
    n, L, k = d.shape
    ar = np.arange(n)
    ny_i = hi - lo
    yoff = np.concatenate([[0], np.cumsum(ny_i)]).astype(np.int64)
    ny = int(yoff[-1])
    rows = _CooRows()
    # y chains: y[i, l] >= y[i, l+1]
    task_of = np.repeat(ar, ny_i)
    idx = np.arange(ny)
    not_last = np.ones(ny, dtype=bool)
    not_last[yoff[1:][ny_i > 0] - 1] = False
    a = idx[not_last]
    rows.add_pairs(a, a + 1)
    budget_row = rows.add_row(idx, np.ones(ny))
    top = d[ar, lo, :].max(axis=0)  # (k,)
    bottom = np.maximum(floor_k, d[ar, hi, :].max(axis=0))
    constant = float(np.dot(w, top))
    th = _step_thresholds(d, w, lo, hi, top, bottom)
    T, Tk, first_of_step = th.T, th.step, th.first_of_step
    nv = T.size
    vid = ny + np.arange(nv)
    # v chains within a step
    chain = ~first_of_step
    rows.add_pairs(vid[np.nonzero(chain)[0] - 1], vid[chain])
    # links: need_i(T) per threshold; keep rows where need increases along the step's thresholds
    if nv:
        dk = d[:, :, Tk]  # (n, L, nv)
        need = (dk > T[None, None, :]).sum(axis=1)  # (n, nv)
        need = np.maximum(need, lo[:, None])
        prev_need = np.where(first_of_step[None, :], lo[:, None], np.concatenate([lo[:, None], need[:, :-1]], axis=1))
        ii, tt = np.nonzero(need > prev_need)
        yidx = yoff[ii] + need[ii, tt] - lo[ii] - 1
        rows.add_pairs(yidx, vid[tt])
    r = rows.count
    row_lo = np.zeros(r)
    row_hi = np.full(r, np.inf)
    row_lo[budget_row] = -np.inf
    row_hi[budget_row] = budget - lo.sum()
    c = np.concatenate([np.zeros(ny), th.cost])
    integrality = np.concatenate([np.ones(ny), np.zeros(nv)])

    def decode(x: np.ndarray) -> np.ndarray:
        y = x[:ny] > 0.5
        return lo + np.bincount(task_of[y], minlength=n).astype(np.int64)

    A = rows.matrix(ny + nv)
    return _Model(c, A, row_lo, row_hi, integrality, np.zeros(ny + nv), np.ones(ny + nv), constant, decode)


def build_assignment_model(
    d: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, floor_k: np.ndarray
) -> _Model:
    """The textbook model: x[i, l] binary (one level per task), z_k >= sum_l d[i, l, k] x[i, l]."""
    n, L, k = d.shape
    sizes = hi - lo + 1
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    nx = int(off[-1])
    task_of = np.repeat(np.arange(n), sizes)
    level_of = np.concatenate([np.arange(lo[i], hi[i] + 1) for i in range(n)])
    R = [task_of, np.full(nx, n)]
    Cc = [np.arange(nx), np.arange(nx)]
    V = [np.ones(nx), level_of.astype(float)]
    # z_k - sum_l d x >= 0 for every (i, k)
    rows = n + 1 + task_of[:, None] * k + np.arange(k)[None, :]  # (nx, k)
    R += [rows.ravel(), (n + 1 + np.arange(n * k))]
    Cc += [np.repeat(np.arange(nx), k), nx + np.tile(np.arange(k), n)]
    V += [-d[task_of, level_of, :].ravel(), np.ones(n * k)]
    nrows = n + 1 + n * k
    A = csr_array((np.concatenate(V), (np.concatenate(R), np.concatenate(Cc))), shape=(nrows, nx + k))
    row_lo = np.concatenate([np.ones(n), [-np.inf], np.zeros(n * k)])
    row_hi = np.concatenate([np.ones(n), [budget], np.full(n * k, np.inf)])
    ar = np.arange(n)
    var_lo = np.concatenate([np.zeros(nx), np.maximum(floor_k, d[ar, hi, :].max(axis=0))])
    var_hi = np.concatenate([np.ones(nx), d[ar, lo, :].max(axis=0)])
    c = np.concatenate([np.zeros(nx), w])
    integrality = np.concatenate([np.ones(nx), np.zeros(k)])

    def decode(x: np.ndarray) -> np.ndarray:
        out = lo.copy()
        chosen = x[:nx] > 0.5
        out[task_of[chosen]] = level_of[chosen]
        return out

    return _Model(c, A, row_lo, row_hi, integrality, var_lo, var_hi, 0.0, decode)


FORMULATIONS = {"threshold": build_threshold_model, "assignment": build_assignment_model}


# HiGHS options for every MILP here, passed verbatim (scipy warns that it does not check them). No primal
# heuristics: the incumbent (greedy improved by local search) is already within a fraction of a percent,
# and its time is the objective bound, so HiGHS only has to prove.
_NO_HEURISTICS: dict[str, int | float | bool] = {
    "threads": 1,
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
    "mip_heuristic_run_zi_round": False,
    "mip_heuristic_run_shifting": False,
    "mip_heuristic_run_feasibility_jump": False,
}


def _run_milp(model: _Model, cutoff: float | None, rel_gap: float, time_limit: float, scale: float) -> OptimizeResult:
    """HiGHS through scipy.optimize.milp. `cutoff` (in frame seconds) becomes HiGHS's objective_bound,
    so every node that cannot beat it is pruned; the gap is absolute, rel_gap x scale seconds."""
    options = {"time_limit": float(time_limit), "mip_rel_gap": 0.0, "presolve": True}
    extra = {
        "mip_abs_gap": max(rel_gap * scale, 1e-12),
        **_NO_HEURISTICS,
    }
    if cutoff is not None and np.isfinite(cutoff):
        extra["objective_bound"] = float(cutoff - model.constant)
    constraints = LinearConstraint(model.A, model.row_lo, model.row_hi)
    _quiet_highs_options()
    try:
        return milp(
            model.c,
            constraints=constraints,
            integrality=model.integrality,
            bounds=Bounds(model.var_lo, model.var_hi),
            options={**options, **extra},
        )
    except (AttributeError, ValueError, TypeError):  # a HiGHS build without one of the extras
        return milp(
            model.c,
            constraints=constraints,
            integrality=model.integrality,
            bounds=Bounds(model.var_lo, model.var_hi),
            options=options,
        )


# ----------------------------------------------------------------------------------------------------
# One frame


def check_frame(durations: np.ndarray, weights: np.ndarray, max_level: np.ndarray, budget_steps: int) -> None:
    """The bad inputs every exact solve refuses, with what was expected."""
    if durations.ndim != 3:
        raise InputError(f"expected durations (tasks, levels, steps), got shape {durations.shape}", field="durations")
    n, L, k = durations.shape
    if weights.ndim != 1:
        raise InputError(f"expected weights (steps,), got shape {weights.shape}", field="weights")
    if weights.size > k:
        raise InputError(
            f"a frame of {weights.size} steps is beyond the forecast horizon of {k} steps", field="forecast.horizon"
        )
    if max_level.shape != (n,):
        raise InputError(
            f"expected one maximum level per task ({n}), got shape {max_level.shape}", field="cpu.max_millicores"
        )
    if int(budget_steps) != budget_steps or budget_steps < 0:
        raise InputError(
            f"no feasible configuration: the budget leaves {budget_steps} CPU steps once every task has the "
            "minimum (expected >= 0); raise cpu.budget_millicores or lower cpu.min_millicores",
            field="cpu.budget_millicores",
        )
    if np.any(max_level < 0):
        raise InputError(
            f"no feasible configuration: task {int(np.argmin(max_level))} has no allowed CPU level "
            f"(max level {int(max_level.min())})",
            field="cpu.max_millicores",
        )
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise InputError("expected finite weights >= 0", field="planner.discount")
    if not np.all(np.isfinite(durations[:, :, : weights.size][:, :, weights > 0])):
        raise InputError("durations must be finite (NaN or inf in the predicted table)", field="durations")


def fill_budget(d: np.ndarray, w: np.ndarray, levels: np.ndarray, max_level: np.ndarray, budget: int) -> np.ndarray:
    """Hand out budget the solution left unused, one step at a time to the task with the largest
    weighted time (first among equals). Durations never rise with CPU, so the frame never gets longer."""
    levels = levels.copy()
    left = budget - int(levels.sum())
    n = levels.size
    if left <= 0:
        return levels
    tw = (d * w[None, None, :]).sum(axis=2)  # (n, L)
    rows = np.arange(n)
    while left > 0:
        can = levels < max_level
        if not can.any():
            break
        score = np.where(can, tw[rows, levels], -np.inf)
        i = int(np.argmax(score))
        levels[i] += 1
        left -= 1
    return levels


def solve_frame(
    durations: np.ndarray,
    weights: np.ndarray,
    max_level: np.ndarray,
    budget_steps: int,
    *,
    incumbents: np.ndarray | None = None,
    cutoff: float | None = None,
    rel_gap: float = DEFAULT_REL_GAP,
    time_limit: float = DEFAULT_TIME_LIMIT_S,
    formulation: str = "threshold",
    shrink_rounds: int = 3,
    level_bounds: np.ndarray | None = None,
    lower_bound: float | None = None,
    fill: bool = True,
    search: bool = True,
    floor_steps: np.ndarray | None = None,
    screen: float | None = None,
) -> FrameSolution:
    """The exact configuration of one frame.

    durations (tasks, levels, k) non-increasing in level; weights (j,) with j <= k (0 drops a step);
    incumbents (P, tasks): configurations to start from (e.g. greedy's), the best bounds the search.
    cutoff: only a configuration below this weighted time is wanted; when none exists the result has
    optimal=False and bound >= cutoff (used by `optimum` to prune segments).
    level_bounds (tasks, levels): a known lower bound on the frame's time with task i at level l (inf
    where not allowed), used for the first round of level fixing instead of computing it here;
    shrink_rounds: how many rounds of level fixing (0: hand HiGHS every level).
    lower_bound: a known lower bound on the frame's optimum (the incumbent is optimal if it meets it).
    search: look for a better start than the incumbents (min-max and proportional starts, local
    search); False when the caller's incumbents are already good (`optimum`'s pool): the answer is
    the same, only the bounds HiGHS starts from differ.
    floor_steps: the per-step floor (min-max over all configurations) of the frame's weighted steps,
    when the caller has it; with level_bounds it saves the first round's bound tables.
    screen: the value the caller compares the frame's optimum with (below the cutoff). The model's LP
    relaxation is solved first (a fraction of the MILP's cost: the relaxation is tight but for the
    budget row): an integral LP solution is the MILP's; an LP bound that reaches the cutoff proves
    nothing is below it; one that reaches `screen` is returned as it is (optimal=False, bound below
    the cutoff, method "lp-bound"): the frame cannot beat `screen`, and no MILP is run.
    """
    t0 = time.perf_counter()
    durations = np.asarray(durations, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    max_level = np.asarray(max_level, dtype=np.int64)
    check_frame(durations, weights, max_level, budget_steps)
    L = durations.shape[1]
    active = np.nonzero(weights > 0)[0]
    fr = _Frame(durations[:, :, active], weights[active], np.minimum(max_level, L - 1), int(budget_steps), fill, t0)
    closed = _closed_form(fr)
    if closed is not None:
        return closed
    best_lv, best_v = _incumbent(fr, incumbents) if search else _given_incumbent(fr, incumbents)
    d, w, M, budget = fr.d, fr.w, fr.M, fr.budget
    limit = best_v if cutoff is None else min(best_v, float(cutoff))
    scale = max(abs(best_v) if np.isfinite(best_v) else float(np.dot(w, d.max(axis=(0, 1)))), 1e-9)
    tol = 1e-12 * scale
    inc = _Incumbent(best_lv, best_v, limit, cutoff)

    lo = np.zeros(fr.n, dtype=np.int64)
    hi = np.minimum(M, budget)
    G: np.ndarray | None
    if level_bounds is not None and floor_steps is not None:  # the first round needs no G
        G, floor_k = None, np.asarray(floor_steps, dtype=np.float64)[active]
    else:
        G, floor_k = level_bound_terms(d, lo, hi, budget)
    lb_all = float(np.dot(w, floor_k))
    if lower_bound is not None:
        lb_all = max(lb_all, float(lower_bound))
    if lb_all >= limit - tol:  # the bounds already meet the limit: nothing beats it
        return _proved(fr, inc, lb_all)
    rounds = shrink_rounds if np.isfinite(limit) else 0
    fixed = _fix_levels(fr, G, floor_k, lo, hi, limit + tol, rounds, level_bounds)
    if fixed is None:  # no level of some task can beat the limit: nothing beats it
        return _proved(fr, inc, lb_all)
    lo, hi, floor_k = fixed
    if np.all(lo == hi):
        v = float(frame_time(d, lo, w))
        if v < limit - tol or best_lv is None:
            lv = fill_budget(d, w, lo, M, budget) if fill else lo
            return FrameSolution(lv, float(frame_time(d, lv, w)), v, True, "bounds", seconds=time.perf_counter() - t0)
        return _proved(fr, inc, lb_all)

    model = FORMULATIONS[formulation](d, w, lo, hi, budget, floor_k)
    cut = limit + max(rel_gap * scale, tol) if np.isfinite(limit) else None
    t1 = time.perf_counter()
    if screen is not None:
        screened = _screen_by_lp(fr, inc, model, float(screen), lb_all, scale, tol)
        if screened is not None:
            return screened
        if screen < inc.limit:  # only a configuration below `screen` matters now: a quicker proof
            inc = _Incumbent(best_lv, best_v, float(screen), float(screen))
            cut = float(screen) + max(rel_gap * scale, tol)
    run = _run_milp if screen is None else _run_milp_direct  # the `optimum` DP's hundreds of small MILPs
    res = run(model, cut, rel_gap, time_limit, scale)
    return _milp_solution(fr, inc, model, res, time.perf_counter() - t1, lb_all, tol)


#: How far below HiGHS's LP objective a bound taken from it is put (relative to the frame's time): the
#: LP is solved to floating-point tolerances, and a bound must never exceed the true optimum.
LP_BOUND_MARGIN = 1e-7


def _screen_by_lp(
    fr: _Frame, inc: _Incumbent, model: _Model, screen: float, lb_all: float, scale: float, tol: float
) -> FrameSolution | None:
    """The LP relaxation of `model` as a cheap answer (see solve_frame's `screen`), or None when only
    the MILP can tell."""
    t1 = time.perf_counter()
    res = _run_lp(model)
    lp_s = time.perf_counter() - t1
    if res.status != 0 or res.x is None:
        return None
    y = res.x[model.integrality > 0]
    if np.all(np.abs(y - np.round(y)) <= 1e-9):  # a vertex of the closure polytope: the MILP's optimum
        res.mip_node_count, res.mip_dual_bound = 0, None
        return _milp_solution(fr, inc, model, res, lp_s, lb_all, tol)
    bound = max(float(res.fun + model.constant) - LP_BOUND_MARGIN * scale, lb_all)
    if bound >= inc.limit + tol:  # nothing below the limit (the incumbent, or the cutoff)
        sol = _proved(fr, inc, bound, method="lp")
        sol.milp_seconds = lp_s
        return sol
    bound = min(bound, inc.limit)  # levels were fixed against the limit: the model holds nothing above it
    if bound >= screen:
        lv = inc.levels if inc.levels is not None else np.zeros(fr.n, dtype=np.int64)
        sol = FrameSolution(lv, inc.value, bound, False, "lp-bound", seconds=fr.elapsed())
        sol.milp_seconds = lp_s
        return sol
    return None


_LP_SOLVERS = threading.local()  # one HiGHS instance per thread, reused LP after LP


def _highs_lp(highs, model: _Model):  # type: ignore[no-untyped-def]
    """`model` as the binding's HighsLp (columns, rows, the matrix by columns)."""
    A = model.A.tocsc()
    n, m = model.c.size, model.row_lo.size
    lp = highs.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = model.c, model.var_lo, model.var_hi
    lp.row_lower_, lp.row_upper_ = model.row_lo, model.row_hi
    lp.a_matrix_.format_ = highs.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, m
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    return lp


#: HiGHS's model status -> scipy.optimize.milp's status code (0 optimal, 1 limit, 2 infeasible: nothing
#: below the objective bound, 3 unbounded, 4 other), as `_milp_solution` reads it.
_SCIPY_STATUS = {"kOptimal": 0, "kTimeLimit": 1, "kIterationLimit": 1, "kSolutionLimit": 1, "kInfeasible": 2}


def _run_milp_direct(
    model: _Model, cutoff: float | None, rel_gap: float, time_limit: float, scale: float
) -> OptimizeResult:
    """`_run_milp` (same options, same result fields) straight through the HiGHS binding scipy ships,
    one instance per thread reused: `scipy.optimize.milp` checks and sets a dozen options anew on every
    call, a fifth of a small MILP's time. `_run_milp` itself where that binding is missing."""
    try:
        from scipy.optimize._highspy import _core as highs
    except ImportError:
        return _run_milp(model, cutoff, rel_gap, time_limit, scale)
    h = getattr(_LP_SOLVERS, "milp", None)
    if h is None:
        h = _LP_SOLVERS.milp = highs._Highs()
        for key, value in {
            "output_flag": False,
            "presolve": "on",
            "mip_rel_gap": 0.0,
            **_NO_HEURISTICS,
        }.items():
            h.setOptionValue(key, value)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_abs_gap", max(rel_gap * scale, 1e-12))
    bound = float(cutoff - model.constant) if cutoff is not None and np.isfinite(cutoff) else np.inf
    h.setOptionValue("objective_bound", bound)
    lp = _highs_lp(highs, model)
    lp.integrality_ = [highs.HighsVarType(int(i)) for i in model.integrality]
    h.passModel(lp)
    h.run()
    model_status = h.getModelStatus()
    status = _SCIPY_STATUS.get(model_status.name, 4)
    info = h.getInfo()
    feasible = status in (0, 1) and np.isfinite(info.objective_function_value) and info.primal_solution_status == 2
    x = np.asarray(h.getSolution().col_value, dtype=np.float64) if feasible else None
    return OptimizeResult(
        status=status,
        x=x,
        mip_node_count=int(info.mip_node_count),
        mip_dual_bound=float(info.mip_dual_bound),
        message=h.modelStatusToString(model_status),
    )


def _run_lp(model: _Model) -> OptimizeResult:
    """The LP relaxation of `model` (every variable continuous), by HiGHS: status 0 with x and fun (the
    objective without model.constant) when optimal. Straight through the HiGHS binding scipy ships,
    one instance reused: `scipy.optimize.milp` checks and sets every option anew on each call, as
    long as HiGHS takes to solve an LP of a hundred variables. `milp` where that binding is missing."""
    try:
        from scipy.optimize._highspy import _core as highs
    except ImportError:  # another scipy layout: the public route
        return milp(
            model.c,
            constraints=LinearConstraint(model.A, model.row_lo, model.row_hi),
            integrality=np.zeros_like(model.integrality),
            bounds=Bounds(model.var_lo, model.var_hi),
            options={"presolve": True},
        )
    h = getattr(_LP_SOLVERS, "highs", None)
    if h is None:
        h = _LP_SOLVERS.highs = highs._Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("presolve", "off")  # a hundred variables, already cut down by level fixing
    h.passModel(_highs_lp(highs, model))
    h.run()
    if h.getModelStatus() != highs.HighsModelStatus.kOptimal:
        return OptimizeResult(status=1, x=None, fun=None)
    x = np.asarray(h.getSolution().col_value, dtype=np.float64)
    return OptimizeResult(status=0, x=x, fun=float(h.getInfo().objective_function_value))


@dataclass
class _Frame:
    """One frame's problem with only its weighted steps: d (tasks, levels, k), w (k,), M (tasks,)."""

    d: np.ndarray
    w: np.ndarray
    M: np.ndarray  # the highest level each task may take, within the table
    budget: int
    fill: bool  # hand out leftover budget in the answer
    t0: float  # when solving began (perf_counter)

    @property
    def n(self) -> int:
        return int(self.d.shape[0])

    def filled(self, levels: np.ndarray) -> np.ndarray:
        return fill_budget(self.d, self.w, levels, self.M, self.budget) if self.fill else levels

    def time_of(self, levels: np.ndarray) -> float:
        return float(frame_time(self.d, levels, self.w))

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


@dataclass
class _Incumbent:
    """The best configuration known before the MILP, and what a solution must beat."""

    levels: np.ndarray | None
    value: float
    limit: float  # min(value, cutoff)
    cutoff: float | None


def _closed_form(fr: _Frame) -> FrameSolution | None:
    """The frames that need no search: no weighted step, everyone at the maximum, or one step."""
    d, w, M, budget, n = fr.d, fr.w, fr.M, fr.budget, fr.n
    k = w.size
    if k == 0:
        lv = fill_budget(d, w, np.zeros(n, dtype=np.int64), M, budget) if fr.fill else np.zeros(n, dtype=np.int64)
        return FrameSolution(lv, 0.0, 0.0, True, "empty", seconds=fr.elapsed())
    if M.sum() <= budget:  # everyone at the maximum fits: nothing is faster
        lv = M.copy()
        v = fr.time_of(lv)
        return FrameSolution(lv, v, v, True, "all-max", seconds=fr.elapsed())
    if k == 1:
        lvs, times = floor_levels(d, M, budget)
        lv = fr.filled(lvs[0])
        v = float(w[0] * times[0])
        return FrameSolution(lv, v, v, True, "single-step", seconds=fr.elapsed())
    return None


def _given_incumbent(fr: _Frame, incumbents: np.ndarray | None) -> tuple[np.ndarray | None, float]:
    """The best of the given configurations that fit the budget (None, inf: none given)."""
    if incumbents is None or not len(incumbents):
        return None, np.inf
    inc = np.minimum(np.asarray(incumbents, dtype=np.int64).reshape(-1, fr.n), fr.M[None, :])
    inc = inc[inc.sum(axis=1) <= fr.budget]
    if not len(inc):
        return None, np.inf
    vals = frame_time(np.broadcast_to(fr.d, (len(inc),) + fr.d.shape), inc, fr.w)
    j = int(np.argmin(vals))
    return inc[j], float(vals[j])


def _incumbent(fr: _Frame, incumbents: np.ndarray | None) -> tuple[np.ndarray | None, float]:
    """The best of the given configurations, the min-max configuration of the frame's weighted mean
    durations and the proportional-floor one, improved by local search: (levels, weighted time)."""
    d, w, M, budget, n = fr.d, fr.w, fr.M, fr.budget, fr.n
    floor_k = floor_levels(d, M, budget)[1]
    mean = (d * w[None, None, :]).sum(axis=2, keepdims=True) / w.sum()
    starts = [
        fill_budget(d, w, floor_levels(mean, M, budget)[0][0], M, budget)[None],
        fill_budget(d, w, proportional_floor(d, M, budget, floor_k), M, budget)[None],
    ]
    if incumbents is not None and len(incumbents):
        starts.append(np.minimum(np.asarray(incumbents, dtype=np.int64).reshape(-1, n), M[None, :]))
    inc = np.concatenate(starts)
    inc = inc[inc.sum(axis=1) <= budget]
    inc = np.unique(inc, axis=0)
    vals = frame_time(np.broadcast_to(d, (len(inc),) + d.shape), inc, w)
    best_lv, best_v = None, np.inf
    for j in np.argsort(vals, kind="stable")[:3]:  # local search from the three best starts
        lv, v = local_search(d, w, inc[j], M, budget)
        if v < best_v:
            best_lv, best_v = lv, v
    return best_lv, best_v


def _fix_levels(
    fr: _Frame,
    G: np.ndarray | None,
    floor_k: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    limit: float,
    rounds: int,
    level_bounds: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Rounds of level fixing: drop the levels whose weighted bound from G (tasks, levels, k) exceeds
    `limit` (level_bounds, when given, in the first round instead). G and floor_k (k,) are
    level_bound_terms of lo..hi (G may be None when level_bounds are given). Returns the new (lo, hi,
    floor_k), or None when some task has no level left (nothing beats the limit)."""
    d, w, budget = fr.d, fr.w, fr.budget
    for r in range(rounds):
        if r == 0 and level_bounds is not None:
            lb = np.asarray(level_bounds, dtype=np.float64)
        else:
            if G is None:
                G, floor_k = level_bound_terms(d, lo, hi, budget)
            lb = (G * w[None, None, :]).sum(axis=2)
        got = shrink_levels(lb, lo, hi, budget, limit)
        if got is None:
            return None
        lo2, hi2 = got
        if np.array_equal(lo2, lo) and np.array_equal(hi2, hi) and not (r == 0 and level_bounds is not None):
            break
        lo, hi = lo2, hi2
        if r + 1 < rounds:
            G, floor_k = level_bound_terms(d, lo, hi, budget)
        else:  # the last round: only the floor of the new levels is wanted (the model's lowest thresholds)
            floor_k = floor_levels(d, hi, budget, min_level=lo)[1]
    return lo, hi, floor_k


def _milp_solution(
    fr: _Frame, inc: _Incumbent, model: _Model, res: OptimizeResult, solve_s: float, lb_all: float, tol: float
) -> FrameSolution:
    """The answer from HiGHS's result: its solution, the incumbent proved optimal (or only a bound,
    below a cutoff), or ExactSolverError when it stopped without a proof."""
    d = fr.d
    nodes = int(res.mip_node_count or 0)

    def proved(bound: float) -> FrameSolution:
        sol = _proved(fr, inc, bound, method="milp")
        sol.nodes, sol.milp_seconds = nodes, solve_s
        return sol

    if res.status == 0 and res.x is not None:
        lv = model.decode(res.x)
        v = fr.time_of(lv)
        bound = float(res.mip_dual_bound + model.constant) if res.mip_dual_bound is not None else v
        if v < inc.limit - tol or inc.levels is None:
            lv2 = fr.filled(lv)
            v2 = fr.time_of(lv2)
            sol = FrameSolution(lv2, v2, min(bound, v2), True, "milp", nodes, fr.elapsed())
            sol.milp_seconds = solve_s
            return sol
        # Nothing strictly better than the incumbent / cutoff.
        sol = proved(lb_all)
        if inc.cutoff is not None and v < inc.value:  # found something below the incumbent, not below the cutoff
            sol.levels, sol.value = lv, v
        return sol
    if res.status == 2 or (res.status == 0 and res.x is None):  # nothing beats the objective bound
        return proved(lb_all)
    bound = res.mip_dual_bound + model.constant if res.mip_dual_bound is not None else lb_all
    bound = max(float(bound), lb_all) if np.isfinite(bound) else lb_all
    found = fr.time_of(model.decode(res.x)) if res.x is not None else inc.value
    if bound >= inc.limit - tol and found >= inc.limit - tol:  # stopped, but had already proved nothing beats it
        return proved(bound)
    best = min(found, inc.value)
    gap = (best - bound) / max(abs(best), 1e-12) if np.isfinite(best) else np.inf
    n, L, k = d.shape
    raise ExactSolverError(
        f"the exact allocator's MILP stopped before proving optimality ({res.message.strip()}) on a frame of "
        f"{n} tasks x {k} steps x {L} levels after {solve_s:.2f} s: best bound {bound:.6g} s, best "
        f'configuration {best:.6g} s, gap {100 * gap:.4g}%; raise the time limit or use allocator = "greedy"',
        bound=float(bound),
        incumbent=float(best),
    )


def _proved(fr: _Frame, inc: _Incumbent, lb_all: float, method: str = "incumbent") -> FrameSolution:
    """Nothing beats `limit`: the incumbent is optimal, or (with a cutoff below it) only a bound is known."""
    if inc.cutoff is not None and inc.cutoff < inc.value:
        lv = inc.levels if inc.levels is not None else np.zeros(fr.n, dtype=np.int64)
        v = inc.value if inc.levels is not None else np.inf
        return FrameSolution(lv, v, max(float(inc.cutoff), lb_all), False, "cutoff", seconds=fr.elapsed())
    assert inc.levels is not None  # without a cutoff the limit is the incumbent's value, finite
    lv = fr.filled(inc.levels)
    v = fr.time_of(lv)
    return FrameSolution(lv, v, v, True, method, seconds=fr.elapsed())


# ----------------------------------------------------------------------------------------------------
# The allocator


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
        L, k = durations.shape[2:]
        j = weights.shape[1]
        if j > k:
            raise InputError(
                f"a frame of {j} steps is beyond the forecast horizon of {k} steps", field="forecast.horizon"
            )
        max_level = np.asarray(max_level, dtype=np.int64)
        check_frame(durations[0], weights[0], max_level, budget_steps)
        return cls(durations, weights, max_level, np.minimum(max_level, L - 1), budget_steps)


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

    def __init__(
        self,
        rel_gap: float = DEFAULT_REL_GAP,
        time_limit: float = DEFAULT_TIME_LIMIT_S,
        cache_size: int = 500_000,
        pool_size: int = 16,
        formulation: str = "threshold",
        threads: int | None = None,
    ) -> None:
        import os

        self.rel_gap = rel_gap
        self.time_limit = time_limit
        self.formulation = formulation
        self.cache_size = cache_size
        self.pool_size = pool_size
        self.threads = max(1, min(4, os.cpu_count() or 1)) if threads is None else max(1, int(threads))
        self._cache: OrderedDict[bytes, tuple[np.ndarray, float]] = OrderedDict()  # levels, proven bound
        self._pool: list[np.ndarray] = []
        self._greedy = GreedyAllocator()
        self.stats = ExactStats()

    @staticmethod
    def _key(d: np.ndarray, w: np.ndarray, M: np.ndarray, budget: int) -> bytes:
        """Digest of a frame: durations of its weighted steps, weights relative to the first (a frame's
        optimum scales with its weights, so a sub-frame and the frame that starts there share a key)."""
        import hashlib

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

    def _remember(self, lv: np.ndarray) -> None:
        for p in self._pool:
            if np.array_equal(p, lv):
                return
        self._pool.append(lv.copy())
        if len(self._pool) > self.pool_size:
            self._pool.pop(0)

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
        t0 = time.perf_counter()
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
        self.stats.frames += b
        self.stats.seconds += time.perf_counter() - t0
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
            jobs.append((f, g, np.array(cands) if cands else None, lower))

        def run(job: tuple[int, np.ndarray | None, np.ndarray | None, float | None]) -> FrameSolution:
            f, g, cands, lower = job
            return solve_frame(
                d_all[f][:, :, :j],
                w_all[f],
                batch.max_level,
                budget_steps,
                incumbents=cands,
                rel_gap=self.rel_gap,
                time_limit=self.time_limit,
                formulation=self.formulation,
                lower_bound=lower,
            )

        if self.threads > 1 and len(jobs) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.threads) as ex:
                sols = list(ex.map(run, jobs))
        else:
            sols = [run(job) for job in jobs]
        for (f, g, _, _), sol in zip(jobs, sols, strict=True):
            out[f] = sol.levels
            self._note(sol, None if g is None else float(frame_time(d_all[f][:, :, :j], g, w_all[f])))
            self._remember(sol.levels)
            first_w = w_all[f][batch.active[f][0]] if batch.active[f].size else 1.0
            self._cache[batch.keys[f]] = (sol.levels.copy(), sol.bound / first_w)  # bound per unit first weight
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _note(self, sol: FrameSolution, greedy_value: float | None) -> None:
        s = self.stats
        if sol.method in ("single-step", "all-max", "empty"):
            s.closed_form += 1
        elif sol.method == "milp":
            s.milps += 1
            s.nodes += sol.nodes
            s.milp_seconds += sol.milp_seconds
            s.milp_times.append(sol.seconds)
        else:
            s.proved_by_bounds += 1
        if greedy_value is not None and sol.value < greedy_value - 1e-12 * max(1.0, abs(greedy_value)):
            s.improved_on_greedy += 1

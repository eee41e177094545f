"""The exact allocator's answer for one frame: the configuration that minimises its (weighted)
predicted time, by MILP (`solve_frame`).

Before the solver runs, the model (`exact_model`) is shrunk with bounds from an incumbent
(`exact_bounds`). The incumbent's time is handed to HiGHS as its objective bound (pass-through
option), so HiGHS prunes every node that cannot beat it and mostly has to prove that nothing does.
The better of the MILP solution and the incumbent is returned and the gap is 1e-9, so `exact` is never
worse than `greedy`. Leftover budget (when more CPU would not shorten the frame) is handed out
afterwards, which never lengthens a step.

Frames with one weighted step are solved in closed form (the per-step min-max, as `floor`), and a
solver failure or time limit raises `ExactSolverError` with the best bound and gap: never a silent
greedy answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult

from ..core.errors import InputError
from .base import frame_time
from .exact_bounds import fill_budget, level_bound_terms, local_search, proportional_floor, shrink_levels
from .exact_highs import run_lp, run_milp, run_milp_direct
from .exact_model import FORMULATIONS, MilpModel
from .floor import floor_levels

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

    def __reduce__(self) -> tuple[type, tuple[str], dict[str, object]]:
        # Unpickled (an error from a worker process): built from the bare message, or the field is named twice.
        return type(self), (self.message,), self.__dict__


@dataclass
class FrameSolution:
    levels: np.ndarray  # (tasks,) level indices
    value: float  # weighted frame time of `levels`
    bound: float  # proven lower bound on the frame's optimum (>= cutoff when nothing beat it)
    optimal: bool  # value is optimal within the gap (False: only `bound` was proved, see cutoff)
    method: str  # milp | incumbent (proved optimal by bounds) | bounds | single-step | all-max | empty | cutoff
    seconds: float = 0.0


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
    best_lv, best_v = _incumbent(fr, incumbents, search)
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
        v = fr.time_of(lo)
        if v < limit - tol or best_lv is None:
            lv = fr.filled(lo)
            return FrameSolution(lv, fr.time_of(lv), v, True, "bounds", seconds=fr.elapsed())
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
    run = run_milp if screen is None else run_milp_direct  # the `optimum` DP's hundreds of small MILPs
    res = run(model, cut, rel_gap, time_limit, scale)
    return _milp_solution(fr, inc, model, res, time.perf_counter() - t1, lb_all, tol)


#: How far below HiGHS's LP objective a bound taken from it is put (relative to the frame's time): the
#: LP is solved to floating-point tolerances, and a bound must never exceed the true optimum.
LP_BOUND_MARGIN = 1e-7


def _screen_by_lp(
    fr: _Frame, inc: _Incumbent, model: MilpModel, screen: float, lb_all: float, scale: float, tol: float
) -> FrameSolution | None:
    """The LP relaxation of `model` as a cheap answer (see solve_frame's `screen`), or None when only
    the MILP can tell."""
    t1 = time.perf_counter()
    res = run_lp(model)
    lp_s = time.perf_counter() - t1
    if res.status != 0 or res.x is None:
        return None
    y = res.x[model.integrality > 0]
    if np.all(np.abs(y - np.round(y)) <= 1e-9):  # a vertex of the closure polytope: the MILP's optimum
        res.mip_node_count, res.mip_dual_bound = 0, None
        return _milp_solution(fr, inc, model, res, lp_s, lb_all, tol)
    bound = max(float(res.fun + model.constant) - LP_BOUND_MARGIN * scale, lb_all)
    if bound >= inc.limit + tol:  # nothing below the limit (the incumbent, or the cutoff)
        return _proved(fr, inc, bound, method="lp")
    bound = min(bound, inc.limit)  # levels were fixed against the limit: the model holds nothing above it
    if bound >= screen:
        lv = inc.levels if inc.levels is not None else np.zeros(fr.n, dtype=np.int64)
        return FrameSolution(lv, inc.value, bound, False, "lp-bound", seconds=fr.elapsed())
    return None


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
        return FrameSolution(fr.filled(np.zeros(n, dtype=np.int64)), 0.0, 0.0, True, "empty", seconds=fr.elapsed())
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


def _incumbent(fr: _Frame, incumbents: np.ndarray | None, search: bool) -> tuple[np.ndarray | None, float]:
    """The best of the given configurations that fit the budget (None, inf: none); with `search` also
    the min-max configuration of the frame's weighted mean durations and the proportional-floor one,
    the three best improved by local search: (levels, weighted time)."""
    d, w, M, budget, n = fr.d, fr.w, fr.M, fr.budget, fr.n
    starts = []
    if search:
        floor_k = floor_levels(d, M, budget)[1]
        mean = (d * w[None, None, :]).sum(axis=2, keepdims=True) / w.sum()
        starts += [
            fill_budget(d, w, floor_levels(mean, M, budget)[0][0], M, budget)[None],
            fill_budget(d, w, proportional_floor(d, M, budget, floor_k), M, budget)[None],
        ]
    if incumbents is not None and len(incumbents):
        starts.append(np.minimum(np.asarray(incumbents, dtype=np.int64).reshape(-1, n), M[None, :]))
    inc = np.concatenate(starts) if starts else np.zeros((0, n), dtype=np.int64)
    inc = inc[inc.sum(axis=1) <= budget]
    if search:
        inc = np.unique(inc, axis=0)
    if not len(inc):
        return None, np.inf
    vals = frame_time(np.broadcast_to(d, (len(inc),) + d.shape), inc, w)
    if not search:
        j = int(np.argmin(vals))
        return inc[j], float(vals[j])
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
    fr: _Frame, inc: _Incumbent, model: MilpModel, res: OptimizeResult, solve_s: float, lb_all: float, tol: float
) -> FrameSolution:
    """The answer from HiGHS's result: its solution, the incumbent proved optimal (or only a bound,
    below a cutoff), or ExactSolverError when it stopped without a proof."""
    d = fr.d
    if res.status == 0 and res.x is not None:
        lv = model.decode(res.x)
        v = fr.time_of(lv)
        bound = float(res.mip_dual_bound + model.constant) if res.mip_dual_bound is not None else v
        if v < inc.limit - tol or inc.levels is None:
            lv2 = fr.filled(lv)
            v2 = fr.time_of(lv2)
            return FrameSolution(lv2, v2, min(bound, v2), True, "milp", fr.elapsed())
        # Nothing strictly better than the incumbent / cutoff.
        sol = _proved(fr, inc, lb_all, "milp")
        if inc.cutoff is not None and v < inc.value:  # found something below the incumbent, not below the cutoff
            sol.levels, sol.value = lv, v
        return sol
    if res.status == 2 or (res.status == 0 and res.x is None):  # nothing beats the objective bound
        return _proved(fr, inc, lb_all, "milp")
    bound = res.mip_dual_bound + model.constant if res.mip_dual_bound is not None else lb_all
    bound = max(float(bound), lb_all) if np.isfinite(bound) else lb_all
    found = fr.time_of(model.decode(res.x)) if res.x is not None else inc.value
    if bound >= inc.limit - tol and found >= inc.limit - tol:  # stopped, but had already proved nothing beats it
        return _proved(fr, inc, bound, "milp")
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

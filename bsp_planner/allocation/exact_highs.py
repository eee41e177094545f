"""Solving the exact allocator's models (`exact_model.MilpModel`) with HiGHS.

`run_milp` goes through `scipy.optimize.milp`; `run_milp_direct` and `run_lp` go straight through
`highspy`, HiGHS's own Python binding (its bare solver class `highspy._Highs`, exported by highspy: the
`highspy.Highs` wrapper prints a banner when made and installs callbacks on every instance), one instance
per thread reused (the `optimum` DP's hundreds of small models), and fall back to `milp` where highspy is
not installed. Not scipy's private `scipy.optimize._highspy`, which may move in any scipy release.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp

from .exact_model import MilpModel

try:
    import highspy
except ImportError:  # highspy not installed: scipy.optimize.milp only
    highspy = None  # type: ignore[assignment,unused-ignore]
_highs: Any = highspy  # typed loosely: highspy's stubs leave out the bare solver class


def _quiet_highs_options() -> None:
    """Options beyond scipy's documented five are handed to HiGHS verbatim, with a warning we expect.
    A filter (re-)installed before each solve, not warnings.catch_warnings: that is not thread-safe,
    and batches run on threads; re-adding an identical filter replaces it, so the list does not grow."""
    warnings.filterwarnings("ignore", message="Unrecognized options detected", category=RuntimeWarning)


_quiet_highs_options()

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


def _scipy_milp(model: MilpModel, integrality: np.ndarray, options: dict[str, Any]) -> OptimizeResult:
    return milp(
        model.c,
        constraints=LinearConstraint(model.A, model.row_lo, model.row_hi),
        integrality=integrality,
        bounds=Bounds(model.var_lo, model.var_hi),
        options=options,
    )


def run_milp(model: MilpModel, cutoff: float | None, rel_gap: float, time_limit: float, scale: float) -> OptimizeResult:
    """HiGHS through scipy.optimize.milp. `cutoff` (in frame seconds) becomes HiGHS's objective_bound,
    so every node that cannot beat it is pruned; the gap is absolute, rel_gap x scale seconds."""
    options = {"time_limit": float(time_limit), "mip_rel_gap": 0.0, "presolve": True}
    extra = {"mip_abs_gap": max(rel_gap * scale, 1e-12), **_NO_HEURISTICS}
    if cutoff is not None and np.isfinite(cutoff):
        extra["objective_bound"] = float(cutoff - model.constant)
    _quiet_highs_options()
    try:
        return _scipy_milp(model, model.integrality, {**options, **extra})
    except (AttributeError, ValueError, TypeError):  # a HiGHS build without one of the extras
        return _scipy_milp(model, model.integrality, options)


_SOLVERS = threading.local()  # one HiGHS instance per thread and use, reused model after model


def _solver(use: str, options: dict[str, Any]) -> Any:
    """This thread's HiGHS instance for `use`, made with `options` the first time."""
    h = getattr(_SOLVERS, use, None)
    if h is None:
        h = _highs._Highs()
        for key, value in options.items():
            h.setOptionValue(key, value)
        setattr(_SOLVERS, use, h)
    return h


def _highs_lp(model: MilpModel) -> Any:
    """`model` as the binding's HighsLp (columns, rows, the matrix by columns)."""
    A = model.A.tocsc()
    n, m = model.c.size, model.row_lo.size
    lp = _highs.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = model.c, model.var_lo, model.var_hi
    lp.row_lower_, lp.row_upper_ = model.row_lo, model.row_hi
    lp.a_matrix_.format_ = _highs.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, m
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    return lp


#: HiGHS's model status -> scipy.optimize.milp's status code (0 optimal, 1 limit, 2 infeasible: nothing
#: below the objective bound, 3 unbounded, 4 other), as `exact_frame` reads it.
_SCIPY_STATUS = {"kOptimal": 0, "kTimeLimit": 1, "kIterationLimit": 1, "kSolutionLimit": 1, "kInfeasible": 2}


def run_milp_direct(
    model: MilpModel, cutoff: float | None, rel_gap: float, time_limit: float, scale: float
) -> OptimizeResult:
    """`run_milp` (same options, same result fields) straight through highspy:
    `scipy.optimize.milp` checks and sets a dozen options anew on every call, a fifth of a small
    MILP's time."""
    if _highs is None:
        return run_milp(model, cutoff, rel_gap, time_limit, scale)
    h = _solver("milp", {"output_flag": False, "presolve": "on", "mip_rel_gap": 0.0, **_NO_HEURISTICS})
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_abs_gap", max(rel_gap * scale, 1e-12))
    bound = float(cutoff - model.constant) if cutoff is not None and np.isfinite(cutoff) else np.inf
    h.setOptionValue("objective_bound", bound)
    lp = _highs_lp(model)
    lp.integrality_ = [_highs.HighsVarType(int(i)) for i in model.integrality]
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


def run_lp(model: MilpModel) -> OptimizeResult:
    """The LP relaxation of `model` (every variable continuous), by HiGHS: status 0 with x and fun (the
    objective without model.constant) when optimal. Straight through the binding: `milp` checks and
    sets every option anew on each call, as long as HiGHS takes to solve an LP of a hundred variables."""
    if _highs is None:
        return _scipy_milp(model, np.zeros_like(model.integrality), {"presolve": True})
    # presolve off: a hundred variables, already cut down by level fixing
    h = _solver("lp", {"output_flag": False, "threads": 1, "presolve": "off"})
    h.passModel(_highs_lp(model))
    h.run()
    if h.getModelStatus() != _highs.HighsModelStatus.kOptimal:
        return OptimizeResult(status=1, x=None, fun=None)
    x = np.asarray(h.getSolution().col_value, dtype=np.float64)
    return OptimizeResult(status=0, x=x, fun=float(h.getInfo().objective_function_value))

"""The exact allocator's MILP models of one frame, as arrays for HiGHS (`exact_highs`).

For a frame of k steps with weights w_k (discount**k, 0 for steps outside the frame), choose a level
l_i in 0..max_i for every task so that sum_k w_k max_i d[i, l_i, k] is minimal and sum_i l_i <= budget.
The formulation uses durations being non-increasing in CPU:

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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array


@dataclass
class MilpModel:
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
) -> MilpModel:
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
    return MilpModel(c, A, row_lo, row_hi, integrality, np.zeros(ny + nv), np.ones(ny + nv), constant, decode)


def build_assignment_model(
    d: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, budget: int, floor_k: np.ndarray
) -> MilpModel:
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

    return MilpModel(c, A, row_lo, row_hi, integrality, var_lo, var_hi, 0.0, decode)


FORMULATIONS = {"threshold": build_threshold_model, "assignment": build_assignment_model}

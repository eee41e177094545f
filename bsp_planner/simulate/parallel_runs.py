"""Run an experiment's (mode, strategy) pairs in parallel processes: `bsp-planner simulate --jobs N`.

Every pair is independent (a planner over one mode's predictions against the same actual durations)
and every planner and allocator is deterministic, so a pair gives the same result in any process: only
the decision timings differ. Workers get the scenario by inheritance where the platform forks (no
rebuild, no pickling of its large views) and rebuild it from the experiment otherwise; results come
back pickled (arrays of steps x tasks, small). The heaviest strategies are submitted first, so that a
long one does not start last.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..core.errors import InputError
from ..core.signals import child_defaults, deferred
from ..core.steps import StrategyResult
from ..inputs.experiment import Experiment
from .runs import run_strategy
from .scenario import Scenario, build_scenario

#: Rough relative cost, to submit long runs first (unknown strategies count as cheap).
_HEAVY = {"optimum": 4, "dqn": 3, "dp": 3, "mpc": 3, "floor": 0}

#: Strategies whose result is the same in every mode (perfect knowledge of the actual durations): their
#: pairs run one after another in one process, where the plan made for the first mode serves the others
#: (`optimum` keeps its last plan per process), instead of being planned again in parallel.
_SAME_IN_EVERY_MODE = {"optimum"}

_SCENARIO: Scenario | None = None


def default_jobs() -> int:
    """How many processes `simulate` uses unless told: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # a platform without CPU affinity
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int) -> int:
    if jobs < 1:
        raise InputError(f"expected a whole number of processes >= 1, got {jobs}", field="--jobs")
    return jobs


def _init(exp: Experiment, parent_pid: int) -> None:
    global _SCENARIO
    child_defaults(parent_pid)  # the parent stops the pool (Ctrl-C, kill); a SIGKILLed parent takes it along
    if _SCENARIO is None:  # not inherited (a platform that spawns): build it here
        _SCENARIO = build_scenario(exp)


def _run(pairs: list[tuple[str, str]]) -> tuple[list[StrategyResult], list[tuple[str, type[Warning]]]]:
    """The pairs' results and the warnings they raised, for the parent to show (each once, not once per
    process)."""
    assert _SCENARIO is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [run_strategy(_SCENARIO, s, m) for m, s in pairs]
    return results, [(str(w.message), w.category) for w in caught]


def _units(pairs: list[tuple[str, str]]) -> list[list[int]]:
    """The pairs' indices grouped into what one process runs at a time: one pair each, but all the
    modes of a strategy that is the same in every mode together."""
    units: list[list[int]] = []
    shared: dict[str, list[int]] = {}
    for i, (_, s) in enumerate(pairs):
        if s in _SAME_IN_EVERY_MODE:
            if s not in shared:
                shared[s] = []
                units.append(shared[s])
            shared[s].append(i)
        else:
            units.append([i])
    return units


def run_pairs(
    scen: Scenario,
    pairs: list[tuple[str, str]],
    jobs: int = 1,
    on_start: Callable[[str, str], None] | None = None,
    on_done: Callable[[str, str], None] | None = None,
) -> list[StrategyResult]:
    """Results for the (mode, strategy) pairs, in the order given; jobs > 1 uses that many processes."""
    check_jobs(jobs)
    units = _units(pairs)
    jobs = min(jobs, len(units))
    if jobs <= 1:
        out = []
        for m, s in pairs:
            if on_start:
                on_start(m, s)
            out.append(run_strategy(scen, s, m))
            if on_done:
                on_done(m, s)
        return out
    global _SCENARIO
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    order = sorted(units, key=lambda u: -_HEAVY.get(pairs[u[0]][1].partition(":")[0], 1))
    results: list[StrategyResult | None] = [None] * len(pairs)
    _SCENARIO = scen
    pool: ProcessPoolExecutor | None = None
    try:
        with deferred():  # a signal while the pool starts its processes and its thread would leave it unstoppable
            pool = ProcessPoolExecutor(
                jobs, mp_context=mp.get_context(method), initializer=_init, initargs=(scen.experiment, os.getpid())
            )
            futures = {pool.submit(_run, [pairs[i] for i in u]): u for u in order}
        for fut in as_completed(futures):
            unit = futures[fut]
            done, caught = fut.result()  # an InputError in a worker is raised here
            for message, category in caught:
                warnings.warn(message, category, stacklevel=1)
            for i, result in zip(unit, done, strict=True):
                results[i] = result
                if on_done:
                    on_done(*pairs[i])
    except BaseException:
        if pool is not None:
            _terminate(pool)  # a signal or a failed pair: the others' work is not wanted
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        _SCENARIO = None
    return results  # type: ignore[return-value]


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's workers now (shutdown alone waits for the pairs they run, minutes for `optimum`)."""
    workers = list((pool._processes or {}).values())  # no public way before Python 3.14's terminate_workers
    for p in workers:
        if p.is_alive():
            p.terminate()
    for p in workers:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()

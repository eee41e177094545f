"""Step structure (issue 31): a step's time is the critical path through the tasks that wait for each
other inside it; with no edges it is exactly the slowest task."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bsp_planner.core.steps import step_times
from bsp_planner.core.structure import StepStructure, StructureError

STAR = StepStructure.from_names(["l0", "l1", "l2", "hub"], {"hub": ["l0", "l1", "l2"]})


def test_independent_is_exactly_the_maximum():
    rng = np.random.default_rng(3)
    d = rng.random((7, 5, 11))
    s = StepStructure.independent(5)
    assert s.is_independent
    assert np.array_equal(s.step_time(d, axis=1), d.max(axis=1))
    actual = rng.random((5, 4, 9))
    levels = rng.integers(0, 4, (9, 5))
    assert np.array_equal(step_times(actual, levels, s), step_times(actual, levels))


def test_star_is_slowest_leaf_plus_hub_and_pipeline_is_the_sum():
    d = np.array([[1.0, 3.0, 2.0, 0.5], [2.0, 1.0, 1.0, 4.0]])
    assert np.allclose(STAR.step_time(d), [3.5, 6.0])
    assert np.allclose(STAR.finish_times(d)[0], [1.0, 3.0, 2.0, 3.5])
    pipe = StepStructure(((), (0,), (1,)))
    assert np.allclose(pipe.step_time(np.array([1.0, 2.0, 4.0])), 7.0)
    # tasks along another axis
    assert np.allclose(STAR.step_time(d.T, axis=0), [3.5, 6.0])


def test_critical_tasks_are_those_on_a_longest_path():
    """Brute force: a task is critical iff the longest chain through it (its finish plus the longest chain
    of followers after it) is the step; shortening a task that is not critical never shortens the step."""
    rng = np.random.default_rng(7)
    groups = StepStructure(((), (), (0, 1), (), (3,), (2, 4)))
    for _ in range(50):
        d = rng.integers(1, 6, 6).astype(float)
        crit = groups.critical(d)
        base = groups.step_time(d)
        for i in range(6):
            through = groups.finish_times(d)[i] + _tail(groups, d, i)
            assert crit[i] == np.isclose(through, base)
            if not crit[i]:
                shorter = d.copy()
                shorter[i] -= 0.5
                assert groups.step_time(shorter) == base


def _tail(s: StepStructure, d: np.ndarray, i: int) -> float:
    followers = [k for k in range(s.n_tasks) if i in s.after[k]]
    return max((d[k] + _tail(s, d, k) for k in followers), default=0.0)


@pytest.mark.parametrize(
    "after, needle",
    [
        (((0,), ()), "itself"),
        (((1,), (0,)), "cycle"),
        (((), (2,), (1,)), "cycle"),
        (((5,),), "only 1 tasks"),
    ],
)
def test_not_a_dag_is_refused(after, needle):
    with pytest.raises(StructureError, match=needle):
        StepStructure(after)


def test_from_names_refuses_unknown_names_and_round_trips():
    with pytest.raises(StructureError, match="unknown task 'l9'"):
        StepStructure.from_names(["a", "b"], {"b": ["l9"]})
    names = ["l0", "l1", "l2", "hub"]
    assert StepStructure.from_names(names, STAR.names(names)) == STAR


def test_every_order_of_a_dag_gives_the_same_time():
    rng = np.random.default_rng(11)
    d = rng.random(4)
    for perm in itertools.permutations(range(4)):
        names = [f"t{p}" for p in perm]
        s = StepStructure.from_names(names, {"t3": ["t0", "t1"], "t2": ["t3"]})
        got = s.step_time(d[list(perm)])
        assert np.isclose(got, max(d[0], d[1]) + d[3] + d[2])

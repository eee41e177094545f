"""Learning the step structure (issue 31) from when tasks computed: independent, star, pipeline, groups."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.core.structure import StepStructure
from bsp_planner.model.structure import learn_structure, read_timings


def timings(structure: StepStructure, seed: int, steps: int = 40, jitter_s: float = 4e-4):
    """Synthetic start/end times: each task starts when its predecessors end (plus a reporting jitter),
    computes for a random time; steps follow one another."""
    rng = np.random.default_rng(seed)
    n = structure.n_tasks
    d = rng.uniform(0.01, 0.2, (steps, n))
    finish = structure.finish_times(d, axis=1)
    begin = np.cumsum(np.r_[0.0, structure.step_time(d, axis=1)[:-1] + 0.005])[:, None]
    start = begin + finish - d + rng.uniform(0, jitter_s, (steps, n))
    return start, start + d


CASES = {
    "independent": StepStructure.independent(4),
    "star": StepStructure(((), (), (), (0, 1, 2))),
    "pipeline": StepStructure(((), (0,), (1,), (2,))),
    "groups": StepStructure(((), (), (0, 1), (), (3,))),
    "two stars": StepStructure(((), (), (0, 1), (2,), (2,), (3, 4))),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("seed", range(3))
def test_the_structure_that_made_the_timings_is_learned(name, seed):
    truth = CASES[name]
    start, end = timings(truth, seed)
    assert learn_structure(start, end) == truth


def test_a_few_odd_steps_and_missing_reports_do_not_change_it():
    truth = CASES["star"]
    start, end = timings(truth, 5)
    start[3, 3] = start[3, 0]  # the hub once seen starting with its leaves
    start[7, 1] = end[7, 1] = np.nan  # a step a leaf did not report
    assert learn_structure(start, end) == truth


def test_independent_tasks_that_happen_to_run_one_after_another_rarely_get_no_edge():
    rng = np.random.default_rng(2)
    start = np.cumsum(rng.uniform(0.1, 0.2, (30, 1)), axis=0) + np.zeros((30, 2))
    end = start + rng.uniform(0.01, 0.05, (30, 2))
    start[:5, 1] = end[:5, 0] + 0.001  # 5 of 30 steps b happened to start after a
    assert learn_structure(start, end).is_independent


def test_timings_files_are_read_and_bad_lines_named(tmp_path):
    truth = CASES["star"]
    start, end = timings(truth, 1, steps=10)
    names = ["l0", "l1", "l2", "hub"]
    for t, name in enumerate(names):
        lines = [json.dumps({"step": s, "start": start[s, t], "end": end[s, t]}) for s in range(10)]
        (tmp_path / f"timings-{name}.jsonl").write_text("\n".join(lines) + "\n")
    got_start, got_end = read_timings(tmp_path, names)
    assert np.array_equal(got_start, start) and np.array_equal(got_end, end)
    assert learn_structure(got_start, got_end).names(names) == {"hub": ["l0", "l1", "l2"]}
    (tmp_path / "timings-hub.jsonl").write_text('{"step": 0, "start": 1.0}\n')
    with pytest.raises(InputError, match=r"timings-hub.jsonl.*line 1"):
        read_timings(tmp_path, names)


def test_a_task_that_runs_ahead_of_a_slow_one_is_not_taken_for_one_it_waits_for():
    # a ring's fast member ends step t before the slow one begins it (HELICS lets it run ahead): it ended
    # before, in every step, but the slow one was never held by it
    rng = np.random.default_rng(4)
    slow = rng.uniform(0.45, 0.55, 30)
    start_a = np.cumsum(np.r_[0.0, slow[:-1]])
    start = np.c_[start_a, start_a - 0.45]
    end = np.c_[start_a + slow, start_a - 0.45 + rng.uniform(0.03, 0.06, 30)]
    assert (start[:, 0] >= end[:, 1]).all()
    assert learn_structure(start, end).is_independent

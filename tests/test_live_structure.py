"""A live run's step time follows the job's waits: the record's predicted time and critical path go through
the hub's `after` (not the slowest task alone), and the summary shows the waits the tasks' own clocks reveal
beside the declared ones."""

from types import SimpleNamespace

import numpy as np
import pytest

from bsp_planner.core.structure import StepStructure
from bsp_planner.runtime.runlog import step_time_s
from bsp_planner.runtime.summary import structure_found, structure_text

NAMES = ["l0", "l1", "hub"]
STAR = StepStructure.from_names(NAMES, {"hub": ["l0", "l1"]})


def star_records(steps: int, seed: int = 3) -> list[dict]:
    """Steps of a star on the tasks' clocks: both leaves start together, the hub once the later leaf ended."""
    rng = np.random.default_rng(seed)
    records, t = [], 1000.0
    for step in range(steps):
        leaves = rng.uniform(0.2, 0.6, size=2)
        hub = 0.1
        starts = [t, t + 0.001, t + leaves.max() + 0.004]
        ends = [t + leaves[0], t + 0.001 + leaves[1], starts[2] + hub]
        tasks = [{"task": n, "started_at": s, "finished_at": e} for n, s, e in zip(NAMES, starts, ends, strict=True)]
        records.append({"step": step, "tasks": tasks})
        t = ends[2] + 0.01
    return records


def run_of(structure: StepStructure | None):
    return SimpleNamespace(tasks=NAMES, ctx=SimpleNamespace(structure=structure))


def test_a_steps_time_is_the_slowest_leaf_plus_the_hub_where_the_hub_waits_for_its_leaves():
    d = np.array([0.5, 0.3, 0.2])
    assert step_time_s(d, STAR) == pytest.approx(0.7)
    assert step_time_s(d, None) == pytest.approx(0.5)  # independent tasks: the slowest


def test_the_summary_finds_the_hub_waiting_for_its_leaves_from_the_tasks_clocks():
    records = star_records(12)
    declared = structure_found(run_of(STAR), records)
    assert declared == {
        "learned": {"hub": ["l0", "l1"]},
        "declared": {"hub": ["l0", "l1"]},
        "steps": 12,
        "agrees": True,
    }
    assert structure_text(declared).endswith("as the job declares")
    undeclared = structure_found(run_of(None), records)
    assert undeclared is not None and not undeclared["agrees"]
    text = structure_text(undeclared)
    assert "hub after l0, l1" in text and "declare these with `after = [...]`" in text


def test_no_structure_is_claimed_without_the_tasks_clocks_or_from_too_few_steps():
    records = star_records(12)
    del records[4]["tasks"][1]["started_at"]  # a task that reports no clock (an older task library)
    assert structure_found(run_of(STAR), records) is None
    assert structure_found(run_of(STAR), star_records(2)) is None

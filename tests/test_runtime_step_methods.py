"""How each step's configuration was put in place, as it really happened (issue 23): the first step a
coordinator runs starts its workers, so a resumed run whose configuration changes there records a start
(its cost the workers' start-up), not a reconfiguration by the run's method; a reconfiguration in which the
backend fell back to recreating a task (a refused resize) records a recreate."""

from __future__ import annotations

import numpy as np

from bsp_planner.runtime.live_steps import LiveSteps


class _Executor:
    """What LiveSteps reads of a LiveExecutor: starting and reconfiguring report what they did."""

    tasks = ["a", "b"]
    processes: dict[str, tuple[str, ...]] = {}  # no process tasks: both run a stressor each step
    quota_at: dict[str, float] = {}  # when each task's new quota was in place (not timed here)
    replanned: dict[int, dict] = {}  # no step re-planned on the nodes' free CPU

    def __init__(self) -> None:
        self.last_methods: dict[str, str] = {}
        self.started: list[int] = []

    def check_stop(self) -> None:
        pass

    def start_all(self, levels, step) -> float:
        self.started.append(step)
        return 1.25

    def reconfigure(self, levels, step):
        self.last_methods = {"a": "in-place", "b": "in-place"}
        return 0.01, ["a", "b"]


def steps(first_step: int) -> tuple[LiveSteps, _Executor]:
    ex = _Executor()
    live = LiveSteps(
        ex,  # type: ignore[arg-type]
        first_step=first_step,
        millicores=lambda levels: np.asarray(levels, dtype=np.float64) * 100,
        budget_millicores=1000,
        given_workloads=lambda t: np.zeros(2),
        workload_range=(10.0, 50.0),
        before_reconfigure=lambda: None,
        say=lambda text: None,
    )
    return live, ex


def test_a_resumed_runs_first_changed_step_is_a_start_costing_the_start_up():
    live, ex = steps(first_step=5)
    cost = live.apply(5, np.array([2, 3]), True)  # the configuration differs from the logged step 4's
    assert ex.started == [5] and cost == 1.25 and live.start_s == 1.25
    assert live.method(5, True) == "start"  # not the run's in-place method costing 1.25 s
    assert live.method(5, False) is None  # unchanged: started, but nothing was reconfigured
    assert live.apply(6, np.array([3, 2]), True) == 0.01
    assert live.method(6, True) == "in-place" and live.method(6, False) is None


def test_a_reconfiguration_in_which_a_task_was_recreated_is_a_recreate():
    live, ex = steps(first_step=0)
    live.apply(0, np.array([2, 3]), False)
    assert live.method(0, False) is None  # a fresh run's first step: its start is no reconfiguration
    live.apply(1, np.array([3, 2]), True)
    ex.last_methods = {"a": "in-place", "b": "recreate"}  # b's resize refused: recreated instead
    assert live.method(1, True) == "recreate"

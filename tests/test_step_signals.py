"""The step signal (bsp_planner/task/step_signal.py, runtime/step_signals.py): a task's end of step told
to a local coordinator by one datagram, ahead of its report. Real sockets; the listener's deliveries are
waited on as events."""

from __future__ import annotations

import queue

import pytest

from bsp_planner.runtime.step_signals import StepSignals
from bsp_planner.task import TaskJoinError
from bsp_planner.task.session import join
from bsp_planner.task.step_signal import ENV_STEP_SIGNAL, StepSignal


@pytest.fixture
def signals():
    s = StepSignals(["a", "b"])
    got: queue.Queue = queue.Queue()
    s.deliver(lambda task, step, via: got.put((task, step, via)))
    yield s, got
    s.close()


def test_a_tasks_signal_reaches_the_coordinator_with_its_task_and_step(signals):
    s, got = signals
    sender = StepSignal(s.env()[ENV_STEP_SIGNAL], "b")
    assert sender.send(7)
    assert got.get(timeout=10) == ("b", 7, "signal")
    sender.close()


def test_signals_without_the_runs_token_or_of_another_task_are_refused(signals):
    s, got = signals
    address = s.env()[ENV_STEP_SIGNAL].split()[0]
    forged = StepSignal(f"{address} {'0' * 32}", "a")  # the address is visible to anyone on the host
    stranger = StepSignal(s.env()[ENV_STEP_SIGNAL], "c")  # a task the run does not have
    assert forged.send(1) and stranger.send(1)
    genuine = StepSignal(s.env()[ENV_STEP_SIGNAL], "a")
    genuine.send(2)
    assert got.get(timeout=10) == ("a", 2, "signal")  # the only one delivered, whatever the arrival order
    genuine.send(3)  # the listener handles datagrams one after the other: the two refused came before this
    assert got.get(timeout=10) == ("a", 3, "signal")
    assert got.empty() and s.refused == 2
    for sender in (forged, stranger):
        sender.close()


def test_a_signal_with_no_listener_is_dropped_quietly():
    s = StepSignals(["a"])
    value = s.env()[ENV_STEP_SIGNAL]
    s.close()
    sender = StepSignal(value, "a")
    assert sender.send(0) is False  # the report remains the record; the task goes on
    sender.close()


@pytest.mark.parametrize("value", ["nonsense", "@ x", "/tmp/sock token", "@name tok-en", "@name"])
def test_a_malformed_signal_variable_is_refused_naming_it_before_joining(value):
    env = {
        "BSP_RUN_ID": "r",
        "BSP_TASK": "a",
        "BSP_ZOOKEEPER": "127.0.0.1:1",
        "BSP_ZK_AUTH": "user:pw",
        "BSP_SYNC": "observe",
        ENV_STEP_SIGNAL: value,
    }
    with pytest.raises(TaskJoinError) as e:
        join(env)
    assert e.value.field == ENV_STEP_SIGNAL and ENV_STEP_SIGNAL in e.value.message


def test_a_signal_of_a_later_step_than_the_task_runs_waits_for_the_report_in_between():
    # the signal of step 0 was lost (sent before the coordinator listened): step 1's must not skip it, and
    # step 0's report takes it up at once
    from bsp_planner.runtime.quota_ahead import QuotaKeeper

    in_place = {"a": 4}
    writes: list[tuple[str, int]] = []
    keeper = QuotaKeeper(["a"], in_place, 0, lambda task, level: writes.append((task, level)))
    keeper.decide(0, {"a": 4})
    keeper.plan(1, {1: {"a": 6}, 2: {"a": 8}})
    keeper.on_report("a", 1, "signal")
    assert keeper.placements(2) == {} and writes == []
    keeper.on_report("a", 0)  # its report of step 0
    assert keeper.placements(1)["a"]["quota_on"] == "report"
    assert keeper.placements(2)["a"]["quota_on"] == "signal"
    assert writes == [("a", 6), ("a", 8)]
    keeper.on_report("a", 1)  # the report behind the signal changes nothing
    keeper.on_report("a", 2, "signal")  # and the next signal is in step again
    assert keeper.placements(3)["a"]["quota_on"] == "signal" and len(writes) == 2

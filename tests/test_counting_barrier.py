"""The counting barrier against a real ZooKeeper server: it holds until all arrive, a dead participant
blocks the step and is named, and a server restart neither loses nor double-counts an arrival."""

from __future__ import annotations

import threading

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.zk.barrier import CountingBarrier
from bsp_planner.zk.schema import RunPaths
from bsp_planner.zk.session import ZkSession

from zk_fixtures import close_all, make_root, needs_zk, session

pytestmark = needs_zk


def prepare(coord: ZkSession, root: str, t_steps: int, names: list[str]) -> RunPaths:
    make_root(coord, root)
    paths = RunPaths(root)
    coord.ensure_path(paths.barriers)
    for t in range(t_steps):
        assert not any(
            isinstance(r, Exception) for r in coord.commit(CountingBarrier(coord, paths, t, names).setup_ops())
        )
    return paths


def wait_arrivals(coord: ZkSession, b: CountingBarrier, phase: str, count: int) -> None:
    """Until the counter sees `count` arrivals (woken by the child watch, not by a sleep)."""
    assert coord.wait_for(lambda watch: True if len(b.arrived(phase, watch=watch)) >= count else None, 120), (
        f"{count} arrivals never seen"
    )


def test_participants_pass_only_when_all_have_arrived_in_both_phases(zk_server, creds, root):
    names = [f"p{i}" for i in range(6)]
    coord = session(zk_server, creds)
    paths = prepare(coord, root, 2, names)
    sessions = {n: session(zk_server, creds) for n in names}
    passed = {phase: threading.Event() for phase in ("enter", "leave")}
    errors: list[BaseException] = []
    go_on = {n: threading.Event() for n in names}

    def participant(name: str, t: int) -> None:
        try:
            b = CountingBarrier(sessions[name], paths, t, names)
            go_on[name].wait(120)
            b.enter(name, timeout_s=120)
            passed["enter"].set()
            b.leave(name, timeout_s=120)
            passed["leave"].set()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    try:
        for t in range(2):
            for ev in (*passed.values(), *go_on.values()):
                ev.clear()
            counter = CountingBarrier(coord, paths, t, names)
            released: list = []
            ct = threading.Thread(target=lambda r=released, c=counter: r.append(c.run_step(timeout_s=60)))
            threads = [threading.Thread(target=participant, args=(n, t)) for n in names]
            for th in (ct, *threads):
                th.start()
            for n in names[:-1]:  # all but the last arrive
                go_on[n].set()
            wait_arrivals(coord, counter, "enter", len(names) - 1)
            assert counter.missing("enter") == [names[-1]]
            # the counter has seen five of six: nobody is through, and no flag was created
            assert not passed["enter"].is_set() and not coord.exists(counter.go_path)
            go_on[names[-1]].set()
            for th in (ct, *threads):
                th.join(120)
            assert not errors, errors
            assert released and counter.is_done()
            assert coord.get(counter.go_path) == {"step": t, "arrived": len(names)}
            assert sorted(coord.children(f"{paths.barrier(t)}/leave")) == names
        # a participant restarted after everyone passed goes straight through; strangers are refused
        b = CountingBarrier(sessions["p0"], paths, 1, names)
        b.enter("p0", timeout_s=30)  # a barrier that held it would raise TimeoutError
        b.leave("p0", timeout_s=30)
        with pytest.raises(InputError, match="not a participant"):
            b.enter("stranger")
        coord.commit(CountingBarrier(coord, paths, 0, names).cleanup_ops())
        assert not coord.exists(paths.barrier(0))
    finally:
        close_all(coord, sessions, root)


def test_a_participant_that_dies_before_arriving_blocks_the_step_and_is_named(zk_server, creds, root):
    names = ["a", "b", "c", "dead"]
    coord = session(zk_server, creds)
    paths = prepare(coord, root, 1, names)
    coord.ensure_path(paths.members)
    sessions = {n: session(zk_server, creds) for n in names}
    try:
        for n in names:  # each participant's liveness: its ephemeral membership node
            sessions[n].create(paths.member(n), {"x": 1}, ephemeral=True)
        sessions["dead"].close()  # dies before arriving: its session ends, its membership node goes
        counter = CountingBarrier(coord, paths, 0, names)
        errors: list[BaseException] = []
        outcome: list[str] = []

        def participant(name: str) -> None:
            try:
                CountingBarrier(sessions[name], paths, 0, names).enter(name, timeout_s=3)
                outcome.append("passed")
            except TimeoutError:
                outcome.append("blocked")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=participant, args=(n,)) for n in names[:3]]
        for th in threads:
            th.start()
        wait_arrivals(coord, counter, "enter", 3)
        with pytest.raises(TimeoutError, match=r"1 of 4 participants missing after 1 s: dead"):
            counter.release("enter", timeout_s=1)
        for th in threads:
            th.join(30)
        assert not errors and outcome == ["blocked"] * 3
        assert not coord.exists(counter.go_path)
        assert counter.missing("enter") == ["dead"]
        assert counter.absent("enter", paths.member) == ["dead"]  # dead, not merely slow
    finally:
        close_all(coord, sessions, root)


def test_a_zookeeper_restart_neither_loses_nor_double_counts_an_arrival(own_zk, creds, root):
    # What must hold across the restart, whether or not a session expires while the server is down (under
    # heavy load a JVM restart can outlast any timeout): every participant's arrival counted once, none lost.
    names = [f"p{i}" for i in range(4)]
    coord = session(own_zk, creds, session_timeout_s=50)
    paths = prepare(coord, root, 1, names)
    sessions = {n: session(own_zk, creds, session_timeout_s=50) for n in names}
    counter = CountingBarrier(coord, paths, 0, names)
    errors: list[BaseException] = []
    go_on = {n: threading.Event() for n in names}
    released: list = []

    def participant(name: str) -> None:
        try:
            b = CountingBarrier(sessions[name], paths, 0, names)
            go_on[name].wait(60)
            b.enter(name, timeout_s=60)
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=participant, args=(n,)) for n in names]
        for th in threads:
            th.start()
        for n in names[:2]:
            go_on[n].set()
        wait_arrivals(coord, counter, "enter", 2)
        own_zk.kill()  # crash the server under two arrived, waiting participants and the counter
        own_zk.start()
        ct = threading.Thread(target=lambda: released.append(counter.release("enter", timeout_s=60)))
        ct.start()
        for n in names[2:]:
            go_on[n].set()
        # an arrival retried after the restart (its first try went through) must not count twice
        CountingBarrier(sessions["p0"], paths, 0, names).enter("p0", timeout_s=60)
        for th in (ct, *threads):
            th.join(120)
        assert not errors, errors
        assert released
        arrivals = coord.children(f"{paths.barrier(0)}/enter")
        assert sorted(arrivals) == names  # each participant arrived, once (p0 twice: its retry added nothing)
        assert coord.get(counter.go_path) == {"step": 0, "arrived": len(names)}  # counted once each
    finally:
        close_all(coord, sessions, root)


def test_a_counter_killed_mid_step_is_resumed_by_a_new_one(zk_server, creds, root):
    names = ["a", "b", "c"]
    first = session(zk_server, creds)
    paths = prepare(first, root, 1, names)
    sessions = {n: session(zk_server, creds) for n in names}
    left = {n: threading.Event() for n in names}
    errors: list[BaseException] = []

    def participant(name: str) -> None:
        try:
            b = CountingBarrier(sessions[name], paths, 0, names)
            b.enter(name, timeout_s=60)
            left[name].wait(60)
            b.leave(name, timeout_s=60)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=participant, args=(n,)) for n in names]
    for th in threads:
        th.start()
    resumed = None
    try:
        CountingBarrier(first, paths, 0, names).release("enter", timeout_s=60)
        first.close()  # the coordinator dies between the phases
        for n in names:
            left[n].set()
        resumed = session(zk_server, creds)
        counter = CountingBarrier(resumed, paths, 0, names)  # knows nothing: finds `go` there, counts `leave`
        counter.run_step(timeout_s=60)
        for th in threads:
            th.join(120)
        assert not errors, errors
        assert counter.is_done() and sorted(resumed.children(f"{paths.barrier(0)}/leave")) == names
    finally:
        for s in sessions.values():
            s.close()
        if resumed is not None:
            resumed.delete_tree(root)
            resumed.close()

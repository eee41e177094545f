"""The ZooKeeper layer against a real server: values, ACLs, the step barrier, bounded waits, the server."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.zk.credentials import ENV_AUTH, ENV_AUTH_FILE, Credentials, load_credentials, write_credentials_file
from bsp_planner.zk.schema import (
    MAX_VALUE_BYTES,
    MalformedValue,
    decode,
    encode,
    parse_run,
    parse_step,
    run_value,
    step_value,
)
from bsp_planner.zk.session import ZkSession, ZkUnavailable

from zk_fixtures import close_all, make_root, needs_zk, session

pytestmark = needs_zk


# -- values ------------------------------------------------------------------------------------------
def test_workloads_round_trip_through_zookeeper_exactly(zk_server, creds, root):
    s = session(zk_server, creds)
    try:
        make_root(s, root)
        values = [10.0, 50.0, 10.000000000000002, 49.99999999999999, 33.333333333333336, 12.3456789012345, 27.0]
        for i, w in enumerate(values):
            path = f"{root}/w{i}"
            s.create(path, step_value(i, w))
            assert parse_step(path, s.get(path), i, (10.0, 50.0)) == w  # bit for bit, not a byte's worth
    finally:
        s.close()


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "empty"),
        (b"\x00\xff garbage", "not JSON"),
        (b"[1, 2]", "expected an object"),
        (b'{"step": 3, "workload": NaN}', "not JSON"),
        (b'{"step": 3, "workload": 1e400}', "finite"),
        (b'{"step": 3, "workload": "20"}', "finite number"),
        (b'{"step": 4, "workload": 20}', "step 3"),
        (b'{"step": 3, "workload": 75}', "[10, 50]"),
        (b'{"step": 3}', "'workload'"),
        (b'{"step": true, "workload": 20}', "'step'"),
    ],
)
def test_a_malformed_workload_is_refused_naming_the_znode(raw, message):
    path = "/r/tasks/a/steps/0000000003"
    with pytest.raises(MalformedValue) as exc:
        parse_step(path, decode(path, raw), 3, (10.0, 50.0))
    assert path in str(exc.value) and message in str(exc.value)


def test_a_malformed_run_description_is_refused():
    good = run_value("r1", "job", [{"name": "a", "stressor": "zero", "ops_per_unit": 2.0, "workers": 1}], (10, 50), 5)
    assert parse_run("/r", good).tasks["a"]["stressor"] == "zero"
    for key, bad in (("stressor", "rm -rf /"), ("name", "../etc"), ("ops_per_unit", -1), ("workers", 0)):
        v = json.loads(encode(good))
        v["tasks"][0][key] = bad
        with pytest.raises(MalformedValue, match="malformed value in ZooKeeper at /r"):
            parse_run("/r", v)
    with pytest.raises(MalformedValue, match="too|bytes"):
        decode("/r", b"{" + b" " * (MAX_VALUE_BYTES + 1) + b"}")


# -- credentials and ACLs ----------------------------------------------------------------------------
def test_credentials_come_from_a_private_file_or_the_environment(tmp_path, creds):
    f = write_credentials_file(tmp_path / "auth", creds)
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    assert load_credentials(f, env={}) == creds
    assert load_credentials(None, env={ENV_AUTH_FILE: str(f)}) == creds
    assert load_credentials(None, env={ENV_AUTH: "u:p"}) == Credentials("u", "p")
    assert load_credentials(None, env={}) is None
    assert "p" not in repr(Credentials("u", "p")).split("password=")[1]
    os.chmod(f, 0o644)
    with pytest.raises(InputError, match="chmod 600"):
        load_credentials(f, env={})
    (tmp_path / "bad").write_text("no-colon\n")
    os.chmod(tmp_path / "bad", 0o600)
    with pytest.raises(InputError, match="user:password"):
        load_credentials(tmp_path / "bad", env={})


def test_another_client_can_neither_enter_the_barrier_nor_rewrite_a_workload(zk_server, creds, root):
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from bsp_planner.zk.barrier import StepBarrier
    from bsp_planner.zk.schema import RunPaths

    s = session(zk_server, creds)
    paths = RunPaths(root)
    try:
        s.ensure_path(root.rsplit("/", 1)[0], acl=creds.parent_acl())
        s.create(
            root,
            run_value("r", "j", [{"name": "a", "stressor": "zero", "ops_per_unit": 1.0, "workers": 1}], (10, 50), 3),
        )
        s.ensure_path(paths.steps("a"))
        s.ensure_path(paths.barriers)
        s.create(paths.step("a", 0), step_value(0, 20.0))
        assert not any(isinstance(r, Exception) for r in s.commit(StepBarrier(s, paths, 0, ["a"]).setup_ops()))
        for auth in (None, [("digest", "intruder:guess")]):
            other = KazooClient(hosts=zk_server.hosts, auth_data=auth)
            other.start(timeout=10)
            try:
                with pytest.raises(NoAuthError):
                    other.create(f"{paths.barrier(0)}/enter/a", b"{}")
                with pytest.raises(NoAuthError):
                    other.set(paths.step("a", 0), b'{"step":0,"workload":50}')
                with pytest.raises(NoAuthError):
                    other.get(paths.step("a", 0))
                with pytest.raises(NoAuthError):
                    other.delete(root, recursive=True)
            finally:
                other.stop()
                other.close()
        assert parse_step(paths.step("a", 0), s.get(paths.step("a", 0)), 0, (10, 50)) == 20.0
    finally:
        s.delete_tree(root)
        s.close()


# -- the barrier -------------------------------------------------------------------------------------
def test_the_double_barrier_holds_everyone_until_all_enter_and_all_leave(zk_server, creds, root):
    from bsp_planner.zk.barrier import StepBarrier
    from bsp_planner.zk.schema import RunPaths

    names = [f"p{i}" for i in range(5)]
    paths = RunPaths(root)
    coord = session(zk_server, creds)
    make_root(coord, root)
    coord.ensure_path(paths.barriers)
    sessions = {n: session(zk_server, creds) for n in names}
    log: list[tuple] = []
    lock = threading.Lock()

    def participant(name: str, t: int, delay: float) -> None:
        b = StepBarrier(sessions[name], paths, t, names)
        time.sleep(delay)
        with lock:
            log.append(("in", t, name, time.perf_counter()))
        b.enter(name, timeout_s=20)
        with lock:
            log.append(("go", t, name, time.perf_counter()))
        time.sleep(delay)
        with lock:
            log.append(("out", t, name, time.perf_counter()))
        b.leave(name, timeout_s=20)
        with lock:
            log.append(("done", t, name, time.perf_counter()))

    try:
        for t in range(3):
            coord.commit(StepBarrier(coord, paths, t, names).setup_ops())
            threads = [threading.Thread(target=participant, args=(n, t, 0.02 * i)) for i, n in enumerate(names)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(30)
            at = {(k, n): x for k, tt, n, x in log if tt == t}
            assert min(at[("go", n)] for n in names) >= max(at[("in", n)] for n in names)
            assert min(at[("done", n)] for n in names) >= max(at[("out", n)] for n in names)
            assert StepBarrier(coord, paths, t, names).is_done()
        # a participant restarted after everyone passed goes straight through, in and out
        b = StepBarrier(sessions["p0"], paths, 1, names)
        b.enter("p0", timeout_s=30)  # a barrier that held it would raise TimeoutError
        b.leave("p0", timeout_s=30)
        with pytest.raises(InputError):
            b.enter("stranger")
        # housekeeping removes a passed step's nodes in one transaction
        coord.commit(StepBarrier(coord, paths, 0, names).cleanup_ops())
        assert not coord.exists(paths.barrier(0))
    finally:
        close_all(coord, sessions, root)


# -- bounded waits, the server -----------------------------------------------------------------------
def test_an_unreachable_zookeeper_is_a_clear_error_after_a_bounded_wait(creds):
    from bsp_planner.runtime.zkserver import free_port

    port = free_port()
    t0 = time.perf_counter()
    with pytest.raises(ZkUnavailable, match=f"cannot reach ZooKeeper at 127.0.0.1:{port} after 1.5 s"):
        ZkSession(f"127.0.0.1:{port}", creds, connect_timeout_s=1.5).start()
    assert time.perf_counter() - t0 < 30  # the 1.5 s bound, with slack for a loaded machine


@pytest.mark.parametrize("hosts", ["foo:notaport", ""])
def test_a_malformed_connection_string_is_a_clear_error(creds, hosts):
    with pytest.raises(InputError, match="expected a ZooKeeper connection string"):
        ZkSession(hosts, creds)


def expire(server, creds, s, within_s: float = 120.0) -> None:
    """Expire `s`'s ZooKeeper session as a server does when a client stays away too long: a second connection
    takes the session over and closes it (repeated until `s` has seen the loss: `s` may win the session back
    between the takeover and the close)."""
    from kazoo.client import KazooClient

    deadline = time.monotonic() + within_s
    lost_before = s.lost
    while s.lost == lost_before:
        assert time.monotonic() < deadline, "the session never expired"
        twin = KazooClient(hosts=server.hosts, client_id=s.client.client_id, auth_data=creds.auth_data)
        try:
            twin.start(timeout=30)
            twin.stop()
        finally:
            twin.close()
        wait_until = time.monotonic() + 5
        while s.lost == lost_before and time.monotonic() < wait_until:
            time.sleep(0.05)


@pytest.mark.parametrize("expired", [False, True], ids=["restart", "restart-and-expiry"])
def test_a_session_survives_a_server_restart_and_waits_wake_up(own_zk, creds, root, expired):
    # What a user relies on across a server restart, whether or not the session expires while the server is down
    # (under heavy load a JVM restart can outlast any session timeout; `expired` forces that case): a wait armed
    # before the crash wakes up once its node appears, a write made during the outage lands exactly once, and the
    # session's ephemeral node is there exactly when the session was kept (`lost` tells the caller which).
    s = session(own_zk, creds, session_timeout_s=10, op_deadline_s=180)
    try:
        make_root(s, root)
        s.create(f"{root}/arrivals")
        s.create(f"{root}/member", {"x": 1}, ephemeral=True)
        got: dict[str, bool] = {}

        def waiter():
            got["woke"] = s.wait_exists(f"{root}/late", timeout_s=180)

        th = threading.Thread(target=waiter)
        th.start()  # armed before the crash: kazoo does not re-register watches, the wait re-checks
        deadline = time.monotonic() + 30
        while not s._wakers:  # the wait has registered (and set its watch): now crash the server under it
            assert time.monotonic() < deadline, "the wait never started"
            time.sleep(0.01)
        own_zk.kill()
        writer = threading.Thread(target=s.create, args=(f"{root}/arrivals/p0", {"step": 0}))
        writer.start()  # issued while the server is down: retried until it is back
        own_zk.start(wait_s=180)
        if expired:
            expire(own_zk, creds, s)
        other = session(own_zk, creds)
        other.create(f"{root}/late", {"y": 2})
        other.close()
        th.join(200)
        writer.join(200)
        assert not th.is_alive() and not writer.is_alive()
        assert got["woke"] is True
        assert s.children(f"{root}/arrivals") == ["p0"]  # the outage's write landed, once
        assert s.get(f"{root}/arrivals/p0") == {"step": 0}
        if expired:
            assert s.lost >= 1  # the expiry was seen, and the session went on with a new one
        assert s.exists(f"{root}/member") == (s.lost == 0)  # an ephemeral lives exactly as long as its session
    finally:
        s.close()


def test_local_server_refuses_a_second_start_and_a_taken_port(own_zk, tmp_path):
    from bsp_planner.runtime.zkserver import LocalZooKeeper

    assert own_zk.ok() and own_zk.recorded_pid() is not None
    with pytest.raises(InputError, match="already running"):
        LocalZooKeeper(own_zk.data_dir, port=own_zk.port).start()
    with pytest.raises(InputError, match="already taken"):
        LocalZooKeeper(tmp_path / "other", port=own_zk.port).start()
    assert "Mode: standalone" in (Z_four(own_zk) or "")


def test_a_local_server_gets_the_largest_cpu_weight_and_its_group_goes_with_it(own_zk):
    """Every report and quota of a live run passes through the server: on a busy host it must not wait
    behind other work as one ordinary process."""
    from bsp_planner.profiling.cgroups import MAX_SHARES, detect_hierarchy
    from bsp_planner.runtime.zkserver import SERVER_GROUP_PREFIX

    try:
        h = detect_hierarchy()
    except Exception as exc:
        pytest.skip(f"no cgroup cpu controller here: {exc}")
    if os.geteuid() != 0:
        pytest.skip("moving a process into a cpu cgroup needs root")
    group = h.root / SERVER_GROUP_PREFIX / f"server-{own_zk.port}"
    pid = own_zk.recorded_pid()
    assert str(pid) in (group / "cgroup.procs").read_text().split()
    weight = "cpu.shares" if h.version == 1 else "cpu.weight"
    assert int((group / weight).read_text()) == (MAX_SHARES if h.version == 1 else 10000)
    assert int((group.parent / weight).read_text()) == int((group / weight).read_text())
    own_zk.stop()
    assert not group.exists()
    left = group.parent / "server-1"  # the emptied group of a server that was killed, not stopped
    left.mkdir(parents=True, exist_ok=True)
    own_zk.start()
    assert not left.exists() and group.exists()


def Z_four(server):
    from bsp_planner.runtime.zkserver import four_letter

    return four_letter(server.host, server.port, "srvr")


def test_zk_cli_starts_reports_and_stops_a_server(tmp_path):
    """Started on another port and folder, `zk start` prints what a run and `zk stop` then need; `zk stop`
    in a folder without a server names where the running one is and stops nothing (exit 1)."""
    import os
    import subprocess
    import sys

    from bsp_planner.runtime.zkserver import free_port
    from bsp_planner.zk.session import ENV_HOSTS

    port = free_port()
    cli = [sys.executable, "-m", "bsp_planner.cli", "zk"]
    d = tmp_path / "srv"
    env = {k: v for k, v in os.environ.items() if k != ENV_HOSTS}
    here = tmp_path / "elsewhere"  # its runs/zookeeper, the default folder, holds no server
    here.mkdir()

    def zk(*args):
        return subprocess.run(cli + list(args), capture_output=True, text=True, timeout=90, env=env, cwd=here)

    out = zk("start", "--port", str(port), "--data-dir", str(d))
    try:
        assert out.returncode == 0, out.stderr
        assert f"127.0.0.1:{port}" in out.stdout
        said = " ".join(out.stdout.split())
        assert f"--zookeeper 127.0.0.1:{port}" in said and f"{ENV_HOSTS}=127.0.0.1:{port}" in said, said
        assert f"`bsp-planner zk stop --data-dir {d}`" in said and "by default" not in said, said
        st = zk("status", "--data-dir", str(d))
        assert st.returncode == 0 and "answers" in st.stdout
        wrong = zk("stop")  # the default folder: nothing there, but the server runs from d
        assert wrong.returncode == 1 and "nothing stopped" in wrong.stderr, wrong.stderr
        assert f"127.0.0.1:{port} from {d}: `bsp-planner zk stop --data-dir {d}`" in wrong.stderr, wrong.stderr
        assert zk("status", "--data-dir", str(d)).returncode == 0  # still running
    finally:
        stop = zk("stop", "--data-dir", str(d))
    assert "stopped" in stop.stdout and stop.returncode == 0
    st = zk("status", "--data-dir", str(d))
    assert st.returncode == 1 and "not running" in st.stdout

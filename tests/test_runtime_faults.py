"""Live runs that meet a fault or a second coordinator, against a real ZooKeeper, stress-ng and cgroups:
two runs started with one id, a resume of a run that is still running, a server that lost its data, a
step past its timeout, a run log that cannot be written, a stress-ng killed by a signal.

Each fault is injected while a known step is held (:class:`zk_fixtures.StressGate`), never at whatever
moment a sleep happens to end, so every outcome below is the only possible one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.runtime.coordinator import Coordinator, RunFailed, RunInterrupted
from bsp_planner.zk.credentials import ENV_AUTH_FILE, read_credentials_file
from bsp_planner.zk.schema import DEFAULT_PARENT
from bsp_planner.zk.session import ZkSession

from zk_fixtures import (
    PREFIX,
    StressGate,
    assert_nothing_left,
    both_barriers,
    needs_tasks,
    run_cgroups,
    run_processes,
    settings,
    tiny_experiment,
    write_profile,
)

pytestmark = [needs_tasks, pytest.mark.usefixtures("reap_runs"), pytest.mark.slow]  # live runs


def coordinator(tmp_path, exp, zk, creds, run_id, resume=False, runs="runs", say=None, **kw) -> Coordinator:
    return Coordinator(settings(exp, zk, creds, **kw), run_id, tmp_path / runs, resume=resume, say=say)


def in_thread(coord: Coordinator) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def body():
        try:
            out["result"] = coord.run()
        except BaseException as exc:  # the test inspects it
            out["error"] = exc

    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th, out


def steps_logged(run_dir) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]


def root_exists(zk, creds_file, run_id: str) -> bool:
    s = ZkSession(zk.hosts, read_credentials_file(creds_file)).start()
    try:
        return s.exists(f"{DEFAULT_PARENT}/{run_id}")
    finally:
        s.close()


def cli_args(runs, zk, *args) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bsp_planner.cli",
        "run",
        *args,
        "--runs-dir",
        str(runs),
        "--zookeeper",
        zk.hosts,
        "--cgroup-prefix",
        PREFIX,
        "-q",
    ]


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps errors at the terminal width


def snapshot(run_dir) -> dict[str, tuple[str, int]]:
    """Every file of a run folder but the workers' logs: content hash and modification time."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and "logs" not in p.relative_to(run_dir).parts:
            out[str(p.relative_to(run_dir))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


# -- two coordinators, one run ----------------------------------------------------------------------
def test_two_runs_started_with_one_id_at_the_same_moment_one_is_refused_and_the_other_is_untouched(
    tmp_path, zk_server, creds_file
):
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)  # whichever run wins holds in step 2 until the loser has been refused
    runs = tmp_path / "runs"
    args = cli_args(
        runs,
        zk_server,
        "-e",
        str(exp),
        "--planner",
        "mpc",
        "--run-id",
        "twin",
        "--zk-auth-file",
        str(creds_file),
        "--stress-ng",
        str(gate.path),
    )
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        gate.wait_held(3, alive=lambda: any(p.poll() is None for p in procs))
        # the loser ends by itself (it never got the run folder); the winner is held and cannot end
        while all(p.poll() is None for p in procs):
            time.sleep(0.05)
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        _, err = loser.communicate(timeout=60)
        assert loser.returncode == 2, err
        assert "run 'twin' already exists" in flat(err) and "Traceback" not in err
        assert winner.poll() is None, "the first run must keep running"
        meta = json.loads((runs / "twin" / "run.json").read_text())
        assert meta["status"] == "running" and (runs / "twin" / "steps.jsonl").is_file()
        assert len(run_processes("twin")) >= 3  # the first run's workers alive (a restart may overlap under load)
        gate.release(3)
        out, err = winner.communicate(timeout=120)
    finally:
        for p in procs:
            p.kill()
    assert winner.returncode == 0, err
    assert steps_logged(runs / "twin") == [0, 1, 2, 3]
    assert json.loads((runs / "twin" / "run.json").read_text())["status"] == "finished"
    assert not root_exists(zk_server, creds_file, "twin")  # no znode left to block the run id
    assert_nothing_left("twin")


def test_a_second_coordinator_of_a_running_run_on_another_machine_is_refused_by_zookeeper(
    tmp_path, zk_server, creds_file
):
    """Two run folders (two machines), one ZooKeeper root: the second sees the run's root and its live
    coordinator, says so, and leaves the first alone."""
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)
    first = coordinator(tmp_path, exp, zk_server, creds_file, "shared", stress_ng=str(gate.path))
    th, out = in_thread(first)
    gate.wait_held(3, alive=th.is_alive)
    second = coordinator(tmp_path, exp, zk_server, creds_file, "shared", runs="other-machine")
    with pytest.raises(
        InputError, match=rf"already holds run 'shared', coordinated now by pid {os.getpid()}.*--resume shared"
    ):
        second.run()
    assert not (tmp_path / "other-machine" / "shared").exists()
    gate.release(3)
    th.join(120)
    assert "error" not in out, out.get("error")
    assert out["result"].status == "finished" and steps_logged(tmp_path / "runs" / "shared") == [0, 1, 2, 3]
    assert_nothing_left("shared")


def test_resume_of_a_run_that_is_still_running_is_refused_and_touches_nothing(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    write_profile(exp.parent / "profile.csv", tasks=("a", "b", "c", "d"))  # more tasks: the run keeps a copy
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        cli_args(
            runs,
            zk_server,
            "-e",
            str(exp),
            "--run-id",
            "busy",
            "--zk-auth-file",
            str(creds_file),
            "--stress-ng",
            str(gate.path),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        gate.wait_held(3, alive=lambda: proc.poll() is None)
        before = snapshot(runs / "busy")
        assert "profile.csv" in before
        workers, groups = sorted(run_processes("busy")), run_cgroups("busy")
        assert len(workers) == 3
        out = subprocess.run(cli_args(runs, zk_server, "--resume", "busy"), capture_output=True, text=True, timeout=120)
        err = flat(out.stderr)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"run 'busy' is being coordinated by pid {proc.pid} on" in err and "nothing was changed" in err
        assert "Traceback" not in out.stderr
        assert snapshot(runs / "busy") == before  # run.json, the run log, the profile copy: untouched
        assert sorted(run_processes("busy")) == workers and run_cgroups("busy") == groups
        assert proc.poll() is None
        gate.release(3)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    meta = json.loads((runs / "busy" / "run.json").read_text())
    assert meta["status"] == "finished" and meta["resumes"] == []
    assert steps_logged(runs / "busy") == [0, 1, 2, 3]
    assert_nothing_left("busy")


# -- ZooKeeper lost its data ------------------------------------------------------------------------
@both_barriers
def test_resume_after_zookeeper_lost_its_data_says_so_and_continues_from_the_run_log(
    tmp_path, own_zk, creds_file, barrier
):
    from bsp_planner.runtime.zkserver import LocalZooKeeper

    exp = tiny_experiment(tmp_path / "exp", steps=5)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)
    coord = coordinator(
        tmp_path,
        exp,
        own_zk,
        creds_file,
        "amnesia",
        session_timeout_s=4.0,
        zk_wait_s=2.0,
        stress_ng=str(gate.path),
        barrier=barrier,
    )
    th, out = in_thread(coord)
    gate.wait_held(3, alive=th.is_alive)
    own_zk.kill()
    th.join(60)
    assert isinstance(out.get("error"), RunInterrupted), out
    run_dir = tmp_path / "runs" / "amnesia"
    assert steps_logged(run_dir) == [0, 1]
    empty = LocalZooKeeper(tmp_path / "zk-empty", port=own_zk.port)  # the same address, no data
    empty.start()
    try:
        said: list[str] = []
        result = coordinator(
            tmp_path,
            exp,
            empty,
            creds_file,
            "amnesia",
            resume=True,
            say=said.append,
            session_timeout_s=4.0,
            zk_wait_s=10.0,
            barrier=barrier,
        ).run()
        assert result.status == "finished"
        assert any("has no state of this run" in line and "continuing at step 2" in line for line in said), said
        assert steps_logged(run_dir) == [0, 1, 2, 3, 4]
        meta = json.loads((run_dir / "run.json").read_text())
        assert "rebuilt the tasks' checkpoints from the run log" in meta["zk_state"]
        assert json.loads((run_dir / "summary.json").read_text())["same_plan_as_simulated"]
    finally:
        empty.stop()
    assert_nothing_left("amnesia")


# -- the step timeout, a failure that stays resumable ------------------------------------------------
@both_barriers
def test_a_step_past_the_step_timeout_fails_with_the_resume_hint_and_resumes(tmp_path, zk_server, creds_file, barrier):
    # Deterministic under load: the held step is the first (no earlier step has to beat the short timer),
    # and the worker's own limit is far past the coordinator's, so only the coordinator's message can come.
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    gate = StressGate(tmp_path / "gate")
    gate.hold(1)  # never released: task a cannot end step 0
    coord = coordinator(
        tmp_path, exp, zk_server, creds_file, "slowstep", step_timeout_s=2.0, stress_ng=str(gate.path), barrier=barrier
    )
    with pytest.raises(RunFailed) as info:
        coord.run()
    message = str(info.value)
    assert (
        "step 0 did not finish within 2 s (the step timeout: --step-timeout): task a did not report step 0" in message
    )
    assert "the run stopped before its first step" in message and "--resume slowstep" in message
    run_dir = tmp_path / "runs" / "slowstep"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert_nothing_left("slowstep")
    # gate run 2: free
    result = coordinator(tmp_path, exp, zk_server, creds_file, "slowstep", resume=True, barrier=barrier).run()
    assert result.status == "finished" and steps_logged(run_dir) == [0, 1, 2, 3]
    assert_nothing_left("slowstep")


def test_a_bad_step_timeout_is_refused(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    for value in ("0", "nan", "-5"):
        out = subprocess.run(
            cli_args(
                tmp_path / "runs", zk_server, "-e", str(exp), "--zk-auth-file", str(creds_file), "--step-timeout", value
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            out.returncode == 2
            and "--step-timeout" in out.stderr
            and "positive, finite number of seconds" in flat(out.stderr)
        ), out.stderr
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


# -- the run log cannot be written ------------------------------------------------------------------
def _chattr(path, flag: str) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_a_run_log_that_cannot_be_written_stops_the_run_resumable(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)
    coord = coordinator(tmp_path, exp, zk_server, creds_file, "diskfull", stress_ng=str(gate.path))
    th, out = in_thread(coord)
    gate.wait_held(3, alive=th.is_alive)
    run_dir = tmp_path / "runs" / "diskfull"
    log = run_dir / "steps.jsonl"
    if not _chattr(log, "+i"):  # immutable: even root cannot append, as on a full disk
        gate.release(3)
        th.join(120)
        pytest.skip("chattr +i is not supported on this file system")
    try:
        gate.release(3)
        th.join(120)
        error = out.get("error")
        assert isinstance(error, RunInterrupted), out
        assert "step 2 ran but cannot be written to the run log" in str(error) and str(log) in str(error)
        assert "--resume diskfull" in str(error) and "the run stopped after step 1" in str(error)
        assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
        assert_nothing_left("diskfull")
    finally:
        _chattr(log, "-i")
    assert steps_logged(run_dir) == [0, 1]
    result = coordinator(tmp_path, exp, zk_server, creds_file, "diskfull", resume=True).run()
    assert result.status == "finished" and steps_logged(run_dir) == [0, 1, 2, 3]  # step 2 recorded once
    assert_nothing_left("diskfull")


# -- stress-ng killed by a signal ---------------------------------------------------------------------
@both_barriers
def test_a_stress_ng_killed_by_a_signal_restarts_the_task_like_a_dead_worker(tmp_path, zk_server, creds_file, barrier):
    exp = tiny_experiment(tmp_path / "exp", steps=4)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)
    coord = coordinator(tmp_path, exp, zk_server, creds_file, "oom", stress_ng=str(gate.path), barrier=barrier)
    th, out = in_thread(coord)
    gate.wait_held(3, alive=th.is_alive)
    worker = coord.backend.pid("a")
    stressor = [pid for pid in coord.backend.tasks["a"].group.pids() if pid != worker]
    assert stressor, "task a's stress-ng (held) is in its group"
    for pid in stressor:  # as the OOM killer would
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    th.join(120)
    assert "error" not in out, out.get("error")
    records = [json.loads(line) for line in (tmp_path / "runs" / "oom" / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert [r["restarts"] for r in records] == [0, 0, 1, 0]
    log = (tmp_path / "runs" / "oom" / "logs" / "a.log").read_text()
    assert "stress-ng was killed by signal 9 (SIGKILL)" in log
    assert_nothing_left("oom")


# -- a worker in a pod that cannot reach ZooKeeper ----------------------------------------------------
def test_a_worker_in_a_pod_that_cannot_reach_zookeeper_points_at_worker_zookeeper(tmp_path, creds_file):
    from bsp_planner.runtime.zkserver import free_port

    env = dict(os.environ, KUBERNETES_SERVICE_HOST="10.0.0.1", **{ENV_AUTH_FILE: str(creds_file)})
    args = [
        sys.executable,
        "-m",
        "bsp_planner.cli",
        "worker",
        "--zookeeper",
        f"127.0.0.1:{free_port()}",
        "--root",
        "/r",
        "--task",
        "a",
        "--zk-wait",
        "1",
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    err = flat(out.stderr)
    assert out.returncode == 3, err
    assert "--worker-zookeeper" in err and "zk start" not in err
    env.pop("KUBERNETES_SERVICE_HOST")
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 3 and "bsp-planner zk start" in flat(out.stderr)

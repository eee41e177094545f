"""Live runs against a real ZooKeeper, real stress-ng and real cgroups: the plan carried out, the run log,
reconfiguration both ways, and the faults (a killed worker, a restarted server, a server gone too long,
a killed coordinator). Every test ends by checking that no process and no cgroup of the run is left.

A tiny three-task job keeps steps at ~0.1-0.5 s (see zk_fixtures.py). A fault is injected while a known
step is held (zk_fixtures.StressGate), so it always lands in that step however busy the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.runtime.coordinator import Coordinator, RunInterrupted
from bsp_planner.zk.credentials import ENV_AUTH, ENV_AUTH_FILE, Credentials, read_credentials_file
from bsp_planner.zk.schema import (
    DEFAULT_PARENT,
    RunPaths,
    checkpoint_value,
    parse_checkpoint,
    parse_run,
    run_value,
    step_name,
)
from bsp_planner.zk.session import ZkSession

from zk_fixtures import (
    PREFIX,
    StressGate,
    assert_nothing_left,
    both_barriers,
    needs_tasks,
    run_processes,
    settings,
    tiny_experiment,
)

pytestmark = [needs_tasks, pytest.mark.usefixtures("reap_runs"), pytest.mark.slow]  # live runs


def coordinator(tmp_path, exp, zk, creds, run_id, resume=False, **kw) -> Coordinator:
    return Coordinator(settings(exp, zk, creds, **kw), run_id, tmp_path / "runs", resume=resume)


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


def check_log(run_dir, steps: int) -> list[dict]:
    """Every step logged exactly once, in order, in both files."""
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(steps))
    rows = (run_dir / "steps.csv").read_text().splitlines()
    assert len(rows) == steps + 1 and rows[0].startswith("step,action,reconfigured")
    return records


def test_a_live_run_carries_out_the_plan_and_logs_every_step(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=5)
    coord = coordinator(tmp_path, exp, zk_server, creds_file, "plain", planner="mpc", reconfigure="recreate")
    result = coord.run()
    assert result.status == "finished"
    run_dir = tmp_path / "runs" / "plain"
    records = check_log(run_dir, 5)
    for r in records:
        assert sum(t["cpu_millicores"] for t in r["tasks"]) <= 1500
        assert all(t["measured_s"] > 0 and t["predicted_s"] > 0 and 10 <= t["workload"] <= 50 for t in r["tasks"])
        assert r["step_s"] >= r["slowest_s"] > 0 and r["barrier_s"] >= 0
    sm = json.loads((run_dir / "summary.json").read_text())
    assert sm["same_plan_as_simulated"] and sm["steps_done"] == 5
    assert [row["strategy"] for row in sm["rows"]] == ["floor", "mpc (simulated)", "mpc (live)"]
    assert set(sm["rows"][0]) >= {
        "compute_s",
        "checkpoints",
        "checkpoint_s",
        "total_s",
        "vs_floor_pct",
        "mean_decision_ms",
    }
    for name in ("summary.md", "summary.csv", "chart.png", "run.json", "logs/a.log"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    assert "password" not in (run_dir / "run.json").read_text()
    s = ZkSession(zk_server.hosts, read_credentials_file(creds_file)).start()
    try:
        assert not s.exists(f"{DEFAULT_PARENT}/plain")  # the run's znodes are gone
    finally:
        s.close()
    assert_nothing_left("plain")


@pytest.mark.parametrize("how", ["in-place", "recreate"])
def test_reconfiguration_in_place_rewrites_quotas_and_recreate_restarts(tmp_path, zk_server, creds_file, how):
    exp = tiny_experiment(tmp_path / "exp", steps=5, penalty=0.0)
    period_us = 100_000
    if how == "in-place":  # a profile measured at a 10 ms period: the run's quotas use it too
        period_us = 10_000
        meta = {"backend": "local-cgroup", "cfs_period_us": period_us}
        (tmp_path / "exp" / "profile.meta.json").write_text(json.dumps(meta))
    coord = coordinator(tmp_path, exp, zk_server, creds_file, f"re-{how}", planner="static:1", reconfigure=how)
    seen: dict[int, dict] = {}

    weights: list[str] = []

    def say(text: str) -> None:  # called as each step is logged: the quotas the tasks ran that step with
        if text.startswith("step"):
            step = int(text.split(":")[0].split()[1])
            seen[step] = {t: coord.backend.tasks[t].group.quota() for t in coord.tasks}
            weight_file = "cpu.shares" if coord.backend.hierarchy.version == 1 else "cpu.weight"
            weights.append((coord.backend.run_parent / weight_file).read_text().strip())

    coord.say = say
    result = coord.run()
    records = check_log(tmp_path / "runs" / f"re-{how}", 5)
    assert result.status == "finished"
    assert any(r["reconfigured"] for r in records), "the plan should reconfigure with no penalty"
    for r in records:
        for t in r["tasks"]:
            assert seen[r["step"]][t["task"]] == (int(t["cpu_millicores"] * period_us // 1000), period_us)
    assert set(weights) <= {"262144", "10000"}  # --cpu-weight guaranteed: the tasks get their quotas
    incarnations = {t["incarnation"] for r in records for t in r["tasks"]}
    if how == "in-place":
        assert incarnations == {0}  # never restarted
        assert all(r["reconfig_s"] < 0.5 for r in records)
    else:
        assert max(incarnations) >= 1
        assert all(r["reconfig_s"] > 0 for r in records if r["reconfigured"])
    assert_nothing_left(f"re-{how}")


@both_barriers
def test_a_worker_killed_mid_step_reruns_that_step_from_its_checkpoint(tmp_path, zk_server, creds_file, barrier):
    exp = tiny_experiment(tmp_path / "exp", steps=5, ops_a=60)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)  # task a's third stress-ng run: step 2, which the run cannot pass while it is held
    coord = coordinator(
        tmp_path, exp, zk_server, creds_file, "killw", keep_zk=True, stress_ng=str(gate.path), barrier=barrier
    )
    th, out = in_thread(coord)
    run_dir = tmp_path / "runs" / "killw"
    gate.wait_held(3, alive=th.is_alive)  # task a's worker is computing step 2 (its stress-ng is running)
    killed_during = len((run_dir / "steps.jsonl").read_text().splitlines())
    assert killed_during == 2
    os.kill(coord.backend.pid("a"), signal.SIGKILL)
    th.join(120)
    assert "error" not in out, out.get("error")
    records = check_log(run_dir, 5)
    assert sum(r["restarts"] for r in records) == 1
    hit = next(r for r in records if r["restarts"])
    assert hit["step"] == killed_during
    assert next(t for t in hit["tasks"] if t["task"] == "a")["incarnation"] == 1
    assert gate.runs() == 6  # step 2 ran twice, every other step once
    # in ZooKeeper: exactly one result per step and task, and every checkpoint at the last step
    s = ZkSession(zk_server.hosts, read_credentials_file(creds_file)).start()
    try:
        for task in ("a", "b", "c"):
            assert sorted(s.children(coord.paths.results(task))) == [step_name(i) for i in range(5)]
            assert parse_checkpoint("cp", s.get(coord.paths.checkpoint(task))) == 4
        # the run's description tells the tasks which barrier to pass; the counting one is released by
        # the coordinator, which writes the count into the flag (the last step's barrier is kept)
        assert parse_run(coord.paths.root, s.get(coord.paths.root)).barrier == barrier
        go = s.get(f"{coord.paths.barrier(4)}/go")
        assert go is not None and (go.get("arrived") == 3) == (barrier == "counting")
        s.delete_tree(coord.paths.root)
    finally:
        s.close()
    log = (run_dir / "logs" / "a.log").read_text()
    assert f"joined at step {killed_during}" in log
    assert_nothing_left("killw")


@both_barriers
def test_the_run_continues_when_zookeeper_restarts_within_the_session_timeout(tmp_path, own_zk, creds_file, barrier):
    exp = tiny_experiment(tmp_path / "exp", steps=6)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)  # the server goes down while step 2 is certainly under way
    coord = coordinator(
        tmp_path,
        exp,
        own_zk,
        creds_file,
        "zkbounce",
        session_timeout_s=30.0,  # a JVM restart took over 10 s at load 15: sessions must outlive any restart
        zk_wait_s=120.0,
        stress_ng=str(gate.path),
        barrier=barrier,
    )
    th, out = in_thread(coord)
    gate.wait_held(3, alive=th.is_alive)
    own_zk.kill()
    time.sleep(1.0)  # how long the server stays down (well inside the session timeout), not a wait for the run
    own_zk.start()
    gate.release(3)
    th.join(120)
    assert "error" not in out, out.get("error")
    assert out["result"].status == "finished"
    records = check_log(tmp_path / "runs" / "zkbounce", 6)
    assert sum(r["restarts"] for r in records) == 0  # nobody noticed beyond a slower step
    assert_nothing_left("zkbounce")


@both_barriers
def test_zookeeper_gone_too_long_stops_the_run_cleanly_and_it_resumes(tmp_path, own_zk, creds_file, barrier):
    exp = tiny_experiment(tmp_path / "exp", steps=5)
    gate = StressGate(tmp_path / "gate")
    gate.hold(3)  # the server goes for good while step 2 is under way: the run cannot have finished
    coord = coordinator(
        tmp_path,
        exp,
        own_zk,
        creds_file,
        "zkgone",
        session_timeout_s=4.0,
        zk_wait_s=10.0,
        stress_ng=str(gate.path),
        barrier=barrier,
    )
    th, out = in_thread(coord)
    run_dir = tmp_path / "runs" / "zkgone"
    gate.wait_held(3, alive=th.is_alive)
    own_zk.kill()
    t0 = time.monotonic()
    th.join(60)
    assert isinstance(out.get("error"), RunInterrupted), out
    assert time.monotonic() - t0 < 60  # the bounded wait (10 s), not the step timeout
    assert "--resume zkgone" in str(out["error"])
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert_nothing_left("zkgone")
    done = len((run_dir / "steps.jsonl").read_text().splitlines())
    assert done == 2
    own_zk.start()
    result = coordinator(
        tmp_path, exp, own_zk, creds_file, "zkgone", resume=True, session_timeout_s=4.0, zk_wait_s=10.0, barrier=barrier
    ).run()
    assert result.status == "finished"
    records = check_log(run_dir, 5)
    assert (
        records[done]["step"] == done and json.loads((run_dir / "summary.json").read_text())["same_plan_as_simulated"]
    )
    assert_nothing_left("zkgone")


def cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    """The command line, its output with line wrapping undone (rich wraps errors at the terminal width)."""
    out = subprocess.run(
        [sys.executable, "-m", "bsp_planner.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    out.stdout, out.stderr = " ".join(out.stdout.split()), " ".join(out.stderr.split())
    return out


@both_barriers
def test_a_stopped_or_killed_coordinator_leaves_nothing_running_and_resume_finishes_the_same_plan(
    tmp_path, zk_server, creds_file, barrier
):
    exp = tiny_experiment(tmp_path / "exp", steps=7)
    runs = tmp_path / "runs"
    common = ["--runs-dir", str(runs), "--zookeeper", zk_server.hosts, "--cgroup-prefix", PREFIX, "-q"]
    log = runs / "killc" / "steps.jsonl"
    gate = StressGate(tmp_path / "gate")

    def start(*args) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "bsp_planner.cli", "run", *args, *common],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def logged() -> int:
        return len(log.read_text().splitlines())

    # SIGTERM (kill, a deleted pod) while step 2 is held: a clean stop, exit code 143 (128 + SIGTERM), nothing
    # left, not even a cgroup
    gate.hold(3)
    proc = start(
        "-e",
        str(exp),
        "--planner",
        "mpc",
        "--run-id",
        "killc",
        "--zk-auth-file",
        str(creds_file),
        "--stress-ng",
        str(gate.path),
        "--barrier",
        barrier,
    )
    try:
        gate.wait_held(3, alive=lambda: proc.poll() is None)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "--resume killc" in " ".join(err.split())
    assert json.loads((runs / "killc" / "run.json").read_text())["status"] == "interrupted"
    assert_nothing_left("killc", wait_s=0.0)
    # resumed (step 2 again, then 3), then SIGKILL while step 4 is held: the workers go (parent-death
    # signal); the cgroups wait for the next resume
    first = logged()
    assert first == 2
    gate.hold(6)
    proc = start("--resume", "killc")
    try:
        gate.wait_held(6, alive=lambda: proc.poll() is None)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 60  # bounds a worker that never goes; a loaded machine can take seconds
    while run_processes("killc") and time.monotonic() < deadline:  # parent-death signal: the workers are going
        time.sleep(0.05)
    assert run_processes("killc") == []
    second = logged()
    out = cli("run", "--resume", "killc", *common)
    assert out.returncode == 0, out.stdout + out.stderr
    records = check_log(runs / "killc", 7)
    assert second == 4 and any(r["step"] == second for r in records)
    # each coordinator's first step started its workers: logged as a start (with its start-up time), and where
    # the configuration changed there, the change is that start, not a resize costing the start-up
    for r in records:
        first_of_a_coordinator = r["step"] in (0, first, second)
        assert ("start_s" in r) == first_of_a_coordinator and (not first_of_a_coordinator or r["start_s"] > 0)
        method = json.loads((runs / "killc" / "run.json").read_text())["settings"]["reconfigure"]
        expected = ("start" if first_of_a_coordinator else method) if r["reconfigured"] else None
        assert r["reconfig_method"] == (expected if r["step"] else None)
    sm = json.loads((runs / "killc" / "summary.json").read_text())
    assert sm["same_plan_as_simulated"]
    meta = json.loads((runs / "killc" / "run.json").read_text())
    assert meta["status"] == "finished" and len(meta["resumes"]) == 2
    # the inputs are named relative to the run folder (what the two resumes found), never by an absolute path
    assert (runs / "killc" / meta["settings"]["experiment"]).resolve() == exp.resolve()
    assert not any(Path(p).is_absolute() for k, p in meta["inputs"].items() if k != "sha256")
    assert_nothing_left("killc")


# -- bad input -----------------------------------------------------------------------------------------
def test_bad_inputs_are_clear_errors(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.backends.local import machine_millicores
    from bsp_planner.runtime.zkserver import free_port

    exp = tiny_experiment(tmp_path / "exp", steps=3)
    runs = ["--runs-dir", str(tmp_path / "runs"), "--cgroup-prefix", PREFIX, "--zk-auth-file", str(creds_file)]
    # ZooKeeper unreachable: an error after the bounded wait, and no run folder left
    t0 = time.monotonic()
    out = cli(
        "run", "-e", str(exp), "--zookeeper", f"127.0.0.1:{free_port()}", "--zk-wait", "1.5", "--run-id", "nozk", *runs
    )
    assert out.returncode == 2 and "cannot reach ZooKeeper" in out.stderr and "bsp-planner zk start" in out.stderr
    assert time.monotonic() - t0 < 30 and not (tmp_path / "runs" / "nozk").exists()
    # more CPU than the machine has
    too_much = machine_millicores() + 1000
    out = cli(
        "run", "-e", str(exp), "--zookeeper", zk_server.hosts, "--set", f"cpu.budget_millicores={too_much:g}", *runs
    )
    assert out.returncode == 2 and "exceeds this machine" in out.stderr and "cpu.budget_millicores" in out.stderr
    # no stress-ng
    out = cli("run", "-e", str(exp), "--zookeeper", zk_server.hosts, "--stress-ng", "/nonexistent/stress-ng", *runs)
    assert out.returncode == 2 and "stress-ng not found" in out.stderr and "apt-get install stress-ng" in out.stderr
    # an unknown planner
    out = cli("run", "-e", str(exp), "--zookeeper", zk_server.hosts, "--planner", "nope", *runs)
    assert out.returncode == 2 and "unknown strategy" in out.stderr


def test_run_json_is_the_summary_alone_on_stdout(tmp_path, zk_server, creds_file):
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    runs = ["--runs-dir", str(tmp_path / "runs"), "--cgroup-prefix", PREFIX, "--zk-auth-file", str(creds_file)]
    out = cli("run", "-e", str(exp), "--zookeeper", zk_server.hosts, "--run-id", "js", "--json", *runs)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # nothing else on stdout: the step lines and totals went to stderr
    sm = json.loads((tmp_path / "runs" / "js" / "summary.json").read_text())
    assert doc["rows"] == sm["rows"] and doc["steps_done"] == sm["steps_done"] == 3
    assert "total: live" in out.stderr and "run folder:" in out.stderr
    assert_nothing_left("js")


def test_a_root_path_held_by_another_run_is_refused(tmp_path, zk_server, creds_file):
    from kazoo.client import KazooClient

    exp = tiny_experiment(tmp_path / "exp", steps=3)
    creds = read_credentials_file(creds_file)
    s = ZkSession(zk_server.hosts, creds).start()
    other = ZkSession(zk_server.hosts, Credentials("someone", "else")).start()
    try:
        s.ensure_path("/held", acl=creds.parent_acl())
        tasks = [{"name": "a", "stressor": "zero", "ops_per_unit": 1.0, "workers": 1}]
        s.create("/held/mine", run_value("first-run", "tiny", tasks, (10, 50), 3))
        other.create("/held/theirs", run_value("their-run", "tiny", tasks, (10, 50), 3))
        garbage = KazooClient(hosts=zk_server.hosts, auth_data=creds.auth_data)
        garbage.start(timeout=10)
        garbage.create("/held/garbage", b"\x00not json", acl=creds.acl())
        garbage.stop()
        for root, message in (
            ("/held/mine", "held by run 'first-run'"),
            ("/held/theirs", "held by another run"),
            ("/held/garbage", "malformed value in ZooKeeper at /held/garbage"),
        ):
            coord = coordinator(tmp_path, exp, zk_server, creds_file, "second", zk_root=root)
            with pytest.raises(InputError, match=message):
                coord.run()
            assert not (tmp_path / "runs" / "second").exists()
    finally:
        s.delete_tree("/held/mine")
        s.delete_tree("/held/garbage")
        other.delete_tree("/held/theirs")
        s.close()
        other.close()
    assert_nothing_left("second")


def test_no_permission_to_create_cgroups_says_what_is_needed(tmp_path, zk_server, creds_file):
    from pathlib import Path

    from bsp_planner.profiling.cgroups import CgroupUnavailable, Hierarchy
    from bsp_planner.runtime.backends.local import LocalBackend

    exp = tiny_experiment(tmp_path / "exp", steps=3)
    # sysfs refuses mkdir even to root: what an unprivileged user meets under /sys/fs/cgroup
    backend = LocalBackend(
        "noperm", tmp_path / "logs", cgroup_prefix=PREFIX, hierarchy=Hierarchy(1, Path("/sys/kernel"))
    )
    coord = Coordinator(settings(exp, zk_server, creds_file), "noperm", tmp_path / "runs", backend=backend)
    with pytest.raises(CgroupUnavailable, match=r"run as root .*delegate a subtree"):
        coord.run()


def test_a_worker_refuses_a_malformed_workload(tmp_path, zk_server, creds_file):
    creds = read_credentials_file(creds_file)
    root = f"/malformed-{os.urandom(3).hex()}"
    paths = RunPaths(root)
    s = ZkSession(zk_server.hosts, creds).start()
    try:
        tasks = [{"name": "a", "stressor": "zero", "ops_per_unit": 1.0, "workers": 1}]
        s.create(root, run_value("m", "tiny", tasks, (10, 50), 3))
        for p in (paths.members, paths.tasks, paths.task("a"), paths.steps("a"), paths.results("a"), paths.barriers):
            s.create(p)
        s.create(paths.checkpoint("a"), checkpoint_value(-1, 0))
        s.client.create(paths.step("a", 0), b'{"step": 0, "workload": 1e9}', acl=creds.acl())
        env = dict(os.environ, **{ENV_AUTH_FILE: str(creds_file)})
        out = cli("worker", "--zookeeper", zk_server.hosts, "--root", root, "--task", "a", env=env, timeout=60)
        assert out.returncode == 2
        assert f"malformed value in ZooKeeper at {paths.step('a', 0)}" in out.stderr and "'workload'" in out.stderr
        # and without credentials a worker does not even start
        env.pop(ENV_AUTH_FILE)
        env.pop(ENV_AUTH, None)
        out = cli("worker", "--zookeeper", zk_server.hosts, "--root", root, "--task", "a", env=env, timeout=60)
        assert out.returncode == 2 and "no ZooKeeper credentials" in out.stderr
    finally:
        s.delete_tree(root)
        s.close()

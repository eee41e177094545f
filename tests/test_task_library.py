"""The task library (issue 15): long-running process tasks joining a live run through bsp_planner.task,
under our barrier or their own (observe mode), against a real ZooKeeper and real cgroup quotas; the
faults (a process dying mid-step, hanging, reporting a step twice, a NaN workload) and joins refused.

The application is bsp_planner.testing.bsp_app: CPU work per step, its own file barrier in observe mode,
faults steered by control files so each hits a known task in a known step.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from bsp_planner import task
from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.profiling.cgroups import detect_hierarchy
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed
from bsp_planner.zk.credentials import read_credentials_file
from bsp_planner.zk.schema import RunPaths, run_value
from bsp_planner.zk.session import ZkSession

from zk_fixtures import (
    DATA,
    EXPERIMENT,
    PREFIX,
    assert_nothing_left,
    needs_tasks,
    settings,
    write_profile,
)

TASK = """
[[task]]
name = "{name}"
process = ["{python}", "-m", "bsp_planner.testing.bsp_app", "--ranks", "3", "--control", "{control}"{extra}]
restorable = {restorable}  # its state is its step: it restores from session.first_step
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""


def process_experiment(
    folder: Path, steps: int = 4, sync: str = "barrier", penalty: float = 0.3, restorable: bool = True
) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    control = folder / "control"
    control.mkdir()
    extra = ', "--self-sync"' if sync == "observe" else ""
    rows = ((0, 1998), (1999, 3997), (0, 1998))
    tasks = "".join(
        TASK.format(
            name=n,
            python=sys.executable,
            control=control,
            extra=extra,
            data=DATA / "datasets",
            first=f,
            last=la,
            restorable=str(restorable).lower(),
        )
        for n, (f, la) in zip("abc", rows, strict=True)
    )
    (folder / "job.toml").write_text(f'name = "app"\nsync = "{sync}"\n' + tasks)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, penalty=penalty))
    return exp, control


def coordinator(tmp_path, exp, zk, creds, run_id, resume=False, **kw) -> Coordinator:
    kw.setdefault("reconfigure", "in-place")
    return Coordinator(settings(exp, zk, creds, **kw), run_id, tmp_path / "runs", resume=resume)


def cpu_cgroup() -> str | None:
    """This process's group in the cgroup v1 cpu hierarchy (None on cgroup v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return None


def records_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


def pids(run_dir: Path, name: str) -> dict[int, int]:
    """step -> pid of the process that ran it."""
    return {int(s): int(p) for s, p in (line.split() for line in (run_dir / f"pids-{name}").read_text().splitlines())}


# -- standalone ------------------------------------------------------------------------------------------
def test_a_local_session_times_and_keeps_reports_and_refuses_steps_out_of_order(tmp_path):
    with task.local_session("p0", workloads=[5, 6], steps=2, reports_file=tmp_path / "r.jsonl") as session:
        with session.step(0, workload=5) as st:
            assert st.assigned_workload == 5
            sum(i for i in range(20000))
        with pytest.raises(task.StepOrderError, match="task p0 reported step 0 but its next step is 1"):
            with session.step(0):
                pass
        with pytest.raises(InputError, match="task p0 step 1 reported workload nan"):
            with session.step(1) as st:
                st.workload = float("nan")
        assert not session.ended
    assert [r["step"] for r in session.reports] == [0]
    rep = session.reports[0]
    assert rep["workload"] == 5 and rep["wall_s"] > 0 and rep["cpu_s"] >= 0
    assert [json.loads(line)["step"] for line in (tmp_path / "r.jsonl").read_text().splitlines()] == [0]


def test_an_application_that_timed_its_step_reports_it_with_its_own_duration(tmp_path):
    session = task.local_session("p0", steps=3, reports_file=tmp_path / "r.jsonl")
    session.report(0, workload=12, duration_s=0.25, cpu_s=0.2)
    before = time.time()
    session.report(1, duration_s=1.5)
    after = time.time()
    rep0, rep1 = session.reports
    assert rep0["wall_s"] == 0.25 and rep0["cpu_s"] == 0.2 and rep0["workload"] == 12
    assert rep1["wall_s"] == 1.5 and "cpu_s" not in rep1  # not measured, so not reported
    assert before - 1.5 <= rep1["started_at"] <= after - 1.5  # it ended as reported, so it started 1.5 s before
    for bad in (float("nan"), 0, -1.0, "1"):
        with pytest.raises(InputError, match=r"task p0 step 2 reported duration_s .*expected a number of seconds"):
            session.report(2, duration_s=bad)
    assert [r["step"] for r in session.reports] == [0, 1]
    with pytest.raises(task.StepOrderError):
        session.report(0, duration_s=1.0)
    barrier = task.local_session("p1")
    barrier.sync = "barrier"
    with pytest.raises(InputError, match="barrier-mode run does not allow"):
        barrier.report(0, duration_s=1.0)


def test_the_reporter_commits_in_order_off_the_applications_thread_and_raises_a_failure_later():
    from bsp_planner.task.reporter import Reporter

    done: list[int] = []
    release = threading.Event()

    def commit(ops):
        release.wait(10)
        if ops[0] == "bad":
            raise RuntimeError("ZooKeeper said no")
        done.append(ops[0])

    r = Reporter(commit)
    r.submit([0])
    r.submit([1])  # queued while the first waits: the application's thread is not held up
    assert done == []
    release.set()
    r.flush()
    assert done == [0, 1]
    r.submit(["bad"])
    r.submit([2])  # after a failure nothing more is committed
    with pytest.raises(RuntimeError, match="ZooKeeper said no"):
        r.flush()
    with pytest.raises(RuntimeError, match="ZooKeeper said no"):
        r.submit([3])
    r.close()
    assert done == [0, 1]


def test_joining_without_the_environment_says_what_is_missing():
    with pytest.raises(task.TaskJoinError, match=r"\$BSP_RUN_ID is not set.*local_session"):
        task.join({})
    with pytest.raises(task.TaskJoinError, match="no ZooKeeper credentials"):
        task.join({"BSP_RUN_ID": "r", "BSP_TASK": "a", "BSP_ZOOKEEPER": "127.0.0.1:1"})
    with pytest.raises(task.TaskJoinError, match="expected \\$BSP_SYNC barrier or observe"):
        task.join({"BSP_RUN_ID": "r", "BSP_TASK": "a", "BSP_ZOOKEEPER": "127.0.0.1:1", "BSP_SYNC": "mpi"})


def test_a_job_may_observe_only_process_tasks(tmp_path):
    process_experiment(tmp_path, sync="observe")
    job = load_job(tmp_path / "job.toml")
    assert job.sync == "observe" and all(t.kind == "process" for t in job.tasks)
    text = (tmp_path / "job.toml").read_text().replace("process = [", "command = [", 1)
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(InputError, match="needs every task to be a `process`"):
        load_job(tmp_path / "job.toml")


@needs_tasks
def test_a_task_of_another_run_or_without_its_credentials_is_refused(tmp_path, zk_server, creds_file):
    creds = read_credentials_file(creds_file)
    root = f"/join-{tmp_path.name[-12:]}"
    s = ZkSession(zk_server.hosts, creds).start()
    try:
        s.create(root, run_value("run1", "app", [{"name": "a", "process": ["x"], "workers": 1}], (10, 50), 3))
        s.create(RunPaths(root).members)
        env = {
            "BSP_RUN_ID": "run1",
            "BSP_TASK": "a",
            "BSP_ZOOKEEPER": zk_server.hosts,
            "BSP_ZK_ROOT": root,
            "BSP_ZK_AUTH": f"{creds.user}:{creds.password}",
        }
        with pytest.raises(task.TaskJoinError, match="holds run 'run1', not 'run2': this task does not belong to it"):
            task.join({**env, "BSP_RUN_ID": "run2"})
        with pytest.raises(task.TaskJoinError, match="run run1 has no task 'z'"):
            task.join({**env, "BSP_TASK": "z"})
        with pytest.raises(task.TaskJoinError, match="its credentials are not the run's"):
            task.join({**env, "BSP_ZK_AUTH": "intruder:guess"})
        with task.join(env) as session:  # the right run, task and credentials
            assert session.first_step == 0 and session.steps == 3
    finally:
        s.delete_tree(root)
        s.close()


# -- live ------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize("sync, barrier", [("barrier", "double"), ("barrier", "counting"), ("observe", "double")])
def test_process_tasks_run_the_whole_run_in_one_process_each_with_cpu_changed_in_place(
    tmp_path, zk_server, creds_file, sync, barrier
):
    exp, control = process_experiment(tmp_path / "exp", steps=5, sync=sync, penalty=0.0)
    coord = coordinator(tmp_path, exp, zk_server, creds_file, f"proc{sync}", planner="static:1", barrier=barrier)
    quotas: dict[int, dict] = {}
    home = cpu_cgroup()
    during: set[str | None] = set()

    def say(text: str) -> None:  # called as each step is logged: the quotas the tasks have then
        if text.startswith("step"):
            quotas[int(text.split(":")[0].split()[1])] = {t: coord.backend.tasks[t].group.quota() for t in coord.tasks}
            during.add(cpu_cgroup())

    coord.say = say
    result = coord.run()
    assert result.status == "finished"
    # the coordinator ran in the run's group beside its tasks (not behind the whole group), and left it;
    # cgroup v2 places no process in an inner group, so there it stays where it was
    v1 = detect_hierarchy().version == 1
    assert during == ({f"/{PREFIX}.live.{coord.run_id}"} if v1 else {home}) and cpu_cgroup() == home
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for name in "abc":
        ran = pids(result.run_dir, name)
        assert sorted(ran) == [0, 1, 2, 3, 4] and len(set(ran.values())) == 1  # started once, never restarted
    for r in records:
        for t in r["tasks"]:
            assert t["measured_s"] > 0 and t["cpu_s"] >= 0
            if sync == "observe":  # the application's own drifting load, as it reported it
                assert t["observed_workload"] == 10 + ("abc".index(t["task"]) * 7 + r["step"] * 3) % 30
            else:
                assert t["observed_workload"] == pytest.approx(t["workload"])
    for name in "abc":  # its ZooKeeper client's threads report from the run's group, outside the task's quota
        group = (result.run_dir / f"report-group-{name}").read_text()
        assert group.endswith(f".live.{coord.run_id}") if v1 else group == "None", group  # v2: threads stay
    if sync == "observe":  # its own barrier, not ours
        assert (result.run_dir / "selfsync" / "000004").is_dir()
        # its steps timed on the tasks' own clocks: from the first task's start to the last one's end, they
        # add up to the application's wall time (the coordinator sees each step only after it began)
        first = min(t["started_at"] for t in records[0]["tasks"])
        last = max(t["finished_at"] for t in records[-1]["tasks"])
        assert sum(r["step_s"] for r in records) == pytest.approx(last - first, rel=1e-9)
        assert records[0]["step_s"] >= records[0]["slowest_s"]
    assert any(r["reconfigured"] for r in records)  # and still one process each: in place
    if sync == "barrier":  # each step ran under the quotas of its configuration
        for r in records:
            for t in r["tasks"]:
                assert quotas[r["step"]][t["task"]] == (int(t["cpu_millicores"] * 100), 100_000)
    assert_nothing_left(f"proc{sync}")


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize(
    "fault, expected, barrier",
    [
        ("die", "task b's process exited with code 9 in step 1", "double"),
        ("die", "task b's process exited with code 9 in step 1", "counting"),
        ("repeat", "task b step 1: reported out of order or repeated", "double"),
        ("nan", "task b step 1 reported workload nan", "double"),
    ],
)
def test_a_process_fault_stops_the_run_naming_task_and_step_and_it_resumes(
    tmp_path, zk_server, creds_file, fault, expected, barrier
):
    exp, control = process_experiment(tmp_path / "exp", steps=3)
    (control / f"{fault}-b-1").touch()
    # a and c are held in step 2 until the resume: however late b's fault is noticed (a repeat comes
    # after b's step 1, so step 2 may already be published), they cannot finish the run before it is
    for other in "ac":
        (control / f"hang-{other}-2").touch()
    run_id = f"pf{fault}"
    with pytest.raises(RunFailed) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, run_id, barrier=barrier).run()
    message = str(info.value)
    assert expected in message and f"--resume {run_id}" in message, message
    assert_nothing_left(run_id)
    (control / f"{fault}-b-1").unlink()
    for other in "ac":
        (control / f"hang-{other}-2").unlink()
    result = coordinator(tmp_path, exp, zk_server, creds_file, run_id, resume=True, barrier=barrier).run()
    assert result.status == "finished"
    assert [r["step"] for r in records_of(result.run_dir)] == [0, 1, 2]  # nothing twice, nothing lost
    assert_nothing_left(run_id)


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_process_that_stops_reporting_is_a_timeout_naming_task_and_step(tmp_path, zk_server, creds_file):
    exp, control = process_experiment(tmp_path / "exp", steps=3, sync="observe")
    (control / "hang-c-0").touch()
    with pytest.raises(RunFailed) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, "phang", step_timeout_s=3.0).run()
    assert "step 0 did not finish within 3 s" in str(info.value) and "task c did not report step 0" in str(info.value)
    assert_nothing_left("phang")


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_self_synchronising_application_owns_its_length_and_may_time_its_steps_itself(
    tmp_path, zk_server, creds_file
):
    exp, control = process_experiment(tmp_path / "exp", steps=40, sync="observe")  # 40: only an upper bound
    job = tmp_path / "exp" / "job.toml"
    job.write_text(job.read_text().replace('"--self-sync"', '"--self-sync", "--steps", "4", "--self-timed"'))
    result = coordinator(tmp_path, exp, zk_server, creds_file, "ownlen", planner="even").run()
    assert result.status == "finished"
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # the application ran 4 steps, then every task left
    assert result.summary["steps_done"] == 4
    for r in records:
        for t in r["tasks"]:  # the duration each task timed itself, and its own workload
            assert t["observed_workload"] == 10 + ("abc".index(t["task"]) * 7 + r["step"] * 3) % 30
            assert 0 < t["measured_s"] <= r["step_s"] + 1e-6 and "cpu_s" not in t
    assert_nothing_left("ownlen")


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_job_without_series_runs_online_from_the_workloads_its_processes_report(tmp_path, zk_server, creds_file):
    exp, control = process_experiment(tmp_path / "exp", steps=5, sync="observe")
    job = tmp_path / "exp" / "job.toml"
    job.write_text("\n".join(line for line in job.read_text().splitlines() if not line.startswith("series")) + "\n")
    kw = dict(
        mode="forecast",
        overrides=["online=true", "learn=true", "forecast.source=persistence", "learning.max_ratio=1000"],
    )
    with pytest.raises(InputError, match="task 'a' has no series"):  # offline, there is nothing to plan from
        coordinator(tmp_path, exp, zk_server, creds_file, "noseries-off").run()
    result = coordinator(tmp_path, exp, zk_server, creds_file, "noseries", **kw).run()
    assert result.status == "finished"
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for r in records:
        for t in r["tasks"]:
            rank = "abc".index(t["task"])
            assert t["observed_workload"] == 10 + (rank * 7 + r["step"] * 3) % 30  # what the process reported
            # persistence: each task is told the workload it reported the step before (the range's middle first)
            told = 30.0 if r["step"] == 0 else 10 + (rank * 7 + (r["step"] - 1) * 3) % 30
            assert t["workload"] == pytest.approx(told)
        assert r["learning"]["measured_s"] == pytest.approx([t["measured_s"] for t in r["tasks"]])
    assert_nothing_left("noseries")

"""The task library (issue 15): long-running process tasks joining a live run through bsp_planner.task,
under our barrier or their own (observe mode), against a real ZooKeeper and real cgroup quotas; the
faults (a process dying mid-step, hanging, reporting a step twice, a NaN workload) and joins refused.

The application is bsp_planner.testing.bsp_app: CPU work per step, its own file barrier in observe mode,
faults steered by control files so each hits a known task in a known step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bsp_planner import task
from bsp_planner.errors import InputError
from bsp_planner.job import load_job
from bsp_planner.runtime import zk as Z
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed

from zk_fixtures import (
    DATA,
    EXPERIMENT,
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
    creds = Z.read_credentials_file(creds_file)
    root = f"/join-{tmp_path.name[-12:]}"
    s = Z.ZkSession(zk_server.hosts, creds).start()
    try:
        s.create(root, Z.run_value("run1", "app", [{"name": "a", "process": ["x"], "workers": 1}], (10, 50), 3))
        s.create(Z.RunPaths(root).members)
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

    def say(text: str) -> None:  # called as each step is logged: the quotas the tasks have then
        if text.startswith("step"):
            quotas[int(text.split(":")[0].split()[1])] = {t: coord.backend.tasks[t].group.quota() for t in coord.tasks}

    coord.say = say
    result = coord.run()
    assert result.status == "finished"
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
    if sync == "observe":  # its own barrier, not ours
        assert (result.run_dir / "selfsync" / "000004").is_dir()
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

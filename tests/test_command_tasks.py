"""Command tasks (issue 10 part 1): the user's own program as a task, run by our worker every superstep
under the task's cgroup quota, against a real ZooKeeper; and `profile run` timing it as it times a
stressor. The program is a tiny Python script whose behaviour per step is steered by files the test
writes (fail, print a bad report, hang), so each fault hits a known task in a known step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed
from bsp_planner.runtime.worker import parse_workload_report

from zk_fixtures import (
    DATA,
    EXPERIMENT,
    PREFIX,
    assert_nothing_left,
    needs_tasks,
    settings,
    write_profile,
)

# A CPU-bound kernel: work grows with the workload; reports it; obeys the control folder.
KERNEL = """#!{python}
import json, os, sys, time
control, task, step, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
assert os.environ["BSP_STEP"] == str(step) and os.environ["BSP_TASK"] == task
assert float(os.environ["BSP_WORKLOAD"]) == size
def flag(name):
    return os.path.exists(os.path.join(control, f"{{name}}-{{task}}-{{step}}"))
open(os.path.join(control, f"ran-{{task}}-{{step}}"), "a").write(os.environ.get("BSP_RUN_DIR", "-") + "\\n")
if flag("fail"):
    print("kernel: out of particles", file=sys.stderr)
    sys.exit(7)
if flag("hang"):
    while not flag("release"):
        time.sleep(0.05)
x = 0
for i in range(int(size * 2000)):
    x += i * i
if flag("bad"):
    print('{{"workload": 12.5,')
elif flag("nan"):
    print('{{"workload": NaN}}')
else:
    print("some output of the kernel")
    print(json.dumps({{"workload": size + 1, "next_workload": size + 2}}))
"""

TASK = """
[[task]]
name = "{name}"
command = ["./kernel.py", "{control}", "{{task}}", "{{step}}", "{{workload}}"]
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""


def command_experiment(folder: Path, steps: int = 3) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    control = folder / "control"
    control.mkdir()
    kernel = folder / "kernel.py"
    kernel.write_text(KERNEL.format(python=sys.executable))
    kernel.chmod(0o755)
    rows = ((0, 1998), (1999, 3997), (0, 1998))
    tasks = "".join(
        TASK.format(name=n, control=control, data=DATA / "datasets", first=f, last=la)
        for n, (f, la) in zip("abc", rows, strict=True)
    )
    (folder / "job.toml").write_text('name = "kernels"\n' + tasks)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, penalty=0.3))
    return exp, control


# -- the job file ----------------------------------------------------------------------------------------
def test_a_command_task_is_an_argument_list_with_placeholders(tmp_path):
    exp, control = command_experiment(tmp_path)
    job = load_job(tmp_path / "job.toml")
    a = job.task("a")
    assert a.kind == "command" and a.stressor is None
    args = a.step_args(37.0, 4, run_dir="/runs/x")
    assert args == [str(tmp_path / "kernel.py"), str(control), "a", "4", "37"]  # ./kernel.py: relative to the job file
    assert a.step_args(2.5, 0)[-1] == "2.5"
    assert a.step_env(2.5, 3) == {"BSP_WORKLOAD": "2.5", "BSP_STEP": "3", "BSP_TASK": "a"}


@pytest.mark.parametrize(
    "task, expected",
    [
        (
            'name = "a"\nstressor = "zero"\nops_per_unit = 1\ncommand = ["x"]\nseries = { file = "s.csv" }',
            "exactly one of stressor, command or process, not stressor and command",
        ),
        ('name = "a"\nseries = { file = "s.csv" }', "exactly one of stressor, command or process"),
        ('name = "a"\ncommand = []', "task[0].command"),
        ('name = "a"\ncommand = ["x"]\nops_per_unit = 3', "ops_per_unit applies to stressor tasks only"),
        ('name = "a"\nstressor = "zero"\nseries = { file = "s.csv" }', "needs ops_per_unit"),
        ('name = "a"\nstressor = "zero"\nops_per_unit = 2', "needs a series"),
    ],
)
def test_a_task_must_say_what_it_runs(tmp_path, task, expected):
    path = tmp_path / "job.toml"
    path.write_text(f'name = "j"\n\n[[task]]\n{task}\n')
    with pytest.raises(InputError) as info:
        load_job(path)
    assert expected in str(info.value) and "job.toml" in str(info.value)


# -- workload reports ------------------------------------------------------------------------------------
def test_a_reported_workload_is_the_last_json_line_and_bad_ones_are_refused():
    what = "task a step 3: its command"
    assert parse_workload_report(b'hello\n{"workload": 4}\nbye\n', what) == {"workload": 4.0}
    assert parse_workload_report(b'{"workload": 1}\n{"workload": 2, "next_workload": 3}\n', what) == {
        "workload": 2.0,
        "next_workload": 3.0,
    }
    assert parse_workload_report(b"no report\n{not json at all}\n", what) == {}
    for out, why in (
        (b'{"workload": 12.5,\n', "malformed workload report"),
        (b'{"workload": NaN}\n', "reported workload nan"),
        (b'{"workload": -1}\n', "reported workload -1"),
        (b'{"workload": 1e30}\n', "reported workload 1e+30"),
        (b'{"workload": "many"}\n', "reported workload 'many'"),
        (b'{"workload": 3, "next_workload": Infinity}\n', "reported next_workload inf"),
    ):
        with pytest.raises(InputError) as info:
            parse_workload_report(out, what)
        assert why in str(info.value) and "task a step 3" in str(info.value), (out, str(info.value))


# -- live, against a real ZooKeeper and real cgroup quotas ---------------------------------------------


def coordinator(tmp_path, exp, zk, creds, run_id, resume=False, **kw) -> Coordinator:
    return Coordinator(settings(exp, zk, creds, **kw), run_id, tmp_path / "runs", resume=resume)


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_command_tasks_run_every_step_under_their_quota_and_report_their_workloads(tmp_path, zk_server, creds_file):
    exp, control = command_experiment(tmp_path / "exp", steps=3)
    result = coordinator(tmp_path, exp, zk_server, creds_file, "cmd").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records:
        for t in r["tasks"]:
            assert t["measured_s"] > 0
            # the kernel reports the workload it was given plus one (so the value is the task's, not ours)
            assert t["observed_workload"] == pytest.approx(t["workload"] + 1, rel=1e-5)
            assert t["next_workload"] == pytest.approx(t["observed_workload"] + 1)
            assert (control / f"ran-{t['task']}-{r['step']}").read_text() == f"{result.run_dir.resolve()}\n"
    assert_nothing_left("cmd")


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize(
    "fault, expected",
    [
        ("fail", "task b step 1: its command exited with code 7"),
        ("bad", "task b step 1: its command printed a malformed workload report"),
        ("nan", "task b step 1: its command reported workload nan"),
    ],
)
def test_a_failing_command_stops_the_run_naming_task_and_step_and_it_resumes(
    tmp_path, zk_server, creds_file, fault, expected
):
    exp, control = command_experiment(tmp_path / "exp", steps=3)
    (control / f"{fault}-b-1").touch()
    with pytest.raises(RunFailed) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, f"cmd{fault}").run()
    message = str(info.value)
    assert "task b's worker failed in step 1" in message and expected in message, message
    if fault == "fail":
        assert "kernel: out of particles" in message  # the command's stderr tail
    assert "the run stopped after step 0" in message and f"--resume cmd{fault}" in message
    assert_nothing_left(f"cmd{fault}")
    (control / f"{fault}-b-1").unlink()  # the cause fixed
    result = coordinator(tmp_path, exp, zk_server, creds_file, f"cmd{fault}", resume=True).run()
    assert result.status == "finished"
    steps = [json.loads(line)["step"] for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]  # nothing recorded twice or lost
    assert_nothing_left(f"cmd{fault}")


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_hanging_command_is_a_step_timeout_naming_the_task(tmp_path, zk_server, creds_file):
    exp, control = command_experiment(tmp_path / "exp", steps=2)
    (control / "hang-c-0").touch()
    with pytest.raises(RunFailed) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, "cmdhang", step_timeout_s=3.0).run()
    message = str(info.value)
    assert "step 0 did not finish within 3 s" in message and "task c did not report step 0" in message, message
    assert_nothing_left("cmdhang")


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize("problem", ["missing", "not executable"])
def test_a_missing_or_not_executable_program_is_refused_before_anything_starts(
    tmp_path, zk_server, creds_file, problem
):
    exp, control = command_experiment(tmp_path / "exp", steps=2)
    kernel = tmp_path / "exp" / "kernel.py"
    if problem == "missing":
        kernel.unlink()
    else:
        kernel.chmod(0o644)
    with pytest.raises(InputError) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, "cmdmissing").run()
    assert f"task 'a': its command program '{kernel}'" in str(info.value) and problem.replace(
        "missing", "was not found"
    ) in str(info.value)
    assert not list(control.glob("ran-*"))
    assert not (tmp_path / "runs" / "cmdmissing").exists()


# -- profiling -------------------------------------------------------------------------------------------
@needs_tasks
def test_profile_run_times_a_command_task_as_a_stressor(tmp_path):
    from bsp_planner.profiling.local import LocalBackend
    from bsp_planner.profiling.runner import Grid, metadata_path, run_grid

    command_experiment(tmp_path, steps=2)
    job = load_job(tmp_path / "job.toml")
    out = tmp_path / "measured.csv"
    with LocalBackend(prefix=PREFIX) as backend:
        report = run_grid(
            job, out, Grid((500.0, 1000.0), (10.0, 20.0), 1), backend, tasks=["a"], timeout_s=60, progress=False
        )
    rows = out.read_text().splitlines()
    assert rows[0].startswith("task,workload,cpu_millicores,duration_s")
    assert len(rows) == 1 + 4 and all(r.startswith("a,") for r in rows[1:]), rows
    assert report.missing == 0
    meta = json.loads(metadata_path(out).read_text())
    assert meta["tasks"]["a"]["command"][0] == str(tmp_path / "kernel.py")
    assert len(list((tmp_path / "control").glob("ran-a-0"))) == 1  # {step} is 0 when profiling


# -- run --online / --learn ------------------------------------------------------------------------------
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.parametrize("planner", ["mpc", "reactive"])  # reactive: plans on the workloads observed live
def test_an_online_learning_run_forecasts_from_reported_workloads_learns_and_resumes_the_same_plan(
    tmp_path, zk_server, creds_file, planner
):
    exp, control = command_experiment(tmp_path / "exp", steps=5)
    run_id = f"online-{planner}"
    kw = dict(mode="forecast", overrides=["online=true", "learn=true"], planner=planner)
    (control / "fail-a-3").touch()
    with pytest.raises(RunFailed, match="task a step 3: its command exited with code 7"):
        coordinator(tmp_path, exp, zk_server, creds_file, run_id, **kw).run()
    (control / "fail-a-3").unlink()
    # the resumed run replays the planner with the forecaster and the model rebuilt from the logged
    # observations; any difference from the logged decisions would refuse the resume
    result = coordinator(tmp_path, exp, zk_server, creds_file, run_id, resume=True, **kw).run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for r in records:
        learning = r["learning"]
        measured = [t["measured_s"] for t in r["tasks"]]
        assert learning["step"] == r["step"] and learning["measured_s"] == pytest.approx(measured)
        # the model learns from the workload each task reported (the kernel reports its workload + 1)
        assert learning["workload"] == pytest.approx([min(50.0, t["observed_workload"]) for t in r["tasks"]])
        assert len(learning["predicted_before_s"]) == len(learning["predicted_after_s"]) == 3
    # every measured step moved the model (how fast it converges is test_learning's and bench_learning's)
    assert all(r["learning"]["predicted_after_s"] != r["learning"]["predicted_before_s"] for r in records)
    assert_nothing_left(run_id)

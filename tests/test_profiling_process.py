"""Profiling long-running `process` tasks: one start per CPU level under a real CFS quota, the workloads
assigned step by step by a profiling session (BSP_PROFILE), warm-up steps discarded; and the faults.

Needs root (or a delegated cgroup); skips otherwise. The programs are small Python loops written here
(plus one tiny grid of the shipped particles application), so the file takes about half a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bsp_planner import task
from bsp_planner.core.errors import InputError, InputWarning
from bsp_planner.inputs.job import Job, Task, load_job
from bsp_planner.inputs.profiles import load_profile, metadata_path, read_profile_rows
from bsp_planner.inputs.shipped import data_path
from bsp_planner.profiling.cgroups import CFS_PERIOD_US, CgroupUnavailable, CpuQuotaGroup, detect_hierarchy
from bsp_planner.profiling.local import LocalBackend
from bsp_planner.profiling.process import ProcessSteps
from bsp_planner.profiling.runner import Grid, failures_path, run_grid
from bsp_planner.task.profiling import PROFILE_ENV, ProfilingPlan, profiling_session, write_plan

PREFIX = f"bsp-planner-test-{os.getpid()}-proc"
ITERATIONS_PER_UNIT = 50_000  # the test program's busy loop: about 5-10 ms of one CPU per workload unit

PROGRAM = textwrap.dedent(
    """
    import sys
    from bsp_planner import task

    mode = sys.argv[1]
    with task.join() as session:
        step = session.first_step
        while not session.ended:
            w = session.assigned_workload(step)
            if mode == "crash" and step == 4:
                sys.exit("the program failed in step 4")
            if mode == "hang" and step == 4:
                import time
                time.sleep(3600)
            if mode == "short" and step == 4:
                break
            with session.step(step, workload=7.0 if mode == "ignore" else w):
                x = 0
                for i in range(int(w * {per_unit})):
                    x += i
            step += 1
    """
).replace("{per_unit}", str(ITERATIONS_PER_UNIT))


def _cgroup_problem() -> str | None:
    try:
        with CpuQuotaGroup("probe", millicores=500, prefix=PREFIX):
            pass
    except CgroupUnavailable as exc:
        return f"CPU-quota cgroups are not writable here (needs root or a delegated cgroup): {exc}"
    return None


_problem = _cgroup_problem()
needs_cgroups = pytest.mark.skipif(_problem is not None, reason=_problem or "")


def leftover_groups() -> list[str]:
    parent = detect_hierarchy().root / PREFIX
    return sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.exists() else []


@pytest.fixture
def program(tmp_path) -> Path:
    path = tmp_path / "loop.py"
    path.write_text(PROGRAM)
    return path


def process_job(program: Path, mode: str = "ok", name: str = "loop") -> Job:
    task = Task(name=name, stressor=None, ops_per_unit=0.0, series=None, process=("{python}", str(program), mode))
    return Job(name="proc", tasks=(task,), path=program.with_name("job.toml"))


@pytest.fixture
def backend(tmp_path):
    with LocalBackend(prefix=PREFIX, workdir=tmp_path / "work") as b:
        (tmp_path / "work").mkdir(exist_ok=True)
        yield b
    assert leftover_groups() == []


# -- the quota is real, the workloads are the assigned ones ------------------------------------------------
@needs_cgroups
def test_a_process_task_is_profiled_once_per_cpu_level_under_its_quota(tmp_path, program, backend):
    out = tmp_path / "p" / "profile.csv"
    rows = []
    report = run_grid(
        process_job(program),
        out,
        Grid((200.0, 1000.0), (5.0, 40.0), 1),
        backend,
        timeout_s=120,
        process_steps=ProcessSteps(warmup=1, measure=2, min_measure_s=0),
        progress=False,
        on_row=lambda cell, result: rows.append((cell, result)),
    )
    assert report.measured == 4 and not report.failures
    prof = load_profile(out)
    assert prof.tasks["loop"].duration_s.shape == (2, 2)
    meta = json.loads(metadata_path(out).read_text())
    assert meta["tasks"]["loop"]["warmup_steps"] == 1 and meta["tasks"]["loop"]["measure_steps"] == 2
    assert "mean wall seconds" in meta["duration"]
    results = {(cell[1], cell[2]): result for cell, result in rows}
    # the kernel's accounting of the process's group, not a wall-clock ratio: at 200m the loop wanted a
    # whole CPU, was throttled, and each step got at most 0.2 CPU over the periods it touched
    for w in (5.0, 40.0):
        r = results[(w, 200.0)]
        assert r.cpu_stat is not None and r.cpu_stat.nr_throttled > 0, r
    big = results[(40.0, 200.0)]
    assert big.cpu_s is not None and big.duration_s is not None
    assert big.cpu_s <= 0.2 * (big.duration_s + 2 * CFS_PERIOD_US / 1e6) * 1.05, big
    # the process did the assigned work: 8x the workload costs well over 3x the CPU seconds
    assert results[(40.0, 1000.0)].cpu_s > 3 * results[(5.0, 1000.0)].cpu_s


@needs_cgroups
def test_resume_measures_only_the_missing_workloads_in_one_start_per_level(tmp_path, program, backend):
    out = tmp_path / "profile.csv"
    job = process_job(program)
    grid = Grid((500.0, 1000.0), (1.0, 2.0, 3.0), 1)
    steps = ProcessSteps(warmup=0, measure=1, min_measure_s=0)
    run_grid(job, out, Grid((500.0, 1000.0), (1.0, 3.0), 1), backend, timeout_s=60, process_steps=steps, progress=False)
    started = []
    original = backend.run_process

    def counting(task, workloads, cpu, timeout_s, steps):
        started.append((cpu, list(workloads)))
        return original(task, workloads, cpu, timeout_s, steps)

    backend.run_process = counting
    with pytest.warns(InputWarning, match="appending rows of another grid"):
        report = run_grid(job, out, grid, backend, timeout_s=60, process_steps=steps, progress=False)
    assert report.skipped == 4 and report.measured == 2
    assert started == [(500.0, [2.0]), (1000.0, [2.0])]  # one start per CPU level, only what is missing
    assert len(list(read_profile_rows(out))) == 6


# -- faults: the cells finished before stay, the rest are failures that name what happened ------------------
@needs_cgroups
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("crash", "exited with code 1 after step 3 (workload 2): the program failed in step 4"),
        ("short", "exited after step 3 (workload 2), before its profiling session ended (2 of 3 workloads done)"),
        pytest.param("hang", "timeout: no step reported within 10 s after step 3 (workload 2)", marks=pytest.mark.slow),
        ("ignore", "reported workload 7.0 in step 0 but the profiler assigned 1"),
    ],
)
def test_a_failing_process_keeps_its_finished_cells_and_logs_the_rest(tmp_path, program, backend, mode, reason):
    out = tmp_path / "profile.csv"
    report = run_grid(
        process_job(program, mode),
        out,
        Grid((1000.0, 2000.0), (1.0, 2.0, 3.0), 1),
        backend,
        tasks=None,
        timeout_s=10 if mode == "hang" else 60,
        process_steps=ProcessSteps(warmup=1, measure=1, min_measure_s=0),
        progress=False,
    )
    measured = sorted((r["workload"], r["cpu_millicores"]) for r in read_profile_rows(out)) if report.measured else []
    if mode == "ignore":
        assert measured == []  # every cell reported a workload it was not given
    else:  # steps 0-3 are workloads 1 and 2: those cells are measured at both levels
        assert measured == [(1.0, 1000.0), (1.0, 2000.0), (2.0, 1000.0), (2.0, 2000.0)]
    assert report.failures and all(reason in f.reason for f in report.failures), [f.reason for f in report.failures]
    assert failures_path(out).is_file()


@needs_cgroups
def test_a_missing_program_is_refused_before_any_run(tmp_path, backend):
    job = Job(
        name="proc",
        tasks=(Task(name="x", stressor=None, ops_per_unit=0.0, series=None, process=(str(tmp_path / "nope"),)),),
        path=tmp_path / "job.toml",
    )
    with pytest.raises(InputError, match="its process program .* was not found"):
        run_grid(job, tmp_path / "p.csv", Grid((500.0, 1000.0), (1.0, 2.0), 1), backend, progress=False)
    assert not (tmp_path / "p.csv").exists()


def test_a_backend_that_cannot_drive_processes_refuses_them_by_name(tmp_path, program):
    class StressorsOnly:
        name = "kubernetes"

        def check(self, tasks, job_path=None): ...

        def info(self):
            return {"backend": self.name}

        def run(self, task, workload, cpu, timeout_s):
            raise AssertionError("no run may start")

    with pytest.raises(InputError, match=r"task\(s\) loop are long-running processes, which the kubernetes backend"):
        run_grid(process_job(program), tmp_path / "p.csv", Grid((500.0, 1000.0), (1.0, 2.0), 1), StressorsOnly())


@pytest.mark.parametrize(("warmup", "measure", "option"), [(-1, 3, "--warmup-steps"), (1, 0, "--measure-steps")])
def test_bad_step_counts_name_their_option(warmup, measure, option):
    with pytest.raises(InputError) as info:
        ProcessSteps(warmup, measure)
    assert info.value.field == option


# -- the profiling session a process gets -----------------------------------------------------------------
def test_the_profiling_session_assigns_the_planned_workloads_and_ends_after_them(tmp_path):
    plan = ProfilingPlan("a", (3.0, 5.0), str(tmp_path / "r.jsonl"), warmup_steps=1, measure_steps=2)
    session = profiling_session({PROFILE_ENV: str(write_plan(tmp_path / "plan.json", plan)), "BSP_TASK": "a"})
    assert session.sync == "profile"
    step = 0
    while not session.ended:
        with session.step(step, workload=session.assigned_workload(step)):
            pass
        step += 1
    with pytest.raises(task.RunEnded):
        with session.step(step):
            pass
    reports = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["phase"], r.get("cell_done", False)) for r in reports] == [
        (3, "warmup", False),
        (3, "measure", False),
        (3, "measure", True),
        (5, "warmup", False),
        (5, "measure", False),
        (5, "measure", True),
    ]


def test_a_workload_is_measured_until_its_steps_cover_the_minimum_time(tmp_path):
    plan = ProfilingPlan("a", (1.0,), str(tmp_path / "r.jsonl"), warmup_steps=0, measure_steps=1, min_measure_s=0.05)
    session = profiling_session({PROFILE_ENV: str(write_plan(tmp_path / "plan.json", plan))})
    step = 0
    while not session.ended:
        with session.step(step, workload=1):
            time.sleep(0.01)  # the step's work
        step += 1
    walls = [json.loads(line)["wall_s"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sum(walls) >= 0.05 > sum(walls[:-1])  # measured until, and only until, 50 ms were covered


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        (None, {}, "does not exist"),
        ("{not json", {}, "cannot be read as JSON"),
        ('{"format": 1, "task": "a", "reports_file": "r", "workloads": [1, -2]}', {}, "non-negative 'workloads'"),
        ('{"format": 1, "task": "a", "reports_file": "r", "workloads": [1]}', {"BSP_TASK": "b"}, "is for task 'a'"),
        ('{"format": 1, "task": "a", "reports_file": "r", "workloads": [1]}', {"BSP_RUN_ID": "r1"}, "both"),
    ],
)
def test_a_bad_profiling_plan_is_a_clear_join_error(tmp_path, content, env, message):
    plan = tmp_path / "plan.json"
    if content is not None:
        plan.write_text(content)
    with pytest.raises(task.TaskJoinError, match=message) as info:
        task.join({PROFILE_ENV: str(plan), **env})
    assert info.value.field == PROFILE_ENV


# -- the shipped application, through the CLI ------------------------------------------------------------------
@needs_cgroups
def test_profile_run_profiles_a_particles_rank_through_the_cli(tmp_path):
    out = tmp_path / "prof" / "profile.csv"
    job = data_path("jobs/particles-3.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, "-m", "bsp_planner.cli", "profile", "run", "--job", str(job), "--out", str(out)]
        + ["--cpu", "500,1000", "--workloads", "1000,3000", "--repeats", "1", "--tasks", "p1"]
        + ["--warmup-steps", "1", "--measure-steps", "2", "--min-measure-s", "0.2", "--cgroup-prefix", PREFIX],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    prof = load_profile(out)
    assert list(prof.tasks) == ["p1"] and prof.tasks["p1"].duration_s.shape == (2, 2)
    assert load_job(job).task("p1").process == tuple(
        json.loads(metadata_path(out).read_text())["tasks"]["p1"]["process"]
    )


def test_the_shipped_particles_3_profile_is_a_complete_profile_run_output_of_its_job(tmp_path, monkeypatch):
    """Measured by `profile run` itself: resuming a copy with the job and the grid it records measures
    nothing (the same programs, step settings and backend, every cell present)."""
    import shutil

    import bsp_planner.profiling.runner as runner_module

    shipped = data_path("profiles/particles-3")
    out = tmp_path / "profile.csv"
    shutil.copy(shipped / "profile.csv", out)
    shutil.copy(shipped / "profile.meta.json", metadata_path(out))
    meta = json.loads(metadata_path(out).read_text())
    host = {k: meta[k] for k in ("host", "cpu_model", "cores", "kernel", "os")}
    monkeypatch.setattr(runner_module, "host_info", lambda: host)  # the machine class it was measured on

    class NoRuns:
        name = "local-cgroup"

        def check(self, tasks, job_path=None): ...

        def info(self):
            return {"backend": meta["backend"], "cpu_shares": meta["cpu_shares"]}

        def run(self, *a):
            raise AssertionError("nothing may be measured again")

        run_process = run

    grid = Grid(tuple(meta["grid"]["cpu_millicores"]), tuple(meta["grid"]["workloads"]), meta["grid"]["repeats"])
    p0 = meta["tasks"]["p0"]
    steps = ProcessSteps(p0["warmup_steps"], p0["measure_steps"], p0["min_measure_s"])
    report = run_grid(load_job(data_path("jobs/particles-3.toml")), out, grid, NoRuns(), process_steps=steps)
    assert report.measured == 0 and report.skipped == report.planned == 48

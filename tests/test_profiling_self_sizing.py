"""Profiling programs that size their own work, or do (almost) none when profiled; a profile that is killed;
and the profile's record of the program's files.

Real processes under real CFS quotas (root or a delegated cgroup; skips otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputWarning
from bsp_planner.inputs.job import Job, load_job
from bsp_planner.inputs.profiles import check_job_matches
from bsp_planner.inputs.program_files import program_digest, program_files
from bsp_planner.profiling.cgroups import CgroupUnavailable, CpuQuotaGroup, detect_hierarchy, remove_stale_groups
from bsp_planner.profiling.local import SCRATCH_PREFIX, LocalBackend, remove_stale_scratch
from bsp_planner.profiling.process import ProcessSteps
from bsp_planner.profiling.profile_meta import task_meta

from cli_run import run_cli

PREFIX = f"bsp-planner-test-{os.getpid()}-self"

# A process task: "empty" does no work in its steps; "hang" writes its pid, then never ends its first step.
PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    from bsp_planner import task

    mode, pidfile = sys.argv[1], sys.argv[2]
    with task.join() as session:
        step = session.first_step
        while not session.ended:
            w = session.assigned_workload(step)
            with session.step(step, workload=w):
                if mode == "hang":
                    open(pidfile, "w").write(str(os.getpid()))
                    while True:
                        time.sleep(0.05)
            step += 1
    """
)

# A command task that ignores the workload it is given (it sizes its own work) and says so.
SELF_SIZED = textwrap.dedent(
    """
    import json, os
    assert os.environ["BSP_SYNC"] == "profile", os.environ.get("BSP_SYNC")
    x = sum(range(20000))
    print(json.dumps({"workload": 7}))
    """
)


def _cgroup_problem() -> str | None:
    try:
        with CpuQuotaGroup("probe", millicores=500, prefix=PREFIX):
            pass
    except CgroupUnavailable as exc:
        return f"CPU-quota cgroups are not writable here (needs root or a delegated cgroup): {exc}"
    return None


_problem = _cgroup_problem()
needs_cgroups = pytest.mark.skipif(_problem is not None, reason=_problem or "")


def process_job(folder: Path, mode: str) -> Job:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "loop.py").write_text(PROGRAM)
    (folder / "job.toml").write_text(
        f'[[task]]\nname = "loop"\nprocess = ["{{python}}", "loop.py", "{mode}", "{folder / "pid"}"]\n'
    )
    return load_job(folder / "job.toml")


def alive(pid: int) -> bool:
    try:
        state = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


def wait_until(condition, timeout_s: float = 60.0, what: str = "", proc=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)


# -- a step that does (almost) nothing: a clear failure, no endless steps ----------------------------------
@needs_cgroups
def test_an_empty_step_fails_its_cell_after_max_measure_steps_and_shows_progress(tmp_path):
    job = process_job(tmp_path / "job", "empty")
    notes: list[str] = []
    with LocalBackend(prefix=PREFIX, workdir=tmp_path / "work") as b:
        (tmp_path / "work").mkdir()
        b.on_progress = notes.append
        steps = ProcessSteps(warmup=1, measure=5, min_measure_s=5.0, max_measure=40)
        results = b.run_process(job.task("loop"), [1.0, 2.0], 1000.0, 30.0, steps)
    for w in (1.0, 2.0):
        reason = results[w].reason
        assert not results[w].ok and f"task 'loop' workload {w:g}: 40 measured steps took" in reason, reason
        assert "short of min_measure_s 5 s" in reason and "--max-measure-steps" in reason
    # told as the reports come in (however many the profiler finds at each look): where the process is
    assert notes and notes[-1].startswith("loop w=2 (2/2 done): step 41, "), notes[-3:]


def test_max_measure_steps_is_checked_like_every_profiling_setting(tmp_path, monkeypatch, capsys):
    from bsp_planner import task
    from bsp_planner.core.errors import InputError
    from bsp_planner.task.profiling import PROFILE_ENV

    with pytest.raises(InputError, match="--max-measure-steps"):
        ProcessSteps(max_measure=0)
    process_job(tmp_path / "job", "empty")
    args = ["profile", "run", "--job", tmp_path / "job" / "job.toml", "--out", tmp_path / "p.csv", "--cpu", "500,1000"]
    code, out, err = run_cli(args + ["--workloads", "1,2", "--max-measure-steps", "0"], monkeypatch, capsys)
    assert code == 2 and "--max-measure-steps" in err and "expected a number >= 1, got 0" in err, out + err
    assert not (tmp_path / "p.csv").exists()
    plan = tmp_path / "plan.json"  # a plan of another writer, with no bound that can end a cell
    plan.write_text('{"format": 1, "task": "a", "reports_file": "r", "workloads": [1], "max_measure_steps": 0}')
    with pytest.raises(task.TaskJoinError, match="max_measure_steps >= 1"):
        task.join({PROFILE_ENV: str(plan)})


# -- a killed or stopped profile leaves nothing ---------------------------------------------------------
@needs_cgroups
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_profile_run_leaves_no_task_process_and_no_scratch_folder(tmp_path, how):
    process_job(tmp_path / "job", "hang")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", "profile", "run", "--job", str(tmp_path / "job" / "job.toml")]
        + ["--out", str(tmp_path / "p.csv"), "--cpu", "500,1000", "--workloads", "1,2"]
        + ["--repeats", "1", "--timeout", "600", "--cgroup-prefix", PREFIX],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pidfile = tmp_path / "job" / "pid"
    try:
        wait_until(lambda: pidfile.is_file() and pidfile.read_text().strip(), 120, "the task's first step", proc)
        pid = int(pidfile.read_text())
        scratch = list(Path("/dev/shm").glob(f"{SCRATCH_PREFIX}{proc.pid}-*")) + list(
            Path("/tmp").glob(f"{SCRATCH_PREFIX}{proc.pid}-*")
        )
        assert alive(pid) and scratch
        proc.send_signal(how)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    wait_until(lambda: not alive(pid), 10, "the task process to go")
    if how == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM  # the clean stop of Ctrl-C
        assert not any(p.exists() for p in scratch)
    else:  # nothing could run in the profiler: the next profile run clears what it left
        assert any(p.exists() for p in scratch)
        assert set(remove_stale_scratch()) >= {str(p) for p in scratch}
        assert not any(p.exists() for p in scratch)
    remove_stale_groups(PREFIX)
    parent = detect_hierarchy().root / PREFIX
    assert not parent.exists() or not [p for p in parent.iterdir() if p.is_dir()]


# -- a command task that sizes its own work -------------------------------------------------------------------
@needs_cgroups
def test_a_command_that_reports_another_workload_is_warned_about_by_name(tmp_path, monkeypatch, capsys):
    (tmp_path / "own.py").write_text(SELF_SIZED)
    (tmp_path / "job.toml").write_text('[[task]]\nname = "own"\ncommand = ["{python}", "own.py", "{workload}"]\n')
    args = ["profile", "run", "--job", tmp_path / "job.toml", "--out", tmp_path / "p.csv", "--cpu", "500,1000"]
    code, out, err = run_cli(
        args + ["--workloads", "1,2", "--repeats", "1", "--cgroup-prefix", PREFIX], monkeypatch, capsys
    )
    assert code == 0, out + err
    text = out + " " + err
    assert "warning: task 'own' reported workload 7 where the profiler assigned 1" in text, text
    assert text.count("reported workload 7") == 1  # once per task


# -- the profile's record of the program's files --------------------------------------------------------------
def test_the_profile_records_the_programs_files_and_a_change_is_warned_about(tmp_path):
    (tmp_path / "sim.py").write_text("print('v1')\n")
    (tmp_path / "job.toml").write_text(
        '[[task]]\nname = "a"\ncommand = ["{python}", "sim.py", "{workload}"]\n\n'
        '[[task]]\nname = "k"\nprocess = ["{python}", "-m", "bsp_planner.apps.kernel", "--process"]\n\n'
        '[[task]]\nname = "s"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "x.csv" }\n'
    )
    job = load_job(tmp_path / "job.toml")
    assert program_files(job.task("a")) == [tmp_path / "sim.py"]
    assert [p.name for p in program_files(job.task("k"))] == ["kernel.py"]  # -m: the module's source
    assert program_digest(job.task("s")) is None
    meta = {"tasks": {t.name: task_meta(t, ProcessSteps()) for t in job.tasks}}
    assert meta["tasks"]["a"]["program_files"] == ["sim.py"] and len(meta["tasks"]["a"]["program_sha256"]) == 64
    meta_file = tmp_path / "profile.meta.json"
    meta_file.write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_job_matches(meta, job, meta_file)  # unchanged: silent
    (tmp_path / "sim.py").write_text("print('v2: twice as fast')\n")
    with pytest.warns(InputWarning) as caught:
        check_job_matches(meta, job, meta_file)
    (w,) = caught
    assert "task 'a': its program (sim.py) changed since it was profiled" in str(w.message)
    assert "profile run" in str(w.message)


# -- a program that cannot start: an early stop with a hint, not a whole grid of identical failures -------------
@needs_cgroups
def test_a_task_whose_first_runs_fail_the_same_way_is_stopped_early_with_a_path_hint(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.toml").write_text('[[task]]\nname = "lost"\ncommand = ["{python}", "scripts/missing.py"]\n')
    args = ["profile", "run", "--job", tmp_path / "job.toml", "--out", tmp_path / "p.csv", "--cpu", "500,1000"]
    code, out, err = run_cli(args + ["--workloads", "1,2,3", "--cgroup-prefix", PREFIX], monkeypatch, capsys)
    text = out + " " + err
    assert code == 1, text
    assert "task 'lost': its first 3 runs failed the same way" in text and "can't open file" in text, text
    assert "relative paths in `command`/`process` resolve against the job file's folder" in text
    fails = (tmp_path / "p.failures.csv").read_text().strip().splitlines()
    assert len(fails) == 1 + 3  # the header and the three runs: the other three cells were not started


@needs_cgroups
def test_profile_run_json_is_the_counts_and_failed_runs_alone_on_stdout(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.toml").write_text('[[task]]\nname = "lost"\ncommand = ["{python}", "scripts/missing.py"]\n')
    args = ["profile", "run", "--job", tmp_path / "job.toml", "--out", tmp_path / "p.csv", "--cpu", "500,1000"]
    code, out, err = run_cli(args + ["--workloads", "1,2,3", "--cgroup-prefix", PREFIX, "--json"], monkeypatch, capsys)
    assert code == 1, err
    doc = json.loads(out)  # the table's rows, and nothing else on stdout
    assert (doc["measured"], doc["skipped"], doc["profile"]) == (0, 0, str(tmp_path / "p.csv"))
    failed = doc["failed"]
    fails = (tmp_path / "p.failures.csv").read_text().strip().splitlines()
    assert len(failed) == len(fails) - 1 == 3 and {f["task"] for f in failed} == {"lost"}
    assert all("can't open file" in f["reason"] for f in failed)
    assert "3 run(s) failed" in err and "failed runs" not in err  # the message stays, the table is the JSON

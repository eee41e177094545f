"""The profiler: real stress-ng runs under real CFS quotas, the resumable grid runner, its files.

Needs root (or a delegated cgroup) and stress-ng (`apt-get install stress-ng`); skips otherwise.
Runs are tiny (a 1-worker `cpu` stressor) so the file takes well under 30 s.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import Job, SeriesRef, Task
from bsp_planner.inputs.profiles import load_profile, metadata_path, read_profile_rows
from bsp_planner.profiling.calibrate import calibrate_task, round_sig
from bsp_planner.profiling.cgroups import CFS_PERIOD_US, CgroupUnavailable, CpuQuotaGroup, detect_hierarchy, quota_us
from bsp_planner.profiling.grid import parse_levels
from bsp_planner.profiling.local import LocalBackend, RunResult
from bsp_planner.profiling.runner import Grid, failures_path, run_grid, validate_grid

PREFIX = f"bsp-planner-test-{os.getpid()}"  # apart from any real measurement running on the host
CPU_OPS_PER_S = 2000  # `stress-ng --cpu 1 --cpu-ops N` does roughly this many ops per CPU-second


def _cgroup_problem() -> str | None:
    if shutil.which("stress-ng") is None:
        return "stress-ng is not installed (apt-get install stress-ng)"
    try:
        with CpuQuotaGroup("probe", millicores=500, prefix=PREFIX):
            pass
    except CgroupUnavailable as exc:
        return f"CPU-quota cgroups are not writable here (needs root or a delegated cgroup): {exc}"
    return None


_problem = _cgroup_problem()
needs_cgroups = pytest.mark.skipif(_problem is not None, reason=_problem or "")


def cpu_task(name: str = "spin", ops_per_unit: float = 100.0, workers: int = 1) -> Task:
    return Task(
        name=name, stressor="cpu", ops_per_unit=ops_per_unit, series=SeriesRef(Path("unused.csv")), workers=workers
    )


def make_job(*tasks: Task) -> Job:
    return Job(name="test", tasks=tasks or (cpu_task(),), path=Path("test-job.toml"))


def leftover_groups() -> list[str]:
    parent = detect_hierarchy().root / PREFIX
    return sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.exists() else []


@pytest.fixture
def backend(tmp_path):
    with LocalBackend(prefix=PREFIX, workdir=tmp_path) as b:
        yield b
    assert leftover_groups() == []


class CountingBackend:
    """Wraps a backend: counts runs, and can fail or interrupt chosen ones."""

    name = "counting"

    def __init__(self, inner=None, *, fail_on=(), interrupt_on=None):
        self.inner = inner
        self.calls: list[tuple] = []
        self.fail_on = set(fail_on)
        self.interrupt_on = interrupt_on

    def check(self, tasks, job_path=None):
        if self.inner:
            self.inner.check(tasks, job_path)

    def info(self):
        return {"backend": self.name}

    def run(self, task, workload, cpu, timeout_s):
        n = len(self.calls)
        self.calls.append((task.name, workload, cpu))
        if n == self.interrupt_on:
            raise KeyboardInterrupt
        if n in self.fail_on:
            return RunResult(None, "exit code 2: simulated failure")
        if self.inner:
            return self.inner.run(task, workload, cpu, timeout_s)
        return RunResult(0.01 * workload * 1000 / cpu)


# -- the quota is real -----------------------------------------------------------------------------
@needs_cgroups
@pytest.mark.parametrize("millicores", [250, 500])
def test_a_run_gets_no_more_cpu_than_its_quota_so_half_a_cpu_takes_twice_its_cpu_time(backend, millicores):
    """The kernel's own accounting, not a ratio of two wall times (which a busy host skews): two workers
    want two CPUs, the group's quota gives them `millicores`, so the group is throttled, and over the run
    they got at most that share of a CPU: at 500m a run takes at least twice the CPU seconds it used.
    Load on the host can only lengthen the run, never let it use more than its quota. (Levels of at most
    half a CPU: the group, at the highest CPU weight, reaches its quota even beside three other busy
    groups of that weight on 2 cores, so it is throttled whatever else runs.)"""
    task = cpu_task(ops_per_unit=CPU_OPS_PER_S * 0.8 / 10, workers=2)  # ~0.8 CPU-seconds at workload 10
    result = backend.run(task, 10, millicores, 120)
    assert result.ok, result.reason
    assert result.cpu_stat is not None and result.cpu_s is not None
    assert result.cpu_stat.nr_throttled > 0, result.cpu_stat  # it hit its quota
    assert result.cpu_s > 0.2  # the work ran (and was counted)
    # the quota per 100 ms period over the periods the run touched (its first and last are partial, and
    # start with a whole quota), plus 5% for the kernel's accounting grain; without the quota two workers
    # would use about twice the wall time in CPU seconds
    period_s = CFS_PERIOD_US / 1e6
    allowed = millicores / 1000 * (result.duration_s + 2 * period_s) * 1.05
    assert result.cpu_s <= allowed, (result.cpu_s, result.duration_s, result.cpu_stat)


@needs_cgroups
def test_group_has_the_kubelet_quota_and_is_removed():
    with CpuQuotaGroup("q", millicores=250, prefix=PREFIX) as g:
        assert g.quota() == (25_000, 100_000)
        g.set_quota(1500)
        assert g.quota() == (150_000, 100_000)
        g.set_weight(2048)
        for group in (g.path, g.parent):  # the prefix group is the one competing with the host
            if g.hierarchy.version == 1:
                assert (group / "cpu.shares").read_text().strip() == "2048"
            else:
                assert (group / "cpu.weight").read_text().strip() == "79"
        assert g.path.is_dir()
    assert not g.path.exists()
    assert leftover_groups() == []


@needs_cgroups
def test_child_runs_inside_its_group_before_exec(backend):
    import subprocess

    with CpuQuotaGroup("inside", millicores=500, prefix=PREFIX) as g:
        out = subprocess.run(["cat", "/proc/self/cgroup"], preexec_fn=g.preexec_fn, capture_output=True, text=True)
    assert f"/{PREFIX}/inside" in out.stdout


@needs_cgroups
def test_a_child_whose_starter_died_before_it_asked_for_the_death_signal_exits_instead_of_running(tmp_path):
    """Between a child joining its group and asking for the parent-death signal is a moment a loaded
    machine makes long; a profiler SIGKILLed inside it must still leave no stress-ng running."""
    marker = tmp_path / "joining"
    with CpuQuotaGroup("orphan", millicores=500, prefix=PREFIX) as g:
        starter = os.fork()
        if starter == 0:  # the profiler: reads the hook, forks its child and dies before the child joins
            try:
                join, starter_pid = g.preexec_fn, os.getpid()
                if os.fork() == 0:  # the child, held until its starter is gone
                    while os.getppid() == starter_pid:
                        time.sleep(0.01)
                    marker.touch()
                    join()
                    os.execvp("sleep", ["sleep", "600"])
            finally:
                os._exit(0)
        os.waitpid(starter, 0)
        deadline = time.monotonic() + 60
        while not (marker.exists() and g.pids() == []):
            assert time.monotonic() < deadline, f"still in the group: {g.pids()}"
            time.sleep(0.02)


def test_quota_below_kernel_minimum_is_refused():
    assert quota_us(250) == 25_000
    with pytest.raises(InputError, match="minimum"):
        quota_us(5)


# -- the runner ------------------------------------------------------------------------------------
@needs_cgroups
def test_runner_writes_a_loadable_profile_and_metadata(tmp_path, backend):
    job = make_job(cpu_task("a", 5), cpu_task("b", 5))
    out = tmp_path / "p" / "profile.csv"
    report = run_grid(job, out, Grid((500, 1000), (1, 2), 1), backend, progress=False)
    assert report.measured == 8 and not report.failures
    prof = load_profile(out)
    assert set(prof.tasks) == {"a", "b"}
    assert prof.tasks["a"].duration_s.shape == (2, 2)
    assert out.read_text().splitlines()[0] == "task,workload,cpu_millicores,duration_s,repeat"
    meta = json.loads(metadata_path(out).read_text())
    for key in ("host", "cpu_model", "cores", "kernel", "stress_ng", "grid", "ops_per_unit", "workers", "backend"):
        assert key in meta, key
    assert meta["ops_per_unit"] == {"a": 5, "b": 5}
    assert meta["grid"]["cpu_millicores"] == [500, 1000]
    assert meta["load_average_1m"]["start"] is not None and meta["load_average_1m"]["end"] is not None
    assert meta["sessions"][0]["load_average_1m_max"] >= 0
    assert not failures_path(out).exists()


def test_resume_skips_measured_cells(tmp_path):
    job = make_job(cpu_task("a"), cpu_task("b"))
    out = tmp_path / "profile.csv"
    first = CountingBackend()
    run_grid(job, out, Grid((500, 1000), (10, 20), 1), first, tasks=["a"], progress=False)
    assert len(first.calls) == 4
    again = CountingBackend()
    report = run_grid(job, out, Grid((500, 1000), (10, 20), 2), again, progress=False)
    assert report.skipped == 4 and report.measured == 12
    assert ("a", 10.0, 500.0) in again.calls and len(again.calls) == 12  # a's repeat 1 and all of b
    third = CountingBackend()
    assert run_grid(job, out, Grid((500, 1000), (10, 20), 2), third, progress=False).measured == 0
    assert third.calls == []
    assert len(read_profile_rows(out)) == 16
    assert len(json.loads(metadata_path(out).read_text())["sessions"]) == 3


def test_resume_refuses_changed_ops_per_unit(tmp_path):
    out = tmp_path / "profile.csv"
    run_grid(make_job(cpu_task("a", 100)), out, Grid((500, 1000), (10, 20), 1), CountingBackend(), progress=False)
    with pytest.raises(InputError, match="ops_per_unit"):
        run_grid(make_job(cpu_task("a", 200)), out, Grid((500, 1000), (10, 20), 1), CountingBackend(), progress=False)


def test_failed_runs_are_logged_and_retried(tmp_path):
    out = tmp_path / "profile.csv"
    job = make_job()
    report = run_grid(job, out, Grid((500, 1000), (10, 20), 1), CountingBackend(fail_on={1}), progress=False)
    assert len(report.failures) == 1 and report.measured == 3
    with failures_path(out).open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["task", "workload", "cpu_millicores", "repeat", "reason", "date"]
    assert rows[0]["task"] == "spin" and rows[0]["workload"] == "10" and rows[0]["cpu_millicores"] == "1000"
    assert "simulated failure" in rows[0]["reason"]
    retry = CountingBackend()
    assert run_grid(job, out, Grid((500, 1000), (10, 20), 1), retry, progress=False).measured == 1
    assert retry.calls == [("spin", 10.0, 1000.0)]
    load_profile(out)


@needs_cgroups
def test_timeout_and_bad_exit_are_failures_and_leave_no_cgroup(tmp_path, backend):
    out = tmp_path / "profile.csv"
    slow = cpu_task("slow", CPU_OPS_PER_S)  # ~10 s at workload 10: killed after 0.3 s
    report = run_grid(make_job(slow), out, Grid((1000, 2000), (10, 20), 1), backend, timeout_s=0.3, progress=False)
    assert report.measured == 0 and len(report.failures) == 4
    assert all("timeout" in f.reason for f in report.failures)
    assert len(failures_path(out).read_text().splitlines()) == 5
    assert leftover_groups() == []
    with LocalBackend(stress_ng="false", prefix=PREFIX, workdir=tmp_path) as broken:
        r = broken.run(cpu_task(), 1, 1000, 10)
    assert not r.ok and "exit code 1" in r.reason
    assert leftover_groups() == []


@needs_cgroups
def test_ctrl_c_leaves_a_valid_partial_profile_and_no_cgroup(tmp_path, backend):
    out = tmp_path / "profile.csv"
    job = make_job(cpu_task("a", 5))
    interrupting = CountingBackend(backend, interrupt_on=3)
    with pytest.raises(KeyboardInterrupt):
        run_grid(job, out, Grid((500, 1000), (1, 2), 1), interrupting, progress=False)
    rows = read_profile_rows(out)
    assert len(rows) == 3
    assert leftover_groups() == []
    meta = json.loads(metadata_path(out).read_text())
    assert meta["sessions"][-1]["interrupted"] is True
    resumed = CountingBackend(backend)
    run_grid(job, out, Grid((500, 1000), (1, 2), 1), resumed, progress=False)
    assert len(resumed.calls) == 1
    load_profile(out)


@needs_cgroups
def test_ctrl_c_during_a_real_run_kills_it_and_removes_its_group(tmp_path, backend, monkeypatch):
    import subprocess

    real = subprocess.Popen.communicate

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backend.run(cpu_task("a", CPU_OPS_PER_S), 10, 1000, 30)
    monkeypatch.setattr(subprocess.Popen, "communicate", real)
    assert leftover_groups() == []


def test_torn_last_row_is_dropped_on_resume(tmp_path):
    out = tmp_path / "profile.csv"
    out.write_text("task,workload,cpu_millicores,duration_s,repeat\nspin,10,500,0.2,0\nspin,10,10")
    calls = CountingBackend()
    run_grid(make_job(), out, Grid((500, 1000), (10, 20), 1), calls, progress=False)
    assert len(calls.calls) == 3
    load_profile(out)


# -- inputs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cpu, workloads, repeats, message, field",
    [
        ("250,abc", "10,20", 1, "expected a number", "--cpu"),
        ("250,,500", "10,20", 1, "comma-separated", "--cpu"),
        ("250,250", "10,20", 1, "duplicate", "--cpu"),
        ("250", "10,20", 1, "at least 2", "--cpu"),
        ("-250,500", "10,20", 1, "positive", "--cpu"),
        ("5,500", "10,20", 1, "smallest CPU quota", "--cpu"),
        ("250.5,500", "10,20", 1, "whole millicores", "--cpu"),
        ("250,500", "10,0", 1, "positive", "--workloads"),
        ("250,500", "10,20", 0, "whole number", "--repeats"),
    ],
)
def test_bad_grid_inputs_say_which_option(cpu, workloads, repeats, message, field):
    with pytest.raises(InputError, match=message) as err:
        validate_grid(Grid(parse_levels(cpu, "--cpu"), parse_levels(workloads, "--workloads"), repeats))
    assert err.value.field == field


def test_bad_run_inputs(tmp_path):
    job = make_job()
    grid = Grid((500, 1000), (10, 20), 1)
    with pytest.raises(InputError, match="unknown task 'nope'"):
        run_grid(job, tmp_path / "p.csv", grid, CountingBackend(), tasks=["nope"], progress=False)
    with pytest.raises(InputError, match="--timeout|positive"):
        run_grid(job, tmp_path / "p.csv", grid, CountingBackend(), timeout_s=0, progress=False)
    with pytest.raises(InputError, match=".csv"):
        run_grid(job, tmp_path / "p.txt", grid, CountingBackend(), progress=False)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n")
    with pytest.raises(InputError, match="header") as err:
        run_grid(job, bad, grid, CountingBackend(), progress=False)
    assert err.value.line == 1


def test_missing_stress_ng_says_how_to_install():
    with pytest.raises(InputError, match="apt-get install stress-ng"):
        LocalBackend(stress_ng="no-such-stress-ng-binary").check([cpu_task()])


def test_cli_reports_bad_grid_as_input_error(tmp_path):
    from typer.testing import CliRunner

    from bsp_planner.profiling.cli import app

    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "p.csv"), "--cpu", "250,x"])
    assert isinstance(result.exception, InputError)
    assert "--cpu" in str(result.exception)


# -- calibration and heatmaps ----------------------------------------------------------------------
def test_calibration_finds_ops_for_the_target():
    def run(task, workload, cpu, timeout_s):  # 20 ms start-up + 1 ms per 10 ops
        return RunResult(0.02 + task.ops_per_unit * workload / 10_000)

    cal = calibrate_task(run, cpu_task(ops_per_unit=5000), cpu_millicores=2000, workload=10, target_s=0.3)
    assert cal.ops_per_unit == pytest.approx(280, rel=0.02)
    assert cal.duration_s == pytest.approx(0.3, rel=0.05)
    assert round_sig(1234.5) == 1230 and round_sig(0.012345) == 0.0123


def test_heatmaps_one_png_per_task(tmp_path):
    out = tmp_path / "profile.csv"
    run_grid(
        make_job(cpu_task("a"), cpu_task("b")), out, Grid((500, 1000), (10, 20), 2), CountingBackend(), progress=False
    )
    from bsp_planner.profiling.heatmap import write_heatmaps

    paths = write_heatmaps(load_profile(out), tmp_path / "heatmaps")
    assert [p.name for p in paths] == ["a.png", "b.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


# -- the CFS period: one setting of the profiler and the live local backend, same default --------------
@needs_cgroups
@pytest.mark.parametrize("period_us", [100_000, 10_000])
def test_the_quota_and_period_written_match_the_cpu_asked(tmp_path, period_us):
    from bsp_planner.runtime.backends.local import LocalBackend as LiveBackend

    with CpuQuotaGroup("p", millicores=250, prefix=PREFIX, period_us=period_us) as g:
        assert g.quota() == (period_us // 4, period_us)
        g.set_quota(750)  # a resize keeps the period
        assert g.quota() == (period_us * 3 // 4, period_us)
    with LocalBackend(prefix=PREFIX, workdir=tmp_path, cfs_period_us=period_us) as prof:
        assert prof.info()["cfs_period_us"] == period_us
        assert prof._group(cpu_task(), 500).period_us == period_us
    live = LiveBackend("r1", tmp_path / "logs", cgroup_prefix=PREFIX, cfs_period_us=period_us)
    with live._group("t", 500) as g:
        assert g.quota() == (period_us // 2, period_us)
    assert live.info()["cgroup"]["cfs_period_us"] == period_us
    assert leftover_groups() == []


def test_the_profiler_and_a_live_run_default_to_the_same_period(tmp_path):
    from bsp_planner.runtime.backends.local import LocalBackend as LiveBackend
    from bsp_planner.runtime.run_settings import RunSettings

    assert LocalBackend(prefix=PREFIX, workdir=tmp_path).cfs_period_us == CFS_PERIOD_US
    assert LiveBackend("r1", tmp_path).cfs_period_us == CFS_PERIOD_US
    assert RunSettings(experiment="x").checked().cfs_period_us is None  # the profile's (test_run_inputs)


@pytest.mark.parametrize("period_us", [999, 1_000_001, 2.5, True])
def test_a_period_the_kernel_refuses_is_an_input_error_naming_it(tmp_path, period_us):
    with pytest.raises(InputError, match="CFS period of 1000..1000000") as e:
        LocalBackend(prefix=PREFIX, workdir=tmp_path, cfs_period_us=period_us)
    assert e.value.field == "--cfs-period-us"
    with pytest.raises(InputError, match="at least 100m"):
        quota_us(50, 10_000)


def test_a_profile_resumed_with_another_period_is_refused(tmp_path):
    from bsp_planner.profiling.profile_meta import _check_same_backend

    meta = {"backend": "local-cgroup", "cpu_shares": 262144}  # before the period was recorded: the default
    _check_same_backend(
        meta, {"backend": "local-cgroup", "cpu_shares": 262144, "cfs_period_us": CFS_PERIOD_US}, tmp_path
    )
    with pytest.raises(InputError, match="cfs_period_us=100000, this run would use 10000"):
        _check_same_backend(meta, {"backend": "local-cgroup", "cpu_shares": 262144, "cfs_period_us": 10_000}, tmp_path)

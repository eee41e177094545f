"""The Kubernetes profiler: grid cells as Jobs, bounded parallelism, resume, the local profiler's files.

The cluster is FakeApiServer (bsp_planner/testing/fake_apiserver.py), FOR LOGIC TESTS ONLY: a Job's
container does not run; a function of the test says what it would have reported (its exit code and
termination message), except in the last test, where that function runs the Job's real command
(`python -m bsp_planner.profiling.pod_measure -- stress-ng ...`) on this machine, without a CPU limit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)

from bsp_planner.inputs.job import Job, SeriesRef, Task
from bsp_planner.inputs.profiles import load_profile, metadata_path
from bsp_planner.inputs.shipped import data_path
from bsp_planner.k8s import names as N
from bsp_planner.k8s.cluster import ROLE_RULES
from bsp_planner.profiling import pod_measure as measure
from bsp_planner.profiling import runner as R
from bsp_planner.profiling.kubernetes import KubernetesProfiler, cell_text, default_profile_id, run_grid_kubernetes
from bsp_planner.profiling.local import RunResult
from bsp_planner.testing.fake_apiserver import FakeApiServer
from bsp_planner.testing.fake_cluster import JobOutcome
from bsp_planner.testing.fake_rbac import rules_from_manifests

from test_k8s_manifests import render_base

NS = "bsp-planner"
GRID = R.Grid((500, 1000), (10, 20), 2)
TASKS = (Task("spin", "cpu", 100.0, SeriesRef(Path("-"))), Task("sort", "qsort", 3.0, SeriesRef(Path("-"))))
JOB = Job("t", TASKS, path=Path("job.toml"))


def ops_and_cpu(job: dict) -> tuple[int, int, str]:
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    args = cmd[cmd.index("--") + 1 :]
    stressor = args[1][2:]
    ops = int(args[args.index(f"--{stressor}-ops") + 1])
    return ops, int(job["metadata"]["annotations"]["bsp-planner.io/cpu-millicores"]), stressor


def synthetic_duration(ops: int, cpu: int) -> float:
    return round(ops / cpu, 4)


def ok_runner(delay_s: float = 0.0, fail_stressor: str | None = None):
    def run(job: dict) -> JobOutcome:
        ops, cpu, stressor = ops_and_cpu(job)
        if stressor == fail_stressor:
            msg = {"duration_s": None, "exit_code": 1, "reason": f"exit code 1: stress-ng: unknown stressor {stressor}"}
            return JobOutcome(1, json.dumps(msg), delay_s)
        msg = {
            "duration_s": synthetic_duration(ops, cpu),
            "exit_code": 0,
            "reason": "",
            "node": "node-a",
            "cpu_model": "Fake CPU @ 3GHz",
        }
        return JobOutcome(0, json.dumps(msg), delay_s)

    return run


class SyntheticLocal:
    """The same synthetic durations as a local backend would time them, one run after the other."""

    name = "kubernetes"  # the same backend name, so the two meta files can be compared key by key

    def check(self, tasks, job_path=None):
        pass

    def info(self):
        return {"backend": self.name}

    def run(self, task, workload, cpu, timeout_s):
        ops = max(1, int(round(task.ops_per_unit * workload)))
        return RunResult(synthetic_duration(ops, int(cpu)))


def profiler(api, **kw) -> KubernetesProfiler:
    kw.setdefault("image", "bsp-planner:dev")
    kw.setdefault("poll_s", 0.005)
    kw.setdefault("namespace", NS)
    kw.setdefault("profile_id", "prof")
    return KubernetesProfiler(kubeconfig=api.kubeconfig, **kw)


@pytest.fixture
def api():
    with FakeApiServer(job_runner=ok_runner(0.03)) as fake:
        fake.add_node("node-a", "4")
        yield fake


def test_the_grid_runs_as_jobs_at_most_parallelism_at_once_into_the_local_profilers_format(api, tmp_path):
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            running = sum(1 for p in api.pods(NS) if p["status"].get("phase") == "Running")
            peak[0] = max(peak[0], running)
            time.sleep(0.003)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        p = profiler(api, parallelism=3)
        report = run_grid_kubernetes(JOB, tmp_path / "k8s" / "profile.csv", GRID, p, progress=False)
    finally:
        done.set()
        watcher.join()
    assert (report.planned, report.measured, report.failures) == (16, 16, [])
    assert peak[0] == 3
    assert p.jobs_created == 16
    assert api.jobs(NS) == []  # every Job is deleted once its row is written

    local = R.run_grid(JOB, tmp_path / "local" / "profile.csv", GRID, SyntheticLocal(), progress=False)
    assert local.measured == 16
    # byte for byte the same rows, in the same order: the runner writes both
    assert (tmp_path / "k8s" / "profile.csv").read_text() == (tmp_path / "local" / "profile.csv").read_text()
    prof = load_profile(tmp_path / "k8s" / "profile.csv")
    assert sorted(prof.tasks) == ["sort", "spin"] and prof.tasks["spin"].repeats == 2
    meta = json.loads(metadata_path(tmp_path / "k8s" / "profile.csv").read_text())
    local_meta = json.loads(metadata_path(tmp_path / "local" / "profile.csv").read_text())
    assert set(local_meta) <= set(meta)
    assert meta["backend"] == "kubernetes" and meta["kubernetes"]["parallelism"] == 3
    assert meta["kubernetes"]["image"] == "bsp-planner:dev" and meta["kubernetes"]["namespace"] == NS
    assert meta["rows"] == 16 and meta["sessions"][-1]["measured"] == 16
    assert meta["kubernetes"]["nodes"] == {"node-a": "Fake CPU @ 3GHz"}  # where the cells ran
    # what a duration is, in the terms of where it was measured: a container's CPU limit, not a local cgroup
    assert "CPU limit" in meta["duration"] and "cfs_period_us" not in meta["duration"]


def test_each_job_runs_one_cell_under_its_cpu_level(api, tmp_path):
    seen = []

    def runner(job):
        seen.append(job)
        return ok_runner()(job)

    api.job_runner = runner
    run_grid_kubernetes(
        JOB, tmp_path / "p.csv", R.Grid((500, 1000), (10, 20), 1), profiler(api), tasks=["spin"], progress=False
    )
    cells = sorted(j["metadata"]["annotations"][N.ANNOTATION_CELL] for j in seen)
    assert cells == sorted(cell_text(c) for c in R.plan_cells([TASKS[0]], R.Grid((500, 1000), (10, 20), 1)))
    for j in seen:
        c = j["spec"]["template"]["spec"]["containers"][0]
        cpu = j["metadata"]["annotations"][N.ANNOTATION_CPU]
        assert c["resources"]["limits"]["cpu"] == c["resources"]["requests"]["cpu"] == N.cpu_quantity(int(cpu))
        assert c["command"][:3] == ["python", "-m", "bsp_planner.profiling.pod_measure"]
        assert c["command"][c["command"].index("--") + 1 :] == TASKS[0].stress_ng_args(
            float(j["metadata"]["annotations"][N.ANNOTATION_CELL].split(",")[1])
        )
        assert j["spec"]["activeDeadlineSeconds"] == int(R.DEFAULT_TIMEOUT_S + 300) + 1


def test_ctrl_c_deletes_the_running_jobs_and_the_next_session_finishes_the_grid(api, tmp_path):
    out = tmp_path / "profile.csv"
    p = profiler(api, parallelism=2)
    calls = [0]
    real_run = p.run

    def run(*a):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return real_run(*a)

    p.run = run
    with pytest.raises(KeyboardInterrupt):
        run_grid_kubernetes(JOB, out, GRID, p, progress=False)
    assert len(R.measured_cells(out)) == 3
    # nothing is left running in the cluster; Jobs that finished before their row was written stay for
    # the next session to read
    left = api.jobs(NS)
    assert all((j.get("status") or {}).get("succeeded") == 1 for j in left)
    meta = json.loads(metadata_path(out).read_text())
    assert meta["sessions"][-1]["interrupted"] is True

    again = profiler(api, parallelism=2)
    report = run_grid_kubernetes(JOB, out, GRID, again, progress=False)
    assert (report.skipped, report.measured) == (3, 13)
    assert again.jobs_created == 13 - len(left)
    assert api.jobs(NS) == []
    rows = R.read_profile_rows(out)
    assert len(rows) == 16 and len({(r["task"], r["workload"], r["cpu_millicores"], r["repeat"]) for r in rows}) == 16


def test_jobs_of_a_killed_session_are_collected_not_run_again(api, tmp_path):
    out = tmp_path / "profile.csv"
    killed = profiler(api, parallelism=4)
    todo = R.plan_cells(list(TASKS), GRID)
    killed.expect(list(TASKS), todo)
    first = killed.run(TASKS[0], 10, 500, 60)  # one result, and 3 more Jobs started ahead of it
    assert first.ok
    # the process dies here: no row written, nothing deleted; 4 Jobs are in the cluster (1 done, 3 ahead)
    assert len(api.jobs(NS)) == 3
    stale = killed.job_body(TASKS[0], ("spin", 99.0, 500.0, 0), 60)  # a cell no session asks for now
    killed.cluster.create_job(stale)

    resumed = profiler(api, parallelism=4)
    report = run_grid_kubernetes(JOB, out, GRID, resumed, progress=False)
    assert report.measured == 16
    assert resumed.jobs_created == 16 - 3  # the three Jobs started ahead were collected
    assert api.jobs(NS) == []  # the leftover of no expected cell was deleted


def test_failed_runs_are_logged_and_retried_by_the_next_session(api, tmp_path):
    out = tmp_path / "profile.csv"
    api.job_runner = ok_runner(fail_stressor="qsort")
    report = run_grid_kubernetes(JOB, out, GRID, profiler(api), progress=False)
    # the task's first runs all failed the same way: its other cells are left for the next session
    assert report.measured == 8 and len(report.failures) == R.GIVE_UP_AFTER
    assert report.failures[0].reason == "exit code 1: stress-ng: unknown stressor qsort"
    failures = R.failures_path(out).read_text().splitlines()
    assert failures[0] == ",".join(R.FAILURE_COLUMNS) and len(failures) == 1 + R.GIVE_UP_AFTER
    api.job_runner = ok_runner()
    again = run_grid_kubernetes(JOB, out, GRID, profiler(api), progress=False)
    assert (again.skipped, again.measured, again.failures) == (8, 8, [])


def test_a_cell_that_cannot_start_or_runs_out_of_time_is_a_failure_with_the_reason(tmp_path):
    def deadline(job):
        ops, cpu, _ = ops_and_cpu(job)
        if cpu == 1000:
            return JobOutcome(137, "", reason="DeadlineExceeded")
        return ok_runner()(job)

    with FakeApiServer(job_runner=deadline) as api:
        api.add_node("small", "750m")  # the 1000m cells are never scheduled
        report = run_grid_kubernetes(
            JOB,
            tmp_path / "p.csv",
            R.Grid((500, 1000), (10, 20), 1),
            profiler(api, startup_timeout_s=0.2),
            tasks=["spin"],
            progress=False,
        )
    assert report.measured == 2
    reasons = sorted({f.reason.split(":")[0] for f in report.failures})
    assert len(report.failures) == 2 and reasons == ["did not start within 0 s"]
    assert "unschedulable: 0/1 nodes are available: 1 Insufficient cpu." in report.failures[0].reason

    with FakeApiServer(job_runner=deadline) as api:
        api.add_node("big", "4")
        report = run_grid_kubernetes(
            JOB,
            tmp_path / "q.csv",
            R.Grid((500, 1000), (10, 20), 1),
            profiler(api),
            tasks=["spin"],
            timeout_s=5,
            progress=False,
        )
    assert [f.reason for f in report.failures] == ["timeout: the Job ran past 5 s + 300 s to start"] * 2


def test_the_profiler_needs_only_the_roles_job_and_pod_rights(tmp_path):
    rules = rules_from_manifests(render_base(), NS, N.SERVICE_ACCOUNT)
    with FakeApiServer(rules=rules, job_runner=ok_runner()) as api:
        api.add_node("n", "4")
        report = run_grid_kubernetes(JOB, tmp_path / "p.csv", GRID, profiler(api), progress=False)
        assert report.measured == 16
        assert [c for c in api.calls if c.status == 403] == []
        used = api.used_permissions()
    granted = {(g, r, v) for (g, r), verbs in ROLE_RULES.items() for v in verbs}
    assert used <= granted
    assert {("batch", "jobs", v) for v in ROLE_RULES[("batch", "jobs")]} <= used  # the backend uses the rest


def test_bad_settings_are_refused(api):
    from bsp_planner.core.errors import InputError

    for kw, field in (
        ({"parallelism": 0}, "--parallel"),
        ({"startup_timeout_s": 0}, "--startup-timeout"),
        ({"profile_id": "Not_OK"}, "--profile-id"),
    ):
        with pytest.raises(InputError) as exc:
            profiler(api, **kw)
        assert exc.value.field == field
    assert N.is_dns_label(default_profile_id("profiles/k8s-kind/profile.csv"))
    assert default_profile_id("profiles/a/profile.csv") != default_profile_id("profiles/b/profile.csv")


# -- the measurement inside the container ------------------------------------------------------------
needs_stress_ng = pytest.mark.skipif(
    shutil.which("stress-ng") is None, reason="stress-ng is not installed (apt-get install stress-ng)"
)


@needs_stress_ng
def test_measure_times_the_command_and_writes_the_termination_message(tmp_path, capsys):
    out = tmp_path / "termination-log"
    code = measure.main(
        ["--timeout", "20", "--out", str(out), "--", "stress-ng", "--cpu", "1", "--cpu-ops", "20", "--quiet"]
    )
    report = json.loads(out.read_text())
    assert code == 0 and report["exit_code"] == 0 and 0 < report["duration_s"] < 20 and report["reason"] == ""
    assert json.loads(capsys.readouterr().out) == report


def test_measure_reports_timeouts_failures_and_missing_programs(tmp_path):
    out = tmp_path / "t"
    assert measure.main(["--timeout", "0.2", "--out", str(out), "--", "sleep", "5"]) == 1
    assert json.loads(out.read_text())["reason"] == "timeout after 0.2 s"
    assert measure.main(["--out", str(out), "--", "sh", "-c", "echo boom >&2; exit 3"]) == 1
    assert json.loads(out.read_text())["reason"] == "exit code 3: boom"
    assert measure.main(["--out", str(out), "--", "no-such-program-here"]) == 1
    assert json.loads(out.read_text())["reason"].startswith("cannot start no-such-program-here")
    assert measure.main(["--bogus"]) == 2


def test_a_command_that_ends_just_as_its_timeout_fires_is_still_reported_as_a_timeout(tmp_path, monkeypatch):
    """The command's process group is gone by the time the measurer kills it: a report, not a traceback
    in the pod (which would leave no termination message at all)."""
    real = subprocess.Popen.communicate

    def ends_at_the_timeout(self, input=None, timeout=None):
        if timeout is not None:
            self.wait()  # the command ends and is reaped before the kill
            raise subprocess.TimeoutExpired(self.args, timeout)
        return real(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, "communicate", ends_at_the_timeout)
    out = tmp_path / "t"
    assert measure.main(["--timeout", "5", "--out", str(out), "--", "true"]) == 1
    assert json.loads(out.read_text())["reason"] == "timeout after 5 s"


@needs_stress_ng
def test_a_real_measurement_travels_through_the_job_and_its_termination_message(tmp_path):
    """The Job's own command, run here (no CPU limit: this is about the plumbing, not the numbers)."""

    def execute(job: dict) -> JobOutcome:
        cmd = list(job["spec"]["template"]["spec"]["containers"][0]["command"])
        assert cmd[0] == "python"
        cmd[0] = sys.executable
        log = tmp_path / f"{job['metadata']['name']}.log"
        env = dict(os.environ, BSP_PLANNER_TERMINATION_LOG=str(log), BSP_PLANNER_NODE="this-machine")
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=60)
        return JobOutcome(proc.returncode, log.read_text())

    job = Job("t", (Task("spin", "cpu", 2.0, SeriesRef(Path("-"))),), path=Path("job.toml"))
    with FakeApiServer(job_runner=execute) as api:
        api.add_node("n", "4")
        p = profiler(api)
        report = run_grid_kubernetes(job, tmp_path / "p.csv", R.Grid((500, 1000), (5, 10), 1), p, progress=False)
    assert report.measured == 4 and report.failures == []
    prof = load_profile(tmp_path / "p.csv")
    assert (prof.tasks["spin"].duration_s > 0).all()
    assert list(p.nodes) == ["this-machine"]


def _kubeconfig_for(api: FakeApiServer, path: Path) -> Path:
    import yaml

    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": NS}}],
            }
        )
    )
    return path


def test_profile_run_backend_kubernetes_on_the_command_line(api, tmp_path):
    from typer.testing import CliRunner

    from bsp_planner.cli import app

    if "--parallel" not in CliRunner().invoke(app, ["profile", "run", "--help"], env={"COLUMNS": "200"}).output:
        pytest.skip(
            "`bsp-planner profile run` has no --backend kubernetes yet (the hook in profiling/cli.py, docs/kubernetes.md)"
        )
    env = {"KUBECONFIG": str(_kubeconfig_for(api, tmp_path / "kubeconfig")), "BSP_PLANNER_IMAGE": "bsp-planner:dev"}
    out = tmp_path / "p" / "profile.csv"
    args = [
        "profile",
        "run",
        "--backend",
        "kubernetes",
        "--job",
        str(data_path("jobs/thesis-8.toml")),
        "--tasks",
        "affinity,atomic",
        "--cpu",
        "500,1000",
        "--workloads",
        "10,20",
        "--repeats",
        "1",
        "--parallel",
        "3",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert len(R.read_profile_rows(out)) == 8
    meta = json.loads(metadata_path(out).read_text())
    assert meta["backend"] == "kubernetes" and meta["kubernetes"]["parallelism"] == 3
    assert meta["kubernetes"]["profile_id"] == default_profile_id(out)


def test_the_cpu_limit_check_of_the_cluster_profiling_test_passes_a_busy_host_and_fails_a_broken_limit():
    """The check of tests/test_k8s_e2e.py (which needs a cluster): the fastest of three repeats per cell.
    A busy host where one repeat of a whole CPU took 3.13 s against a quarter's 1.91 s (one repeat, as the
    test took before) passes once the other repeats show the limit; a limit not enforced (a quarter as fast
    as a whole CPU, with the same noise) fails, naming the cell."""
    from test_k8s_e2e import limit_problems

    def rows(cells: dict[tuple[float, float], list[float]]) -> list[dict]:
        return [
            {"task": "spin", "workload": w, "cpu_millicores": c, "duration_s": d, "repeat": i}
            for (w, c), ds in cells.items()
            for i, d in enumerate(ds)
        ]

    whole = {(5, 1000): [3.13, 0.55, 0.61], (10, 1000): [2.32, 1.1, 1.3]}
    busy = {(5, 250): [1.91, 2.4, 2.2], (10, 250): [5.59, 4.4, 4.6], **whole}
    assert limit_problems(rows(busy)) == []
    broken = {(5, 250): [0.56, 1.91, 0.6], (10, 250): [1.2, 5.59, 1.1], **whole}
    problems = limit_problems(rows(broken))
    assert len(problems) == 2 and problems[0].startswith("spin workload 5: 250m took 0.56 s, 1000m 0.55 s")

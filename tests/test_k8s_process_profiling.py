"""`profile run --backend kubernetes` of long-running `process` tasks (issues 10 and 15): one Job per CPU
level, its program started once with the local profiler's plan (BSP_PROFILE), its step reports reduced to
cells by the collector container with the local profiler's code, against FakeApiServer.

FOR LOGIC TESTS ONLY: the fake's Job "runs" here: its init container, its profiled program and its
collector are this Python's processes sharing a temporary folder for the pod's /scratch (an image run as
built is the program IMAGES names for it). No CPU limit is applied: this is about what the Job runs and
how the results travel, not the numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)

from k8s_fixtures import NS

from bsp_planner.inputs.job import load_job
from bsp_planner.k8s import manifests as M
from bsp_planner.profiling import runner as R
from bsp_planner.profiling.kubernetes import KubernetesProfiler, run_grid_kubernetes
from bsp_planner.profiling.process import ProcessSteps
from bsp_planner.testing.fake_apiserver import FakeApiServer
from bsp_planner.testing.fake_cluster import JobOutcome

PROGRAM = textwrap.dedent(
    """
    import sys
    from bsp_planner import task

    mode = sys.argv[1]
    with task.join() as session:
        assert session.sync == "profile"
        step = session.first_step
        while not session.ended:
            w = session.assigned_workload(step)
            if mode == "crash" and step == 3:
                sys.exit("the program failed in step 3")
            with session.step(step, workload=w):
                x = 0
                for i in range(int(w * 20000)):
                    x += i
            step += 1
    """
)


def _in_pod(value: str, scratch: Path) -> str:
    return value.replace(M.SCRATCH_DIR, str(scratch))


def pod_runner(tmp_path: Path, images: dict[str, list[str]], seen: list[dict]):
    """A job_runner that runs the process profiling Job's pod here (see the module)."""

    def execute(body: dict) -> JobOutcome:
        seen.append(body)
        spec = body["spec"]["template"]["spec"]
        scratch = tmp_path / body["metadata"]["name"]
        scratch.mkdir()
        (scratch / "run").mkdir()
        base = dict(os.environ, BSP_PLANNER_NODE="this-machine")

        def argv_env(c: dict, command: list[str]) -> tuple[list[str], dict[str, str]]:
            argv = [sys.executable if a in ("python", "python3") else _in_pod(a, scratch) for a in command]
            env = dict(base, **{e["name"]: _in_pod(e["value"], scratch) for e in c["env"] if "value" in e})
            return argv, env

        (init,) = spec["initContainers"]
        argv, env = argv_env(init, init["command"])
        subprocess.run(argv, env=env, check=True, timeout=60)
        profiled, collector = spec["containers"]
        argv, env = argv_env(profiled, profiled.get("command") or images[profiled["image"]])
        with open(scratch / "stderr", "w+b") as err:
            prog = subprocess.Popen(argv, env=env, cwd=scratch, stdout=subprocess.DEVNULL, stderr=err)
            argv, env = argv_env(collector, collector["command"])
            env["BSP_PLANNER_TERMINATION_LOG"] = str(scratch / "collector.msg")
            done = subprocess.run(argv, env=env, capture_output=True, timeout=120)
            code = prog.wait(timeout=120)
            err.seek(0)
            tail = err.read().decode(errors="replace")[-200:]
        return JobOutcome(
            code,
            containers={
                M.PROFILED_CONTAINER: (code, tail if code else ""),
                M.COLLECTOR_CONTAINER: (done.returncode, (scratch / "collector.msg").read_text()),
            },
        )

    return execute


def write_job(tmp_path: Path, task: str) -> Path:
    (tmp_path / "app.py").write_text(PROGRAM)
    path = tmp_path / "job.toml"
    path.write_text(f'name = "j"\n\n[[task]]\nname = "p"\n{task}\n')
    return path


def profile(tmp_path: Path, path: Path, images: dict, seen: list, grid: R.Grid, steps: ProcessSteps, timeout_s=60.0):
    with FakeApiServer(job_runner=pod_runner(tmp_path, images, seen)) as api:
        api.add_node("n", "4")
        p = KubernetesProfiler(namespace=NS, kubeconfig=api.kubeconfig, image="bsp-planner:dev", poll_s=0.01)
        report = run_grid_kubernetes(
            load_job(path), tmp_path / "p.csv", grid, p, timeout_s=timeout_s, process_steps=steps, progress=False
        )
        assert api.jobs(NS) == []  # every Job deleted once read
    return report, p


def test_a_process_task_is_profiled_with_one_job_per_cpu_level_in_its_image(tmp_path):
    path = write_job(tmp_path, f'image = "me/app:1"\nprocess = ["{{python}}", "{tmp_path / "app.py"}", "ok"]')
    seen: list[dict] = []
    steps = ProcessSteps(warmup=1, measure=2, min_measure_s=0.0)
    report, p = profile(tmp_path, path, {}, seen, R.Grid((500, 1000), (1, 3), 1), steps)
    assert report.measured == 4 and report.failures == []
    assert len(seen) == 2  # one start per CPU level, every workload in it
    for body, cpu in zip(seen, ("500m", "1"), strict=True):
        profiled, collector = body["spec"]["template"]["spec"]["containers"]
        assert profiled["image"] == "me/app:1" and profiled["command"][0] == "python3"  # the image's Python
        assert profiled["resources"]["limits"]["cpu"] == cpu == profiled["resources"]["requests"]["cpu"]
        env = {e["name"]: e.get("value") for e in profiled["env"]}
        assert env["BSP_PROFILE"] == f"{M.SCRATCH_DIR}/plan.json" and env["BSP_TASK"] == "p"
        plan = {e["name"]: e.get("value") for e in body["spec"]["template"]["spec"]["initContainers"][0]["env"]}
        assert '"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.0' in plan["BSP_PROFILE_PLAN_JSON"]
        assert collector["image"] == "bsp-planner:dev" and collector["command"][-1] == "60"  # --timeout
    rows = (tmp_path / "p.csv").read_text().splitlines()[1:]
    assert len(rows) == 4 and all(float(r.split(",")[3]) > 0 for r in rows)
    assert list(p.nodes) == ["this-machine"]


def test_an_image_run_as_built_is_profiled_from_its_own_entrypoint(tmp_path):
    path = write_job(tmp_path, 'image = "me/app:2"')
    seen: list[dict] = []
    images = {"me/app:2": [sys.executable, str(tmp_path / "app.py"), "ok"]}  # what the image runs as built
    report, _ = profile(tmp_path, path, images, seen, R.Grid((500, 1000), (1, 2), 1), ProcessSteps(1, 1, 0.0))
    assert report.measured == 4 and report.failures == []
    (profiled, _) = seen[0]["spec"]["template"]["spec"]["containers"]
    assert "command" not in profiled and "args" not in profiled


def test_a_crashing_process_keeps_its_finished_cells_and_fails_the_rest_with_its_stderr(tmp_path):
    path = write_job(tmp_path, f'image = "me/app:1"\nprocess = ["{{python}}", "{tmp_path / "app.py"}", "crash"]')
    # steps 0-2: workload 1 (one warm-up, two measured: its cell done); step 3 crashes in workload 2
    # (the collector then waits --timeout for a step that never comes: it cannot see the program end)
    grid = R.Grid((500, 1000), (1, 2), 1)
    report, _ = profile(tmp_path, path, {}, [], grid, ProcessSteps(1, 2, 0.0), timeout_s=6)
    assert report.measured == 2 and len(report.failures) == 2
    for f in report.failures:
        assert f.workload == 2 and "exited with code 1 after step 2" in f.reason, f.reason
        assert "the program failed in step 3" in f.reason

"""A profiler killed mid-grid leaves its cgroup behind (its stress-ng dies with it, or is still running in it); the next
profile run (a resumed one or any other) removes such groups of its own before it measures, and leaves a
group whose profiler is still running alone. Real cgroups, real stress-ng."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from zk_fixtures import PREFIX, StressGate, needs_tasks

pytestmark = needs_tasks

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from bsp_planner.inputs.job import SeriesRef, Task
    from bsp_planner.profiling.local import LocalBackend

    task = Task("a", "zero", 20.0, SeriesRef(Path("-")), 1)
    with LocalBackend(stress_ng=sys.argv[1], prefix=sys.argv[2]) as backend:
        backend.run(task, 30.0, 500, timeout_s=600)  # held by the gate until the test kills us
    """
)


def test_a_killed_profilers_cgroup_is_removed_by_the_next_profile_run(tmp_path):
    from bsp_planner.inputs.job import SeriesRef, Task
    from bsp_planner.profiling.cgroups import CpuQuotaGroup, detect_hierarchy
    from bsp_planner.profiling.local import LocalBackend

    prefix = f"{PREFIX}.profile"
    parent = detect_hierarchy().root / prefix
    gate = StressGate(tmp_path / "gate")
    gate.hold(1)
    profiler = subprocess.Popen([sys.executable, "-c", SCRIPT, str(gate.path), prefix])
    bystander = subprocess.Popen(["sleep", "600"])  # stands for a profile run still going beside ours
    live = CpuQuotaGroup(f"b-{bystander.pid}-1", prefix=prefix, millicores=500).create()
    try:
        gate.wait_held(1, alive=lambda: profiler.poll() is None)
        left = sorted(p.name for p in parent.iterdir() if p.is_dir() and p.name.startswith(f"a-{profiler.pid}-"))
        assert len(left) == 1
        group = CpuQuotaGroup(left[0], prefix=prefix)
        group.created = True
        profiler.send_signal(signal.SIGKILL)
        profiler.wait(timeout=30)
        # its stress-ng gets the parent-death signal and may be gone already: its group is left either way
        inside = group.pids()
        assert group.path.is_dir()

        backend = LocalBackend(prefix=prefix)
        backend.check([Task("a", "zero", 20.0, SeriesRef(tmp_path / "-"), 1)])
        groups = [x for x in backend.stale_removed if not x.startswith("/")]  # beside them: dead runs' scratch folders
        assert groups == [f"{prefix}/{left[0]}"]
        assert not group.path.exists()
        for pid in inside:
            assert (
                not os.path.exists(f"/proc/{pid}")
                or "Z" in open(f"/proc/{pid}/status").read().split("State:")[1].split()[0]
            )
        assert live.path.is_dir(), "a group whose profiler still runs is not touched"
    finally:
        profiler.kill()
        bystander.kill()
        bystander.wait()
        live.remove()
        for p in parent.glob("*") if parent.is_dir() else []:
            if p.is_dir():
                g = CpuQuotaGroup(p.name, prefix=prefix)
                g.created = True
                g.remove()
        try:
            parent.rmdir()
        except OSError:
            pass


@pytest.mark.parametrize(
    "name, pid",
    [
        ("a-123-456", 123),
        ("check-77", 77),
        ("g88-3", 88),
        ("my-task-name-9-10", 9),
        ("probe-41", 41),
        ("probe-42-b3", 42),
        ("other", None),
        ("a-b", None),
        ("probe-x", None),
    ],
)
def test_only_groups_named_by_a_runner_carry_an_owner(name, pid):
    from bsp_planner.profiling.cgroups import owner_pid

    assert owner_pid(name) == pid


def test_a_run_killed_while_measuring_its_costs_leaves_no_probe_group_past_the_next_run(tmp_path):
    """A coordinator SIGKILLed while it measured its recreation cost, before its run folder existed, left its
    probe groups (and a process in one) inside its run's group, which no --resume reaches: the next run's
    backend check removes them, and the run's group with them, and leaves a living coordinator's probes alone."""
    from bsp_planner.inputs.job import load_job
    from bsp_planner.profiling.cgroups import CpuQuotaGroup, detect_hierarchy
    from bsp_planner.runtime.backends.local import LocalBackend

    from zk_fixtures import DATA

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs: the killed coordinator's
    bystander = subprocess.Popen(["sleep", "600"])  # a coordinator still measuring beside us
    stale = CpuQuotaGroup(f"probe-{gone.pid}-a0", prefix=f"{PREFIX}.live.killed", millicores=500).create()
    held = subprocess.Popen(["sleep", "600"], preexec_fn=stale.preexec_fn)  # the killed run's probe worker
    live = CpuQuotaGroup(f"probe-{bystander.pid}-a0", prefix=f"{PREFIX}.live.running", millicores=500).create()
    try:
        backend = LocalBackend("next", tmp_path / "logs", cgroup_prefix=PREFIX)
        backend.check(load_job(DATA / "jobs" / "live-3.toml"), 1000, 1500)
        assert backend.stale_probes_removed == [f"{PREFIX}.live.killed/probe-{gone.pid}-a0"]
        assert not (detect_hierarchy().root / f"{PREFIX}.live.killed").exists()
        assert held.wait(timeout=30) != 0  # killed with its group
        assert live.path.is_dir(), "a living coordinator's probe is not touched"
    finally:
        held.kill()
        bystander.kill()
        bystander.wait()
        live.remove()
        stale.remove()

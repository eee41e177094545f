"""Fixtures for the live-execution tests: a real ZooKeeper server, a tiny job sized for quick steps, and
checks that a run leaves no process and no cgroup behind.

The server is the one `bsp-planner zk start` runs (Debian's zookeeper package, or ZOOKEEPER_HOME), on a
free loopback port with its own data directory, stopped at the end. Tests that need it skip, saying why,
only when java or the server's jars are missing; tests that run tasks also need root (or a delegated
cgroup) and stress-ng. In CI all are present (scripts/test.sh installs stress-ng and zookeeper).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.shipped import data_dir

DATA = data_dir()  # the shipped defaults (package data)
PREFIX = f"bsp-planner-test-{os.getpid()}"  # the tests' own parent cgroup, apart from real measurements


def zk_problem() -> str | None:
    from bsp_planner.runtime.zkserver import find_java, zookeeper_classpath

    try:
        find_java()
        zookeeper_classpath()
    except InputError as exc:
        return f"no ZooKeeper server to test against: {exc}"
    try:
        import kazoo  # noqa: F401
    except ImportError:
        return "kazoo is not installed (pip install 'bsp-planner[live]')"
    return None


def tasks_problem() -> str | None:
    from bsp_planner.profiling.cgroups import CgroupUnavailable, CpuQuotaGroup

    problem = zk_problem()
    if problem:
        return problem
    if shutil.which("stress-ng") is None:
        return "stress-ng is not installed (apt-get install stress-ng)"
    try:
        with CpuQuotaGroup("probe", millicores=500, prefix=PREFIX):
            pass
    except CgroupUnavailable as exc:
        return f"CPU-quota cgroups are not writable here (needs root or a delegated cgroup): {exc}"
    return None


_zk = zk_problem()
_tasks = tasks_problem()
needs_zk = pytest.mark.skipif(_zk is not None, reason=_zk or "")
needs_tasks = pytest.mark.skipif(_tasks is not None, reason=_tasks or "")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory):
    """One standalone ZooKeeper for the whole session (tests use their own znode roots)."""
    from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port

    if _zk:
        pytest.skip(_zk)
    server = LocalZooKeeper(tmp_path_factory.mktemp("zk"), port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_zk(tmp_path):
    """A server of the test's own, for tests that crash and restart it."""
    from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port

    if _zk:
        pytest.skip(_zk)
    server = LocalZooKeeper(tmp_path / "zk", port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def creds():
    """Credentials of a test's own, for the ZooKeeper-layer tests that open sessions themselves."""
    from bsp_planner.zk.credentials import Credentials

    return Credentials("tester", "pw-" + os.urandom(6).hex())


@pytest.fixture
def root(request):
    """A znode path of the test's own (its name, made unique), under /t."""
    return f"/t/{request.node.name.replace('[', '-').replace(']', '')}-{os.urandom(3).hex()}"


def session(server, creds, **kw):
    """A started ZooKeeper session on the server (a ZkSession; close it)."""
    from bsp_planner.zk.session import ZkSession

    return ZkSession(server.hosts, creds, connect_timeout_s=10, **kw).start()


def make_root(s, root: str) -> None:
    """The shared parents as a coordinator makes them (anyone may add a run), then the test's root."""
    s.ensure_path(root.rsplit("/", 1)[0], acl=s.creds.parent_acl())
    s.create(root)


def close_all(coord, sessions: dict, root: str) -> None:
    """A test's end: every participant's session closed, then the test's znodes deleted by the coordinator's."""
    for s in sessions.values():
        s.close()
    coord.delete_tree(root)
    coord.close()


@pytest.fixture
def creds_file(tmp_path):
    """Credentials for the run's digest ACL, in a file only its owner may read."""
    from bsp_planner.zk.credentials import Credentials, write_credentials_file

    return write_credentials_file(tmp_path / "zk-auth", Credentials("tester", "s3cret-" + os.urandom(6).hex()))


# -- a tiny job: three cheap stressors, a synthetic profile, steps of ~0.1-0.5 s -----------------------
JOB = """name = "tiny"
workers = 1

[[task]]
name = "a"
stressor = "zero"
ops_per_unit = {ops_a}
series = {{ file = "{data}/nyc_taxi.csv", first_row = 0, last_row = 1998 }}

[[task]]
name = "b"
stressor = "memcpy"
ops_per_unit = 0.5
series = {{ file = "{data}/nyc_taxi.csv", first_row = 1999, last_row = 3997 }}

[[task]]
name = "c"
stressor = "vecmath"
ops_per_unit = 4
series = {{ file = "{data}/ambient_temperature_system_failure.csv", first_row = 0, last_row = 2000 }}
"""

EXPERIMENT = """job = "job.toml"
profile = "profile.csv"
steps = {steps}
penalty_s = {penalty}
modes = ["perfect"]
strategies = ["mpc"]
output = "out"

[cpu]
budget_millicores = 1500
min_millicores = 250
step_millicores = 50
max_millicores = 1000

[planner]
horizon = 4
dp_max_segment = 8

[forecast]
horizon = 8
"""


def write_profile(path: Path, tasks=("a", "b", "c"), seed: int = 1) -> Path:
    """duration = base_i * (w / 30) * (1000 / c): roughly what the tiny job's stressors do, with the
    tasks' speeds differing enough that planners move CPU between them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = ["task,workload,cpu_millicores,duration_s,repeat"]
    for i, t in enumerate(tasks):
        base = (0.08, 0.12, 0.1)[i % 3] * (1 + 0.1 * rng.random())
        for w in (10, 20, 30, 40, 50):
            for c in (250, 500, 750, 1000):
                lines.append(f"{t},{w},{c},{base * (w / 30) * (1000 / c) ** 0.9:.5f},0")
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_experiment(folder: Path, steps: int = 5, penalty: float = 0.3, ops_a: float = 20) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.toml").write_text(JOB.format(data=DATA / "datasets", ops_a=ops_a))
    write_profile(folder / "profile.csv")
    path = folder / "exp.toml"
    path.write_text(EXPERIMENT.format(steps=steps, penalty=penalty))
    return path


def settings(experiment: Path, zk, creds: Path, **kw):
    from bsp_planner.runtime.coordinator import RunSettings

    base = dict(
        experiment=str(experiment),
        zookeeper=zk.hosts,
        zk_auth=f"file:{creds}",
        session_timeout_s=10.0,
        zk_wait_s=10.0,
        worker_start_s=60.0,
        step_timeout_s=120.0,
        cgroup_prefix=PREFIX,
    )
    base.update(kw)
    return RunSettings(**base)


# -- nothing left behind -------------------------------------------------------------------------------
def run_processes(run_id: str) -> list[int]:
    """Live worker processes of the run (its workers name the run's znode on their command line).

    A worker's child that has forked but not yet exec'd its step carries the worker's command line for
    that moment (a long one on a loaded machine); it is not a worker, so a match whose parent is itself
    a match is left out."""
    found: dict[int, int] = {}  # pid -> parent pid
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "bsp_planner.cli worker" not in cmd or f"/{run_id}" not in cmd:
                continue
            status = dict(line.split(":", 1) for line in (p / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if "Z" not in status.get("State", "Z").split()[0]:  # a zombie is already dead, waiting for its parent
            found[int(p.name)] = int(status.get("PPid", "0").strip() or 0)
    return [pid for pid, ppid in found.items() if ppid not in found]


def run_cgroups(run_id: str, prefix: str = PREFIX) -> list[str]:
    """The run's parent group and its task groups, and its services' groups, if any are left."""
    from bsp_planner.profiling.cgroups import detect_hierarchy

    left: list[str] = []
    for parent in (detect_hierarchy().root / f"{prefix}{infix}{run_id}" for infix in (".live.", ".services.")):
        if parent.is_dir():
            left += [parent.name] + sorted(f"{parent.name}/{p.name}" for p in parent.iterdir() if p.is_dir())
    return left


def assert_nothing_left(run_id: str, prefix: str = PREFIX, wait_s: float = 30.0) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and (run_processes(run_id) or run_cgroups(run_id, prefix)):
        time.sleep(0.05)
    assert run_processes(run_id) == [], f"orphaned worker processes of {run_id}"
    assert run_cgroups(run_id, prefix) == [], f"orphaned cgroups of {run_id}"
    assert run_scratch(run_id, prefix) == [], f"scratch folders of {run_id} left in the temp dir"


def run_scratch(run_id: str, prefix: str = PREFIX) -> list[Path]:
    """The local backend's scratch folders of a run (its tasks' working directory) in the temp dir."""
    name = f"{prefix}.live.{run_id}-"
    return [p for p in Path(tempfile.gettempdir()).glob(f"{name}*") if len(p.name) == len(name) + 8]


@pytest.fixture
def reap_runs():
    """Safety net for a test that fails half-way: kill whatever is left in the tests' run cgroups (a
    worker joins its group before it execs, so that is every worker and stress-ng of the tests' runs)
    and remove the groups and the runs' scratch folders, so one failure cannot leak into the host. The
    tests themselves assert that nothing is left."""
    yield
    from bsp_planner.profiling.cgroups import detect_hierarchy

    root = detect_hierarchy().root
    for parent in sorted([*root.glob(f"{PREFIX}.live.*"), *root.glob(f"{PREFIX}.services.*")]):  # tasks', services'
        remove_groups_under(parent.name)
    for scratch in Path(tempfile.gettempdir()).glob(f"{PREFIX}.live.*"):  # a killed coordinator's scratch folders
        shutil.rmtree(scratch, ignore_errors=True)


def remove_groups_under(prefix: str) -> None:
    """Kill whatever runs in the groups under the prefix group `prefix`, remove them, then the prefix group."""
    from bsp_planner.profiling.cgroups import CpuQuotaGroup, detect_hierarchy

    parent = detect_hierarchy().root / prefix
    if not parent.is_dir():
        return
    for child in sorted(x for x in parent.iterdir() if x.is_dir()):
        g = CpuQuotaGroup(child.name, prefix=prefix)
        g.created = True  # it exists: remove() kills whatever is inside, then removes it and the prefix group
        g.remove()
    try:
        parent.rmdir()
    except OSError:
        pass


def wait_for_steps(run_dir: Path, n: int, timeout_s: float = 60.0) -> None:
    """Until the run log holds n steps."""
    deadline = time.monotonic() + timeout_s
    path = run_dir / "steps.jsonl"
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {n} steps in {timeout_s} s")


# -- holding a step: a fault injected at a known point, not at whatever point a sleep happens to hit -----
GATE_SCRIPT = """#!/bin/sh
# stress-ng for a live test (--stress-ng): the Nth run of one stressor can be held until the test lets it
# go, so that a fault lands in a known step however fast or slow the machine is
gate='{gate}'
case " $* " in
  *" --{stressor}-ops "*)
    n=$(( $(cat "$gate/count" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$gate/count"
    if [ -e "$gate/hold-$n" ]; then
      : > "$gate/held-$n"
      while [ ! -e "$gate/release-$n" ]; do sleep 0.02; done
    fi
    ;;
esac
exec '{stress_ng}' "$@"
"""


class StressGate:
    """A stress-ng stand-in (pass :attr:`path` as the run's stress-ng) that runs the real one, except that
    the Nth run of one stressor (one task's step, counted over the whole run, resumes included) waits while
    ``hold(N)`` is set, until ``release(N)``. A task runs its stressor once per step, in step order, so
    holding run N holds that task in step N-1 (on a fresh run) and the run cannot pass that step: the
    test then injects its fault into a run that is certainly mid-step, never one that has already ended."""

    def __init__(self, folder: Path, stressor: str = "zero") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.path = folder / "stress-ng"
        self.path.write_text(GATE_SCRIPT.format(gate=folder, stressor=stressor, stress_ng=shutil.which("stress-ng")))
        self.path.chmod(0o755)

    def hold(self, n: int) -> None:
        (self.folder / f"hold-{n}").touch()

    def release(self, n: int) -> None:
        (self.folder / f"release-{n}").touch()

    def runs(self) -> int:
        """How many runs of the stressor have started so far."""
        try:
            return int((self.folder / "count").read_text())
        except (OSError, ValueError):
            return 0

    def wait_held(self, n: int, timeout_s: float = 120.0, alive=None) -> None:
        """Until run n is waiting (an event the run produces; the timeout only bounds a broken run)."""
        deadline = time.monotonic() + timeout_s
        marker = self.folder / f"held-{n}"
        while not marker.exists():
            if alive is not None and not alive():
                raise AssertionError(f"the run ended before its stressor run {n} was held")
            if time.monotonic() > deadline:
                raise AssertionError(f"stressor run {n} was not held within {timeout_s} s (runs so far: {self.runs()})")
            time.sleep(0.02)


#: the fault tests run with both step barriers: the one whose tasks count each other, and the one the
#: coordinator counts (run setting `barrier`)
both_barriers = pytest.mark.parametrize("barrier", ["double", "counting"])

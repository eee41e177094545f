"""Every command ends the same way on SIGTERM, SIGINT and SIGHUP (exit 128 + N, no child process, no
cgroup, no partial output), one writer per output (a second is refused naming the first's pid), and a
full disk is one line naming the path and the cause, with nothing torn.

These run the real `bsp-planner` in a subprocess and send it real signals; each waits for an event (a
pool worker started, a stress-ng inside its cgroup, a lock taken), never for a fixed time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bsp_planner.core.filelock import lock_path, output_lock
from bsp_planner.profiling.cgroups import CpuQuotaGroup, detect_hierarchy

from cli_run import run_cli
from synthetic import DATA, write_experiment
from zk_fixtures import remove_groups_under

STOP = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
PREFIX = f"bsp-planner-sigtest-{os.getpid()}"
ROOT = Path(__file__).resolve().parent.parent


STARTED: list[subprocess.Popen] = []  # this test's commands, ended when it ends (pass or fail)


@pytest.fixture(autouse=True)
def end_started_commands():
    """A test that fails half-way must not leave its command running into the next test (a profile run
    still holding its cgroups would look like the next test's). SIGTERM first: the command's own way out
    tidies its children and cgroups; SIGKILL if it does not end."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    _clear_test_cgroups()


def _clear_test_cgroups() -> None:
    """What a failed test's profile run left in the tests' cgroups (a stress-ng, its group) goes too: the
    next test waits for a stress-ng in those groups and would take the leftover for its own."""
    try:
        detect_hierarchy()
    except Exception:  # no cgroups here: nothing can be left in them
        return
    remove_groups_under(PREFIX)


def cli_proc(*args: object, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    STARTED.append(proc)
    return proc


def wait_for(what: str, cond: Callable[[], object], proc: subprocess.Popen, timeout_s: float = 120.0) -> object:
    """Poll `cond` until it is truthy; fail if `proc` ended first or `timeout_s` passed (a hang, not a pace)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (exit {proc.returncode}) before {what}: {out} {err}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no {what} within {timeout_s} s")


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def alive(pid: int) -> bool:
    try:
        state = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


def stop(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, " ".join(err.split())


def hidden_leftovers(folder: Path) -> list[str]:
    """Temporary or lock files a command leaves beside its outputs when it did not clean up."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


# -- a Ctrl-C while the command line is still starting ---------------------------------------------
def importing_numpy(pid: int) -> bool:
    """The process has begun importing the command line's libraries (numpy's extension is mapped)."""
    try:
        return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("how", ["module", "script"])
def test_a_sigint_while_the_command_line_starts_ends_it_without_a_traceback(tmp_path, how):
    # a Ctrl-C during the imports used to raise KeyboardInterrupt inside some library (a traceback) or inside a
    # finaliser, where Python drops it and the command then ran to the end as if never stopped
    script = tmp_path / "bsp-planner"  # what the console script is called
    script.write_text("import sys\nfrom bsp_planner.cli import main\nsys.exit(main())\n")
    cmd = [sys.executable, "-m", "bsp_planner.cli"] if how == "module" else [sys.executable, str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*cmd, "simulate", "-q", "-o", tmp_path / "out"], stderr=subprocess.PIPE, text=True, env=env
    )
    wait_for("the imports", lambda: importing_numpy(proc.pid), proc)
    code, err = stop(proc, signal.SIGINT)
    assert code in (-signal.SIGINT, 128 + signal.SIGINT), err  # ended by the signal, or stopped by the command
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert not (tmp_path / "out").exists()


# -- simulate -j 2: the pool's workers go with their parent -----------------------------------------
@pytest.mark.parametrize("sig", STOP, ids=lambda s: signal.Signals(s).name)
def test_a_signal_during_simulate_with_two_processes_stops_both_workers_and_writes_nothing(tmp_path, sig):
    out = tmp_path / "results"
    proc = cli_proc(
        "simulate", "-m", "perfect", "--steps", "400", "-s", "exppo,mpc,dp,optimum", "-j", "2", "-q", "-o", out
    )
    workers = wait_for("two pool workers", lambda: len(children(proc.pid)) >= 2 and children(proc.pid), proc)
    code, err = stop(proc, sig)
    assert code == 128 + sig, err
    assert f"stopped by {signal.Signals(sig).name}" in err and "Traceback" not in err
    assert [w for w in workers if alive(w)] == []  # the parent waited for them: gone, not reparented
    assert not out.exists()
    assert hidden_leftovers(tmp_path) == []


def test_a_sigkilled_simulate_takes_its_pool_workers_along(tmp_path):
    proc = cli_proc("simulate", "-m", "perfect", "--steps", "400", "-s", "mpc,optimum", "-j", "2", "-q", "-o", tmp_path)
    workers = wait_for("two pool workers", lambda: len(children(proc.pid)) >= 2 and children(proc.pid), proc)
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 30  # the parent-death signal: the kernel delivers it as the parent exits
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [w for w in workers if alive(w)] == []


# -- simulate -o: one writer per folder; a full disk -------------------------------------------------
def test_a_second_simulate_into_a_folder_being_written_is_refused_naming_the_writer(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc"], modes=["perfect"], steps=5)
    out = tmp_path / "out"
    with output_lock(out, "--out"):  # this test's process is the first writer
        code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 2, err
    assert f"pid {os.getpid()}" in err and "--out" in err and str(out) in err
    assert not out.exists()
    code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 0, err
    assert not lock_path(out).exists()


# -- after SIGKILL: the next writer removes what the killed one left, says so, and reads none of it ----
HOLD_STAGED = """
import sys, time
from pathlib import Path
from bsp_planner.core.filelock import output_lock
from bsp_planner.core.outputs import staged_outputs
out = Path(sys.argv[1])
with output_lock(out, "--out"), staged_outputs(out) as stage:
    (stage / "comparison.csv").write_text("half,writ")
    print("ready", flush=True)
    time.sleep(600)
"""

HOLD_INIT = """
import sys, tempfile, time
from pathlib import Path
from bsp_planner.core import leftovers
from bsp_planner.core.filelock import output_lock
place = Path(sys.argv[1]).resolve()
with output_lock(place):
    staging = Path(tempfile.mkdtemp(dir=place.parent, prefix=leftovers.prefix(place, "init")))
    (staging / "experiments").mkdir()
    print("ready", flush=True)
    time.sleep(600)
"""


def sigkilled_holding(script: str, target: Path) -> int:
    """Run `script` on `target` in a real process until it says it holds its half-made output, then SIGKILL
    it (nothing in it can run to tidy up). Returns its pid."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.kill()
    proc.communicate()
    return proc.pid


def test_a_simulate_sigkilled_while_running_leaves_nothing_the_next_one_does_not_remove(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    out = tmp_path / "results"
    proc = cli_proc("simulate", "-m", "perfect", "--steps", "400", "-s", "mpc,optimum", "-q", "-o", out)
    wait_for("its output lock", lambda: lock_path(out).exists(), proc)
    proc.kill()
    proc.communicate()
    assert hidden_leftovers(tmp_path) == [f".{out.name}.lock"]  # what SIGKILL leaves: nothing could run
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc"], modes=["perfect"], steps=5)
    code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 0, err
    assert f"pid {proc.pid}" in err and "killed" in err and f".{out.name}.lock" in err
    assert hidden_leftovers(tmp_path) == []
    code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 0 and "killed" not in err, err  # said once: nothing left to say the next time


def test_results_half_staged_by_a_sigkilled_writer_are_removed_never_published(
    tmp_path, synthetic_profile, monkeypatch, capsys
):
    out = tmp_path / "results"
    pid = sigkilled_holding(HOLD_STAGED, out)
    staged = [n for n in hidden_leftovers(tmp_path) if n.startswith(f".{out.name}.staging.{pid}.")]
    assert len(staged) == 1
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc"], modes=["perfect"], steps=5)
    code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 0, err
    assert f"pid {pid}" in err and staged[0] in err and "none of it a result" in err
    assert hidden_leftovers(tmp_path) == []
    assert "half,writ" not in (out / "comparison.csv").read_text()


HOLD_PUBLISHING = """
import os, sys, time
from pathlib import Path
from bsp_planner.core.filelock import output_lock
from bsp_planner.core.outputs import staged_outputs
out = Path(sys.argv[1])
moved = []
real_replace = os.replace
def replace_then_stop(src, dst):
    real_replace(src, dst)
    moved.append(dst)
    if len(moved) == 1:  # one new file in place, the other still staged: the window a SIGKILL can hit
        print("ready", flush=True)
        time.sleep(600)
os.replace = replace_then_stop
with output_lock(out, "--out"), staged_outputs(out) as stage:
    (stage / "a.csv").write_text("new a")
    (stage / "b.csv").write_text("new b")
"""


def test_results_half_moved_into_place_by_a_sigkilled_writer_are_finished_never_left_mixed(tmp_path):
    from bsp_planner.core.errors import InputWarning

    out = tmp_path / "results"
    out.mkdir()
    (out / "a.csv").write_text("old a")
    (out / "b.csv").write_text("old b")
    (out / "notes.txt").write_text("the user's")
    pid = sigkilled_holding(HOLD_PUBLISHING, out)
    assert (out / "a.csv").read_text() == "new a" and (out / "b.csv").read_text() == "old b"  # mixed, for now
    with pytest.warns(InputWarning, match=f"pid {pid}.*finished moving its complete results"), output_lock(out):
        pass
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        "a.csv": "new a",
        "b.csv": "new b",
        "notes.txt": "the user's",
    }
    assert hidden_leftovers(tmp_path) == []


def test_an_init_sigkilled_half_way_leaves_nothing_that_blocks_the_next_one(tmp_path, monkeypatch, capsys):
    target = tmp_path / "w"
    pid = sigkilled_holding(HOLD_INIT, target)
    assert len(hidden_leftovers(tmp_path)) == 2 and not target.exists()  # its lock file and its half copy
    code, _, err = run_cli(["init", target], monkeypatch, capsys)
    assert code == 0, err
    assert f"pid {pid}" in err and "killed" in err
    assert hidden_leftovers(tmp_path) == []
    assert (target / "experiments" / "default.toml").is_file()


HOLD_INIT_MOVING = """
import os, sys, time
from pathlib import Path
from bsp_planner.inputs.shipped import copy_defaults
moved = []
real_replace = os.replace
def replace_then_stop(src, dst):
    real_replace(src, dst)
    moved.append(dst)
    if len(moved) == 1:  # one top entry in the empty folder, the rest still staged
        print("ready", flush=True)
        time.sleep(600)
os.replace = replace_then_stop
copy_defaults(Path(sys.argv[1]))
"""


def test_an_init_into_an_empty_folder_sigkilled_half_way_is_finished_by_the_next(tmp_path, monkeypatch, capsys):
    target = tmp_path / "w"
    target.mkdir()
    pid = sigkilled_holding(HOLD_INIT_MOVING, target)
    assert len(list(target.iterdir())) == 1  # half a copy
    code, out, err = run_cli(["init", target], monkeypatch, capsys)
    assert code == 0, err  # the same command again: its copy is finished, and that is what was asked for
    assert f"pid {pid}" in err and "finished moving" in err
    assert (target / "experiments" / "default.toml").is_file() and (target / "jobs").is_dir()
    assert "wrote" in out and "run it with" in out
    assert hidden_leftovers(tmp_path) == []
    # a folder some other way not empty is still refused, and left as it is
    code, _, err = run_cli(["init", target], monkeypatch, capsys)
    assert code == 2 and "not empty" in err


def test_only_the_leftovers_of_writers_that_are_gone_are_removed(tmp_path):
    from bsp_planner.core import leftovers

    mine = tmp_path / (leftovers.prefix(tmp_path / "out", "staging") + "abc")
    mine.mkdir()
    (tmp_path / ".out.staging.notapid.abc").mkdir()  # not a name this tool makes: never touched
    assert leftovers.sweep(tmp_path) == []
    assert mine.exists() and (tmp_path / ".out.staging.notapid.abc").exists()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(ended.stdout)
    names = [f".out.tmp.{gone}.x1", f"..staging.{gone}.x2"]  # the second: an output named "." (`-o .`)
    for n in names:
        (tmp_path / n).write_text("half")
    found = leftovers.sweep(tmp_path)
    assert sorted((f.pid, f.name, f.finished) for f in found) == sorted((gone, n, False) for n in names)
    assert not any((tmp_path / n).exists() for n in names) and mine.exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs mounted for the test (root only): a disk that fills for real."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave_bytes: int) -> None:
    """Fill `disk` up to `leave_bytes` free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave_bytes))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_simulate_on_a_disk_that_fills_says_so_in_one_line_and_keeps_the_earlier_results(
    tmp_path, synthetic_profile, small_disk, monkeypatch, capsys
):
    exp = write_experiment(tmp_path, synthetic_profile, strategies=["mpc", "floor"], modes=["perfect"], steps=5)
    out = small_disk / "out"
    code, _, err = run_cli(["simulate", exp, "-q", "-o", out], monkeypatch, capsys)
    assert code == 0, err
    before = snapshot(out)
    fill(small_disk, 8 * 1024)  # room to check the folder, not for the chart
    code, stdout, err = run_cli(["simulate", exp, "-q", "-o", out, "--penalty", "7"], monkeypatch, capsys)
    assert code == 3, err
    assert str(out) in err and "No space left on device" in err and "Traceback" not in err
    assert len(capsys.readouterr().err.splitlines()) <= 1
    assert snapshot(out) == before
    assert hidden_leftovers(small_disk) == []


# -- init: whole or nothing --------------------------------------------------------------------------
def test_init_on_a_nearly_full_disk_leaves_nothing_and_says_why_in_one_line(small_disk):
    fill(small_disk, 200 * 1024)  # the copy is 1.4 MB
    target = small_disk / "w"
    proc = cli_proc("init", target)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert len(err.strip().splitlines()) == 1 or "\n" not in " ".join(err.split()), err
    flat = " ".join(err.split())
    assert str(target) in flat and "No space left on device" in flat and "Traceback" not in flat
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no partial copy, no hidden staging
    (small_disk / "filler").unlink()
    done = subprocess.run([sys.executable, "-m", "bsp_planner.cli", "init", str(target)], capture_output=True)
    assert done.returncode == 0, done.stderr  # a retry is not refused as "not empty"


def test_init_into_a_dangling_symlink_names_the_link(tmp_path, monkeypatch, capsys):
    link = tmp_path / "w"
    link.symlink_to(tmp_path / "nowhere")
    code, _, err = run_cli(["init", link], monkeypatch, capsys)
    assert code == 2 and "symbolic link" in err and "does not exist" in err and "File exists" not in err, err


def test_a_second_init_of_the_same_folder_is_refused_naming_the_first(tmp_path, monkeypatch, capsys):
    target = tmp_path / "w"
    with output_lock(target):
        code, _, err = run_cli(["init", target], monkeypatch, capsys)
    assert code == 2 and f"pid {os.getpid()}" in err, err
    assert not target.exists()


# -- profile run: stress-ng and its cgroup go; one writer per profile -------------------------------
def _cgroups_ok() -> str | None:
    if shutil.which("stress-ng") is None:
        return "stress-ng is not installed"
    try:
        with CpuQuotaGroup("probe", millicores=500, prefix=PREFIX):
            pass
    except Exception as exc:  # any reason is a reason to skip
        return f"no cgroups here: {exc}"
    return None


needs_cgroups = pytest.mark.skipif(_cgroups_ok() is not None, reason=str(_cgroups_ok()))

SLOW_JOB = f"""name = "slow"

[[task]]
name = "spin"
stressor = "cpu"
ops_per_unit = 100000
series = {{ file = "{DATA}/datasets/nyc_taxi.csv", first_row = 0, last_row = 1998 }}
"""


def groups_with_processes() -> list[int]:
    """Pids inside the tests' cgroups (the profiled stress-ng), once there are any."""
    pids: list[int] = []
    # os.walk, not rglob: a group the command removes while we look is skipped, not an error
    for folder, _, files in os.walk(detect_hierarchy().root / PREFIX):
        if "cgroup.procs" in files:
            try:
                pids += [int(p) for p in (Path(folder) / "cgroup.procs").read_text().split()]
            except OSError:
                pass
    return pids


def leftover_groups() -> list[str]:
    parent = detect_hierarchy().root / PREFIX
    return sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.exists() else []


def profile_cmd(tmp_path: Path) -> list[object]:
    job = tmp_path / "job.toml"
    job.write_text(SLOW_JOB)
    out = tmp_path / "p" / "profile.csv"
    return ["profile", "run", "--job", job, "--out", out, "--cpu", "250,500", "--workloads", "10,20", "--repeats", "1"]


@needs_cgroups
@pytest.mark.parametrize("sig", STOP, ids=lambda s: signal.Signals(s).name)
def test_a_signal_during_profile_run_kills_stress_ng_and_removes_its_cgroup(tmp_path, sig):
    proc = cli_proc(*profile_cmd(tmp_path), "--cgroup-prefix", PREFIX, "--timeout", "600")
    inside = wait_for("a stress-ng inside its cgroup", groups_with_processes, proc)
    code, err = stop(proc, sig)
    assert code == 128 + sig, err
    assert "Traceback" not in err
    assert [p for p in inside if alive(p)] == []
    assert leftover_groups() == []
    profile = tmp_path / "p" / "profile.csv"
    assert profile.read_text().endswith("\n")  # the header alone, or whole rows: nothing torn
    assert hidden_leftovers(profile.parent) == []


@needs_cgroups
def test_a_sigkilled_profile_run_leaves_no_stress_ng(tmp_path):
    proc = cli_proc(*profile_cmd(tmp_path), "--cgroup-prefix", PREFIX, "--timeout", "600")
    inside = wait_for("a stress-ng inside its cgroup", groups_with_processes, proc)
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 30
    while any(alive(p) for p in inside) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [p for p in inside if alive(p)] == []
    assert hidden_leftovers(tmp_path / "p") == [".profile.csv.lock"]  # nothing in it could run to tidy up
    # the next run on the same profile removes what it left (its lock file, its empty cgroup) and says so
    again = cli_proc(*profile_cmd(tmp_path), "--cgroup-prefix", PREFIX, "--timeout", "600")
    wait_for("the next run's stress-ng inside its cgroup", groups_with_processes, again)
    code, err = stop(again, signal.SIGTERM)
    assert code == 143, err
    assert f"pid {proc.pid}" in err and "killed" in err
    assert hidden_leftovers(tmp_path / "p") == []
    assert leftover_groups() == []


@needs_cgroups
def test_two_profile_runs_on_one_profile_the_second_is_refused_naming_the_first(tmp_path):
    cmd = profile_cmd(tmp_path)
    first = cli_proc(*cmd, "--cgroup-prefix", PREFIX, "--timeout", "600")
    wait_for("a stress-ng inside its cgroup", groups_with_processes, first)
    second = cli_proc(*cmd, "--cgroup-prefix", PREFIX, "--timeout", "600")
    out, err = second.communicate(timeout=60)
    flat = " ".join(err.split())
    assert second.returncode == 2, flat
    assert f"pid {first.pid}" in flat and "--out" in flat
    code, err = stop(first, signal.SIGTERM)
    assert code == 143, err
    rows = (tmp_path / "p" / "profile.csv").read_text().splitlines()[1:]
    assert len(rows) == len(set(rows))
    assert leftover_groups() == []


# -- zk start --------------------------------------------------------------------------------------
@pytest.mark.parametrize("port", ["70000", "-1", "0"])
def test_zk_start_refuses_a_port_out_of_range_before_starting_anything(port, tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(["zk", "start", "--port", port, "--data-dir", tmp_path / "zk"], monkeypatch, capsys)
    assert code == 2 and "--port" in err and "1 to 65535" in err, err
    assert not (tmp_path / "zk").exists()


def test_zk_start_refuses_a_data_dir_that_is_a_file(tmp_path, monkeypatch, capsys):
    f = tmp_path / "zkdata"
    f.write_text("")
    code, _, err = run_cli(["zk", "start", "--port", "2999", "--data-dir", f], monkeypatch, capsys)
    assert code == 2 and "--data-dir" in err and "is a file" in err, err


def test_a_signal_while_zk_start_waits_stops_the_server_process(tmp_path):
    # a stand-in JVM that never answers, so that the signal surely comes while `zk start` waits
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\nexec sleep 600\n")
    java.chmod(0o755)
    data = tmp_path / "zk"
    pid_file = data / "server.pid"
    from bsp_planner.runtime.zkserver import free_port

    stand_in = {"JAVA": str(java), "BSP_PLANNER_ZK_CLASSPATH": "unused"}
    proc = cli_proc("zk", "start", "--port", free_port(), "--data-dir", data, "--wait", "300", env=stand_in)
    wait_for("the server's pid file", lambda: pid_file.is_file() and pid_file.read_text().strip(), proc)
    pid = int(pid_file.read_text())
    code, err = stop(proc, signal.SIGTERM)
    assert code == 143, err
    assert not alive(pid)
    assert not pid_file.exists()

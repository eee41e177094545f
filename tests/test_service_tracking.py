"""Services tracked as tasks are: each in a cgroup of its own (a daemon it double-forks ends with the run),
its output capped, readiness checks that cannot hang or be fooled, and what can be checked before a run
checked before it (exit 2, no run folder).

The runner tests start real processes in real cgroups (the tests' own prefix) without ZooKeeper; the live
test runs a whole job with a daemonising shell service beside the usual TCP server.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_services import alive, service_experiment, service_pids

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import Service, load_job
from bsp_planner.profiling.cgroups import detect_hierarchy
from bsp_planner.runtime.backends.local_services import LocalServiceRunner
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed
from bsp_planner.runtime.services import Services
from bsp_planner.runtime.worker import OUTPUT_KEEP_BYTES

from cli_run import run_cli
from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks, settings

# A shell service that daemonises as a real one does: the first shell exits 0 at once; the daemon, in a
# session of its own (so no signal to the first shell's process group reaches it), writes its pid and sleeps.
DAEMON = 'setsid sh -c "echo \\$\\$ > {pidfile}; exec sleep 600" </dev/null >/dev/null 2>&1 & echo forked'


def services_group(run_id: str) -> Path:
    return detect_hierarchy().root / f"{PREFIX}.services.{run_id}"


@pytest.fixture
def runner(tmp_path):
    """A local service runner in the tests' own cgroup prefix; nothing of it may outlive the test."""
    run_id = f"unit-{os.getpid()}-{time.monotonic_ns()}"
    r = LocalServiceRunner(tmp_path / "logs", str(tmp_path), group_parent=f"{PREFIX}.services.{run_id}")
    yield r
    r.stop(list(r.procs))
    assert not services_group(run_id).exists(), "a service's group outlived its stop"


def services(runner, tmp_path, *svcs: Service) -> Services:
    return Services(svcs, {s.name: 0 for s in svcs}, str(tmp_path), str(tmp_path), runner)


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def pid_in(path: Path) -> int:
    wait_for(lambda: path.is_file() and path.read_text().strip().isdigit())
    return int(path.read_text())


# -- a service's processes and output ---------------------------------------------------------------------
def test_a_daemonising_service_runs_on_and_its_daemon_ends_with_the_stop(runner, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    sv = services(runner, tmp_path, Service("daemon", ("/bin/sh", "-c", DAEMON.format(pidfile=pidfile))))
    sv.start_all()
    daemon = pid_in(pidfile)
    wait_for(lambda: runner.procs["daemon"].proc.poll() is not None)  # the first shell is gone, exit 0
    assert runner.procs["daemon"].proc.returncode == 0 and alive(daemon)
    assert runner.exit_code("daemon") is None  # its daemon runs on: the service has not ended
    sv.check()
    assert sv.running == ["daemon"] and not sv.ended
    sv.stop_all()
    wait_for(lambda: not alive(daemon), 30)


def test_a_flooding_service_leaves_a_capped_log(runner, tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(
        "import sys, time\nsys.stdout.write('first line\\n')\n"
        "for i in range(40000):\n    sys.stdout.write(f'flood {i:08d} ' + 'x' * 100 + '\\n')\n"
        "sys.stdout.write('last line\\n'); sys.stdout.flush(); time.sleep(600)\n"
    )
    sv = services(runner, tmp_path, Service("flood", ("{python}", str(script)), ready_log_line="^last line$"))
    sv.start_all()  # ready once its last line came through: everything it printed has been read
    assert runner.procs["flood"].output.total > 4_000_000
    sv.stop_all()
    log = (tmp_path / "logs" / "flood.log").read_bytes()
    assert len(log) < 2 * OUTPUT_KEEP_BYTES + 1000, len(log)
    assert b"first line" in log and log.rstrip().endswith(b"last line")
    assert b"bytes of its output left out" in log


# -- readiness ------------------------------------------------------------------------------------------------
def test_a_port_another_program_holds_never_makes_a_service_ready(runner, tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        sv = services(
            runner, tmp_path, Service("idle", ("sleep", "600"), ready_tcp_port=str(port), ready_timeout_s=1.5)
        )
        with pytest.raises(RunFailed, match=f"service idle did not listen on port {port} itself within 1.5 s") as info:
            sv.start_all()
    assert f"port {port} is held by another program (pid {os.getpid()}, " in str(info.value), str(info.value)


def test_a_service_is_ready_once_it_listens_on_its_port_itself(runner, tmp_path):
    script = tmp_path / "listen.py"
    script.write_text(
        "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen()\ntime.sleep(600)\n"
    )
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sv = Services(
        (Service("srv", ("{python}", str(script), "{port}"), ready_tcp_port="{port}", ready_timeout_s=60),),
        {"srv": port},
        str(tmp_path),
        str(tmp_path),
        runner,
    )
    sv.start_all()
    assert runner.ready("srv", port, None)


BACKTRACKS = "^(a|a)+$"  # against a long line of a's that does not end in one: 2^n ways to fail


def backtracking_service(tmp_path: Path, timeout_s: float) -> Service:
    return Service(
        "chatty",
        ("{python}", "-c", "import time; print('a' * 64 + '!', flush=True); time.sleep(600)"),
        ready_log_line=BACKTRACKS,
        ready_timeout_s=timeout_s,
    )


def test_a_backtracking_log_line_gives_up_at_ready_timeout_s(runner, tmp_path):
    sv = services(runner, tmp_path, backtracking_service(tmp_path, 1.5))
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match="did not print a line matching .* within 1.5 s.*backtracks"):
        sv.start_all()
    assert time.monotonic() - t0 < 30  # not the 2^64 steps of the match


def test_a_stop_is_answered_during_a_backtracking_match(runner, tmp_path):
    sv = services(runner, tmp_path, backtracking_service(tmp_path, 120))
    stop = threading.Event()
    matching = threading.Timer(1.0, stop.set)  # asked while the match runs (it needs far more than 120 s)

    def check_stop() -> None:
        if stop.is_set():
            raise KeyboardInterrupt

    matching.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            sv.start_all(check_stop)
    finally:
        matching.cancel()
    assert time.monotonic() - t0 < 60  # answered, not held until ready_timeout_s


# -- what is checked before a run -----------------------------------------------------------------------------
def job_with_service(tmp_path: Path, table: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f'[[task]]\nname = "a"\ncommand = ["x"]\n\n[[service]]\nname = "s"\n{table}\n')
    return path


@pytest.mark.parametrize(
    "table, field, expected",
    [
        ('command = ["x"]\nready = { tcp_port = "99999" }', "service[0].ready.tcp_port", "1..65535"),
        ('command = ["x"]\nready = { tcp_port = "0" }', "service[0].ready.tcp_port", "1..65535"),
        ('command = ["x"]\nready = { tcp_port = "{port:a}" }', "service[0].ready.tcp_port", "does not open"),
        ('command = ["x"]\nenv = { A = "1\\u0000" }', "service[0].env", "NUL byte"),
    ],
)
def test_a_service_field_no_run_could_use_is_refused_on_load(tmp_path, table, field, expected):
    with pytest.raises(InputError) as info:
        load_job(job_with_service(tmp_path, table))
    assert info.value.field == field and expected in str(info.value) and "job.toml" in str(info.value), str(info.value)


def test_a_ready_port_of_its_own_or_a_fixed_number_loads(tmp_path):
    for port in ('"{port}"', '"{port:s}"', '" 8080 "', "8080"):
        load_job(job_with_service(tmp_path, f'command = ["x"]\nready = {{ tcp_port = {port} }}'))


@pytest.mark.parametrize("program", ["missing", "not-executable", "directory", "not-on-path"])
def test_a_service_program_that_cannot_run_stops_run_with_exit_2_and_no_run_folder(
    tmp_path, monkeypatch, capsys, program
):
    exp = service_experiment(tmp_path / "exp")
    job = tmp_path / "exp" / "job.toml"
    (tmp_path / "exp" / "plain.sh").write_text("#!/bin/sh\nsleep 600\n")  # no execute bit
    (tmp_path / "exp" / "adir").mkdir()
    command = {
        "missing": '["./no-such-broker", "{port}"]',
        "not-executable": '["./plain.sh"]',
        "directory": '["./adir"]',
        "not-on-path": '["no-such-broker-on-path"]',
    }[program]
    text = job.read_text()
    start = text.index("command = ", text.index("[[service]]"))
    job.write_text(text[:start] + f"command = {command}" + text[text.index("\n", start) :])
    code, out, err = run_cli(
        ["run", "-e", exp, "--runs-dir", tmp_path / "runs", "--run-id", "bad"], monkeypatch, capsys
    )
    assert code == 2, out + err
    assert "service[0].command" in err and "service 'svc' runs" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs" / "bad").exists()


# -- live -----------------------------------------------------------------------------------------------------
@needs_tasks
def test_a_daemonising_service_leaves_no_process_after_the_run(tmp_path, zk_server, creds_file, reap_runs):
    exp = service_experiment(tmp_path / "exp", steps=3)
    pidfile = tmp_path / "daemon.pid"
    job = tmp_path / "exp" / "job.toml"
    shell = DAEMON.format(pidfile=pidfile)  # a TOML literal string: as written
    job.write_text(job.read_text() + f'\n[[service]]\nname = "daemon"\ncommand = ["/bin/sh", "-c", \'{shell}\']\n')
    result = Coordinator(settings(exp, zk_server, creds_file), "svc-daemon", tmp_path / "runs").run()
    assert result.status == "finished"
    daemon = int(pidfile.read_text())
    wait_for(lambda: not alive(daemon), 30)
    (pid,) = service_pids(tmp_path / "exp")
    assert not alive(pid)
    assert not services_group("svc-daemon").exists()
    assert_nothing_left("svc-daemon")


def test_a_killed_coordinators_daemon_is_ended_by_the_resume(tmp_path):
    """A coordinator killed outright leaves a daemonised grandchild (no parent-death signal reaches it); the
    run's resume removes the services' groups it left, and everything in them, before it starts anything."""
    from bsp_planner.runtime.backends.local import LocalBackend

    pidfile = tmp_path / "daemon.pid"
    backend = LocalBackend("svc-stale", tmp_path / "logs", cgroup_prefix=PREFIX)
    runner = backend.service_runner(tmp_path / "logs", str(tmp_path))
    Services(
        (Service("daemon", ("/bin/sh", "-c", DAEMON.format(pidfile=pidfile))),), {}, "", str(tmp_path), runner
    ).start_all()
    daemon = pid_in(pidfile)
    runner.procs.clear()  # as a killed coordinator would: nobody stops it
    assert alive(daemon)
    assert backend.cleanup_stale() == [f"{PREFIX}.services.svc-stale/daemon"]
    wait_for(lambda: not alive(daemon), 30)
    assert not services_group("svc-stale").exists()


@needs_tasks
def test_a_killed_coordinators_scratch_folder_is_removed_by_the_resume_and_no_other_runs(tmp_path):
    """The tasks' working directory of a coordinator killed outright stays in the temp dir; the run's resume
    removes it, and never the folder of a run whose id only begins the same ("svc-scratch-2")."""
    import tempfile

    from bsp_planner.runtime.backends.local import LocalBackend

    left = Path(tempfile.mkdtemp(prefix=f"{PREFIX}.live.svc-scratch-"))  # what a killed coordinator leaves
    (left / "stress-ng-scratch").write_text("x")
    other = Path(tempfile.mkdtemp(prefix=f"{PREFIX}.live.svc-scratch-2-"))
    try:
        resumed = LocalBackend("svc-scratch", tmp_path / "logs", cgroup_prefix=PREFIX)
        own = Path(resumed._cwd())
        assert own.name.startswith(f"{PREFIX}.live.svc-scratch-")  # the same name as its run's groups
        assert resumed.cleanup_stale() == [str(left)]
        assert not left.exists() and own.is_dir() and other.is_dir()
        resumed.close()
        assert not own.exists()
        assert_nothing_left("svc-scratch")
    finally:
        shutil.rmtree(left, ignore_errors=True)
        other.rmdir()


CRASHES_ONCE = """
import os, socket, sys, time
port, state = int(sys.argv[1]), sys.argv[2]
if not os.path.exists(state + ".first"):  # the first start: a daemon of its own binds the port
    open(state + ".first", "w").close()
    if os.fork() == 0:
        os.setsid()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        open(state + ".daemon", "w").write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    while not os.path.exists(state + ".crash"):
        time.sleep(0.02)
    sys.exit(1)
time.sleep(600)  # restarted: it never binds the port
"""


def test_a_restarted_service_is_not_ready_on_a_port_its_crashed_start_held(runner, tmp_path):
    script, state = tmp_path / "crashes_once.py", tmp_path / "state"
    script.write_text(CRASHES_ONCE)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sv = Services(
        (
            Service(
                "flaky",
                ("{python}", str(script), "{port}", str(state)),
                ready_tcp_port="{port}",
                ready_timeout_s=2,
                on_failure="restart",
                max_restarts=1,
            ),
        ),
        {"flaky": port},
        str(tmp_path),
        str(tmp_path),
        runner,
    )
    sv.start_all()  # ready: its daemon listens on the port
    daemon = pid_in(Path(f"{state}.daemon"))
    Path(f"{state}.crash").touch()
    wait_for(lambda: runner.exit_code("flaky") == 1)
    with pytest.raises(RunFailed, match=f"service flaky did not listen on port {port} itself within 2 s"):
        sv.check()  # restarted: the crashed start's daemon went with it, and the new start never listens
    assert not alive(daemon)


@needs_tasks
def test_sigterm_while_a_backtracking_log_line_is_matched_stops_the_run_at_once(
    tmp_path, zk_server, creds_file, reap_runs
):
    """The coordinator matches the pattern against a line that takes it far longer than ready_timeout_s; a
    SIGTERM meanwhile stops the run cleanly (exit 128 + SIGTERM) without waiting for the match."""
    exp = service_experiment(tmp_path / "exp", ready=f'{{ log_line = "{BACKTRACKS}" }}', timeout=600)
    service = tmp_path / "exp" / "service.py"  # prints the line that backtracks once it listens
    service.write_text(service.read_text().replace('print("listening on", port', "print('a' * 64 + '!'"))
    runs, run_id = tmp_path / "runs", "svc-backtrack"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", "run", "-e", str(exp), "--runs-dir", str(runs), "--run-id", run_id]
        + ["--zookeeper", zk_server.hosts, "--zk-auth-file", str(creds_file), "--cgroup-prefix", PREFIX, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        log = runs / run_id / "logs" / "svc.log"
        wait_for(lambda: log.is_file() and "a" * 64 + "!" in log.read_text(), 180)  # being matched now
        (pid,) = service_pids(tmp_path / "exp")
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        stopped_s = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert stopped_s < 60, stopped_s  # not the 600 s of ready_timeout_s, nor the match's 2^64 steps
    assert not alive(pid)
    assert not services_group(run_id).exists()

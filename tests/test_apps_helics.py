"""The HELICS ring federation (bsp_planner/apps/helics) without the planner: its model, four real federates
and a real broker on the loopback interface (local sessions), the federate alone under a profiling session,
the broker wrapper, and the shipped job, experiment and profile."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from bsp_planner.apps.helics import broker as broker_app
from bsp_planner.apps.helics.local import run_federation
from bsp_planner.apps.helics.model import Ring, serial_workloads
from bsp_planner.core.leftovers import running
from bsp_planner.inputs.placeholders import choose_ports
from bsp_planner.inputs.shipped import data_dir
from bsp_planner.task.profiling import PROFILE_ENV, ProfilingPlan, write_plan

from cli_run import run_cli

REPO = Path(__file__).resolve().parent.parent
needs_helics = pytest.mark.skipif(
    broker_app.find_broker() is None, reason="the helics wheel is not installed (pip install 'bsp-planner[cosim]')"
)
FAST = {"ops_per_unit": 2000}  # about 0.2 ms of CPU per work unit: the federation's logic, not its load


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def _federate(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bsp_planner.apps.helics.federate", *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- the model ------------------------------------------------------------------------------------------
def test_the_hotspot_moves_from_federate_0_to_the_last_and_no_work_is_lost():
    ring = Ring(federates=4, cells=10)
    w = serial_workloads(ring, 31)
    assert np.allclose(w.sum(axis=1), ring.federates * ring.base + ring.hotspot)
    hot = w.argmax(axis=1)
    assert hot[0] == 0 and hot[10] == 1 and hot[20] == 2 and hot[30] == 3
    assert (np.diff(hot) >= 0).all()  # it only moves forward
    # uneven: in every step the busiest federate has well over an even share of the work (1.79x when the
    # hotspot straddles two federates, 3.2x when it sits on one)
    assert (w.max(axis=1) >= 1.75 * w.mean(axis=1)).all()
    assert w.max() >= 3 * w.mean()


@pytest.mark.parametrize(
    "field, value, message",
    [("federates", 0, "federates: expected at least 1"), ("speed", 11, "speed: expected 0..cells (10)")],
)
def test_bad_ring_parameters_name_the_parameter(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Ring(**{field: value}).check()


# -- the real federation, no planner --------------------------------------------------------------------
@needs_helics
def test_four_federates_and_a_broker_run_the_ring_and_report_the_models_workloads(tmp_path):
    steps = 6
    result = run_federation(tmp_path, 4, steps, FAST, timeout_s=120)
    assert result["codes"] == [0, 0, 0, 0], [(tmp_path / f"f{i}.log").read_text() for i in range(4)]
    assert result["broker_code"] == 0
    expected = serial_workloads(Ring(federates=4), steps)
    for i, reports in enumerate(result["reports"]):
        assert [r["step"] for r in reports] == list(range(steps))  # every step reported once, in order
        assert [r["workload"] for r in reports] == expected[:, i].tolist()
        assert all(r["task"] == f"f{i}" and r["wall_s"] > 0 for r in reports)
    for timings in result["timings"]:
        assert [t["step"] for t in timings] == list(range(steps))
        assert all(t["end"] >= t["start"] and t["grant_s"] >= 0 for t in timings)
    # the wall time runs from the first compute to the last, over every federate
    assert result["wall_s"] >= max(t["end"] - t["start"] for per in result["timings"] for t in per)


@needs_helics
def test_the_federation_runs_when_other_programs_hold_the_ports_the_broker_would_hand_out(tmp_path, monkeypatch):
    """A ZeroMQ broker on port P hands its federates P + 5, P + 6... whether or not they are free. The
    federates bind ports chosen free instead, so a program holding those ports does not stop the run."""
    import bsp_planner.apps.helics.local as local_app

    held: list[socket.socket] = []

    def choose_then_take_the_brokers_range(names):
        ports = choose_ports(names)
        for port in range(ports["broker"] + 2, ports["broker"] + 12):
            if port in ports.values():
                continue
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
                s.listen()
                held.append(s)
            except OSError:
                s.close()  # some other program holds it: held all the same
        return ports

    monkeypatch.setattr(local_app, "choose_ports", choose_then_take_the_brokers_range)
    try:
        result = run_federation(tmp_path, 4, 2, FAST, timeout_s=120)
    finally:
        for s in held:
            s.close()
    assert result["codes"] == [0, 0, 0, 0], [(tmp_path / f"f{i}.log").read_text() for i in range(4)]


def test_a_federate_binds_the_port_its_run_chose_for_it(monkeypatch):
    from bsp_planner.apps.helics.federate import parse_args

    monkeypatch.setenv("BSP_PORT", "41234")
    args = parse_args(["--index", "0", "--federates", "2", "--broker-port", "41000", "--steps", "1"])
    assert args.port == 41234
    args = parse_args(["--index", "0", "--federates", "2", "--broker-port", "41000", "--steps", "1", "--port", "42"])
    assert args.port == 42


def _broker_wrapper(tmp_path: Path) -> tuple[subprocess.Popen, int, Path]:
    """The broker wrapper for a federation of 1 on a free port: (process, port, its log)."""
    port = choose_ports(["broker"])["broker"]
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bsp_planner.apps.helics.broker", "--federates", "1", "--port", str(port)],
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, port, log


@needs_helics
def test_the_broker_outlives_its_federation_until_it_is_stopped(tmp_path):
    """A run stops its services after the tasks: a broker ending with its federation would look like a
    service that died. The wrapper keeps running after the broker's normal end, until SIGTERM."""
    broker, port, log = _broker_wrapper(tmp_path)
    try:
        fed = _federate(
            "--index", "0", "--federates", "1", "--broker-port", str(port), "--steps", "2", "--ops-per-unit", "10"
        )
        assert fed.returncode == 0, fed.stderr
        deadline = time.monotonic() + 60
        while "the federation has finished" not in log.read_text():
            assert broker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert f"broker ready on port {port}" in log.read_text()
        assert broker.poll() is None  # still running: the run decides when it stops
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()


@needs_helics
def test_a_sigkilled_broker_wrapper_leaves_no_helics_broker_holding_its_ports(tmp_path):
    wrapper, port, log = _broker_wrapper(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while f"broker ready on port {port}" not in log.read_text():
            assert wrapper.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        (broker,) = [
            int(c) for t in Path(f"/proc/{wrapper.pid}/task").iterdir() for c in (t / "children").read_text().split()
        ]
        wrapper.kill()
        wrapper.wait()
        while running(broker):
            assert time.monotonic() < deadline, "helics_broker outlived its wrapper"
            time.sleep(0.05)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()


def test_without_the_helics_broker_program_the_wrapper_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(broker_app, "find_broker", lambda: None)
    assert broker_app.main(["--federates", "2", "--port", "40000"]) == 2
    assert "pip install 'bsp-planner[cosim]'" in capsys.readouterr().err


# -- the federate alone -----------------------------------------------------------------------------------
def test_under_the_profiler_a_federate_runs_alone_at_the_assigned_workloads(tmp_path):
    """No broker, no HELICS: the profiler's workloads, one after the other, reported as assigned."""
    reports = tmp_path / "reports.jsonl"
    plan = ProfilingPlan("f2", (3.0, 7.5), str(reports), warmup_steps=1, measure_steps=2, min_measure_s=0.0)
    p = _federate(
        "--index", "2", "--federates", "4", "--ops-per-unit", "100",
        **{PROFILE_ENV: str(write_plan(tmp_path / "plan.json", plan)), "BSP_TASK": "f2"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in reports.read_text().splitlines()]
    assert [(r["step"], r["workload"]) for r in got] == [(0, 3.0), (1, 3.0), (2, 3.0), (3, 7.5), (4, 7.5), (5, 7.5)]


@needs_helics
def test_a_restarted_federate_refuses_to_rejoin_its_federation(tmp_path):
    p = _federate(
        "--index", "0", "--federates", "2", "--broker-port", "40000", "--steps", "3", BSP_INCARNATION="1"
    )  # fmt: skip
    assert p.returncode == 1
    assert "a HELICS federate cannot rejoin it" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--index", "4", "--federates", "4", "--broker-port", "1", "--steps", "1"], "--index: expected 0..3, got 4"),
        (["--index", "0", "--federates", "4", "--steps", "1"], "--broker-port: expected the broker's TCP port"),
        (["--index", "0", "--federates", "4", "--broker-port", "1"], "--steps: required"),
        (["--index", "0", "--federates", "4", "--broker-port", "1", "--steps", "1", "--speed", "99"], "--speed"),
        (
            ["--shape", "star", "--index", "0", "--federates", "1", "--broker-port", "1", "--steps", "1"],
            "--federates: a star needs a hub and at least one leaf, got 1",
        ),
        (
            ["--shape", "star", "--index", "5", "--federates", "5", "--broker-port", "1", "--steps", "1"],
            "--index: expected 0..4, got 5",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(args, message):
    p = _federate(*args)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr


# -- the shipped job, experiment and profile ----------------------------------------------------------------
def test_the_shipped_job_runs_one_federate_of_4_per_task_against_its_broker_service():
    job = tomllib.loads((data_dir() / "jobs" / "helics-4.toml").read_text())
    assert job["sync"] == "observe"  # HELICS synchronises the federates
    (broker,) = job["service"]
    argv = broker["command"]
    assert argv[argv.index("--federates") + 1] == "4" and argv[argv.index("--port") + 1] == "{port}"
    indexes = []
    for t in job["task"]:
        argv = t["process"]
        assert argv[argv.index("--federates") + 1] == "4"
        assert argv[argv.index("--broker-port") + 1] == f"{{port:{broker['name']}}}"
        indexes.append(int(argv[argv.index("--index") + 1]))
        assert t["name"] == f"f{indexes[-1]}"
    assert sorted(indexes) == [0, 1, 2, 3]


def test_the_shipped_profile_covers_every_federate_over_the_experiments_range():
    from bsp_planner.inputs.profiles import load_profile

    exp = tomllib.loads((data_dir() / "experiments" / "helics-4.toml").read_text())
    job = tomllib.loads((data_dir() / "jobs" / "helics-4.toml").read_text())
    profile = load_profile(data_dir() / "profiles" / "helics-4" / "profile.csv")
    profile.check_job([t["name"] for t in job["task"]])
    lo, hi = exp["workload_range"]
    for p in profile.tasks.values():
        assert p.workloads[0] <= lo and p.workloads[-1] >= hi
        assert p.cpu_millicores[0] <= exp["cpu"]["min_millicores"] and p.cpu_millicores[-1] >= 1000
        d = p.duration_s  # more CPU never makes a step much slower; more work never faster
        assert (d[:, 1:] <= d[:, :-1] * 1.25 + 0.02).all()
        assert (d[1:, :] >= d[:-1, :]).all()
    # the model's workloads stay inside the experiment's range
    w = serial_workloads(Ring(federates=4), exp["steps"])
    assert lo <= w.min() and w.max() <= hi


def test_the_shipped_trace_is_the_workloads_the_federates_report():
    """`simulate helics-4 --actual traces/helics-4` replays what a live run of the federation reports."""
    expected = serial_workloads(Ring(federates=4), 30)
    for i in range(4):
        lines = (data_dir() / "traces" / "helics-4" / f"f{i}.csv").read_text().split()
        assert lines[0] == "workload"
        assert np.allclose([float(x) for x in lines[1:]], expected[:, i], rtol=0, atol=1e-6)


def test_recreating_the_shipped_federates_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    """A HELICS federate cannot rejoin its federation: `run --reconfigure recreate` would kill it at the first
    reconfiguration, so the run refuses it up front, naming the federates (no ZooKeeper reached)."""
    code, _, err = run_cli(
        ["run", "--experiment", "helics-4", "--planner", "mpc", "--online", "--reconfigure", "recreate",
         "--zookeeper", "127.0.0.1:1", "--runs-dir", tmp_path / "runs"],
        monkeypatch,
        capsys,
    )  # fmt: skip
    assert code == 2
    assert "--reconfigure recreate would stop and restart tasks f0, f1, f2, f3" in err and "Traceback" not in err

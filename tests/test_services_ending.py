"""Services that end with the application (issue 31): a service's exit with status 0 at the application's
end is not a failure; a service declared `ends_run = true` (the application's driver) ends the run with
it; a service that ends while the application goes on still fails the run; the wheel's own
`helics_broker`, which exits when its federation has finished, runs as a service with no wrapper.

The application here is a real one of its own synchronisation (observe mode): a "world" service, a TCP
server that drives two process tasks through STEPS steps (it sends each its step, waits for both to
answer) and then exits 0, at once, as a co-simulation scheduler does; each task reports its step with
bsp_planner.task. The task answers the world from inside its step, so the world can exit before the
tasks' last reports reach ZooKeeper: the race the issue saw fail 1 run of 19.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed

from cli_run import run_cli
from zk_fixtures import EXPERIMENT, PREFIX, assert_nothing_left, needs_tasks, settings, write_profile

STEPS = 3
BOUND = 50  # the experiment's `steps`: an upper bound, the application ends first

# argv: port, steps, tasks, then "linger" to stay alive after the last step (a service that ends later)
WORLD = """
import socket, sys, time
port, steps, tasks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen()
conns = []
while len(conns) < tasks:
    c, _ = srv.accept()
    if c.recv(5) == b"hello":
        conns.append(c.makefile("rw"))
    else:
        c.close()  # the coordinator's readiness probe
for step in range(steps):
    for c in conns:
        c.write(f"step {step}\\n")
        c.flush()
    for c in conns:
        assert c.readline().strip() == f"done {step}"
for c in conns:
    c.write("end\\n")
    c.flush()
print("the world has ended", flush=True)
if sys.argv[4:] == ["linger"]:
    time.sleep(600)
"""

# argv: port, then "stay" to keep running after the world ended (only the driver's end stops it), or "more"
# to run one more step of its own after the world ended
TASK = """
import os, socket, sys, time
from bsp_planner import task
port = int(sys.argv[1])
with task.join() as session:
    deadline = time.monotonic() + 60
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    sock.sendall(b"hello")
    world = sock.makefile("rw")
    for line in world:
        if line.strip() == "end":
            break
        step = int(line.split()[1])
        # the load swings between the two tasks every step, so a planner moves CPU between them
        workload = 40 if (step + (os.environ["BSP_TASK"] == "b")) % 2 == 0 else 10
        with session.step(step, workload=workload):
            sum(range(10000 * workload))
            world.write(f"done {step}\\n")  # before the report: the world may end first
            world.flush()
    if sys.argv[2:] == ["more"]:
        time.sleep(0.5)
        with session.step(step + 1, workload=20):
            pass
if sys.argv[2:] == ["stay"]:
    time.sleep(600)
"""


def world_experiment(
    folder: Path, *, world_args: str = "", task_args: str = "", service_extra: str = "", steps: int = STEPS
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "world.py").write_text(WORLD)
    (folder / "task.py").write_text(TASK)
    job = 'name = "world"\nsync = "observe"\n\n[[service]]\nname = "world"\n'
    job += f'command = ["{{python}}", "world.py", "{{port}}", "{steps}", "2"{world_args}]\n'
    job += 'ready = { tcp_port = "{port}" }\n' + service_extra
    for name in "ab":
        job += f'\n[[task]]\nname = "{name}"\nprocess = ["{sys.executable}", "task.py", "{{port:world}}"{task_args}]\n'
    (folder / "job.toml").write_text(job)
    write_profile(folder / "profile.csv", tasks=("a", "b"))
    exp = folder / "exp.toml"
    exp.write_text(
        EXPERIMENT.format(steps=BOUND, penalty=0.001)
        .replace("budget_millicores = 1500", "budget_millicores = 1000")
        .replace('output = "out"', 'output = "out"\nonline = true')
    )
    return exp


def logged_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "steps.jsonl").read_text().splitlines()]


@needs_tasks
@pytest.mark.usefixtures("reap_runs")
@pytest.mark.parametrize("attempt", range(20))
def test_a_service_that_exits_0_at_the_applications_end_completes_the_run(tmp_path, zk_server, creds_file, attempt):
    exp = world_experiment(tmp_path / "exp")
    run_id = f"world-end-{attempt}"
    result = Coordinator(settings(exp, zk_server, creds_file, reconfigure="in-place"), run_id, tmp_path / "runs").run()
    assert result.status == "finished"
    assert logged_steps(result.run_dir) == list(range(STEPS))  # the application's own length, every step once
    assert "the world has ended" in (result.run_dir / "logs" / "world.log").read_text()
    assert_nothing_left(run_id)


@needs_tasks
@pytest.mark.usefixtures("reap_runs")
def test_a_driver_service_ends_the_run_though_its_tasks_stay(tmp_path, zk_server, creds_file):
    exp = world_experiment(tmp_path / "exp", task_args=', "stay"', service_extra="ends_run = true\n")
    run_id = "world-driver"
    result = Coordinator(settings(exp, zk_server, creds_file, reconfigure="in-place"), run_id, tmp_path / "runs").run()
    assert result.status == "finished"
    assert logged_steps(result.run_dir) == list(range(STEPS))
    assert_nothing_left(run_id)


@needs_tasks
@pytest.mark.usefixtures("reap_runs")
def test_a_service_that_ends_while_the_application_goes_on_fails_the_run(tmp_path, zk_server, creds_file):
    # the world drives STEPS steps, but its tasks then run one more step without it
    exp = world_experiment(tmp_path / "exp", task_args=', "more"')
    with pytest.raises(RunFailed) as info:
        Coordinator(settings(exp, zk_server, creds_file, reconfigure="in-place"), "world-gone", tmp_path / "runs").run()
    text = str(info.value)
    assert f"service world exited with code 0 before step {STEPS} started" in text and 'on_failure = "fail"' in text
    assert_nothing_left("world-gone")


@pytest.mark.parametrize(
    "value, expected",
    [('"yes"', "expected true or false"), ("1", "expected true or false"), ('"driver"', "expected true or false")],
)
def test_a_bad_ends_run_is_refused_with_exit_2_before_anything_starts(tmp_path, monkeypatch, capsys, value, expected):
    exp = world_experiment(tmp_path / "exp", service_extra=f"ends_run = {value}\n")
    code, out, err = run_cli(
        ["run", "-e", exp, "--runs-dir", tmp_path / "runs", "--run-id", "bad"], monkeypatch, capsys
    )
    assert code == 2, out + err
    assert "job.toml" in err and "service[0].ends_run" in err and expected in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "runs" / "bad").exists()


@pytest.mark.slow
@needs_tasks
@pytest.mark.usefixtures("reap_runs")
def test_the_wheels_raw_helics_broker_runs_as_a_service(tmp_path, zk_server, creds_file, monkeypatch, capsys):
    from test_apps_helics_live import helics_experiment

    from bsp_planner.apps.helics.broker import find_broker

    broker = find_broker()
    if broker is None:
        pytest.skip("the helics wheel is not installed (bsp-planner[cosim])")
    exp = helics_experiment(tmp_path / "exp")
    job = tmp_path / "exp" / "job.toml"
    wrapped = '["{python}", "-m", "bsp_planner.apps.helics.broker", "--federates", "4", "--port", "{port}"]'
    raw = f'["{broker}", "-f", "4", "--coretype=zmq", "--local_interface=tcp://127.0.0.1", "--port", "{{port}}"]'
    assert wrapped in job.read_text()
    text = job.read_text().replace(wrapped, raw)  # it exits 0 when the federation has finished
    # each federate's process lingers 2 s after the federation ended (as a federate writing its results
    # would), so the run is still waiting for its tasks when the broker's end is seen
    linger = 'process = ["/bin/sh", "-c", "\\"$0\\" \\"$@\\"; code=$?; sleep 2; exit $code", '
    assert text.count('process = ["{python}"') == 4
    # the federation runs 3 steps, the run allows 10: it ends when the federation does
    text = text.replace('"--steps", "30"', '"--steps", "3"')
    job.write_text(text.replace('process = ["{python}"', linger + '"{python}"'))
    meta_file = tmp_path / "exp" / "profile" / "profile.meta.json"  # the profile timed the same programs
    meta = json.loads(meta_file.read_text())
    for t in meta["tasks"].values():
        argv = ["3" if i and t["process"][i - 1] == "--steps" else a for i, a in enumerate(t["process"])]
        t["process"] = ["/bin/sh", "-c", '"$0" "$@"; code=$?; sleep 2; exit $code', *argv]
    meta_file.write_text(json.dumps(meta))
    run_id = "helics-raw-broker"
    code, out, err = run_cli(
        [
            "run", "--experiment", exp, "--planner", "even", "--online", "--reconfigure", "in-place",
            "--steps", 10, "--zookeeper", zk_server.hosts, "--zk-auth-file", creds_file,
            "--runs-dir", tmp_path / "runs", "--run-id", run_id, "--cgroup-prefix", PREFIX,
            "--step-timeout", 120,
        ],
        monkeypatch,
        capsys,
    )  # fmt: skip
    assert code == 0, (out, err)
    assert logged_steps(tmp_path / "runs" / run_id) == [0, 1, 2]
    assert "service broker ended (exit code 0)" in out + err  # seen while the run still waited for its tasks
    assert_nothing_left(run_id)

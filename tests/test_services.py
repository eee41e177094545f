"""Services in the job (`[[service]]`) and the run-wide placeholders (`{port}`, `{port:NAME}`, `{job_dir}`).

A service here is a real TCP server (a small Python script) that the job's command tasks talk to every
step through `{port:svc}`; it records its pid, so a test can prove it is gone after the run ended, failed
or was stopped with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.placeholders import choose_ports, run_env, run_values, values_from_env
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed

from cli_run import run_cli
from zk_fixtures import DATA, EXPERIMENT, PREFIX, assert_nothing_left, needs_tasks, settings, write_profile

# A TCP server: answers "ok <what was sent>"; exits with code 5 after `die_after` real requests (0: never).
SERVICE = """
import os, socket, sys
port, pids, die_after = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
assert os.environ["BSP_PORT"] == str(port), (os.environ["BSP_PORT"], port)
assert os.environ["GREETING"] == "hello from " + os.environ["BSP_JOB_DIR"]
with open(pids, "a") as f:
    f.write(f"{os.getpid()}\\n")
with open(pids + ".cgroup", "a") as f:  # where it runs: never inside the run's group
    f.write(open("/proc/self/cgroup").read().replace("\\n", " ") + "\\n")
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen()
print("listening on", port, flush=True)
served = 0
while True:
    c, _ = srv.accept()
    data = c.recv(200)
    if data:
        c.sendall(b"ok " + data)
        served += 1
        print("served", data.decode(), flush=True)
    c.close()
    if die_after and served >= die_after:
        sys.exit(5)
"""

# A command task: one request to the service per step (retried while a restarted service comes back, as a
# broker's client does); its own port is not the service's.
CLIENT = """
import json, os, socket, sys, time
port, task, step, host = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
assert os.environ["BSP_PORT"] != str(port)
deadline = time.monotonic() + 60
while True:
    try:
        with socket.create_connection((host, port), timeout=10) as c:
            c.sendall(f"{task}-{step}".encode())
            if c.recv(200) == f"ok {task}-{step}".encode():
                break
    except OSError:
        pass
    assert time.monotonic() < deadline
    time.sleep(0.02)
print("talked to the service")
print(json.dumps({"workload": 20}))
"""

SERVICE_TABLE = """
[[service]]
name = "svc"
command = ["{{python}}", "service.py", "{{port}}", "{pids}", "{die_after}"]
ready = {ready}
ready_timeout_s = {timeout}
env = {{ GREETING = "hello from {{job_dir}}" }}
on_failure = "{on_failure}"
max_restarts = {max_restarts}
"""

TASK = """
[[task]]
name = "{name}"
command = ["{{python}}", "client.py", "{{port:svc}}", "{{task}}", "{{step}}", "{{host:svc}}"]
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""


def service_experiment(
    folder: Path,
    *,
    steps: int = 3,
    die_after: int = 0,
    on_failure: str = "fail",
    max_restarts: int = 3,
    ready: str = '{ tcp_port = "{port}" }',
    timeout: float = 30,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "service.py").write_text(SERVICE)
    (folder / "client.py").write_text(CLIENT)
    job = 'name = "with-service"\n' + SERVICE_TABLE.format(
        pids=folder / "pids",
        die_after=die_after,
        ready=ready,
        timeout=timeout,
        on_failure=on_failure,
        max_restarts=max_restarts,
    )
    rows = ((0, 1998), (1999, 3997), (0, 1998))
    job += "".join(
        TASK.format(name=n, data=DATA / "datasets", first=f, last=la) for n, (f, la) in zip("abc", rows, strict=True)
    )
    (folder / "job.toml").write_text(job)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, penalty=0.3))
    return exp


def service_pids(folder: Path) -> list[int]:
    try:
        return [int(x) for x in (folder / "pids").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        state = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


# -- the job file --------------------------------------------------------------------------------------
def test_the_agreed_service_table_loads_and_its_placeholders_are_substituted(tmp_path):
    service_experiment(tmp_path)
    job = load_job(tmp_path / "job.toml")
    (svc,) = job.services
    assert svc.name == "svc" and svc.ready_tcp_port == "{port}" and svc.on_failure == "fail"
    assert svc.command[1] == str(tmp_path / "service.py")  # a file next to the job: resolved against it
    assert job.port_names == ["a", "b", "c", "svc"]
    ports = choose_ports(job.port_names)
    assert len(set(ports.values())) == 4
    values = run_values("a", ports, job.job_dir)
    args = job.task("a").step_args(20, 3, run_values=values)
    assert args[1:] == [str(tmp_path / "client.py"), str(ports["svc"]), "a", "3", "{host:svc}"]  # once started
    assert values_from_env(run_env("a", ports, job.job_dir)) == values  # what a command task's worker rebuilds
    assert svc.args(run_values("svc", ports, job.job_dir))[2] == str(ports["svc"])


def test_every_chosen_port_has_its_next_port_free_for_a_zeromq_broker(monkeypatch):
    """A HELICS (ZeroMQ) broker given {port} binds port + 1 too: no chosen port's neighbour is taken by
    another program or given to another name."""
    from bsp_planner.inputs import placeholders

    picks = iter([40000, 40010, 39999, 40020])  # what the kernel offers for port 0, in turn
    taken = {40011}  # another program's

    class FakeSocket:
        def __init__(self, *a):
            self.port = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            port = addr[1] or next(picks)
            if port in taken:
                raise OSError(98, "Address already in use")
            taken.add(port)
            self.port = port

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(placeholders.socket, "socket", FakeSocket)
    ports = placeholders.choose_ports(["broker", "fed"])
    # 40010's neighbour is another program's; 39999's is the broker's own port
    assert ports == {"broker": 40000, "fed": 40020}
    monkeypatch.undo()  # the real sockets again
    real = placeholders.choose_ports([f"t{i}" for i in range(16)])
    chosen = set(real.values())
    assert len(chosen) == 16 and not chosen & {p + 1 for p in chosen}


def test_a_relative_script_argument_resolves_against_the_job_file(tmp_path):
    (tmp_path / "cmd_task.py").write_text("print(1)\n")
    (tmp_path / "job.toml").write_text(
        '[[task]]\nname = "a"\ncommand = ["python3", "cmd_task.py", "not-a-file", "--flag", "{job_dir}/x.py"]\n'
    )
    args = load_job(tmp_path / "job.toml").task("a").step_args(1, run_values={"job_dir": "/j"})
    assert args == ["python3", str(tmp_path / "cmd_task.py"), "not-a-file", "--flag", "/j/x.py"]


@pytest.mark.parametrize(
    "table, field, expected",
    [
        ('name = "a"\ncommand = ["x"]', "service[0].name", "unique among the job's tasks and services"),
        ('name = "s"\ncommand = []', "service[0].command", "at least 1 item"),
        ('name = "s"\ncommand = ["x"]\nready = {}', "service[0].ready", "exactly one of them"),
        (
            'name = "s"\ncommand = ["x"]\nready = { tcp_port = 1, log_line = "x" }',
            "service[0].ready",
            "exactly one of them",
        ),
        ('name = "s"\ncommand = ["x"]\nready = { tcp_port = 70000 }', "service[0].ready.tcp_port", "1..65535"),
        ('name = "s"\ncommand = ["x"]\nready = { tcp_port = "{prot}" }', "service[0].ready.tcp_port", "placeholder"),
        ('name = "s"\ncommand = ["x"]\nready = { log_line = "(" }', "service[0].ready.log_line", "regular expression"),
        ('name = "s"\ncommand = ["x"]\nready = { http = "/" }', "service[0].ready.http", "unknown setting"),
        ('name = "s"\ncommand = ["x"]\nready_timeout_s = 0', "service[0].ready_timeout_s", "> 0"),
        ('name = "s"\ncommand = ["x"]\non_failure = "retry"', "service[0].on_failure", "fail, restart"),
        ('name = "s"\ncommand = ["x"]\nmax_restarts = -1', "service[0].max_restarts", ">= 0"),
        ('name = "s"\ncommand = ["x"]\nends_run = "yes"', "service[0].ends_run", "true or false"),
        ('name = "s"\ncommand = ["x"]\nends_run = 1', "service[0].ends_run", "true or false"),
        ('name = "s"\ncommand = ["x"]\nenv = { "A B" = "1" }', "service[0].env", "environment variable names"),
        ('name = "s"\ncommand = ["x"]\nenv = { A = 1 }', "service[0].env", "a table of str values"),
        ('name = "s"\ncommand = ["x", "{port:nobody}"]', "service[0].command", "{port:nobody} names no task"),
    ],
)
def test_a_bad_service_field_is_named(tmp_path, table, field, expected):
    path = tmp_path / "job.toml"
    path.write_text(f'[[task]]\nname = "a"\ncommand = ["x"]\n\n[[service]]\n{table}\n')
    with pytest.raises(InputError) as info:
        load_job(path)
    assert info.value.field == field and expected in str(info.value) and "job.toml" in str(info.value), str(info.value)


def test_a_host_placeholder_must_name_a_service(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[[task]]\nname = "a"\nprocess = ["x"]\n\n[[task]]\nname = "b"\nprocess = ["x", "{host:a}"]\n')
    with pytest.raises(InputError, match=r"\{host:a\} names no service of the job \(services: none\)") as info:
        load_job(path)
    assert info.value.field == "task[1].process"


def test_a_task_naming_an_unknown_port_or_a_bad_restorable_is_refused(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[[task]]\nname = "a"\nprocess = ["x", "--peer", "{port:b}"]\n')
    with pytest.raises(InputError, match=r"\{port:b\} names no task or service") as info:
        load_job(path)
    assert info.value.field == "task[0].process"
    path.write_text('[[task]]\nname = "a"\nprocess = ["x"]\nrestorable = "maybe"\n')
    with pytest.raises(InputError, match="true or false") as info:
        load_job(path)
    assert info.value.field == "task[0].restorable"


def test_a_bad_service_stops_run_with_exit_2_before_anything_starts(tmp_path, monkeypatch, capsys):
    exp = service_experiment(tmp_path / "exp", on_failure="sometimes")
    code, out, err = run_cli(
        ["run", "-e", exp, "--runs-dir", tmp_path / "runs", "--run-id", "bad"], monkeypatch, capsys
    )
    assert code == 2, out + err
    assert "job.toml" in err and "service[0].on_failure" in err and "Traceback" not in err
    assert service_pids(tmp_path / "exp") == [] and not (tmp_path / "runs" / "bad").exists()


# -- live --------------------------------------------------------------------------------------------------
@needs_tasks
def test_a_service_runs_before_the_tasks_and_is_gone_after_the_run(tmp_path, zk_server, creds_file, reap_runs):
    exp = service_experiment(tmp_path / "exp", steps=3)
    result = Coordinator(settings(exp, zk_server, creds_file), "svc-ok", tmp_path / "runs").run()
    assert result.status == "finished"
    log = (result.run_dir / "logs" / "svc.log").read_text()
    for t in "abc":  # every task talked to it in every step, through {port:svc}
        for step in range(3):
            assert f"served {t}-{step}" in log
    (pid,) = service_pids(tmp_path / "exp")
    assert not alive(pid)
    assert_nothing_left("svc-ok")
    task_log = (result.run_dir / "logs" / "a.log").read_text()  # a successful command's output is kept too
    assert "--- step 2 stdout" in task_log and "talked to the service" in task_log


@needs_tasks
def test_a_service_that_dies_fails_the_run_or_is_restarted_per_its_policy(tmp_path, zk_server, creds_file, reap_runs):
    exp = service_experiment(tmp_path / "fail", steps=4, die_after=4)  # dies in step 1
    with pytest.raises(RunFailed) as info:
        Coordinator(settings(exp, zk_server, creds_file), "svc-fail", tmp_path / "runs").run()
    text = str(info.value)
    assert "service svc exited with code 5 during the run" in text and 'on_failure = "fail"' in text
    assert "served" in text  # the end of its log
    assert not any(alive(p) for p in service_pids(tmp_path / "fail"))
    assert_nothing_left("svc-fail")

    exp = service_experiment(tmp_path / "restart", steps=4, die_after=4, on_failure="restart", max_restarts=5)
    result = Coordinator(settings(exp, zk_server, creds_file), "svc-restart", tmp_path / "runs").run()
    assert result.status == "finished"
    pids = service_pids(tmp_path / "restart")
    assert len(pids) >= 2 and not any(alive(p) for p in pids)
    # restarted mid-run by the coordinator, whose threads then sit in the run's group at a raised priority:
    # the service still starts where the coordinator came from, so the run's group can be removed
    groups = (tmp_path / "restart" / "pids.cgroup").read_text().splitlines()
    assert len(groups) == len(pids) and not any(".live.svc-restart" in g for g in groups), groups
    assert_nothing_left("svc-restart")


@needs_tasks
def test_a_service_never_ready_fails_the_run_before_any_task_starts(tmp_path, zk_server, creds_file, reap_runs):
    exp = service_experiment(tmp_path / "exp", ready='{ log_line = "^never printed$" }', timeout=1.5)
    with pytest.raises(RunFailed) as info:
        Coordinator(settings(exp, zk_server, creds_file), "svc-late", tmp_path / "runs").run()
    text = str(info.value)
    assert "service svc did not print a line matching '^never printed$' within 1.5 s (ready_timeout_s)" in text
    assert "listening on" in text
    assert not any(alive(p) for p in service_pids(tmp_path / "exp"))
    assert not list((tmp_path / "runs" / "svc-late" / "logs").glob("[abc].log"))  # no task started
    assert_nothing_left("svc-late")


@needs_tasks
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_or_killed_coordinator_leaves_no_service_running(tmp_path, zk_server, creds_file, reap_runs, how):
    exp = service_experiment(tmp_path / "exp", steps=200, ready='{ log_line = "listening on \\\\d+" }')
    runs = tmp_path / "runs"
    run_id = f"svc-{how.name.lower()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", "run", "-e", str(exp), "--runs-dir", str(runs), "--run-id", run_id]
        + ["--zookeeper", zk_server.hosts, "--zk-auth-file", str(creds_file), "--cgroup-prefix", PREFIX, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        log = runs / run_id / "steps.jsonl"
        deadline = time.monotonic() + 120
        while not (log.is_file() and log.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no step in 120 s"
            time.sleep(0.05)
        (pid,) = service_pids(tmp_path / "exp")
        assert alive(pid)
        proc.send_signal(how)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    if how == signal.SIGTERM:  # a clean stop: everything stopped, resumable; exit 128 + SIGTERM
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert not alive(pid)
        assert json.loads((runs / run_id / "run.json").read_text())["status"] == "interrupted"
        assert_nothing_left(run_id)
    else:  # nothing ran in the coordinator: the service goes by the parent-death signal
        deadline = time.monotonic() + 60  # bounds a service that never goes
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)


# -- Kubernetes: the service as a pod (the fake API server; its kubelet runs the containers here) -------------
@pytest.mark.slow
@needs_tasks
def test_on_kubernetes_a_service_is_a_pod_ready_by_its_probe_and_deleted_after_the_run(tmp_path, zk_server, creds_file):
    from test_k8s_tasks import NS, live

    exp = service_experiment(tmp_path / "exp", steps=3)
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-svc")
    created: list[dict] = []
    create = b._cluster.create_pod

    def spy(body):
        if "-probe" not in body["metadata"]["name"]:  # the cost probes before the run
            created.append(body)
        return create(body)

    b._cluster.create_pod = spy
    try:
        result = coord.run()
        left = api.pods(NS)
    finally:
        api.stop()
    assert result.status == "finished" and left == []
    service = created[0]  # before any task's pod
    c = service["spec"]["containers"][0]
    assert service["metadata"]["annotations"]["bsp-planner.io/service"] == "svc"
    assert c["command"][0] == "python3"  # {python}: the image's
    assert "cpu" not in c["resources"]["limits"] and c["resources"]["requests"]["cpu"] == "100m"  # no CPU limit
    port = coord.services.ports["svc"]
    assert c["readinessProbe"] == {"tcpSocket": {"port": port}, "periodSeconds": 1}
    assert coord.services.hosts == {"svc": "127.0.0.1"}  # the pod's IP (the fake's pods run here)
    log = (tmp_path / f"{service['metadata']['name']}.log").read_text()
    for t in "abc":
        for step in range(3):
            assert f"served {t}-{step}" in log
    (pid,) = service_pids(tmp_path / "exp")
    assert not alive(pid)


def test_on_kubernetes_a_log_line_readiness_is_refused_before_anything_starts(tmp_path):
    from bsp_planner.runtime.backends.kubernetes import KubernetesBackend
    from bsp_planner.testing.fake_apiserver import FakeApiServer

    service_experiment(tmp_path, ready='{ log_line = "listening" }')
    job = load_job(tmp_path / "job.toml")
    with FakeApiServer() as api:
        api.add_node("node-a", "4")
        b = KubernetesBackend("k8s-log", kubeconfig=api.kubeconfig, namespace="ns", image="bsp-planner:dev")
        with pytest.raises(InputError) as info:
            b.check(job, 1000, 1500)
        assert api.pods("ns") == []
    assert info.value.field == "service.ready.log_line" and "tcp_port" in str(info.value)

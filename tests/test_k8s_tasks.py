"""The user's own programs on Kubernetes (issues 10 and 15): `image` + `command` tasks (our worker in the
task's image runs the command every step) and `process` tasks (one long-running pod per task, its CPU
changed in place through ``pods/resize``), against FakeApiServer.

FOR LOGIC TESTS ONLY: FakeApiServer is not a cluster (see bsp_planner/testing/fake_apiserver.py). Its
"kubelet" here runs a pod's container as a local process: ``bsp-planner`` is this checkout's CLI and
``python3`` this Python (what an image with bsp-planner installed provides); an image named
``plain/...`` has no bsp-planner, so its worker cannot start (StartError, as containerd reports it). No
CPU limit is applied to those processes. ZooKeeper and the programs are real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)

from k8s_fixtures import NS, SECRET, fake_cluster_backend, kubelet

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.k8s import manifests as M
from bsp_planner.k8s.cluster import pod_state, resize_done
from bsp_planner.runtime.backends import WorkerLaunch
from bsp_planner.runtime.backends.kubernetes import ImageUnusable, KubernetesBackend
from bsp_planner.runtime.backends.kubernetes.pods import PodLost
from bsp_planner.runtime.backends.kubernetes.resizes import ResizeRefused
from bsp_planner.testing.fake_apiserver import FakeApiServer

from zk_fixtures import DATA, EXPERIMENT, write_profile, zk_problem


# -- the job file ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "task, expected",
    [
        ('command = ["x"]\nimage = "Ghcr.io/Me/App"', "is not an image reference"),
        ('command = ["x"]\nimage = "app: 1"', "contains whitespace"),
        ('command = ["x"]\nimage = ""', "an empty image name"),
        ('command = ["x"]\nimage = "app:"', "is not an image reference"),
        ('command = ["x"]\nimage = 3', "task[0].image"),
        ('image = ""', "an empty image name"),
        (
            'stressor = "zero"\nops_per_unit = 1\nseries = { file = "s.csv" }\nimage = "me/app:1"',
            "`image` goes with `command`, with `process`, or alone",
        ),
    ],
)
def test_bad_image_fields_are_refused_naming_the_task_and_field(tmp_path, task, expected):
    path = tmp_path / "job.toml"
    path.write_text(f'name = "j"\n\n[[task]]\nname = "k"\n{task}\n')
    with pytest.raises(InputError) as info:
        load_job(path)
    assert expected in str(info.value) and "job.toml" in str(info.value), str(info.value)


def test_an_image_task_keeps_its_program_paths_as_the_image_has_them(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(
        'name = "j"\n\n[[task]]\nname = "k"\ncommand = ["./bin/kernel", "{workload}"]\n'
        'image = "ghcr.io/me/kernel:1.2@sha256:' + "a" * 64 + '"\n'
        '\n[[task]]\nname = "l"\ncommand = ["./bin/kernel", "{workload}"]\n'
    )
    job = load_job(path)
    assert job.task("k").command == ("./bin/kernel", "{workload}")  # the image's path, not the job file's
    assert job.task("k").identity()["image"].startswith("ghcr.io/me/kernel:1.2@sha256:")
    assert job.task("l").command[0] == str(tmp_path / "bin" / "kernel")


def test_an_image_alone_is_a_process_task_running_the_image_as_built(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('name = "j"\nsync = "observe"\n\n[[task]]\nname = "k"\nimage = "ghcr.io/me/app:1"\n')
    t = load_job(path).task("k")
    assert t.kind == "process" and t.process == () and t.runs_image_entrypoint
    assert t.identity() == {"process": [], "workers": 1, "image": "ghcr.io/me/app:1"}


def test_the_local_backend_refuses_an_image_run_as_built_naming_task_and_field(tmp_path):
    from bsp_planner.runtime.backends.local import LocalBackend

    path = tmp_path / "job.toml"
    path.write_text('name = "j"\n\n[[task]]\nname = "k"\nimage = "me/app:1"\n')
    with pytest.raises(InputError, match="task\\(s\\) k name a container image") as info:
        LocalBackend("r", tmp_path / "logs").check(load_job(path), 1000, 1000)
    assert "task.image" in str(info.value) and "job.toml" in str(info.value)


def test_the_local_backend_refuses_image_tasks(tmp_path):
    from bsp_planner.runtime.backends.local import LocalBackend

    path = tmp_path / "job.toml"
    path.write_text('name = "j"\n\n[[task]]\nname = "k"\ncommand = ["kernel"]\nimage = "me/kernel:1"\n')
    with pytest.raises(InputError, match="task\\(s\\) k name a container image, which only the kubernetes backend"):
        LocalBackend("r", tmp_path / "logs").check(load_job(path), 1000, 1000)


# -- the backend: pods of process tasks, resize, faults ------------------------------------------------------
@pytest.fixture
def api():
    with FakeApiServer(delete_delay_s=0.02) as fake:
        fake.add_node("node-a", "4")
        yield fake


def backend(api: FakeApiServer, **kw) -> KubernetesBackend:
    kw.setdefault("image", "bsp-planner:dev")
    kw.setdefault("poll_s", 0.005)
    kw.setdefault("namespace", NS)
    kw.setdefault("worker_zk_hosts", "zookeeper.bsp-planner.svc:2181")
    return KubernetesBackend("r1", kubeconfig=api.kubeconfig, **kw)


class _Job:
    """What check() reads of a job (its tasks' names, kinds and images)."""

    path = None

    def __init__(self, tasks):
        self.tasks = tasks


class _Task:
    def __init__(self, name: str, kind: str, image: str | None = None) -> None:
        self.name, self.kind, self.image = name, kind, image


def process_launch(task: str = "p0", run_dir: str = "/home/me/runs/r1", incarnation: int = 0) -> WorkerLaunch:
    """What the executor hands the backend for a process task (its `{python}` and `{run_dir}` already
    substituted for the coordinator's machine)."""
    env = {
        "BSP_PLANNER_ZK_AUTH_FILE": "/nonexistent/zk-auth",
        "BSP_RUN_ID": "r1",
        "BSP_TASK": task,
        "BSP_ZOOKEEPER": "127.0.0.1:2181",
        "BSP_ZK_ROOT": "/bsp-planner/runs/r1",
        "BSP_SYNC": "barrier",
        "BSP_RUN_DIR": run_dir,
        "BSP_INCARNATION": str(incarnation),
    }
    args = (sys.executable, "-m", "myapp", "--exchange", f"{run_dir}/halo", "--rank", "0")
    return WorkerLaunch(task, args, env, incarnation, program=True)


def checked(b: KubernetesBackend, *tasks: _Task) -> KubernetesBackend:
    b.check(_Job(list(tasks)), 2000, 3000)
    return b


def test_a_process_task_is_one_pod_running_its_image_and_program_with_the_bsp_environment(api):
    b = checked(backend(api, zk_auth_secret=SECRET), _Task("p0", "process", "ghcr.io/me/particles:2"))
    b.start_task(process_launch(), 1000)
    b.wait_running()
    pod = api.pod(NS, b._pod_name("p0"))
    c = pod["spec"]["containers"][0]
    assert c["image"] == "ghcr.io/me/particles:2"
    # the program itself is the container's command; {python} and {run_dir} as the pod has them
    assert c["command"] == ["python3", "-m", "myapp", "--exchange", f"{M.SCRATCH_DIR}/halo", "--rank", "0"]
    assert c.get("args") in (None, [])
    env = {e["name"]: e for e in c["env"]}
    assert env["BSP_ZOOKEEPER"]["value"] == "zookeeper.bsp-planner.svc:2181"  # the address pods reach
    assert env["BSP_RUN_DIR"]["value"] == M.SCRATCH_DIR
    for k, v in (("BSP_RUN_ID", "r1"), ("BSP_TASK", "p0"), ("BSP_SYNC", "barrier"), ("BSP_INCARNATION", "0")):
        assert env[k]["value"] == v
    # credentials from the Secret, never the coordinator's file path or a plain value
    assert env["BSP_PLANNER_ZK_AUTH"]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": "auth"}
    assert "BSP_PLANNER_ZK_AUTH_FILE" not in env and "BSP_ZK_AUTH" not in env
    # resizable in place, Guaranteed
    assert {p["resourceName"]: p["restartPolicy"] for p in c["resizePolicy"]}["cpu"] == "NotRequired"
    assert c["resources"]["requests"] == c["resources"]["limits"]


def test_an_image_task_without_a_program_runs_the_image_as_built_with_the_bsp_environment(api):
    b = checked(backend(api, zk_auth_secret=SECRET), _Task("p0", "process", "ghcr.io/me/app:3"))
    launch = process_launch()
    b.start_task(WorkerLaunch(launch.task, (), launch.env, 0, program=True), 1000)  # the executor's, for process=()
    b.wait_running()
    c = api.pod(NS, b._pod_name("p0"))["spec"]["containers"][0]
    assert c["image"] == "ghcr.io/me/app:3"
    assert "command" not in c and "args" not in c  # the kubelet runs the image's ENTRYPOINT and CMD
    env = {e["name"]: e for e in c["env"]}
    assert env["BSP_ZOOKEEPER"]["value"] == "zookeeper.bsp-planner.svc:2181"
    assert env["BSP_RUN_DIR"]["value"] == M.SCRATCH_DIR
    for k, v in (("BSP_RUN_ID", "r1"), ("BSP_TASK", "p0"), ("BSP_ZK_ROOT", "/bsp-planner/runs/r1")):
        assert env[k]["value"] == v
    assert env["BSP_PLANNER_ZK_AUTH"]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": "auth"}


def test_an_image_run_as_built_launched_as_a_worker_is_refused_naming_the_task(api, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('name = "j"\n\n[[task]]\nname = "p0"\nimage = "me/app:1"\n')
    b = backend(api, zk_auth_secret=SECRET)
    b.check(load_job(path), 2000, 3000)
    assert b.as_built == {"p0"} and b.processes == {"p0"} and b.images == {"p0": "me/app:1"}
    with pytest.raises(InputError, match="task 'p0' runs its image as built"):
        b.start_task(WorkerLaunch("p0", ("worker", "--task", "p0"), {}, 0), 1000)
    assert api.pods(NS) == []


def test_an_image_run_as_built_is_resized_in_place():
    with FakeApiServer(version="v1.33.1", resize_delay_s=0.05) as api:
        api.add_node("node-a", "4")
        b = checked(backend(api, zk_auth_secret=SECRET, reconfigure="auto"), _Task("p0", "process", "me/app:1"))
        launch = process_launch()
        b.start_task(WorkerLaunch(launch.task, (), launch.env, 0, program=True), 1000)
        b.wait_running()
        uid = api.pod(NS, b._pod_name("p0"))["metadata"]["uid"]
        b.resize_task("p0", 2500)
        pod = api.pod(NS, b._pod_name("p0"))
        assert pod["metadata"]["uid"] == uid and "command" not in pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "2500m"
        assert [c.resource for c in api.calls if c.verb == "patch"] == ["pods/resize"]


def test_a_shared_run_folder_is_a_claim_mounted_in_every_pod(api):
    b = checked(backend(api, zk_auth_secret=SECRET, run_dir_claim="particles-run"), _Task("p0", "process"))
    b.start_task(process_launch(), 1000)
    pod = api.pod(NS, b._pod_name("p0"))
    c = pod["spec"]["containers"][0]
    assert c["image"] == "bsp-planner:dev"  # no image of its own: the run's
    assert {"name": "run-dir", "persistentVolumeClaim": {"claimName": "particles-run"}} in pod["spec"]["volumes"]
    assert {"name": "run-dir", "mountPath": M.RUN_DIR_MOUNT} in c["volumeMounts"]
    assert {e["name"]: e.get("value") for e in c["env"]}["BSP_RUN_DIR"] == M.RUN_DIR_MOUNT
    assert f"{M.RUN_DIR_MOUNT}/halo" in c["command"]
    assert pod["spec"]["securityContext"]["fsGroup"] == M.RUN_AS_USER


@pytest.mark.parametrize("version", ["v1.33.1", "v1.35.0"])
def test_a_process_pod_is_resized_in_place_never_recreated(version):
    with FakeApiServer(version=version, resize_delay_s=0.05) as api:
        api.add_node("node-a", "4")
        b = checked(backend(api, zk_auth_secret=SECRET, reconfigure="auto"), _Task("p0", "process"))
        b.start_task(process_launch(), 1000)
        b.wait_running()
        uid = api.pod(NS, b._pod_name("p0"))["metadata"]["uid"]
        assert b.check_configuration({"p0": 2500}) == {"p0": "in-place"}
        b.resize_task("p0", 2500)
        pod = api.pod(NS, b._pod_name("p0"))
        assert pod["metadata"]["uid"] == uid  # the same pod: the process kept its state
        assert pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "2500m"
        if version == "v1.35.0":  # the kubelet acted on the resized spec
            assert pod["metadata"]["generation"] == 2 and pod["status"]["observedGeneration"] == 2
        assert b.events[-1].mode == "in-place" and b.events[-1].task == "p0"
        assert [c.resource for c in api.calls if c.verb == "patch"] == ["pods/resize"]


def test_a_resize_is_done_only_once_the_kubelet_caught_up_with_the_resized_generation():
    pod = {
        "metadata": {"name": "p", "generation": 3},
        "spec": {"containers": [{"name": "worker", "resources": {"limits": {"cpu": "2"}}}]},
        "status": {
            "phase": "Running",
            "observedGeneration": 2,  # the status is still that of the spec before the resize
            "conditions": [],
            "containerStatuses": [{"name": "worker", "state": {"running": {}}, "resources": {"limits": {"cpu": "2"}}}],
        },
    }
    assert not resize_done(pod_state(pod), 2000)
    pod["status"]["observedGeneration"] = 3
    assert resize_done(pod_state(pod), 2000)


def test_an_infeasible_resize_of_a_process_task_stops_the_run_clearly_and_keeps_the_pod(api):
    b = checked(backend(api, zk_auth_secret=SECRET, fit_check=False), _Task("p0", "process"))
    b.start_task(process_launch(), 1000)
    b.wait_running()
    uid = api.pod(NS, b._pod_name("p0"))["metadata"]["uid"]
    b.check_configuration({"p0": 6000})
    with pytest.raises(ResizeRefused) as info:
        b.resize_task("p0", 6000)
    text = str(info.value)
    assert "task 'p0'" in text and "Infeasible" in text and "Node didn't have enough capacity" in text, text
    assert "never recreated behind its back" in text and "resumed" in text
    assert api.pod(NS, b._pod_name("p0"))["metadata"]["uid"] == uid  # not recreated


def test_a_deferred_resize_of_a_process_task_is_reported_after_the_timeout(api):
    api.add_foreign_pod("other", "big", "node-a", "2500m")
    b = checked(backend(api, zk_auth_secret=SECRET, fit_check=False, resize_timeout_s=0.3), _Task("p0", "process"))
    b.start_task(process_launch(), 1000)
    b.wait_running()
    b.check_configuration({"p0": 2000})
    with pytest.raises(ResizeRefused) as info:
        b.resize_task("p0", 2000)
    text = str(info.value)
    assert "not applied after 0.3 s" in text and "pending: Deferred" in text and "task 'p0'" in text, text


def test_a_process_task_whose_growth_does_not_fit_its_node_is_refused_before_anything_changes(api):
    api.add_node("node-b", "8")
    b = checked(backend(api, zk_auth_secret=SECRET), _Task("p0", "process"), _Task("s", "stressor"))
    b.start_task(process_launch(), 3000)
    b.wait_running()
    node = api.pod(NS, b._pod_name("p0"))["spec"]["nodeName"]
    api.add_foreign_pod("other", "neighbour", node, "1")
    with pytest.raises(InputError, match="task 'p0'.s CPU cannot grow in place from 3000m to 3500m"):
        b.check_configuration({"p0": 3500})


def test_a_process_pod_evicted_mid_run_is_lost_naming_the_task(api):
    b = checked(backend(api, zk_auth_secret=SECRET), _Task("p0", "process"))
    b.start_task(process_launch(), 1000)
    b.wait_running()
    api.evict(NS, b._pod_name("p0"))
    with pytest.raises(PodLost, match="task 'p0': the pod was evicted"):
        b.poll_task("p0")


# -- live: the coordinator, a real ZooKeeper, the programs run by the fake kubelet --------------------------
KERNEL = """#!{python}
import json, os, sys
task, step, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
assert os.environ["BSP_STEP"] == str(step) and float(os.environ["BSP_WORKLOAD"]) == size
if os.path.exists(os.path.join({control!r}, f"fail-{{task}}-{{step}}")):
    print("kernel: out of particles", file=sys.stderr)
    sys.exit(7)
x = 0
for i in range(int(size * 1000)):
    x += i * i
print(json.dumps({{"workload": size + 1}}))
"""

COMMAND_TASK = """
[[task]]
name = "{name}"
image = "{image}"
command = ["{kernel}", "{{task}}", "{{step}}", "{{workload}}"]
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""

PROCESS_TASK = """
[[task]]
name = "{name}"
image = "{image}"
process = ["{{python}}", "-m", "bsp_planner.testing.bsp_app", "--ranks", "3", "--control", "{control}"{extra}]
restorable = true  # its state is its step: it restores from session.first_step
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""

AS_BUILT_TASK = """
[[task]]
name = "{name}"
image = "{image}"
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""

ROWS = ((0, 1998), (1999, 3997), (0, 1998))


def image_experiment(folder: Path, kind: str, images=("me/kernel:1",) * 3, steps: int = 3, sync: str = "barrier"):
    folder.mkdir(parents=True, exist_ok=True)
    control = folder / "control"
    control.mkdir()
    kernel = folder / "kernel.py"
    kernel.write_text(KERNEL.format(python=sys.executable, control=str(control)))
    kernel.chmod(0o755)
    template = {"command": COMMAND_TASK, "process": PROCESS_TASK, "as-built": AS_BUILT_TASK}[kind]
    extra = ', "--self-sync"' if sync == "observe" else ""
    tasks = "".join(
        template.format(
            name=n, image=img, kernel=kernel, data=DATA / "datasets", first=f, last=la, extra=extra, control=control
        )
        for n, img, (f, la) in zip("abc", images, ROWS, strict=True)
    )
    (folder / "job.toml").write_text(f'name = "own"\nsync = "{sync}"\n' + tasks)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, penalty=0.0))
    return exp, control


def live(tmp_path, zk_server, creds_file, exp, run_id: str, reconfigure: str = "in-place", entrypoints=None, **kw):
    from bsp_planner.runtime.coordinator import Coordinator

    from zk_fixtures import settings

    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    runner = kubelet(tmp_path, secrets, entrypoints=entrypoints)
    api = FakeApiServer(pod_runner=runner, delete_delay_s=0.2, **kw).start()
    api.add_node("node-a", "4")
    b = fake_cluster_backend(run_id, api, zk_server, tmp_path)
    coord = Coordinator(
        settings(exp, zk_server, creds_file, planner="static:1", reconfigure=reconfigure, step_timeout_s=60.0),
        run_id,
        tmp_path / "runs",
        backend=b,
    )
    return api, b, coord


_live = zk_problem()
needs_zk = pytest.mark.skipif(_live is not None, reason=_live or "")


def records_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
@needs_zk
def test_image_command_tasks_run_their_command_every_step_in_their_image(tmp_path, zk_server, creds_file):
    exp, _ = image_experiment(tmp_path / "exp", "command", images=("me/kernel:1", "me/kernel:1", "me/other:2"))
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-cmd")
    seen: dict[str, str] = {}
    create = b._cluster.create_pod

    def spy(body):  # the pods as created: each task's image, our worker as the container's command
        task = body["metadata"]["annotations"]["bsp-planner.io/task-name"]
        if task == "cost-probe":  # the pod that measures an in-place resize before the run: it sleeps
            return create(body)
        seen[task] = body["spec"]["containers"][0]["image"]
        assert body["spec"]["containers"][0]["command"] == ["bsp-planner"]
        return create(body)

    b._cluster.create_pod = spy
    try:
        result = coord.run()
    finally:
        api.stop()
    assert result.status == "finished"
    assert seen == {"a": "me/kernel:1", "b": "me/kernel:1", "c": "me/other:2"}
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records:
        for t in r["tasks"]:  # the command's wall time, and the workload line it printed
            assert t["measured_s"] > 0 and t["observed_workload"] == pytest.approx(t["workload"] + 1, rel=1e-4)


@pytest.mark.slow
@needs_zk
def test_a_failing_step_of_an_image_command_names_task_step_and_stderr(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.executor import RunFailed

    exp, control = image_experiment(tmp_path / "exp", "command")
    (control / "fail-b-1").touch()
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-cmdfail")
    try:
        with pytest.raises(RunFailed) as info:
            coord.run()
    finally:
        api.stop()
    text = str(info.value)
    assert "task b" in text and "step 1" in text and "exited with code 7" in text, text
    assert "kernel: out of particles" in text and "--resume k8s-cmdfail" in text, text


@pytest.mark.slow
@needs_zk
def test_an_image_without_bsp_planner_stops_the_run_saying_what_the_image_needs(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.coordinator import RunInterrupted

    exp, _ = image_experiment(tmp_path / "exp", "command", images=("me/kernel:1", "plain/kernel:1", "me/kernel:1"))
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-plain")
    try:
        with pytest.raises((RunInterrupted, ImageUnusable)) as info:
            coord.run()
        assert api.pods(NS) == []  # every pod deleted
    finally:
        api.stop()
    text = str(info.value)
    assert "task 'b'" in text and "plain/kernel:1" in text and "executable file not found" in text, text
    assert "install bsp-planner in the image" in text, text


@pytest.mark.slow
@needs_zk
@pytest.mark.parametrize(
    "sync",
    [
        "barrier",
        "observe",
    ],
)
def test_process_tasks_run_one_pod_each_for_the_whole_run_resized_in_place(tmp_path, zk_server, creds_file, sync):
    exp, control = image_experiment(tmp_path / "exp", "process", images=("me/app:1",) * 3, steps=4, sync=sync)
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, f"k8s-proc-{sync}", version="v1.35.0")
    uids: dict[str, set[str]] = {}
    if sync == "observe":  # a self-synchronising app may run ahead of us: hold its last step until
        (control / "hang-a-3").touch()  # the coordinator has seen step 2, so resizes meet running pods

    def say(text: str) -> None:  # as each step is logged: the pods then (one per task, never replaced)
        if text.split()[:2] == ["step", "2:"]:
            (control / "release-a-3").touch()
        if text.startswith("step"):
            for t in coord.tasks:
                uids.setdefault(t, set()).add(api.pod(NS, b._pod_name(t))["metadata"]["uid"])

    coord.say = say
    try:
        result = coord.run()
    finally:
        api.stop()
    assert result.status == "finished"
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(len(u) == 1 for u in uids.values()), uids
    assert any(r["reconfigured"] for r in records)
    assert {e.mode for e in b.events} == {"start", "in-place"}
    for name in "abc":  # one process ran every step (the app appends its pid per step)
        pids = {line.split()[1] for line in (tmp_path / "scratch" / f"pids-{name}").read_text().splitlines()}
        assert len(pids) == 1


@pytest.mark.slow
@needs_zk
def test_images_run_as_built_run_live_as_process_pods_resized_in_place(tmp_path, zk_server, creds_file):
    exp, control = image_experiment(tmp_path / "exp", "as-built", images=("me/app:1",) * 3, steps=3)
    app = ["python3", "-m", "bsp_planner.testing.bsp_app", "--ranks", "3", "--control", str(control)]
    api, b, coord = live(
        tmp_path, zk_server, creds_file, exp, "k8s-built", version="v1.35.0", entrypoints={"me/app:1": app}
    )
    try:
        result = coord.run()
        pods = {t: api.pod(NS, b._pod_name(t)) for t in "abc"}
    finally:
        api.stop()
    assert result.status == "finished"
    records = records_of(result.run_dir)
    assert [r["step"] for r in records] == [0, 1, 2] and any(r["reconfigured"] for r in records)
    assert {e.mode for e in b.events} == {"start", "in-place"}
    for name in "abc":  # one process ran every step: the image as built, never replaced
        pids = {line.split()[1] for line in (tmp_path / "scratch" / f"pids-{name}").read_text().splitlines()}
        assert len(pids) == 1
    assert all(p is None or "command" not in p["spec"]["containers"][0] for p in pods.values())


@pytest.mark.slow
@needs_zk
def test_a_process_pod_dying_mid_run_names_task_and_step(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.executor import RunFailed

    exp, control = image_experiment(tmp_path / "exp", "process", images=("me/app:1",) * 3, steps=3)
    (control / "die-b-1").touch()
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-procdie")
    try:
        with pytest.raises(RunFailed) as info:
            coord.run()
        assert api.pods(NS) == []
    finally:
        api.stop()
    text = str(info.value)
    assert "task b's process exited with code 9 in step 1" in text and "--resume k8s-procdie" in text, text


@pytest.mark.slow
@needs_zk
def test_a_process_pod_evicted_mid_run_stops_the_run_resumable_naming_task_and_step(tmp_path, zk_server, creds_file):
    from bsp_planner.runtime.coordinator import RunInterrupted

    exp, control = image_experiment(tmp_path / "exp", "process", images=("me/app:1",) * 3, steps=4)
    (control / "hang-a-2").touch()  # step 2 cannot end before the eviction is seen
    api, b, coord = live(tmp_path, zk_server, creds_file, exp, "k8s-evict")

    def say(text: str) -> None:
        if text.startswith("step    1"):  # step 1 is logged: the node evicts b's pod
            api.evict(NS, b._pod_name("b"))

    coord.say = say
    try:
        with pytest.raises(RunInterrupted) as info:
            coord.run()
        assert api.pods(NS) == []
    finally:
        api.stop()
    text = str(info.value)
    assert "task 'b': the pod was evicted" in text and "after step 1" in text, text
    assert "--resume k8s-evict" in text, text


# -- profile run: command tasks as Jobs ------------------------------------------------------------------
def test_profile_run_times_an_image_command_task_as_jobs_in_its_image(tmp_path):
    """The Job's own command run here (`python` and `{python}` are this Python; no CPU limit: this is
    about what the Job runs and how its result travels, not the numbers)."""
    from bsp_planner.profiling import runner as R
    from bsp_planner.profiling.kubernetes import KubernetesProfiler, run_grid_kubernetes
    from bsp_planner.testing.fake_cluster import JobOutcome

    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        "import os, sys\nassert os.environ['BSP_WORKLOAD'] == sys.argv[1]\n"
        "x = 0\nfor i in range(int(float(sys.argv[1]) * 1000)):\n    x += i\n"
        "if os.environ['BSP_PLANNER_CPU'] == '1000' and sys.argv[1] == '20':\n"
        "    sys.exit('kernel: cannot do 20 on one CPU')\n"
    )
    path = tmp_path / "job.toml"
    path.write_text(
        f'name = "j"\n\n[[task]]\nname = "k"\nimage = "ghcr.io/me/kernel:3"\n'
        f'command = ["{{python}}", "{kernel}", "{{workload}}"]\n'
    )
    job = load_job(path)
    seen: list[dict] = []

    def execute(body: dict) -> JobOutcome:
        c = body["spec"]["template"]["spec"]["containers"][0]
        seen.append(c)
        cmd = list(c["command"])
        assert cmd[:3] == ["python", "-m", "bsp_planner.profiling.pod_measure"]
        cmd[0] = sys.executable
        log = tmp_path / f"{body['metadata']['name']}.log"
        env = dict(os.environ, BSP_PLANNER_TERMINATION_LOG=str(log), BSP_PLANNER_NODE="this-machine")
        env.update({e["name"]: e["value"] for e in c["env"] if "value" in e})
        env["BSP_PLANNER_CPU"] = body["metadata"]["annotations"]["bsp-planner.io/cpu-millicores"]
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=60)
        return JobOutcome(proc.returncode, log.read_text())

    with FakeApiServer(job_runner=execute) as api:
        api.add_node("n", "4")
        p = KubernetesProfiler(namespace=NS, kubeconfig=api.kubeconfig, image="bsp-planner:dev", poll_s=0.01)
        report = run_grid_kubernetes(job, tmp_path / "p.csv", R.Grid((1000, 2000), (10, 20), 1), p, progress=False)
    assert {c["image"] for c in seen} == {"ghcr.io/me/kernel:3"}
    c = seen[0]
    program = c["command"][c["command"].index("--") + 1 :]
    assert program[0] == "{python}" and program[1] == str(kernel)  # the container's own Python fills it in
    assert {e["name"]: e.get("value") for e in c["env"]}["BSP_TASK"] == "k"
    assert report.measured == 3 and len(report.failures) == 1
    assert "cannot do 20 on one CPU" in report.failures[0].reason
    rows = (tmp_path / "p.csv").read_text().splitlines()[1:]
    assert len(rows) == 3 and all(float(r.split(",")[3]) > 0 for r in rows)  # task,workload,cpu,duration_s,...


def test_a_profile_resumed_with_another_image_is_refused(tmp_path):
    from bsp_planner.profiling import runner as R
    from bsp_planner.profiling.kubernetes import KubernetesProfiler, run_grid_kubernetes
    from bsp_planner.testing.fake_cluster import JobOutcome

    def ok(body: dict) -> JobOutcome:
        return JobOutcome(0, json.dumps({"duration_s": 1.0, "exit_code": 0, "reason": "", "node": "n"}))

    path = tmp_path / "job.toml"
    text = 'name = "j"\n\n[[task]]\nname = "k"\nimage = "me/kernel:{v}"\ncommand = ["kernel", "{{workload}}"]\n'
    grid = R.Grid((1000, 2000), (10, 20), 1)
    with FakeApiServer(job_runner=ok) as api:
        api.add_node("n", "4")
        path.write_text(text.format(v=1))
        p = KubernetesProfiler(namespace=NS, kubeconfig=api.kubeconfig, image="bsp-planner:dev", poll_s=0.01)
        run_grid_kubernetes(load_job(path), tmp_path / "p.csv", grid, p, tasks=None, progress=False)
        path.write_text(text.format(v=2))
        p = KubernetesProfiler(namespace=NS, kubeconfig=api.kubeconfig, image="bsp-planner:dev", poll_s=0.01)
        with pytest.raises(InputError, match="task 'k' was measured with image='me/kernel:1'"):
            run_grid_kubernetes(
                load_job(path), tmp_path / "p.csv", R.Grid((1000, 2000), (10, 20), 2), p, progress=False
            )


def test_profile_run_accepts_process_tasks_on_kubernetes(api, tmp_path):
    """(Profiled one Job per CPU level: tests/test_k8s_process_profiling.py.)"""
    from bsp_planner.profiling.kubernetes import KubernetesProfiler

    path = tmp_path / "job.toml"
    path.write_text('name = "j"\n\n[[task]]\nname = "p"\nimage = "me/app:1"\nprocess = ["app"]\n')
    p = KubernetesProfiler(namespace=NS, kubeconfig=api.kubeconfig, image="bsp-planner:dev")
    p.check(list(load_job(path).tasks), path)
    assert callable(p.run_process)


# -- what a recreation costs (issue 15 part 3) ----------------------------------------------------------------
def test_the_backend_measures_a_pod_recreation_with_a_probe_pod_and_leaves_nothing(tmp_path):
    """The probe pod's container is a quick local process here; the fake's scheduling takes 0.4 s and its
    deletion 0.2 s, so a recreation cannot cost less than 0.4 s: the measurement sees them."""
    ran: list[dict] = []
    procs: list[subprocess.Popen] = []

    def run_pod(pod: dict):
        ran.append(pod)
        procs.append(subprocess.Popen([sys.executable, "-c", "pass"]))
        return procs[-1]

    with FakeApiServer(start_delay_s=0.4, delete_delay_s=0.2, pod_runner=run_pod) as api:
        api.add_node("node-a", "4")
        b = checked(backend(api, zk_auth_secret=SECRET), _Task("a", "stressor"), _Task("b", "stressor"))
        cost = b.measure_reconfigure_cost("recreate")
        assert cost is not None and 0.4 <= cost < 30
        assert api.pods(NS) == []  # the probe is gone
        (probe,) = ran
        c = probe["spec"]["containers"][0]
        assert c["command"] == ["bsp-planner"] and c["args"] == ["worker", "--help"]  # our worker's start
        assert c["resources"]["limits"]["cpu"] == "1500m"  # the average task's: budget 3000m / 2 tasks
        info = b.info()["kubernetes"]["recreate_probe"]
        assert info["seconds"] == pytest.approx(cost, abs=1e-3) and info["millicores"] == 1500
        assert "created_to_started_s" in info and "started_to_finished_s" in info  # from the pod's timestamps
    for p in procs:
        p.wait(timeout=30)


# -- what an in-place resize costs (issue 23) -------------------------------------------------------------------
@pytest.mark.parametrize("delay_s", [0.0, 0.5])
def test_the_backend_measures_an_in_place_resize_until_the_kubelet_reports_it_applied(delay_s):
    """As many probe pods as the job has tasks are resized down and up again together, as a step's batch is;
    each batch counts until the kubelet's status shows every new limit (the fake applies it after `delay_s`),
    so the measurement follows the kubelet, not the patch; a reconfiguration is planned as two batches
    (the shrinks, then the grows)."""
    with FakeApiServer(resize_delay_s=delay_s) as api:
        api.add_node("node-a", "4")
        b = checked(backend(api, zk_auth_secret=SECRET), _Task("a", "stressor"), _Task("b", "stressor"))
        cost = b.measure_reconfigure_cost("in-place")
        assert cost is not None and 2 * delay_s <= cost < 2 * delay_s + 5
        info = b.info()["kubernetes"]["in_place_probe"]
        assert info["seconds"] == pytest.approx(cost, abs=1e-3) and len(info["samples_s"]) == 3
        assert info["batch_s"] == pytest.approx(cost / 2, abs=1e-3) and info["pods"] == 2
        # one batch of two pods costs one round trip, not two
        assert all(delay_s <= x < delay_s + 2 for x in info["samples_s"])
        assert info["millicores"] == [1500.0, 750.0]  # the average task's CPU (3000m / 2), and half of it
        assert api.pods(NS) == []  # the probes are gone
        resizes = [c for c in api.calls if c.resource == "pods/resize"]
        assert len(resizes) == 6  # 3 batches x 2 pods


def test_an_in_place_probe_is_not_measured_where_the_server_cannot_resize():
    with FakeApiServer(resize_subresource=False) as api:
        api.add_node("node-a", "4")
        b = checked(backend(api, zk_auth_secret=SECRET), _Task("a", "stressor"))
        assert b.measure_reconfigure_cost("in-place") is None
        assert api.pods(NS) == []


def test_an_in_place_probe_whose_resize_is_refused_falls_back_with_a_warning():
    """Another pod takes the room the probe would grow back into: its resize is Deferred until the timeout."""
    with FakeApiServer() as api:
        api.add_node("node-a", "2")
        b = checked(backend(api, zk_auth_secret=SECRET, resize_timeout_s=0.3, fit_check=False), _Task("a", "stressor"))
        b.probe_millicores = 1500.0

        taken = []

        def take_room(*a, **kw):  # once the probe shrank, someone else's pod takes the node's free CPU
            out = real_resize(*a, **kw)
            if not taken:
                taken.append(api.add_foreign_pod(NS, "other", "node-a", "1200m"))
            return out

        real_resize = b._cluster.resize_pod
        b._cluster.resize_pod = take_room  # type: ignore[method-assign]
        assert b.measure_reconfigure_cost("in-place") is None
        assert any("could not measure an in-place resize" in w and "Deferred" in w for w in b.warnings)
        assert [p["metadata"]["name"] for p in api.pods(NS)] == ["other"]  # the probe is gone


def test_a_recreation_probe_that_cannot_be_placed_falls_back_with_a_warning(tmp_path):
    with FakeApiServer() as api:
        api.add_node("node-a", "1")  # less than the probe's 1500m
        b = checked(backend(api, zk_auth_secret=SECRET, pending_timeout_s=0.3, fit_check=False), _Task("a", "stressor"))
        b.probe_millicores = 1500.0
        assert b.measure_reconfigure_cost("recreate") is None
        assert any("could not measure a pod recreation" in w and "penalty_s" in w for w in b.warnings)
        assert api.pods(NS) == []

"""The coordinator driving the kubernetes backend, against FakeApiServer whose "kubelet" runs each pod's
container as a local process. FOR LOGIC TESTS ONLY: no CPU limit is applied to those processes, so this
checks the contract between the coordinator and the backend (pod arguments and environment, the
ZooKeeper address and credentials the workers get, start / resize / recreate / stop, the run log), not
anything a real cluster does. The workers, ZooKeeper and stress-ng are real.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)

pytest.importorskip("bsp_planner.runtime.coordinator", reason="the live runtime is not in this tree yet")

from k8s_fixtures import NS, SECRET, fake_cluster_backend, kubelet

from bsp_planner.k8s import names as N
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.testing.fake_apiserver import FakeApiServer

from zk_fixtures import settings, tiny_experiment, zk_problem

_problem = zk_problem() or (
    None if shutil.which("stress-ng") else "stress-ng is not installed (apt-get install stress-ng)"
)
pytestmark = [pytest.mark.skipif(_problem is not None, reason=_problem or ""), pytest.mark.slow]  # live runs


@pytest.mark.parametrize("how", ["in-place", "recreate"])
def test_a_live_run_through_the_kubernetes_backend(tmp_path, zk_server, creds_file, how):
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True), delete_delay_s=5.0) as api:
        api.add_node("node-a", "4")
        backend = fake_cluster_backend(f"k8s-{how}", api, zk_server, tmp_path)
        said: list[str] = []
        coord = Coordinator(
            settings(exp, zk_server, creds_file, planner="static:1", reconfigure=how),
            f"k8s-{how}",
            tmp_path / "runs",
            backend=backend,
            say=said.append,
        )
        result = coord.run()
        assert result.status == "finished", (tmp_path / f"bsp-k8s-{how}-a.log").read_text()
        assert api.pods(NS) == []  # every pod deleted at the end
    records = [json.loads(line) for line in (tmp_path / "runs" / f"k8s-{how}" / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(t["measured_s"] > 0 for r in records for t in r["tasks"])
    reconfigured = [r for r in records if r["reconfigured"]]
    assert reconfigured and all(r["reconfig_s"] > 0 for r in reconfigured)
    modes = {e.mode for e in backend.events}
    assert modes == ({"start", "in-place"} if how == "in-place" else {"start", "recreate"})
    meta = json.loads((tmp_path / "runs" / f"k8s-{how}" / "run.json").read_text())
    assert meta["backend"]["backend"] == "kubernetes" and meta["backend"]["kubernetes"]["reconfigure"] == "in-place"
    assert creds_file.read_text().strip().split(":")[1] not in json.dumps(meta)
    # planned with what a probe pod's change by this run's method cost on this (fake) cluster, not penalty_s
    cost = meta["reconfigure_cost"]
    assert cost["source"] == "measured by the kubernetes backend" and cost["planned_s"] > 0
    probe = "recreate_probe" if how == "recreate" else "in_place_probe"
    assert meta["backend"]["kubernetes"][probe]["seconds"] == pytest.approx(cost["planned_s"], abs=1e-3)
    if how == "in-place":  # a refused resize recreates a stress-ng task: that cost is measured and recorded too
        assert cost["recreate_s"] > 0 and cost["recreate_source"] == "measured by the kubernetes backend"
    # the workers joined through the address and Secret the pods were given
    pod_log = (tmp_path / f"{N.pod_name(f'k8s-{how}', 'a')}.log").read_text()
    assert "joined at step 0" in pod_log
    # the texts say what happened: a normal finish is not reported as a worker that left early
    kept = "".join(p.read_text() for p in (tmp_path / "logs").glob("*.log"))
    assert "Succeeded (the worker exited with code 0)" in kept and "before the run ended" not in kept
    planning = next(line for line in said if line.startswith("planning with"))
    assert planning.startswith(f"planning with {'an in-place' if how == 'in-place' else 'a recreate'} reconfiguration")


@pytest.mark.parametrize("env_reconfigure, expected", [(None, "in-place"), ("recreate", "recreate")])
def test_run_backend_kubernetes_on_the_command_line(
    tmp_path, zk_server, creds_file, monkeypatch, env_reconfigure, expected
):
    """No --reconfigure: the backend's default applies ($BSP_PLANNER_K8S_RECONFIGURE, else auto, which is
    in place on a server that can resize pods), never a recreation forced by the command line."""
    import yaml
    from typer.testing import CliRunner

    from bsp_planner.cli import app

    if "--zk-auth-secret" not in CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output:
        pytest.skip("`bsp-planner run` has no kubernetes options yet (the hook in runtime/cli.py, docs/kubernetes.md)")
    exp = tiny_experiment(tmp_path / "exp", steps=3)
    secrets = {SECRET: {"auth": creds_file.read_text().strip()}}
    with FakeApiServer(pod_runner=kubelet(tmp_path, secrets, workers_only=True)) as api:
        api.add_node("node-a", "4")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                }
            )
        )
        if env_reconfigure:
            monkeypatch.setenv("BSP_PLANNER_K8S_RECONFIGURE", env_reconfigure)
        else:
            monkeypatch.delenv("BSP_PLANNER_K8S_RECONFIGURE", raising=False)
        args = [
            "run",
            "--backend",
            "kubernetes",
            "--experiment",
            str(exp),
            "--planner",
            "static:1",
            "--zookeeper",
            zk_server.hosts,
            "--zk-auth-file",
            str(creds_file),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--run-id",
            "cli-k8s",
            "--namespace",
            NS,
            "--image",
            "bsp-planner:dev",
            "--kubeconfig",
            str(kubeconfig),
            "--worker-zookeeper",
            zk_server.hosts,
            "--zk-auth-secret",
            SECRET,
            "--pending-timeout",
            "60",
            "--quiet",
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert api.pods(NS) == []
    meta = json.loads((tmp_path / "runs" / "cli-k8s" / "run.json").read_text())
    assert meta["status"] == "finished"
    assert meta["settings"]["reconfigure"] == expected
    assert meta["settings"]["kubernetes"]["zk_auth_secret"] == SECRET

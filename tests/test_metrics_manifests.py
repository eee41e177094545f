"""The in-cluster coordinator's metrics: the Job serves them on a named port with Prometheus' scrape
annotations (jobs/k8s/coordinator.yaml), and the optional component jobs/k8s/components/metrics adds a
Service and a ServiceMonitor that select exactly that port of exactly that pod."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip(
    "kubernetes", reason="the official kubernetes client is not installed (pip install 'bsp-planner[kubernetes]')"
)
import yaml

from bsp_planner.runtime.cli import METRICS_HOST_ENV, METRICS_PORT_ENV
from bsp_planner.runtime.run_settings import MetricsEndpoint

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "jobs" / "k8s"
COMPONENT = BASE / "components" / "metrics"


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(docs: list[dict], kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def coordinator_pod() -> tuple[dict, dict]:
    """The coordinator Job's pod template and its coordinator container."""
    job = by_kind(load_all(BASE / "coordinator.yaml"), "Job")
    template = job["spec"]["template"]
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "coordinator"]
    return template, container


def test_the_coordinator_serves_its_metrics_on_the_port_its_annotations_name():
    template, container = coordinator_pod()
    env = {e["name"]: e.get("value") for e in container["env"]}
    endpoint = MetricsEndpoint.from_flags(env[METRICS_PORT_ENV], env[METRICS_HOST_ENV])  # as `run` reads them
    assert endpoint.host == "0.0.0.0"  # scraped from other pods: every interface, not the pod's loopback
    (port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert port["containerPort"] == endpoint.port and port["protocol"] == "TCP"
    notes = template["metadata"]["annotations"]
    assert notes == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(endpoint.port),
        "prometheus.io/path": "/metrics",
    }
    # the variables apply to a new run and to a resumed one: the command gives neither a metrics option
    assert "--metrics" not in " ".join(container["command"])
    # added after the variables the docs' patches address by index (env/0 RUN_ID, env/3 RECONFIGURE)
    names = [e["name"] for e in container["env"]]
    assert names[0] == "RUN_ID" and names[3] == "RECONFIGURE"


def test_the_component_scrapes_exactly_the_coordinators_metrics_port():
    from kubernetes import client

    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component" and kust["resources"] == ["metrics.yaml"]
    docs = load_all(COMPONENT / "metrics.yaml")
    assert sorted(d["kind"] for d in docs) == ["Service", "ServiceMonitor"]
    service, monitor = by_kind(docs, "Service"), by_kind(docs, "ServiceMonitor")
    client.V1Service.model_validate(service)
    namespace = yaml.safe_load((BASE / "kustomization.yaml").read_text())["namespace"]
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == namespace
    template, container = coordinator_pod()
    pod_labels = template["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()  # the coordinator pod
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "coordinator"  # not ZooKeeper's pods
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] in [p["name"] for p in container["ports"]]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == svc_port["name"] and endpoint["path"] == "/metrics"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_an_overlay_with_the_component_renders_the_base_and_the_monitor(tmp_path):
    """As docs/metrics.md shows it: an overlay of the base with the component."""
    shutil.copytree(BASE, tmp_path / "k8s")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [../k8s]\ncomponents: [../k8s/components/metrics]\n")
    out = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    plain = subprocess.run(["kubectl", "kustomize", str(tmp_path / "k8s")], capture_output=True, text=True, timeout=60)
    base = [d for d in yaml.safe_load_all(plain.stdout) if d]
    added = [d for d in rendered if d not in base]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in added) == [
        ("Service", "bsp-planner-coordinator-metrics"),
        ("ServiceMonitor", "bsp-planner-coordinator"),
    ]
    assert len(rendered) == len(base) + 2  # the base unchanged

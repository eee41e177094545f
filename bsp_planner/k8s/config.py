"""Connecting to a cluster: in it (the pod's service account) or from outside it (a kubeconfig).

``connect()`` returns an ``ApiClient`` and the namespace to work in: the one given, else the pod's own
namespace in the cluster, else the kubeconfig context's namespace, else ``bsp-planner`` (the kustomize
base's). The image of the pods to create is resolved the same way by :func:`resolve_image`: the one
given, else ``$BSP_PLANNER_IMAGE``, else (in the cluster) the image of the coordinator's own pod, so
that the kustomize base's ``images:`` setting drives the coordinator and its workers alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InputError
from .names import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
IMAGE_ENV = "BSP_PLANNER_IMAGE"
POD_ENV = "BSP_PLANNER_POD"


@dataclass
class Connection:
    api_client: ApiClient
    namespace: str
    where: str  # 'in-cluster' or 'kubeconfig <path> context <name>'

    @property
    def host(self) -> str:
        return self.api_client.configuration.host


def connect(
    namespace: str | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> Connection:
    """An ApiClient for the cluster: in it (service account) or from a kubeconfig."""
    try:
        from kubernetes import client, config
    except ImportError as exc:  # pragma: no cover - the venv has it
        raise InputError(
            "the kubernetes backend needs the official client: pip install 'bsp-planner[kubernetes]'",
            field="--backend",
        ) from exc
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SA_DIR / "token").is_file()
    if kubeconfig is None and context is None and in_cluster:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        ns = namespace or _read(SA_DIR / "namespace") or DEFAULT_NAMESPACE
        return Connection(client.ApiClient(cfg), ns, "in-cluster")
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    if not Path(path).expanduser().is_file():
        raise InputError(
            "no Kubernetes configuration: not inside a cluster and no kubeconfig file "
            "(set KUBECONFIG or pass --kubeconfig)",
            path=path,
        )
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        if context and chosen is None:
            raise InputError(
                f"no context {context!r} in the kubeconfig (it has {', '.join(c['name'] for c in contexts)})",
                path=path,
                field="--context",
            )
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    except config.ConfigException as exc:
        raise InputError(f"cannot use the kubeconfig: {exc}", path=path) from exc
    ns = namespace or ((chosen or {}).get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
    name = (chosen or {}).get("name", "?")
    return Connection(client.ApiClient(cfg), ns, f"kubeconfig {path} context {name}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def resolve_image(image: str | None, own_pod_image: Callable[[str], str | None] | None = None) -> str:
    """The image for worker and profiler pods (see the module's docstring)."""
    own_pod = os.environ.get(POD_ENV)
    found = image or os.environ.get(IMAGE_ENV) or (own_pod and own_pod_image and own_pod_image(own_pod))
    if found:
        return found
    raise InputError(
        f"which image should the pods run? Pass --image (e.g. bsp-planner:dev, built from jobs/Dockerfile) "
        f"or set ${IMAGE_ENV}",
        field="--image",
    )


def parse_node_selector(text: str) -> dict[str, str]:
    """'disktype=ssd,zone=a' -> {'disktype': 'ssd', 'zone': 'a'}."""
    out = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise InputError(f"expected key=value[,key=value...], got {text!r}", field="--node-selector")
        out[k.strip()] = v.strip()
    return out

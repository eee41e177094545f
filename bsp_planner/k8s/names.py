"""Names, labels and CPU quantities: the small vocabulary every Kubernetes object of bsp-planner shares.

Objects carry ``app.kubernetes.io/*`` labels plus ``bsp-planner.io/run`` (a run's pods)
or ``bsp-planner.io/profile`` (a profiling session's Jobs), so that one label selector finds exactly
what a run or a profile made. Task names are free text in a job file; in object names and label values
they become DNS-1123 labels, with a short hash whenever that changed them, so that two tasks never map
to the same name. The raw name is kept in an annotation.
"""

from __future__ import annotations

import hashlib
import math
import re

from ..core.errors import InputError

APP = "bsp-planner"
DOMAIN = "bsp-planner.io"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_RUN = f"{DOMAIN}/run"
LABEL_TASK = f"{DOMAIN}/task"
LABEL_PROFILE = f"{DOMAIN}/profile"
LABEL_CELL = f"{DOMAIN}/cell"

ANNOTATION_TASK = f"{DOMAIN}/task-name"
ANNOTATION_CPU = f"{DOMAIN}/cpu-millicores"
ANNOTATION_CELL = f"{DOMAIN}/cell"

COMPONENT_WORKER = "worker"
COMPONENT_PROFILER = "profiler"

# Names of the objects the kustomize base in jobs/k8s defines; the code refers to them by these.
DEFAULT_NAMESPACE = "bsp-planner"
SERVICE_ACCOUNT = "bsp-planner-coordinator"
ZOOKEEPER_SERVICE = "zookeeper"
ZOOKEEPER_PORT = 2181
WORKER_CONTAINER = "worker"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns_label(text: str, max_len: int = 63) -> str:
    """`text` as a DNS-1123 label (lowercase alphanumerics and '-', at most `max_len` characters).

    Unchanged when it already is one; otherwise sanitised and suffixed with a hash of the original, so
    distinct inputs ('a_b', 'a-b', 'A-B') give distinct names."""
    if len(text) <= max_len and _DNS_LABEL.match(text):
        return text
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"
    suffix = hashlib.sha256(text.encode()).hexdigest()[:6]
    base = base[: max_len - len(suffix) - 1].rstrip("-") or "x"
    return f"{base}-{suffix}"


def is_dns_label(text: str) -> bool:
    return len(text) <= 63 and bool(_DNS_LABEL.match(text))


def is_label_value(text: str) -> bool:
    return len(text) <= 63 and bool(_LABEL_VALUE.match(text))


def run_key(run_id: str) -> str:
    """A run id (letters, digits, '_', '-', up to 64) as it appears in names and labels: a DNS label of at
    most 30 characters (the id itself when it already is one, e.g. live-20261121-101500-ab12)."""
    if not run_id:
        raise InputError("expected a run id", field="--run-id")
    return dns_label(run_id, 30)


def pod_name(run_id: str, task: str) -> str:
    """The pod of one task of one run: ``bsp-<run>-<task>``, a DNS label (it is also the pod's hostname)."""
    return dns_label(f"bsp-{run_id}-{dns_label(task, 40)}")


def app_labels(component: str, own: dict[str, str], task: str | None = None) -> dict[str, str]:
    """The labels of every object of bsp-planner: the app's, its `component`, the run's or profile's
    `own`, and the task's (as a DNS label) when it belongs to one."""
    labels = {LABEL_NAME: APP, LABEL_PART_OF: APP, LABEL_MANAGED_BY: APP, LABEL_COMPONENT: component, **own}
    if task is not None:
        labels[LABEL_TASK] = dns_label(task)
    return labels


def run_selector(run_id: str) -> str:
    return f"{LABEL_RUN}={run_id},{LABEL_COMPONENT}={COMPONENT_WORKER}"


# -- CPU quantities ----------------------------------------------------------------------------------
def cpu_quantity(millicores: float) -> str:
    """Whole millicores as a Kubernetes quantity: 500 -> '500m', 2000 -> '2' (the form the API returns)."""
    m = float(millicores)
    if not math.isfinite(m) or m <= 0 or not m.is_integer():
        raise InputError(f"expected a positive whole number of millicores, got {millicores!r}", field="cpu")
    m = int(m)
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def cpu_millicores(quantity: str | int | float | None) -> float:
    """A CPU quantity ('250m', '1', '1.5', '2500000n') in millicores; None or '' is 0 (ValueError if it is
    none: the client's own parser reads it)."""
    from kubernetes.utils.quantity import parse_quantity

    return 0.0 if quantity is None or quantity == "" else float(parse_quantity(quantity) * 1000)

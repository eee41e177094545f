"""`bsp-planner k8s operator`: the BspJob operator (:mod:`.operator`), as its Deployment in
jobs/k8s/components/operator runs it."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from ..core.errors import InputError

app = typer.Typer(help="bsp-planner's Kubernetes operator: BspJobs run as coordinator Jobs.", no_args_is_help=True)


@app.command("operator")
def operator(
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        help="The namespace whose BspJobs it runs (default: the pod's own, the kubeconfig "
        "context's, else bsp-planner).",
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG; in-cluster config inside a pod)."
    ),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context."),
    image: str | None = typer.Option(
        None,
        "--image",
        help="The coordinators' image when a BspJob names none (default $BSP_PLANNER_IMAGE, or the "
        "operator pod's own).",
    ),
    interval: float = typer.Option(
        10.0, "--interval", help="Seconds between two looks at each BspJob (besides its creation)."
    ),
) -> None:
    """Run every BspJob of the namespace as a coordinator Job, resume it when its coordinator dies, and keep its
    phase in its status (until stopped: Ctrl-C or SIGTERM)."""
    from . import names as n
    from .operator import run

    if not math.isfinite(interval) or not 1.0 <= interval <= 3600.0:
        raise InputError(f"expected seconds from 1 to 3600, got {interval!r}", field="--interval")
    if namespace is not None and not n.is_dns_label(namespace):
        raise InputError(f"expected a namespace name (a DNS label), got {namespace!r}", field="--namespace")
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError("not found; expected a kubeconfig file", path=kubeconfig, field="--kubeconfig")
    run(
        namespace, kubeconfig=str(kubeconfig) if kubeconfig else None, context=context, interval_s=interval, image=image
    )

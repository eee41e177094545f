"""A live run's progress in its BspJob's status (a `RunWatcher`), and which watchers a coordinator in a
cluster gets.

The coordinator of a BspJob (the operator's Job sets ``$BSP_PLANNER_BSPJOB``) writes, through the status
subresource: at the start ``runStatus: running`` and ``steps``; after each logged step ``step`` (steps
done), ``progress`` ("12/40"), ``reconfigurations`` and ``liveSeconds`` (steps and reconfigurations so
far); at the end ``runStatus`` (finished, interrupted, failed) and, from the run's summary,
``liveTotalSeconds``, ``simulatedTotalSeconds`` and ``reconfigurations``. A resumed run continues the
counts its BspJob holds. The operator owns ``phase``; see bsp_planner/k8s/bspjob.py.
"""

from __future__ import annotations

import os
from typing import Any

from ....core.errors import InputError
from ....k8s.bspjob import BSPJOB_ENV
from ....k8s.config import POD_ENV, connect
from ....k8s.names import is_dns_label
from ....k8s.objects import ReportingCluster
from .events import KubernetesEvents


class BspJobStatus:
    """A RunWatcher writing the run's progress into its BspJob's status (see the module)."""

    def __init__(self, api: ReportingCluster, name: str) -> None:
        self.api = api
        self.name = name
        self.steps = 0
        self.reconfigurations = 0
        self.live_s = 0.0

    def _write(self, **status: Any) -> None:
        self.api.patch_bspjob_status(self.name, status)

    def run_started(self, run_id: str, tasks: list[str], steps: int) -> None:
        before = (self.api.get_bspjob_status(self.name) or {}).get("status") or {}
        if before.get("runStatus"):  # a resumed run: its counts so far
            self.reconfigurations = int(before.get("reconfigurations") or 0)
            self.live_s = float(before.get("liveSeconds") or 0.0)
        self.steps = steps
        self._write(runStatus="running", steps=steps, progress=f"{int(before.get('step') or 0)}/{steps}")

    def step_logged(self, rec: dict[str, Any]) -> None:
        done = int(rec["step"]) + 1
        self.reconfigurations += bool(rec.get("reconfigured"))
        self.live_s += float(rec.get("step_s", 0.0)) + float(rec.get("reconfig_s", 0.0))
        self._write(
            step=done,
            progress=f"{done}/{self.steps}",
            reconfigurations=self.reconfigurations,
            liveSeconds=round(self.live_s, 3),
        )

    def noticed(self, kind: str, message: str, **counts: float) -> None:
        pass  # told as Events; the status holds progress and totals

    def run_ended(self, status: str, message: str, summary: dict[str, Any]) -> None:
        totals: dict[str, Any] = {}
        if summary:
            totals = {
                "liveTotalSeconds": summary["live_total_s"],
                "simulatedTotalSeconds": summary["simulated_total_s"],
                "reconfigurations": summary["reconfigurations"],
                "liveSeconds": summary["live_total_s"],
                "step": summary["steps_done"],
                "progress": f"{summary['steps_done']}/{summary['steps']}",
            }
        self._write(runStatus=status, **totals)


def cluster_watchers(settings: Any) -> list[Any]:
    """A coordinator's watchers in a cluster: Events on its Job where ``$BSP_PLANNER_POD`` names its own pod (the
    in-cluster coordinator Job sets it), its BspJob's status where ``$BSP_PLANNER_BSPJOB`` names one; none for
    another backend, or outside a cluster."""
    pod, bspjob = os.environ.get(POD_ENV), os.environ.get(BSPJOB_ENV)
    if settings.backend not in ("kubernetes", "k8s") or not (pod or bspjob):
        return []
    if bspjob and not is_dns_label(bspjob):
        raise InputError(f"expected a BspJob's name (a DNS label), got {bspjob!r}", field=f"${BSPJOB_ENV}")
    k8s = settings.kubernetes or {}
    api = ReportingCluster(connect(k8s.get("namespace"), kubeconfig=k8s.get("kubeconfig"), context=k8s.get("context")))
    return ([KubernetesEvents(api, pod)] if pod else []) + ([BspJobStatus(api, bspjob)] if bspjob else [])

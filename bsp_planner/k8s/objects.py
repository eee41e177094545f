"""The calls on what reports a run to the cluster's users: BspJobs (:mod:`.bspjob`), Events, and one Job by name.

:class:`ReportingCluster` adds them to :class:`~.cluster.Cluster` (same namespace, same error handling: a
KubernetesError that says what to do). The coordinator's Role grants what the coordinator calls of them
(``ROLE_RULES`` in :mod:`.cluster`); :data:`OPERATOR_RULES` is what the operator's Role in
jobs/k8s/components/operator grants, and a test holds both to the calls the fake API server records.
"""

from __future__ import annotations

from typing import Any

from . import bspjob as b
from .cluster import Cluster
from .config import Connection

MERGE_PATCH = "application/merge-patch+json"

#: (apiGroup, resource) -> verbs of the operator's Role (kopf itself lists, watches and patches BspJobs,
#: and posts Events about its handlers)
OPERATOR_RULES: dict[tuple[str, str], tuple[str, ...]] = {
    (b.GROUP, b.PLURAL): ("get", "list", "patch", "watch"),
    (b.GROUP, f"{b.PLURAL}/status"): ("get", "patch"),
    ("batch", "jobs"): ("create", "get", "list"),
    ("", "pods"): ("get", "list"),
    ("", "events"): ("create", "patch"),
}


class ReportingCluster(Cluster):
    """:class:`~.cluster.Cluster` with BspJobs, Events and reading one Job."""

    def __init__(self, conn: Connection, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        super().__init__(conn, request_timeout_s)
        self.custom = client.CustomObjectsApi(conn.api_client)

    # -- BspJobs -----------------------------------------------------------------------------------
    def get_bspjob(self, name: str) -> dict | None:
        fn = self.custom.get_namespaced_custom_object
        return self._call(
            f"read bspjob {name}", fn, b.GROUP, b.VERSION, self.namespace, b.PLURAL, name, missing_ok=True
        )

    def get_bspjob_status(self, name: str) -> dict | None:
        """The BspJob read through its status subresource (what a coordinator may read of it)."""
        fn = self.custom.get_namespaced_custom_object_status
        return self._call(
            f"read bspjob {name}", fn, b.GROUP, b.VERSION, self.namespace, b.PLURAL, name, missing_ok=True
        )

    def list_bspjobs(self) -> list[dict]:
        fn = self.custom.list_namespaced_custom_object
        return self._list("list bspjobs", fn, b.GROUP, b.VERSION, self.namespace, b.PLURAL) or []

    def patch_bspjob_status(self, name: str, status: dict[str, Any]) -> dict | None:
        """Merge `status` into the BspJob's (the status subresource; a key set to None is removed); None
        when the BspJob is gone."""
        fn = self.custom.patch_namespaced_custom_object_status
        args = (b.GROUP, b.VERSION, self.namespace, b.PLURAL, name, {"status": status})
        return self._call(f"write bspjob {name}'s status", fn, *args, missing_ok=True, _content_type=MERGE_PATCH)

    # -- Events ------------------------------------------------------------------------------------
    def create_event(self, body: dict) -> dict | None:
        fn = self.core.create_namespaced_event
        return self._call(f"create event {body['reason']}", fn, self.namespace, body)

    def patch_event(self, name: str, patch: dict) -> dict | None:
        """None when the event is gone (events expire, an hour by default)."""
        fn = self.core.patch_namespaced_event
        return self._call(
            f"update event {name}", fn, name, self.namespace, patch, missing_ok=True, _content_type=MERGE_PATCH
        )

    # -- one Job -----------------------------------------------------------------------------------
    def get_job(self, name: str) -> dict | None:
        return self._call(f"read job {name}", self.batch.read_namespaced_job, name, self.namespace, missing_ok=True)

"""FakeApiServer: an in-process HTTP server speaking enough of the Kubernetes REST API for bsp-planner's
calls. FOR LOGIC TESTS ONLY.

It lets the real ``kubernetes`` client (its URL building, serialisation, content types, error mapping)
drive the backend's and the profiler's reconcile logic on this machine, where no cluster exists. It is
not a cluster and proves nothing about one: its "scheduler" puts a pending pod on the first node (of
those its nodeSelector and required node affinity admit) whose allocatable CPU covers the requests already
there, its "kubelet" starts containers and applies resizes at once (or after a set delay) and runs
profiling Jobs by calling a function the test gives, and it evicts a pod when a test says so. What it
does check like a real server:

- request bodies against the client's own models (unknown or missing fields -> 422), and a patch's
  content type (a dict sent as a JSON patch -> 400, as a real server answers);
- names (DNS-1123) and duplicates (409), missing objects (404);
- (optionally) a pod's container as a local process: ``pod_runner(pod)`` returns a ``Popen``-like
  object when the pod starts; its exit makes the pod Succeeded or Failed, deleting the pod terminates
  it; an OSError from it (the program is not in the image) fails the container with reason StartError
  and exit code 128, as the kubelet reports it. No CPU limit is applied to it: resizes only change the
  reported status;
- a container's tcpSocket readiness probe (on 127.0.0.1, where pod_runner's processes run; ``podIP`` is
  127.0.0.1): ``containerStatuses[].ready`` while the port accepts connections;
- resize progress as the kubelet reports it since 1.33: conditions ``PodResizePending`` (reason
  Deferred: no room on the node now; Infeasible: more than the node's allocatable) and
  ``PodResizeInProgress``, the applied values in ``containerStatuses[].resources``, and from 1.35
  ``metadata.generation`` (bumped by the resize) against ``status.observedGeneration``;
- authorisation, when given RBAC rules (e.g. parsed from jobs/k8s/rbac.yaml): a request its rules do
  not grant gets 403, like the API server's RBAC authoriser. Every request is recorded in ``calls`` as
  (verb, apiGroup, resource[/subresource], namespace), for tests of which verbs the code uses.

Everything runs on 127.0.0.1 with a port the OS chooses; ``with FakeApiServer() as api:`` stops it.
Code under test reaches it as it reaches any cluster, through a kubeconfig file: ``api.kubeconfig``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from .fake_cluster import FakeCluster, _terminate
from .fake_http import Handler


class FakeApiServer(FakeCluster):
    """See the module docstring. For logic tests only. Its settings are :class:`~.fake_cluster.FakeCluster`'s
    (version, delays, job_runner, pod_runner, resize_subresource, rules)."""

    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None
    _kubeconfig_dir: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        handler = type("Handler", (Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-apiserver", daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            for proc in self._procs.values():
                _terminate(proc, kill=True)
            self._procs.clear()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self._kubeconfig_dir is not None:
            shutil.rmtree(self._kubeconfig_dir, ignore_errors=True)
            self._kubeconfig_dir = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self.server is not None, "start() first"
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def kubeconfig(self) -> str:
        """A kubeconfig file pointing at this server (JSON, which is YAML; written on first use, removed by stop())."""
        if self._kubeconfig_dir is None:
            self._kubeconfig_dir = tempfile.mkdtemp(prefix="fake-apiserver-")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        }
        path = Path(self._kubeconfig_dir, "kubeconfig")
        path.write_text(json.dumps(config))
        return str(path)

    def used_permissions(self) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every authorised namespaced request made so far."""
        with self.lock:
            return {(c.group, c.resource, c.verb) for c in self.calls if c.namespace is not None and c.status != 403}

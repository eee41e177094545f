"""Kubernetes support shared by the live backend (`runtime/backends/kubernetes/`) and the Kubernetes
profiler (`profiling/kubernetes.py`).

- :mod:`.names`: label keys, DNS-1123 names for runs, tasks and grid cells, CPU quantities.
- :mod:`.manifests`: the objects the code creates (worker Pods, profiling Jobs, resize patches), as
  plain dicts that the official client sends as they are.
- :mod:`.binpack`: does a configuration fit the nodes' allocatable CPU, next to every other pod's requests.
- :mod:`.capabilities`: the server's version, whether it has the ``pods/resize`` subresource, and the
  choice between in-place resize and recreation.
- :mod:`.cluster`: the API calls (one small class over ``CoreV1Api`` / ``BatchV1Api``) and how a pod's
  status reads: running, pending and why, evicted, resized.
- :mod:`.config`: the client's configuration, in the cluster (service account) or outside (kubeconfig).

The fake API server the logic tests use lives in :mod:`bsp_planner.testing.fake_apiserver`.

The ``kubernetes`` package is optional (``pip install bsp-planner[kubernetes]``); every module here
imports it lazily or only where it is needed, so `bsp-planner --help` does not.
"""

"""Kubernetes support shared by the live backend (`runtime/backends/kubernetes/`) and the Kubernetes
profiler (`profiling/kubernetes.py`): names and labels, the objects it creates (as plain dicts the official
client sends as they are), the fit check, the server's capabilities, the API calls and the connection.

The fake API server the logic tests use lives in :mod:`bsp_planner.testing.fake_apiserver`.

The ``kubernetes`` package is optional (``pip install bsp-planner[kubernetes]``); every module here
imports it lazily or only where it is needed, so `bsp-planner --help` does not.
"""

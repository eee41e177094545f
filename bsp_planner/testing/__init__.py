"""Test helpers shipped with the package (as kazoo ships ``kazoo.testing``), never imported by production code.

- :mod:`.fake_apiserver`: ``FakeApiServer``, an in-process HTTP server speaking enough of the Kubernetes
  REST API for bsp-planner's calls, reached through a kubeconfig file like any cluster. For logic tests
  only: it schedules, resizes and evicts by rule, it is not a cluster. Its parts: :mod:`.fake_cluster`
  (the objects, scheduler and kubelet), :mod:`.fake_http` (the REST verbs), :mod:`.fake_rbac` (RBAC rules),
  :mod:`.fake_resources` (CRDs and their objects, Events, discovery and tables for kubectl).
"""

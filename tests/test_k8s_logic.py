"""Pure logic of the Kubernetes backend: bin packing over nodes, the server's capabilities, the choice
between in-place resize and recreation, and how a pod's status reads. No cluster, no server."""

from __future__ import annotations

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.k8s.binpack import DoesNotFit, NodeCapacity, fits_in_place, node_capacities, pack, pod_cpu_request
from bsp_planner.k8s.capabilities import ServerCapabilities, choose_reconfigure_mode, detect, parse_version
from bsp_planner.k8s.cluster import pod_state, resize_done


def node(name, cpu, *, taints=None, unschedulable=False, ready="True", labels=None):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable, **({"taints": taints} if taints else {})},
        "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": ready}]},
    }


def pod(name, node_name, *cpus, phase="Running", ns="other", labels=None, init=(), overhead=None):
    spec = {
        "nodeName": node_name,
        "containers": [{"name": f"c{i}", "resources": {"requests": {"cpu": c}}} for i, c in enumerate(cpus)],
    }
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = {"cpu": overhead}
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


# -- requests and capacities -------------------------------------------------------------------------
def test_a_pods_request_counts_containers_sidecars_init_peaks_and_overhead():
    assert pod_cpu_request(pod("p", "n", "250m", "1")) == 1250
    sidecar = {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
    big_init = {"name": "i", "resources": {"requests": {"cpu": "2"}}}
    assert pod_cpu_request(pod("p", "n", "500m", init=[sidecar])) == 600
    assert pod_cpu_request(pod("p", "n", "500m", init=[big_init, sidecar])) == 2100  # the init peak, with the sidecar
    assert pod_cpu_request(pod("p", "n", "500m", overhead="50m")) == 550
    assert pod_cpu_request({"spec": {"containers": [{"name": "x"}]}}) == 0  # best effort


def test_node_capacities_count_bound_unfinished_pods_and_mark_unusable_nodes():
    nodes = [
        node("a", "4"),
        node("b", "2", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
        node("c", "8", unschedulable=True),
        node("d", "8", ready="False"),
        node("e", "8", labels={"pool": "x"}),
        node("f", "8", taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
    ]
    pods = [
        pod("x", "a", "1"),
        pod("y", "a", "500m"),
        pod("done", "a", "2", phase="Succeeded"),
        pod("unbound", "", "3", phase="Pending"),
        pod("mine", "a", "1", ns="bsp", labels={"bsp-planner.io/run": "r"}),
    ]
    caps = {
        c.name: c
        for c in node_capacities(
            nodes, pods, node_selector={"pool": "x"}, movable=lambda p: p["metadata"]["name"] == "mine"
        )
    }
    assert caps["a"].requested_m == 1500 and caps["a"].free_m == 2500
    assert caps["b"].unschedulable.startswith("tainted")
    assert caps["c"].unschedulable == "cordoned"
    assert caps["d"].unschedulable == "not Ready"
    assert caps["e"].unschedulable is None  # selected
    assert caps["a"].unschedulable == "not selected by pool=x"
    assert caps["f"].unschedulable == "not selected by pool=x"  # PreferNoSchedule alone would not exclude it


# -- packing -----------------------------------------------------------------------------------------
def caps(*free, alloc=None):
    return [NodeCapacity(f"n{i}", alloc or f, (alloc or f) - f) for i, f in enumerate(free)]


def test_pack_places_every_task_within_each_nodes_free_cpu():
    placement = pack({"a": 1500, "b": 1000, "c": 1000, "d": 500}, caps(2000, 2000))
    assert set(placement) == {"a", "b", "c", "d"}
    load = {}
    for t, n in placement.items():
        load[n] = load.get(n, 0) + {"a": 1500, "b": 1000, "c": 1000, "d": 500}[t]
    assert all(v <= 2000 for v in load.values())


def test_pack_finds_a_placement_that_best_fit_decreasing_misses():
    # best fit decreasing: 5->n0, 4->n0 (1 left), 4->n1, 3->n1, 2->n1, then 2 fits nowhere;
    # but n0 = 5+3+2 and n1 = 4+4+2 works
    req = {"a": 5, "b": 4, "c": 4, "d": 3, "e": 2, "f": 2}
    placement = pack(req, caps(10, 10))
    assert len(placement) == 6
    for n in ("n0", "n1"):
        assert sum(req[t] for t, k in placement.items() if k == n) == 10


@pytest.mark.parametrize(
    "requests, free, message",
    [
        ({"big": 3000}, (2000, 2000), "task 'big' asks for 3000m of CPU but no node has more than 2000m free"),
        (
            {"a": 1500, "b": 1500, "c": 1500},
            (2000, 2000),
            "asks for 4500m of CPU in all, the schedulable nodes have 4000m free",
        ),
        (
            {"a": 1500, "b": 1500, "c": 1000},
            (2000, 2000),
            "fit the free CPU in total (4000m) but cannot be split over the nodes",
        ),
    ],
)
def test_pack_refuses_with_the_numbers(requests, free, message):
    with pytest.raises(DoesNotFit, match=message.replace("(", r"\(").replace(")", r"\)")):
        pack(requests, caps(*free))


def test_pack_counts_other_pods_and_skips_unusable_nodes():
    nodes = [NodeCapacity("a", 4000, 3500), NodeCapacity("b", 8000, 0, "cordoned")]
    with pytest.raises(
        DoesNotFit, match=r"no node has more than 500m free .*b: 8000m free of 8000m allocatable \(cordoned\)"
    ):
        pack({"t": 1000}, nodes)
    with pytest.raises(DoesNotFit, match="no node can take new pods"):
        pack({"t": 1}, [NodeCapacity("b", 8000, 0, "not Ready")])
    assert pack({}, []) == {}


def test_in_place_increases_must_fit_on_the_pods_own_node_after_its_decreases():
    nodes = [NodeCapacity("a", 4000, 3500), NodeCapacity("b", 4000, 1000)]
    changes = {
        "up_a": ("a", 1000, 1800),
        "down_a": ("a", 1500, 1000),
        "up_b": ("b", 1000, 4500),
        "same": ("b", 500, 500),
    }
    ok = fits_in_place(changes, nodes)
    # node a: 500 free + 500 freed by down_a = 1000 >= the 800 up_a needs; node b: 3000 free < 3500
    assert ok == {"up_a": True, "down_a": True, "up_b": False, "same": True}
    assert fits_in_place({"x": ("gone", 500, 900)}, nodes) == {"x": False}


# -- capabilities and the choice of reconfiguration ----------------------------------------------------
def test_versions_parse_from_managed_clusters_too():
    assert parse_version("1", "33") == (1, 33)
    assert parse_version("1", "33+", "v1.33.2-eks-1") == (1, 33)
    assert parse_version("", "", "v1.34.0+k3s1") == (1, 34)
    assert parse_version(None, None, None) == (0, 0)


def test_capabilities_come_from_discovery_not_the_version_alone():
    v = {"major": "1", "minor": "33", "gitVersion": "v1.33.1"}
    with_resize = detect(v, {"resources": [{"name": "pods"}, {"name": "pods/resize"}]})
    gate_off = detect(v, {"resources": [{"name": "pods"}, {"name": "pods/status"}]})
    assert with_resize.in_place_resize and not gate_off.in_place_resize
    assert with_resize.version == (1, 33)


NEW = ServerCapabilities("v1.33.1", (1, 33), True)
OLD = ServerCapabilities("v1.32.4", (1, 32), False)


@pytest.mark.parametrize(
    "asked, caps_, mode",
    [
        ("auto", NEW, "in-place"),
        ("auto", OLD, "recreate"),
        ("recreate", NEW, "recreate"),
        ("in-place", NEW, "in-place"),
        ("recreate", OLD, "recreate"),
    ],
)
def test_the_reconfiguration_mode_follows_the_server_and_the_flag(asked, caps_, mode):
    got, why = choose_reconfigure_mode(asked, caps_)
    assert got == mode and why


def test_forcing_in_place_on_a_server_without_resize_says_what_to_do():
    with pytest.raises(
        InputError, match=r"pods/resize subresource \(Kubernetes 1.33 or later.*v1.32.4.*--reconfigure recreate"
    ):
        choose_reconfigure_mode("in-place", OLD)
    with pytest.raises(InputError, match="expected one of auto, in-place, recreate"):
        choose_reconfigure_mode("sometimes", NEW)


# -- reading pod status ------------------------------------------------------------------------------
def status_pod(phase, *, conds=(), cstate=None, reason=None, message=None, limits="500m", actual=None, deleting=False):
    p = {
        "metadata": {"name": "p"},
        "spec": {
            "nodeName": "n" if phase != "Pending" else None,
            "containers": [{"name": "worker", "resources": {"limits": {"cpu": limits}}}],
        },
        "status": {"phase": phase, "conditions": list(conds)},
    }
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if reason:
        p["status"]["reason"] = reason
        p["status"]["message"] = message
    if cstate is not None:
        cs = {"name": "worker", "state": cstate}
        if actual:
            cs["resources"] = {"limits": {"cpu": actual}}
        p["status"]["containerStatuses"] = [cs]
    return p


def test_pod_states_tell_pending_running_lost_and_exited_apart():
    unsched = pod_state(
        status_pod(
            "Pending",
            conds=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                }
            ],
        )
    )
    assert (
        unsched.waiting == "unschedulable: 0/3 nodes are available: 3 Insufficient cpu." and not unsched.fatal_waiting
    )
    pull = pod_state(
        status_pod("Pending", cstate={"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}})
    )
    assert pull.fatal_waiting and "ErrImageNeverPull" in pull.waiting
    secret = pod_state(
        status_pod(
            "Pending", cstate={"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "x" not found'}}
        )
    )
    assert secret.fatal_waiting
    running = pod_state(status_pod("Running", cstate={"running": {}}, actual="500m"))
    assert running.running and running.problem is None and running.actual_cpu_m == 500
    evicted = pod_state(
        status_pod("Failed", reason="Evicted", message="low on memory", cstate={"terminated": {"exitCode": 137}})
    )
    assert evicted.platform_lost and evicted.problem == "the pod was evicted: low on memory"
    rejected = pod_state(status_pod("Failed", reason="OutOfcpu", message="Node didn't have enough resource: cpu"))
    assert rejected.platform_lost and "OutOfcpu" in rejected.problem
    deleted = pod_state(status_pod("Running", cstate={"running": {}}, deleting=True))
    assert deleted.platform_lost and "being deleted" in deleted.problem
    gone = pod_state(None)
    assert gone.phase == "Gone" and gone.platform_lost
    crashed = pod_state(
        status_pod("Failed", cstate={"terminated": {"exitCode": 3, "reason": "Error", "message": "zk lost"}})
    )
    assert not crashed.platform_lost and crashed.exit_code == 3 and "exited with code 3" in crashed.problem


def test_a_resize_is_done_when_the_kubelet_reports_the_new_limit():
    pending = status_pod(
        "Running",
        cstate={"running": {}},
        limits="1",
        actual="500m",
        conds=[{"type": "PodResizeInProgress", "status": "True"}],
    )
    assert not resize_done(pod_state(pending), 1000)
    applied = status_pod("Running", cstate={"running": {}}, limits="1", actual="1")
    assert resize_done(pod_state(applied), 1000)
    infeasible = pod_state(
        status_pod(
            "Running",
            cstate={"running": {}},
            limits="64",
            actual="500m",
            conds=[
                {
                    "type": "PodResizePending",
                    "status": "True",
                    "reason": "Infeasible",
                    "message": "Node didn't have enough capacity",
                }
            ],
        )
    )
    assert infeasible.resize_infeasible == "Node didn't have enough capacity" and infeasible.resize.startswith(
        "pending: Infeasible"
    )

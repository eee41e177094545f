"""The shipped in-place experiments plan live with the measured in-place cost (issue 23): their
`penalty_s = 0.0002` (a local quota rewrite, what `simulate` charges) is only the fallback where the
backend cannot measure; on Kubernetes the pods/resize round trip is ~1 s, and planning with 0.0002 s
there made mpc resize as if it were free."""

from __future__ import annotations

import pytest

from bsp_planner.inputs.shipped import data_path
from bsp_planner.runtime.backends import Backend, Capabilities, TaskStatus
from bsp_planner.runtime.coordinator import Coordinator

from zk_fixtures import settings


class MeasuringBackend(Backend):
    """A backend whose measurement of each method gives a set figure (None: it cannot measure)."""

    name = "kubernetes"  # an in-place run on Kubernetes may recreate too: both methods are resolved

    def __init__(self, costs: dict[str, float | None]) -> None:
        self.costs = costs
        self.asked: list[str] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(in_place=True, sees_exit=True)

    def measure_reconfigure_cost(self, method: str) -> float | None:
        self.asked.append(method)
        return self.costs.get(method)

    def start_task(self, launch, millicores) -> None: ...

    def resize_task(self, task, millicores) -> None: ...

    def recreate_task(self, launch, millicores) -> None: ...

    def stop_task(self, task, timeout_s=10.0) -> TaskStatus:
        return TaskStatus(alive=False)


def planned(tmp_path, experiment: str, mode: str, backend: MeasuringBackend) -> Coordinator:
    creds = tmp_path / "zk-auth"
    creds.write_text("tester:secret\n")
    creds.chmod(0o600)
    run = settings(
        data_path(f"experiments/{experiment}.toml"),
        type("Zk", (), {"hosts": "127.0.0.1:9"})(),
        creds,
        planner="mpc",
        mode=mode,
        reconfigure="in-place",
    )
    coord = Coordinator(run, "shipped", tmp_path / "runs", backend=backend)
    coord._load()
    coord.backend = backend
    coord._plan_on_nodes()
    coord.settings.reconfigure = "in-place"
    coord._plan_with_method_cost()
    return coord


SHIPPED = [("live-inplace", "perfect"), ("particles-3", "forecast"), ("kernel-3p", "perfect")]


@pytest.mark.parametrize("experiment, mode", SHIPPED)
def test_the_shipped_in_place_experiments_plan_live_with_the_measured_in_place_cost(tmp_path, experiment, mode):
    coord = planned(tmp_path, experiment, mode, MeasuringBackend({"in-place": 1.1, "recreate": 5.0}))
    assert coord.exp.penalty_s == 0.0002  # what simulate charges: not what the live run plans with
    assert coord.ctx.penalty_s == 1.1
    cost = coord.reconfigure_cost
    assert cost["source"] == "measured by the kubernetes backend" and cost["in_place_s"] == 1.1
    assert cost["recreate_s"] == 5.0  # a refused resize recreates a stress-ng task: its cost is recorded


@pytest.mark.parametrize("experiment, mode", SHIPPED[:1])
def test_penalty_s_is_only_the_fallback_where_nothing_can_be_measured(tmp_path, experiment, mode):
    coord = planned(tmp_path, experiment, mode, MeasuringBackend({}))
    assert coord.ctx.penalty_s == 0.0002
    assert coord.reconfigure_cost["source"] == "the experiment's penalty_s"
    assert coord.reconfigure_cost["recreate_s"] is None
    assert coord.reconfigure_cost["recreate_source"] == "could not be measured"


class NodesBackend(MeasuringBackend):
    """A backend with nodes (as Kubernetes reads them), recording where it was told to place the tasks."""

    def __init__(self, nodes: list[tuple[str, float]]) -> None:
        super().__init__({"in-place": 0.01})
        self.nodes = nodes
        self.placed: dict[str, str] = {}

    def cluster_nodes(self):
        return list(self.nodes)

    def place(self, placement: dict[str, str]) -> None:
        self.placed = dict(placement)


def test_a_resumed_run_plans_on_the_nodes_it_recorded_not_on_what_is_free_now(tmp_path):
    """Its decisions are made again (and checked against the log), so it must plan on the same nodes."""
    from zk_fixtures import tiny_experiment

    exp = tiny_experiment(tmp_path / "exp")
    creds = tmp_path / "zk-auth"
    creds.write_text("tester:secret\n")
    creds.chmod(0o600)
    run = settings(exp, type("Zk", (), {"hosts": "127.0.0.1:9"})(), creds, planner="mpc", reconfigure="in-place")
    first = Coordinator(run, "nodes", tmp_path / "runs", backend=NodesBackend([("n1", 1000.0), ("n2", 600.0)]))
    first._load()
    first.backend = first._backend
    first._plan_on_nodes()
    assert first.cluster_record["source"] == "the kubernetes backend"
    assert {n["name"]: n["cpu_millicores"] for n in first.cluster_record["nodes"]} == {"n1": 1000.0, "n2": 600.0}
    assert sorted(first.backend.placed) == ["a", "b", "c"]  # every task placed on one of them
    assert first.ctx.nodes is not None  # the planner plans with the nodes' capacity

    later = NodesBackend([("n1", 4000.0), ("n2", 4000.0), ("n3", 4000.0)])  # the cluster has changed since
    resumed = Coordinator(run, "nodes", tmp_path / "runs", resume=True, backend=later)
    resumed._load()
    resumed.store.meta = {"cluster": first.cluster_record}
    resumed.backend = later
    resumed._plan_on_nodes()
    assert resumed.cluster_record["nodes"] == first.cluster_record["nodes"]
    assert resumed.cluster_record["source"] == "run.json" and later.placed == first.backend.placed

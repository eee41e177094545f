"""A cluster is nodes: per-node capacity in the allocators and bounds, the fit rules a plan is replayed
through, the [[node]] settings, and the shipped multi-node experiments."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from bsp_planner.allocation.base import CpuLevels
from bsp_planner.allocation.floor import floor_levels
from bsp_planner.allocation.greedy import GreedyAllocator
from bsp_planner.allocation.node_limits import NodeLimits
from bsp_planner.allocation.nodes import NodeConstrained, greedy_with_nodes, solve_frame_nodes
from bsp_planner.model.cluster import Cluster, ClusterExecutor, place_balanced, repack
from bsp_planner.planners.base import ConfigTable, PlanningContext, make_planner
from bsp_planner.planners.floor import floor_result
from bsp_planner.planners.optimum import optimum_plan, optimum_result
from bsp_planner.simulate.executor import SimulatedExecutor
from bsp_planner.simulate.simulation import simulate

from cli_run import run_cli
from synthetic import DATA


def durations_from_work(work, levels):
    """(tasks, steps) work -> (tasks, levels, steps) durations, non-increasing in level."""
    return work[:, None, :] / np.arange(1, levels + 1)[None, :, None]


def all_configs(max_level, budget, limits):
    cfgs = np.array(list(itertools.product(*[range(x + 1) for x in max_level])), dtype=np.int64)
    return cfgs[(cfgs.sum(axis=1) <= budget) & limits.fits(cfgs)]


def random_case(rng, n_nodes=2):
    n, levels, m = int(rng.integers(2, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 7))
    actual = durations_from_work(rng.uniform(1, 10, (n, m)), levels)
    max_level = rng.integers(0, levels, n)
    budget = int(rng.integers(0, max_level.sum() + 2))
    limits = NodeLimits(rng.integers(0, n_nodes, n), rng.integers(0, levels + 1, n_nodes))
    return actual, max_level, budget, limits


def test_node_aware_allocators_only_return_configurations_that_fit():
    rng = np.random.default_rng(1)
    for _ in range(60):
        actual, max_level, budget, limits = random_case(rng)
        k = actual.shape[2]
        w = 0.95 ** np.arange(k)
        for name in ("greedy", "threshold", "exact"):
            lv = NodeConstrained(name, limits).allocate(actual, w, max_level, budget)
            assert np.all(lv <= max_level) and lv.sum() <= budget and limits.fits(lv), name


def test_greedy_with_loose_nodes_is_the_thesis_greedy():
    rng = np.random.default_rng(2)
    for _ in range(40):
        actual, max_level, budget, _ = random_case(rng)
        loose = NodeLimits(np.zeros(actual.shape[0], dtype=np.int64), np.array([10_000]))
        w = 0.95 ** np.arange(actual.shape[2])
        got = greedy_with_nodes(actual[None], w[None], max_level, budget, loose)[0]
        assert np.array_equal(got, GreedyAllocator().allocate(actual, w, max_level, budget))


def test_floor_and_exact_frame_equal_brute_force_under_nodes():
    rng = np.random.default_rng(3)
    for _ in range(60):
        actual, max_level, budget, limits = random_case(rng)
        cfgs = all_configs(max_level, budget, limits)
        n = actual.shape[0]
        per_step = np.array([actual[np.arange(n), c, :].max(axis=0) for c in cfgs])  # (P, m)
        _, times = floor_levels(actual, max_level, budget, limits)
        assert np.allclose(times, per_step.min(axis=0))
        w = 0.9 ** np.arange(actual.shape[2])
        sol = solve_frame_nodes(actual, w, max_level, budget, limits)
        assert limits.fits(sol.levels) and sol.levels.sum() <= budget
        assert sol.value == pytest.approx((per_step * w).sum(axis=1).min(), rel=1e-9)


def test_optimum_under_nodes_equals_brute_force_over_every_plan():
    rng = np.random.default_rng(4)
    for _ in range(30):
        actual, max_level, budget, limits = random_case(rng)
        n, _, m = actual.shape
        penalty = float(rng.choice([0.0, 0.3, 2.0]))
        plan = optimum_plan(actual, max_level, budget, penalty, m, nodes=limits)
        lv = plan.levels(m, n)
        assert np.all(limits.fits(lv))
        cfgs = all_configs(max_level, budget, limits)
        step = np.array([actual[np.arange(n), c, :].max(axis=0) for c in cfgs])
        value = step[:, 0].copy()
        for t in range(1, m):
            value = np.minimum(value, value.min() + penalty) + step[:, t]
        assert plan.value == pytest.approx(float(value.min()), rel=1e-9, abs=1e-12)


def _context(actual, limits, budget, max_level, penalty, allocator="greedy"):
    n, L, m = actual.shape
    h = m
    padded = np.concatenate([actual, np.repeat(actual[:, :, -1:], h - 1, axis=2)], axis=2)
    predicted = sliding_window_view(padded, h, axis=2).transpose(2, 0, 1, 3)
    cpu = CpuLevels(100, 100, 100 * L, 100 * (n + budget))
    configs = ConfigTable(predicted, NodeConstrained(allocator, limits), max_level, budget, 0.95)
    return PlanningContext(
        steps=m,
        cpu=cpu,
        max_level=max_level,
        penalty_s=penalty,
        configs=configs,
        mid_durations=actual.mean(axis=2),
        exppo_max_level=max_level,
        nodes=limits,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    penalty=st.sampled_from([0.0, 0.2, 1.0, 5.0]),
    allocator=st.sampled_from(["greedy", "exact"]),
)
def test_floor_le_optimum_le_every_perfect_mode_strategy_under_nodes(seed, penalty, allocator):
    rng = np.random.default_rng(seed)
    n, L, m = int(rng.integers(2, 6)), int(rng.integers(3, 8)), int(rng.integers(4, 14))
    actual = durations_from_work(rng.uniform(1, 10, (n, m)), L)
    max_level = np.full(n, L - 1)
    budget = int(rng.integers(1, n * (L - 1)))
    limits = NodeLimits(rng.integers(0, 3, n), rng.integers(1, L + 2, 3))
    ctx = _context(actual, limits, budget, max_level, penalty, allocator)
    floor = floor_result(ctx, actual, "perfect").total_s
    opt = optimum_result(ctx, actual, "perfect")
    assert np.all(limits.fits(opt.levels))
    assert floor <= opt.total_s + 1e-9
    for spec in ("exppo", "static:1", "static:3", "dp", "mpc"):
        r = simulate(make_planner(spec), _context(actual, limits, budget, max_level, penalty, allocator), actual)
        assert np.all(limits.fits(r.levels)), spec
        assert opt.total_s <= r.total_s + 1e-9 * max(1.0, r.total_s), spec


def test_a_change_that_does_not_fit_is_a_recreate_and_a_stop_for_a_process():
    cpu = CpuLevels(250, 250, 2000, 6000)
    cluster = Cluster(
        ("a", "b"), np.array([2000.0, 4000.0]), np.array([0, 0, 1]), np.array([True, False, True]), "given"
    )
    actual = np.ones((3, cpu.n_levels, 3))
    ex = ClusterExecutor(SimulatedExecutor(actual, np.zeros((3, 3)), 1.0), cluster, cpu, 0.1, 5.0)
    assert ex.apply(0, np.array([1, 1, 0]), False) == 0.0  # 500 + 500 on a: fits
    assert ex.apply(1, np.array([2, 1, 0]), True) == pytest.approx(0.1)  # 750 + 500: in place
    # 1500 + 1000 > 2000 on node a: task 0 (the larger) moves to b; it can restore
    assert ex.apply(2, np.array([5, 3, 0]), True) == pytest.approx(5.0)
    assert (ex.recreates, ex.stops, list(ex.node_of)) == (1, 0, [1, 0, 1])
    # now task 1 (a process) must move: a stop
    ex2 = ClusterExecutor(SimulatedExecutor(actual, np.zeros((3, 3)), 1.0), cluster, cpu, 0.1, 5.0)
    ex2.apply(0, np.array([0, 0, 0]), False)
    ex2.apply(1, np.array([0, 7, 0]), True)  # task 1 at 2000 + task 0 at 250 > 2000 on a
    assert ex2.recreates == 1
    assert ex2.stops == (1 if ex2.node_of[1] != 0 else 0)


def test_repack_moves_few_tasks_and_refuses_what_no_placement_holds():
    cap = np.array([1000.0, 1000.0])
    assert list(repack(np.array([700.0, 400.0, 200.0]), np.array([0, 0, 1]), cap)) == [1, 0, 1]
    assert repack(np.array([900.0, 900.0, 900.0]), np.array([0, 0, 1]), cap) is None


def test_balanced_placement_spreads_the_peaks():
    demand = np.array([[3000, 3000, 500, 500], [3000, 3000, 500, 500]], dtype=float)  # (steps, tasks)
    node_of = place_balanced(demand, np.array([4000.0, 4000.0]), 250)
    assert node_of[0] != node_of[1]


# -- settings ------------------------------------------------------------------------------------
def _tight(tmp_path: Path, nodes_text: str | None = None, extra: str = "") -> Path:
    text = (DATA / "experiments" / "nodes-tight.toml").read_text().replace('"../', f'"{DATA}/')
    text = text.replace('source = "lstm"', 'source = "seasonal-naive"')
    if nodes_text is not None:
        text = text[: text.index("[[node]]")] + nodes_text
    path = tmp_path / "exp.toml"
    path.write_text(extra + text)
    return path


@pytest.mark.parametrize(
    "nodes_text, needles",
    [
        ('[[node]]\nname = "a"\ncpu_millicores = -4\n', ["node[0].cpu_millicores", "> 0"]),
        ('[[node]]\nname = "a"\ncpu_millicores = "x"\n', ["node[0].cpu_millicores", "float"]),
        ("[[node]]\ncpu_millicores = 4000\n", ["node[0].name", "missing"]),
        (
            '[[node]]\nname = "a"\ncpu_millicores = 9000\n[[node]]\nname = "a"\ncpu_millicores = 9000\n',
            ["node[1].name"],
        ),
        ('[[node]]\nname = "a"\ncpu_millicores = 9000\nspeed = 2\n', ["node[0].speed", "unknown"]),
        ('[[node]]\nname = "a"\ncpu_millicores = 9000\ntasks = ["nope"]\n', ["node[0].tasks", "nope"]),
        (
            '[[node]]\nname = "a"\ncpu_millicores = 9000\ntasks = ["cap"]\n'
            '[[node]]\nname = "b"\ncpu_millicores = 9000\ntasks = ["cap"]\n',
            ["node[1].tasks", "already placed"],
        ),
        ('[[node]]\nname = "a"\ncpu_millicores = 9000\ntasks = ["cap"]\n', ["node", "'affinity' is on no node"]),
        (
            '[[node]]\nname = "a"\ncpu_millicores = 500\ntasks = ["affinity", "atomic", "bsearch", "cap"]\n'
            '[[node]]\nname = "b"\ncpu_millicores = 9000\ntasks = ["chmod", "memcpy", "vecmath", "zero"]\n',
            ["node[0].cpu_millicores", "less than its 4 tasks"],
        ),
        ('[[node]]\nname = "a"\ncpu_millicores = 1000\n', ["node", "at most 4 tasks"]),
    ],
)
def test_bad_nodes_are_refused_with_one_line_naming_the_field(tmp_path, nodes_text, needles, monkeypatch, capsys):
    exp = _tight(tmp_path, nodes_text)
    code, _, err = run_cli(["simulate", exp, "-q", "--steps", "5", "--out", tmp_path / "out"], monkeypatch, capsys)
    assert code == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()


def test_a_bad_node_override_names_the_flag(tmp_path, monkeypatch, capsys):
    exp = _tight(tmp_path)
    code, _, err = run_cli(
        ["simulate", exp, "-q", "--set", "reconfigure_cost.in_place_s=-1", "--out", tmp_path / "out"],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "--set" in err and "in_place_s" in err


# -- the shipped tight cluster ---------------------------------------------------------------------
def test_tight_cluster_node_aware_mpc_fits_and_one_pool_planning_does_not(tmp_path, monkeypatch, capsys):
    """Node-aware mpc: no recreate, no stop, within 1% of the node-constrained optimum in perfect mode;
    the same predictions planned as one pool need recreates on these nodes."""
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    exp = load_experiment(_tight(tmp_path), ["steps=40", "modes=perfect"])
    scen = build_scenario(exp)
    assert scen.cluster is not None and scen.cluster.placement == "balanced"
    mpc = run_strategy(scen, "mpc", "perfect")
    opt = run_strategy(scen, "optimum", "perfect")
    assert mpc.notes["recreates"] == 0 and mpc.notes["stops"] == 0 and mpc.notes["unpriced_recreates"] == 0
    assert mpc.total_s <= 1.01 * opt.total_s
    pool = run_strategy(scen, "mpc/one-pool", "perfect")
    assert pool.notes["recreates"] > 0
    assert pool.checkpoint_s > pool.checkpoints * exp.reconfigure_cost.in_place_s  # recreates cost more
    pool_opt = run_strategy(scen, "optimum/one-pool", "perfect")
    assert pool_opt.total_s <= opt.total_s + 1e-9  # the nodes only constrain: their price is >= 0


def test_mpc_place_moves_tasks_only_as_priced_recreates_and_never_a_process(tmp_path):
    """On the tight cluster mpc-place moves tasks (each move a recreate it priced) and ends cheaper than
    mpc on its fixed placement; with every task a process (cannot restore) it never moves one."""
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    exp = load_experiment(_tight(tmp_path), ["steps=120", "modes=perfect"])
    scen = build_scenario(exp)
    mpc = run_strategy(scen, "mpc", "perfect")
    place = run_strategy(scen, "mpc-place", "perfect")
    assert place.notes["planned_recreates"] > 0 and place.notes["unpriced_recreates"] == 0
    assert place.notes["stops"] == 0
    assert place.total_s < mpc.total_s
    assert place.total_s >= run_strategy(scen, "optimum/one-pool", "perfect").total_s - 1e-9  # its bound
    recreated = place.reconfigure_s > exp.reconfigure_cost.in_place_s + 1e-12
    assert recreated.sum() == place.notes["planned_recreates"]
    assert np.allclose(place.reconfigure_s[recreated], exp.reconfigure_cost.recreate_s)
    # the same cluster, every task a process: nothing may move
    stuck = Cluster(
        scen.cluster.names,
        scen.cluster.capacity_millicores,
        scen.cluster.node_of,
        np.zeros(len(scen.task_names), dtype=bool),
        "balanced",
    )
    scen.cluster = stuck
    pinned = run_strategy(scen, "mpc-place", "perfect")
    assert pinned.notes["recreates"] == 0 and pinned.notes["stops"] == 0
    assert np.array_equal(pinned.levels, mpc.levels)


def test_simulate_on_the_shipped_testbed_writes_per_node_utilisation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["simulate", "thesis-testbed", "-q", "--steps", "12", "--mode", "perfect", "--forecasts", "seasonal-naive"]
    code, out, err = run_cli([*args, "--strategies", "mpc,optimum,floor", "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err
    rows = (tmp_path / "o" / "comparison.csv").read_text().splitlines()
    assert rows[0].endswith("recreates,unpriced_recreates,stops,peak_node_pct")
    assert any(r.startswith("mpc/one-pool,perfect") for r in rows)
    assert any(r.startswith("optimum/one-pool,perfect") for r in rows)
    nodes = (tmp_path / "o" / "nodes.csv").read_text().splitlines()
    assert nodes[0] == "mode,strategy,node,mean_pct,peak_pct"
    mpc = [r.split(",") for r in nodes[1:] if r.startswith("perfect,mpc,")]
    assert [r[2] for r in mpc] == ["node-1", "node-2", "node-3", "node-4"]
    assert all(0 < float(r[3]) <= float(r[4]) <= 100.0 for r in mpc)  # node-aware: never above a node's CPU
    # the one-pool bound on the nodes as placed: every node, no blank cell in its comparison row
    pool = [r.split(",") for r in nodes[1:] if r.startswith("perfect,optimum/one-pool,")]
    assert [r[2] for r in pool] == ["node-1", "node-2", "node-3", "node-4"]
    assert all(0 < float(r[3]) <= float(r[4]) for r in pool)
    pool_row = next(r for r in rows if r.startswith("optimum/one-pool,perfect"))
    assert "" not in pool_row.split(","), pool_row
    assert (tmp_path / "o" / "nodes.png").stat().st_size > 0

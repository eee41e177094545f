"""The HELICS star federation (bsp_planner/apps/helics, `--shape star`): its seeded irregular load, a real
broker with four real leaves and a hub on the loopback interface (local sessions) in which the hub
computes only once every leaf's value of the step has arrived, and the shipped job, experiment, profile
and trace, simulated on the critical path."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest

from bsp_planner.apps.helics import broker as broker_app
from bsp_planner.apps.helics.local import run_federation
from bsp_planner.apps.helics.star_model import Bursts, Star, Wave, federate_names, leaf_workloads, star_workloads
from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.profiles import load_profile
from bsp_planner.inputs.shipped import data_dir, find_experiment
from bsp_planner.model.performance import PerformanceModel

from cli_run import run_cli

needs_helics = pytest.mark.skipif(
    broker_app.find_broker() is None, reason="the helics wheel is not installed (pip install 'bsp-planner[cosim]')"
)
NAMES = ["l0", "l1", "l2", "l3", "hub"]
TRACE = data_dir() / "traces" / "helics-star-5"


# -- the model ------------------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_workloads_and_another_seed_other_bursts():
    w = star_workloads(Star(seed=3), 40)
    assert np.array_equal(w, star_workloads(Star(seed=3), 40))
    assert not np.array_equal(w, star_workloads(Star(seed=4), 40))
    # a step's workloads do not depend on how many steps are run (`run --steps 5` reports the same)
    assert np.array_equal(star_workloads(Star(seed=3), 7), w[:7])
    # without bursts the seed does not matter: it only draws the bursts
    no_bursts = Bursts(chance=0.0, units=8.0, decay=0.5)
    calm = Star(bursts=no_bursts)
    assert np.array_equal(leaf_workloads(calm, 40), leaf_workloads(Star(bursts=no_bursts, seed=9), 40))


def test_the_load_moves_irregularly_between_the_leaves_and_the_hub_stays_modest():
    star = Star()
    w = star_workloads(star, 80)  # a shipped run's steps
    leaves, hub = w[:, :4], w[:, 4]
    busiest = leaves.argmax(axis=1)
    assert set(busiest.tolist()) == {0, 1, 2, 3}  # every leaf is the busiest some of the time
    changes = np.flatnonzero(np.diff(busiest))
    # not a fixed rotation: the busiest leaf holds on for runs of different lengths (mostly the peaked
    # slow component's 3 steps a leaf; the bursts and the 7-step component shift some turns)
    assert len(set(np.diff(changes).tolist())) >= 3
    # the hub: a fraction of a busy leaf's work, and steady (its spread is a fraction of a leaf's)
    assert hub.max() < 0.5 * leaves.max(axis=1).min() + star.hub_base
    assert np.ptp(hub) < 0.2 * np.ptp(leaves[:, 0])
    # bursts: some steps hold more than the periodic components give there (the same star without them)
    calm = leaf_workloads(Star(bursts=Bursts(chance=0.0, units=0.0, decay=0.0)), 80)
    assert (leaves - calm).max() > 0.5 * star.bursts.units
    # the load is concentrated: the busiest leaf holds on average over 40% of the leaves' work (a quarter
    # would be an even load), so an even split of the CPU leaves it the slowest by far
    assert (leaves.max(axis=1) / leaves.sum(axis=1)).mean() > 0.4


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("leaves", 0, "leaves: expected at least 1"),
        ("bursts", Bursts(chance=1.5, units=8.0, decay=0.5), "bursts.chance: expected 0..1"),
        ("fast", Wave(units=6.0, period_steps=0.0), "fast.period_steps: expected a positive number"),
        ("slow", Wave(units=6.0, period_steps=12.0, sharpness=0.0), "slow.sharpness: expected a positive number"),
        ("hub_share", -0.1, "hub_share: expected a finite non-negative number"),
    ],
)
def test_bad_star_parameters_name_the_parameter(field, value, message):
    with pytest.raises(ValueError, match=message):
        Star(**{field: value}).check()


# -- the real federation, no planner --------------------------------------------------------------------
@needs_helics
def test_a_real_star_runs_with_the_hub_computing_after_its_leaves_in_every_step(tmp_path):
    steps, seed = 6, 11
    # about 1 ms of CPU per unit: each leaf's compute is long enough that, were the hub not to wait for
    # the leaves, it would start before the slowest of them ended
    result = run_federation(tmp_path, 5, steps, {"ops_per_unit": 10_000, "seed": seed}, 120, shape="star")
    assert result["codes"] == [0] * 5, [(tmp_path / f"{n}.log").read_text() for n in NAMES]
    assert result["broker_code"] == 0
    expected = star_workloads(Star(seed=seed), steps)  # the seed given reaches every federate
    for i, (name, reports) in enumerate(zip(NAMES, result["reports"], strict=True)):
        assert [r["step"] for r in reports] == list(range(steps))
        assert [r["task"] for r in reports] == [name] * steps
        # the hub's workload is computed from the leaves' values it received: the model's only if it read
        # every leaf's value of the same step
        assert [r["workload"] for r in reports] == expected[:, i].tolist(), name
    start = np.array([[t["start"] for t in per] for per in result["timings"]]).T  # (steps, federates)
    end = np.array([[t["end"] for t in per] for per in result["timings"]]).T
    leaves_end = end[:, :4].max(axis=1)
    assert (start[:, 4] >= leaves_end).all(), start[:, 4] - leaves_end  # the hub follows the leaves...
    assert (start[1:, :4].min(axis=1) >= end[:-1, 4]).all()  # ...and the leaves' next step follows the hub
    # so the federation's wall time is the steps' slowest leaf plus hub, one after the other
    per_step = (end[:, :4] - start[:, :4]).max(axis=1) + (end[:, 4] - start[:, 4])
    assert result["wall_s"] >= per_step.sum()


# -- the shipped job, experiment, profile and trace ------------------------------------------------------------
def test_the_shipped_job_is_a_hub_after_four_leaves_against_its_broker_service():
    job = load_job(data_dir() / "jobs" / "helics-star-5.toml")
    assert job.task_names == NAMES == federate_names(4)
    assert job.structure.names(job.task_names) == {"hub": ["l0", "l1", "l2", "l3"]}
    raw = tomllib.loads((data_dir() / "jobs" / "helics-star-5.toml").read_text())
    (broker,) = raw["service"]
    assert broker["command"][broker["command"].index("--federates") + 1] == "5"
    for i, t in enumerate(raw["task"]):
        argv = t["process"]
        assert argv[argv.index("--shape") + 1] == "star" and argv[argv.index("--index") + 1] == str(i)
        assert argv[argv.index("--federates") + 1] == "5" and argv[argv.index("--seed") + 1] == str(Star.seed)
        assert "--steps" not in argv  # the run's steps are the federation's length: one profile for any length


def test_the_shipped_trace_is_the_workloads_the_federates_report_and_the_profile_covers_them():
    exp = tomllib.loads((data_dir() / "experiments" / "helics-star-5.toml").read_text())
    expected = star_workloads(Star(), exp["steps"])
    for i, name in enumerate(NAMES):
        lines = (TRACE / f"{name}.csv").read_text().split()
        assert lines[0] == "workload"
        assert np.allclose([float(x) for x in lines[1:]], expected[:, i], rtol=0, atol=1e-6)
    lo, hi = exp["workload_range"]
    assert lo <= expected.min() and expected.max() <= hi
    profile = load_profile(data_dir() / "profiles" / "helics-star-5" / "profile.csv")
    profile.check_job(NAMES)
    for p in profile.tasks.values():
        assert p.workloads[0] <= lo and p.workloads[-1] >= hi
        assert p.cpu_millicores[0] <= exp["cpu"]["min_millicores"] and p.cpu_millicores[-1] >= 1000
        d = p.duration_s  # more work never faster; more CPU never much slower
        assert (d[1:, :] >= d[:-1, :]).all()
        assert (d[:, 1:] <= d[:, :-1] * 1.25 + 0.02).all()


def test_simulating_the_shipped_star_charges_each_step_its_slowest_leaf_plus_the_hub(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    code, _, err = run_cli(
        ["simulate", "helics-star-5", "-q", "--mode", "perfect", "--actual", TRACE, "-o", out], monkeypatch, capsys
    )
    assert code == 0, err
    results = {r["strategy"]: r for r in json.loads((out / "comparison.json").read_text())["results"]}
    assert {"mpc", "even", "static:4", "floor"} <= set(results)
    # the even split (300m each: the highest 50m step whose five fit 1600m; never changed): per step the
    # slowest leaf's profiled duration plus the hub's, summed over the steps; more than the slowest task alone
    exp = load_experiment(find_experiment("helics-star-5"))
    model = PerformanceModel(load_profile(exp.profile_path), NAMES, exp.interpolation, exp.out_of_grid)
    d = model.at_levels(np.array([300.0])).durations(star_workloads(Star(), exp.steps).T)[:, 0, :]  # (tasks, steps)
    critical = (d[:4].max(axis=0) + d[4]).sum()
    assert results["even"]["total_s"] == pytest.approx(critical, abs=5e-4)
    assert critical > d.max(axis=0).sum() + 0.5
    # knowing the loads, mpc moves CPU to the busy leaves and keeps the hub fed: below the even split
    assert results["floor"]["total_s"] <= results["mpc"]["total_s"] < results["even"]["total_s"]


def test_the_shipped_star_experiment_simulates_online_as_shipped(tmp_path, monkeypatch, capsys):
    """The experiment as a live run plans it: online forecasts of the observed workloads (the trace)."""
    code, stdout, err = run_cli(
        ["simulate", "helics-star-5", "-q", "--actual", TRACE, "-o", tmp_path / "out"], monkeypatch, capsys
    )
    assert code == 0, err
    results = {r["strategy"]: r for r in json.loads((tmp_path / "out" / "comparison.json").read_text())["results"]}
    assert results["mpc"]["total_s"] < results["even"]["total_s"]


# -- the federate's checks ---------------------------------------------------------------------------------
def test_a_hub_given_a_leafs_value_of_another_step_stops_naming_the_leaf():
    """Should HELICS ever grant the hub before a leaf's value of the step arrived, the hub must not size its
    compute by the step before's value: it stops, naming the leaf."""
    from types import SimpleNamespace

    from bsp_planner.apps.helics.federate import StarHub

    hub = StarHub(SimpleNamespace(federates=5, seed=Star.seed))
    stamps = {0: 3, 1: 3, 2: 2, 3: 3}  # l2's value is of step 2

    class Inputs:
        def incoming(self, step, size, sub=0):
            return np.array([stamps[sub], 10.0])

    with pytest.raises(RuntimeError, match=r"step 3: the values of l2/load are not of this step"):
        hub.take(Inputs(), 3)
    stamps[2] = 3
    assert hub.take(Inputs(), 3) == Star().hub_base + Star().hub_share * 40

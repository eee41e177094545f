"""Reconfiguration costs that match the method (issue 15 part 3): a live run plans with the cost of the
method it uses (the experiment's [reconfigure_cost], else what the backend measures, else penalty_s),
records it in run.json and the summary, and logs which method each reconfiguration used and its cost."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bsp_planner.runtime.coordinator import Coordinator

from zk_fixtures import (
    assert_nothing_left,
    needs_tasks,
    settings,
    tiny_experiment,
)

pytestmark = [needs_tasks, pytest.mark.usefixtures("reap_runs")]


def records_of(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "how, overrides, source",
    [
        ("in-place", [], "measured by the local backend"),
        ("in-place", ["reconfigure_cost.in_place_s=0.25"], "experiment [reconfigure_cost]"),
        ("recreate", [], "measured by the local backend"),
        ("recreate", ["reconfigure_cost.recreate_s=0.75"], "experiment [reconfigure_cost]"),
    ],
)
def test_a_run_plans_with_the_cost_of_its_method_and_reports_each_reconfiguration(
    tmp_path, zk_server, creds_file, how, overrides, source
):
    exp = tiny_experiment(tmp_path / "exp", steps=4, penalty=0.0)
    run_id = f"cost-{how}-{len(overrides)}"
    coord = Coordinator(
        settings(exp, zk_server, creds_file, planner="static:1", reconfigure=how, overrides=overrides),
        run_id,
        tmp_path / "runs",
    )
    result = coord.run()
    assert result.status == "finished"
    meta = json.loads((result.run_dir / "run.json").read_text())
    cost = meta["reconfigure_cost"]
    assert cost["method"] == how and cost["source"] == source
    assert coord.ctx.penalty_s == cost["planned_s"]  # what the planner was given
    if source.startswith("measured") and how == "in-place":
        assert 0 < cost["planned_s"] < 0.5  # a quota rewrite: far below a restart
    elif source.startswith("measured"):  # a worker stopped and started again: an interpreter's start at least
        assert cost["planned_s"] > 0.02
        restarts = [r["reconfig_s"] for r in records_of(result.run_dir) if r["reconfigured"]]
        # the same kind of cost as the restarts the run made (0.99 s against 0.76-0.91 s at load 10): the
        # probe runs under the average task's quota, without the ZooKeeper join; wide bounds for a busy host
        assert max(restarts) / 10 < cost["planned_s"] < max(restarts) * 10
    elif source.startswith("experiment ["):
        assert cost["planned_s"] == float(overrides[0].split("=")[1])
    else:
        assert cost["planned_s"] == 0.0  # penalty_s of this experiment
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert any(r["reconfigured"] for r in records)
    for r in records:
        assert r["reconfig_method"] == (how if r["reconfigured"] else None)
    key = how.replace("-", "_")
    assert cost[f"{key}_s"] == cost["planned_s"] and cost[f"{key}_source"] == source
    other = "recreate" if how == "in-place" else "in_place"
    # the local backend never uses the other method in this run: neither measured nor planned with
    assert cost[f"{other}_s"] is None and cost[f"{other}_source"] == "not used by this run's method"
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["reconfigure_cost"] == cost
    done = [r["reconfig_s"] for r in records if r["reconfigured"]]
    assert summary["reconfigure_measured"] == {
        how: {
            "count": len(done),
            "median_s": pytest.approx(np.median(done), abs=1e-4),
            "mean_s": pytest.approx(np.mean(done), abs=1e-4),
        }
    }
    assert f"- {how}: {len(done)} measured" in (result.run_dir / "summary.md").read_text()
    assert f"planned with {cost['planned_s']:.4g} s: {source}" in (result.run_dir / "summary.md").read_text()
    assert_nothing_left(run_id)

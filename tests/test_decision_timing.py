"""Decisions in time (issue 31), as a live run records them: for every task whose quota changed, the delay
from its own report of a step to its new quota in place (`decision_latency_s`) and how much of its next
step it ran on the old quota (`previous_quota_share`), in the run log and the summary; and in observe mode
the summary names the coordinator's delay in noticing a step for what it is (no barrier there).

A real run: ZooKeeper, cgroup quotas changed in place, two process tasks of an application that keeps its
own synchronisation (the "world" of test_services_ending), whose load swings between them every step so
the planner moves CPU every step."""

from __future__ import annotations

import json

import pytest
from test_services_ending import world_experiment

from bsp_planner.runtime.coordinator import Coordinator

from zk_fixtures import assert_nothing_left, needs_tasks, settings

STEPS = 6


@needs_tasks
@pytest.mark.usefixtures("reap_runs")
def test_each_changed_quota_records_its_latency_from_the_tasks_report(tmp_path, zk_server, creds_file):
    exp = world_experiment(tmp_path / "exp", steps=STEPS)
    run_id = "decision-timing"
    s = settings(exp, zk_server, creds_file, reconfigure="in-place", mode="forecast")
    result = Coordinator(s, run_id, tmp_path / "runs").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))
    changed = [r for r in records[1:] if r["reconfigured"]]
    assert changed, "the planner never moved CPU: nothing to time"
    for r in changed:
        before = {x["task"]: x for x in records[r["step"] - 1]["tasks"]}
        moved = [x for x in r["tasks"] if x["cpu_millicores"] != before[x["task"]]["cpu_millicores"]]
        assert moved and all("quota_at" in x for x in moved)
        for x in moved:  # per task: from its own report of the step before to its quota in place
            assert x["decision_latency_s"] == pytest.approx(x["quota_at"] - before[x["task"]]["finished_at"])
            assert 0 <= x["decision_latency_s"] < 30 and 0 <= x["previous_quota_share"] <= 1
        assert r["decision_latency_s"] == max(x["decision_latency_s"] for x in moved)
        assert all("quota_at" not in x for x in r["tasks"] if x not in moved)  # an unchanged quota is not timed
    sm = json.loads((result.run_dir / "summary.json").read_text())
    lat = sm["decision_latency_s"]
    assert (
        lat["count"] == sum(1 for r in changed for x in r["tasks"] if "decision_latency_s" in x)
        and 0 <= lat["median"] <= lat["p95"] <= lat["max"]
    )
    assert sm["previous_quota_share"]["count"] == len(changed)
    assert "report_to_notice_s" in sm and "barrier_s" not in sm  # observe mode: no barrier
    md = (result.run_dir / "summary.md").read_text()
    assert "decision latency" in md and "report-to-notice delay" in md and "barrier overhead" not in md
    # the application ended on its own: the summary says so rather than "6 of 50"
    assert sm["steps"] == STEPS and sm["steps_bound"] == 50 and "the application's own length" in md
    assert_nothing_left(run_id)

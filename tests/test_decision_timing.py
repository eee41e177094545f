"""Decisions in time (issue 31), as a live run records them: for every task and step, the delay from its own
report of the step before to its quota for the step in place (`decision_latency_s`: the decision's, or the
plan's where the step was not decided yet), how much of the step it ran before then
(`previous_quota_share`), and what the decision then corrected, in the run log and the summary; and in observe mode
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
def test_each_tasks_quota_records_its_latency_from_the_tasks_report(tmp_path, zk_server, creds_file):
    exp = world_experiment(tmp_path / "exp", steps=STEPS)
    run_id = "decision-timing"
    s = settings(exp, zk_server, creds_file, reconfigure="in-place", mode="forecast")
    result = Coordinator(s, run_id, tmp_path / "runs").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))
    changed = [r for r in records[1:] if r["reconfigured"]]
    assert changed, "the planner never moved CPU: nothing to time"
    for r in records[1:]:
        before = {x["task"]: x for x in records[r["step"] - 1]["tasks"]}
        for x in r["tasks"]:  # per task: from its own report of the step before to its quota for the step
            assert x["decision_latency_s"] == pytest.approx(x["quota_at"] - before[x["task"]]["finished_at"])
            assert 0 <= x["decision_latency_s"] < 30 and 0 <= x["previous_quota_share"] <= 1
            assert x["quota_from"] in ("decision", "plan") and x["quota_on"] in ("signal", "report")
            if "corrected_at" in x:  # the plan's quota, replaced by the decision's while the task ran the step
                assert x["quota_from"] == "plan" and x["corrected_at"] >= x["quota_at"]
                assert x["correction_latency_s"] >= x["decision_latency_s"]
            if x["quota_from"] == "decision" or "corrected_at" in x:  # what ran the step's end: the decision
                assert not x.get("ran_on_plan")
        assert r["decision_latency_s"] == max(x["decision_latency_s"] for x in r["tasks"])
    sm = json.loads((result.run_dir / "summary.json").read_text())
    lat = sm["decision_latency_s"]
    placed = [x for r in records[1:] for x in r["tasks"]]
    assert lat["count"] == len(placed) and 0 <= lat["median"] <= lat["p95"] <= lat["max"]
    assert sm["previous_quota_share"]["count"] == len(records) - 1
    q = sm["plan_quotas"]
    assert q["placed"] == len(placed) and q["corrected"] == sum("corrected_at" in x for x in placed)
    assert q["ran_on_plan"] == sum(bool(x.get("ran_on_plan")) for x in placed)
    # a local run's tasks signal each step's end ahead of their reports: the quotas follow the signals
    assert q["on_signal"] == sum(x["quota_on"] == "signal" for x in placed) > 0
    assert "report_to_notice_s" in sm and "barrier_s" not in sm  # observe mode: no barrier
    md = (result.run_dir / "summary.md").read_text()
    assert "decision latency" in md and "quotas from the plan" in md and "step signal" in md
    assert "report-to-notice delay" in md and "barrier overhead" not in md
    # the application ended on its own: the summary says so rather than "6 of 50"
    assert sm["steps"] == STEPS and sm["steps_bound"] == 50 and "the application's own length" in md
    assert_nothing_left(run_id)

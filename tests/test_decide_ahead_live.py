"""Decisions in time, live (issue 31): in observe mode a task's quota for step t+1 is put in place the
moment its own report of step t arrives, not once the coordinator has noticed the whole step: from the
decision made ahead (planner.decide_ahead = true, an opt-in for such jobs), or, where step t+1 is not
decided yet, from the planner's latest plan, which the decision then corrects.

A real run: ZooKeeper, cgroup quotas changed in place, two process tasks driven step by step by a "world"
service (test_services_ending's application), whose load swings between them every step, so the planner
moves CPU every step and in every step one task computes four times as long as the other. Everything is
read from the run log's own timestamps (the tasks' `finished_at`, the coordinator's `quota_at`)."""

from __future__ import annotations

import json

import pytest
from test_services_ending import world_experiment

from bsp_planner.runtime.coordinator import Coordinator

from zk_fixtures import assert_nothing_left, needs_tasks, settings

STEPS = 8
# the tasks' compute, ten times test_services_ending's: a step takes tenths of a second, the light task's
# ending well before the heavy one's
HEAVIER = ("sum(range(10000 * workload))", "sum(range(100000 * workload))")


def heavier_world(folder):
    exp = world_experiment(folder, steps=STEPS)
    task = folder / "task.py"
    task.write_text(task.read_text().replace(*HEAVIER))
    return exp


def run_records(tmp_path, zk_server, creds_file, run_id: str, *sets: str) -> tuple[list[dict], dict]:
    exp = heavier_world(tmp_path / "exp")
    exp.write_text(exp.read_text().replace("[planner]", "[planner]\n" + "\n".join(sets), 1))
    s = settings(exp, zk_server, creds_file, reconfigure="in-place", mode="forecast")
    result = Coordinator(s, run_id, tmp_path / "runs").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))
    assert_nothing_left(run_id)
    return records, json.loads((result.run_dir / "summary.json").read_text())


def moves(records: list[dict]):
    """(tasks' reports of the step before by task, when the coordinator noticed that step (time.time()), the
    tasks whose quota changed) of every reconfigured step."""
    for before, r in zip(records, records[1:], strict=False):
        if r["reconfigured"]:
            finished = {x["task"]: x["finished_at"] for x in before["tasks"]}
            noticed = max(finished.values()) + before["barrier_s"]  # observe mode: last report -> noticed
            cpu = {x["task"]: x["cpu_millicores"] for x in before["tasks"]}
            yield finished, noticed, [x for x in r["tasks"] if x["cpu_millicores"] != cpu[x["task"]]]


@needs_tasks
@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
def test_each_tasks_next_quota_is_written_on_its_own_report_not_after_the_whole_step(tmp_path, zk_server, creds_file):
    """With the lead, step t+1's quota of every task that changes is in place after that task's own report
    of step t and no later than the coordinator noticing step t: at the report itself where the
    coordinator was already waiting for step t, or the moment the configuration was decided where the
    coordinator was still busy with the step before (a loaded machine)."""
    records, summary = run_records(tmp_path, zk_server, creds_file, "decide-ahead", "decide_ahead = true")
    moved_steps = list(moves(records))
    assert len(moved_steps) >= STEPS - 3, "the planner hardly moved CPU: nothing to time"
    for r in records:
        assert sum(x["cpu_millicores"] for x in r["tasks"]) <= 1000  # every configuration within the budget
    for finished, noticed, moved in moved_steps:
        for x in moved:
            # never during the step the task still runs: only after its own report of the step before
            assert finished[x["task"]] <= x["quota_at"] <= noticed, (x, finished, noticed)
        # the light task's quota did not wait for the heavy task's report to be noticed
        light = min(moved, key=lambda x: finished[x["task"]])
        assert light["quota_at"] < noticed
    lat = summary["decision_latency_s"]
    assert lat["count"] == sum(len(r["tasks"]) for r in records[1:])  # every task, every step after the first
    print("decision latency (s):", json.dumps(lat), json.dumps(summary["plan_quotas"]))


@needs_tasks
@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
def test_without_the_lead_the_plans_quota_goes_in_on_the_report_and_the_decision_corrects_it(
    tmp_path, zk_server, creds_file
):
    """planner.decide_ahead = false: step t+1 is decided once step t was noticed; until then each task runs
    under the plan's quota for t+1, in place on its own report. Where the decision differs from the plan,
    its quota goes in once the whole step was noticed (a correction), or, where the task had already ended
    the step by then (a loaded machine), the task ran it on the plan's (shows the test above can tell the
    two apart)."""
    records, summary = run_records(tmp_path, zk_server, creds_file, "decide-late", "decide_ahead = false")
    moved_steps = list(moves(records))
    assert moved_steps
    for finished, noticed, moved in moved_steps:
        for x in moved:
            assert x["quota_from"] == "plan" and finished[x["task"]] <= x["quota_at"] <= noticed
            assert not ("corrected_at" in x and x.get("ran_on_plan")), x
            if "corrected_at" in x:  # the decision's quota: only once the whole step was noticed
                assert x["corrected_at"] > noticed
    q = summary["plan_quotas"]
    placed = [x for r in records for x in r["tasks"] if "quota_from" in x]
    assert q["corrected"] == sum("corrected_at" in x for x in placed)
    assert q["ran_on_plan"] == sum(bool(x.get("ran_on_plan")) for x in placed)
    print("without the lead (s):", json.dumps(summary["decision_latency_s"]), json.dumps(q))

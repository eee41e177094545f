"""The shipped ring federation with its federates unchanged (jobs/helics-4-plain.toml): plain HELICS
federates that report nothing, observed through HELICS's own profiler by the broker (`--profile`) and
`apps.helics.observe`, live under the planner for a few steps against a real ZooKeeper and real quotas."""

from __future__ import annotations

import json
import shutil

import pytest

from bsp_planner.apps.helics.broker import find_broker
from bsp_planner.apps.helics.profiler import FederateSteps
from bsp_planner.inputs.shipped import data_dir

from cli_run import run_cli
from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks

STEPS = 5
PROFILE_LINES = """\
<PROFILING>f0[131072](created)MARKER<1000000000|1700000000000000000>[t=-9223372036.854776]</PROFILING>
<PROFILING>f1[131073](created)MARKER<2000000000|1700000001000000000>[t=-9223372036.854776]</PROFILING>
<PROFILING>f0[131072](initializing)HELICS CODE ENTRY<1100000000>[t=-1000000]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE EXIT<1200000000>[t=0]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE ENTRY<1250000000>[t=0]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE EXIT<1300000000>[t=1]</PROFILING>
<PROFILING>f1[131073](executing)HELICS CODE EXIT<2300000000>[t=1]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE ENTRY<1550000000>[t=1]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE EXIT<1600000000>[t=2]</PROFILING>
<PROFILING>f0[131072](executing)HELICS CODE ENTRY<1700000000>[t=2]</PROFILING>
"""


def test_the_profiler_lines_give_each_federates_compute_from_grant_to_next_request_on_the_epoch_clock():
    f0 = FederateSteps("f0")
    steps = [s for line in PROFILE_LINES.splitlines() if (s := f0.feed(line)) is not None]
    # entering executing mode is no step; step 0 granted t=1 at 1.3 s, requested again at 1.55 s
    assert [(s.step, s.granted_time) for s in steps] == [(0, 1.0), (1, 2.0)]
    assert [s.compute_s for s in steps] == pytest.approx([0.25, 0.1], abs=1e-6)  # epoch floats: ~0.2 us
    assert steps[0].started_at == pytest.approx(1700000000.3) and steps[1].ended_at == pytest.approx(1700000000.7)
    assert not f0.open


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
@pytest.mark.skipif(find_broker() is None, reason="the helics wheel is not installed (bsp-planner[cosim])")
def test_unchanged_federates_run_under_the_planner_through_helicss_profiler(
    tmp_path, zk_server, creds_file, monkeypatch, capsys
):
    folder = tmp_path / "exp"
    folder.mkdir()
    job = (data_dir() / "jobs" / "helics-4-plain.toml").read_text()
    (folder / "job.toml").write_text(job.replace('"--steps", "30"', f'"--steps", "{STEPS}"'))
    shutil.copytree(data_dir() / "profiles" / "helics-4-plain", folder / "profile")
    meta_file = folder / "profile" / "profile.meta.json"  # the profile's tasks are the job's: 5 steps too
    meta = json.loads(meta_file.read_text())
    for t in meta["tasks"].values():
        t["process"][t["process"].index("--steps") + 1] = str(STEPS)
    meta_file.write_text(json.dumps(meta))
    exp = (data_dir() / "experiments" / "helics-4-plain.toml").read_text()
    exp = exp.replace('job = "../jobs/helics-4-plain.toml"', 'job = "job.toml"')
    (folder / "exp.toml").write_text(exp.replace("../profiles/helics-4-plain/profile.csv", "profile/profile.csv"))
    run_id = "helics-plain"
    code, out, err = run_cli(
        [
            "run", "--experiment", folder / "exp.toml", "--planner", "mpc", "--online", "--reconfigure", "in-place",
            "--zookeeper", zk_server.hosts, "--zk-auth-file", creds_file, "--runs-dir", tmp_path / "runs",
            "--run-id", run_id, "--cgroup-prefix", PREFIX, "--step-timeout", 120, "--quiet",
        ],
        monkeypatch,
        capsys,
    )  # fmt: skip
    assert code == 0, (out, err)
    run_dir = tmp_path / "runs" / run_id
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(STEPS))  # the federation's 5 steps, each once
    for i in range(4):
        own = [json.loads(line) for line in (run_dir / f"timings-f{i}.jsonl").read_text().splitlines()]
        got = [next(t for t in r["tasks"] if t["task"] == f"f{i}") for r in records]
        # HELICS's grant-to-request span is the federate's compute as it timed it itself, plus its input and
        # publication: a few ms, up to a CFS period (100 ms) more where a throttled period falls between them
        gaps = sorted(t["measured_s"] - o["compute_s"] for t, o in zip(got, own, strict=True))
        assert -0.01 < gaps[0] and gaps[-1] < 0.12 and gaps[len(gaps) // 2] < 0.03, gaps
        assert all(t["observed_workload"] > 0 for t in got)
    # the hotspot starts on f0: its observed work (CPU seconds in units) is the largest at step 0
    step0 = {t["task"]: t["observed_workload"] for t in records[0]["tasks"]}
    assert max(step0, key=step0.__getitem__) == "f0"
    assert_nothing_left(run_id)

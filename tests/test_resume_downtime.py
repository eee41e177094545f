"""A resumed run never counts the time it was stopped as a step's time, and a run the tool itself called one
that cannot be resumed refuses `--resume` with one line.

The live tests stop an observe-mode application (the stand-in BSP app, synchronising itself) with SIGINT
while two of its ranks have already reported the next step and the third is held in it: the reports of the
interrupted run stay in ZooKeeper and the held rank reports that step only after the resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_task_library import coordinator, process_experiment

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.runtime.live_steps import clock_step_s
from bsp_planner.runtime.stateful import refuse_resume

from cli_run import run_cli
from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks

DOWNTIME_S = 12.0
HELD_STEP = 4  # rank a is held in it; b and c have reported it when the run is stopped


def report(started: float, finished: float) -> dict:
    return {"started_at": started, "finished_at": finished, "duration_s": finished - started}


# -- the clock of a resumed step ------------------------------------------------------------------------------
def test_a_resumed_steps_clock_skips_the_time_the_run_was_stopped():
    stopped_at, resumed_at = 1000.0, 1020.0
    # two reports made before the stop, one after the resume
    reports = [report(999.5, 999.9), report(999.6, 999.95), report(1021.0, 1021.4)]
    assert clock_step_s(reports, None) == pytest.approx((21.9, 1021.4))  # what the clocks span, the stop in it
    step_s, end = clock_step_s(reports, None, resumed_at)
    assert step_s == pytest.approx(0.4) and end == 1021.4  # the slowest task's own time
    # a program's own timing across its restart counts from the resume only
    step_s, _ = clock_step_s([report(stopped_at - 1, 1022.0)], None, resumed_at)
    assert step_s == pytest.approx(2.0)
    # the steps after the first resumed one are clocked from its end, as ever
    assert clock_step_s([report(1021.5, 1022.4)], 1021.4) == pytest.approx((1.0, 1022.4))


def test_a_run_of_memory_only_tasks_that_ran_steps_refuses_resume(tmp_path):
    (tmp_path / "p.toml").write_text('[[task]]\nname = "f0"\nprocess = ["x"]\n')
    (tmp_path / "r.toml").write_text('[[task]]\nname = "f0"\nprocess = ["x"]\nrestorable = true\n')
    procs, restorable = load_job(tmp_path / "p.toml"), load_job(tmp_path / "r.toml")
    refuse_resume(procs, "r1", 0)  # nothing ran: a resume starts afresh
    refuse_resume(restorable, "r1", 3)
    with pytest.raises(InputError) as info:
        refuse_resume(procs, "r1", 3)
    assert info.value.field == "--resume" and "run 'r1' cannot be resumed: task f0 kept its state in memory" in str(
        info.value
    )


# -- live -------------------------------------------------------------------------------------------------------
def stop_while_held(tmp_path: Path, zk_server, creds_file, run_id: str, restorable: bool) -> tuple[Path, Path]:
    """Run the observe-mode app with the CLI; stop it with SIGINT once steps 0..HELD_STEP-1 are logged and ranks
    b and c have reported step HELD_STEP (they wait in the app's own barrier for a, held in it); (exp, run_dir)."""
    exp, control = process_experiment(tmp_path / "exp", steps=8, sync="observe", restorable=restorable)
    (control / f"hang-a-{HELD_STEP}").touch()
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", "run", "-e", str(exp), "--runs-dir", str(runs), "--run-id", run_id]
        + ["--zookeeper", zk_server.hosts, "--zk-auth-file", str(creds_file), "--cgroup-prefix", PREFIX, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    run_dir = runs / run_id
    barrier = run_dir / "selfsync" / f"{HELD_STEP:06d}"
    try:
        deadline = time.monotonic() + 180
        while not (
            (run_dir / "steps.jsonl").is_file()
            and (run_dir / "steps.jsonl").read_text().count("\n") >= HELD_STEP
            and (barrier / "1").exists()
            and (barrier / "2").exists()
        ):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the app did not reach the held step in 180 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    (control / f"hang-a-{HELD_STEP}").unlink()
    return exp, run_dir


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_resumed_observe_run_never_counts_its_downtime(tmp_path, zk_server, creds_file):
    exp, run_dir = stop_while_held(tmp_path, zk_server, creds_file, "downtime", restorable=True)
    stopped = time.monotonic()
    time.sleep(DOWNTIME_S)  # the run stays stopped this long: the very thing the steps must not count
    assert time.monotonic() - stopped >= DOWNTIME_S
    coord = coordinator(tmp_path, exp, zk_server, creds_file, "downtime", resume=True)
    result = coord.run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(8))
    step_s = [r["step_s"] for r in records]
    assert step_s[HELD_STEP] < DOWNTIME_S / 2, step_s
    assert coord.summary["live_total_s"] < DOWNTIME_S, coord.summary["live_total_s"]
    assert_nothing_left("downtime")


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_resume_of_a_run_called_unresumable_is_refused_in_one_line(
    tmp_path, zk_server, creds_file, monkeypatch, capsys
):
    _, run_dir = stop_while_held(tmp_path, zk_server, creds_file, "memonly-refused", restorable=False)
    meta = (run_dir / "run.json").read_text()
    assert "cannot be resumed" in json.loads(meta)["message"]
    args = ["run", "--resume", "memonly-refused", "--runs-dir", run_dir.parent, "--zookeeper", zk_server.hosts]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 2, out + err
    assert "--resume" in err and "run 'memonly-refused' cannot be resumed" in err and "Traceback" not in err, err
    assert (run_dir / "run.json").read_text() == meta  # untouched
    assert_nothing_left("memonly-refused")

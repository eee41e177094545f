"""A task in any language (issue 31): a bash program run under `bsp-planner report --serve` reports its
steps as lines on the FIFO named in its environment, and the run records them as a Python task's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.runtime.coordinator import Coordinator
from bsp_planner.runtime.executor import RunFailed
from bsp_planner.task.lines import parse_report_line
from bsp_planner.task.serve import FIFO_ENV, write_line

from zk_fixtures import EXPERIMENT, assert_nothing_left, needs_tasks, settings, write_profile

# One rank of a self-synchronising bash program: per step, work sized by its drifting workload, timed on
# its own clock, one report line per step; each line also kept in sent-<task> for the test to compare.
SCRIPT = r"""#!/bin/bash
set -eu
rank=$1; steps=$2
for ((t = BSP_FIRST_STEP; t < steps && t < BSP_STEPS; t++)); do
    w=$(( 10 + (rank * 7 + t * 3) % 30 ))
    start=$(date +%s.%N)
    x=0; for ((i = 0; i < w * 300; i++)); do x=$(( (x * 31 + i) % 1000003 )); done
    end=$(date +%s.%N)
    line="step=$t workload=$w started_at=$start ended_at=$end"
    echo "$line" >> "$BSP_RUN_DIR/sent-$BSP_TASK"
    echo "$line" > "$BSP_REPORT_FIFO"
done
"""

TASK = """
[[task]]
name = "{name}"
process = ["{python}", "-m", "bsp_planner.cli", "report", "--serve", "--", "bash", "{script}", "{rank}", "{steps}"]
"""


def bash_experiment(folder: Path, steps: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "sim.sh"
    script.write_text(SCRIPT)
    tasks = "".join(
        TASK.format(name=n, python=sys.executable, script=script, rank=i, steps=steps) for i, n in enumerate("abc")
    )
    (folder / "job.toml").write_text('name = "bash"\nsync = "observe"\n' + tasks)
    write_profile(folder / "profile.csv")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=40, penalty=0.3))  # 40: only an upper bound, the program owns its length
    return exp


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_bash_task_reports_its_steps_through_the_fifo_as_a_python_task_would(tmp_path, zk_server, creds_file):
    exp = bash_experiment(tmp_path / "exp", steps=4)
    kw = dict(mode="forecast", overrides=["online=true", "forecast.source=persistence"], reconfigure="in-place")
    result = Coordinator(settings(exp, zk_server, creds_file, planner="even", **kw), "bash1", tmp_path / "runs").run()
    assert result.status == "finished"
    records = [json.loads(line) for line in (result.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # the program ran 4 steps, then every task left
    for name in "abc":
        sent = [parse_report_line(line) for line in (result.run_dir / f"sent-{name}").read_text().splitlines()]
        got = [next(t for t in r["tasks"] if t["task"] == name) for r in records]
        assert [t["observed_workload"] for t in got] == [s["workload"] for s in sent]
        assert [t["measured_s"] for t in got] == pytest.approx([s["duration_s"] for s in sent], abs=1e-6)
    assert_nothing_left("bash1")


def test_a_report_line_is_read_as_keys_or_json_and_a_bad_one_names_what_was_expected():
    assert parse_report_line("step=3 workload=12.5 duration_s=0.42") == {
        "step": 3,
        "workload": 12.5,
        "duration_s": 0.42,
    }
    assert parse_report_line('{"step": 0, "started_at": 10.0, "ended_at": 10.5}') == {
        "step": 0,
        "duration_s": 0.5,
        "ended_at": 10.5,
    }
    for line, expected in (
        ("step=1", "no time"),
        ("workload=3 duration_s=1", "no step="),
        ("step=1 duration_s=x", "is not a number"),
        ("step=1.5 duration_s=1", "is not a step number"),
        ("step=1 duration=1", "unknown key 'duration'"),
        ("step 1", "is not key=value"),
        ("{oops", "not valid JSON"),
    ):
        with pytest.raises(InputError, match=expected):
            parse_report_line(line)


@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_bad_report_line_fails_the_run_naming_the_task_and_what_was_expected(tmp_path, zk_server, creds_file):
    exp = bash_experiment(tmp_path / "exp", steps=3)
    script = tmp_path / "exp" / "sim.sh"
    # rank 1 reports its step 1 with a duration that is not a number
    script.write_text(
        SCRIPT.replace('line="step=$t', 'line="step=$t$( ((rank == 1 && t == 1)) && echo " cpu_s=soon" || true)')
    )
    kw = dict(mode="forecast", overrides=["online=true", "forecast.source=persistence"], reconfigure="in-place")
    with pytest.raises(RunFailed) as info:
        Coordinator(settings(exp, zk_server, creds_file, planner="even", **kw), "bash-bad", tmp_path / "runs").run()
    message = str(info.value)
    assert "task b" in message and "cpu_s='soon' is not a number" in message, message
    assert_nothing_left("bash-bad")


def test_report_writes_one_checked_line_to_the_fifo_its_server_named(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"  # a plain file stands in for the server's FIFO
    monkeypatch.setenv(FIFO_ENV, str(fifo))
    write_line({"step": "2", "workload": "7", "duration_s": "0.25"})
    assert fifo.read_text() == "step=2 workload=7 duration_s=0.25\n"
    with pytest.raises(InputError, match="no time"):
        write_line({"step": "3"})
    monkeypatch.delenv(FIFO_ENV)
    with pytest.raises(InputError, match=r"\$BSP_REPORT_FIFO is not set"):
        write_line({"step": "3", "duration_s": "1"})

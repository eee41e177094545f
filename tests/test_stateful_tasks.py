"""Tasks that keep their state in memory (process tasks): never recreated by a reconfiguration, and a run
they were part of is never said to be resumable unless they declare `restorable = true`."""

from __future__ import annotations

import pytest
from test_task_library import coordinator, process_experiment

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.runtime.executor import RunFailed
from bsp_planner.runtime.stateful import continue_hint, resolve_reconfigure

from cli_run import run_cli
from zk_fixtures import assert_nothing_left, needs_tasks, tiny_experiment


def jobs(tmp_path):
    (tmp_path / "p.toml").write_text(
        '[[task]]\nname = "f0"\nprocess = ["x"]\n\n[[task]]\nname = "f1"\nprocess = ["x"]\n'
    )
    (tmp_path / "r.toml").write_text('[[task]]\nname = "f0"\nprocess = ["x"]\nrestorable = true\n')
    tiny_experiment(tmp_path / "s")
    return load_job(tmp_path / "p.toml"), load_job(tmp_path / "r.toml"), load_job(tmp_path / "s" / "job.toml")


def test_process_tasks_are_reconfigured_in_place_and_an_explicit_recreate_is_refused(tmp_path):
    procs, restorable, stressors = jobs(tmp_path)
    assert resolve_reconfigure(None, procs, "recreate", True, "local") == "in-place"
    assert resolve_reconfigure("auto", procs, "recreate", True, "local") == "auto"  # the caller: in place here
    assert resolve_reconfigure(None, stressors, "recreate", True, "local") == "recreate"  # workers restore
    assert resolve_reconfigure("recreate", restorable, "recreate", True, "local") == "recreate"
    assert resolve_reconfigure(None, restorable, "recreate", True, "local") == "in-place"
    with pytest.raises(InputError) as info:
        resolve_reconfigure("recreate", procs, "recreate", True, "local")
    text = str(info.value)
    assert info.value.field == "--reconfigure" and "tasks f0, f1" in text and "state in memory" in text
    assert "restorable = true" in text and "--reconfigure in-place" in text
    with pytest.raises(InputError, match="cannot change a running task's CPU limit in place"):
        resolve_reconfigure(None, procs, "recreate", False, "kubernetes")


def test_run_refuses_recreate_for_a_process_job_with_exit_2_before_anything_starts(tmp_path, monkeypatch, capsys):
    exp, _ = process_experiment(tmp_path / "exp", restorable=False)
    args = ["run", "-e", exp, "--runs-dir", tmp_path / "runs", "--run-id", "rec", "--reconfigure", "recreate"]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 2, out + err
    assert "--reconfigure" in err and "tasks a, b, c" in err and "state in memory" in err and "Traceback" not in err
    assert not (tmp_path / "runs" / "rec").exists()


def test_the_continue_hint_offers_resume_only_where_the_tasks_can_restore(tmp_path):
    procs, restorable, stressors = jobs(tmp_path)
    assert continue_hint(stressors, "r1", 3, failed=False) == "continue it with `bsp-planner run --resume r1`"
    assert "--resume r1" in continue_hint(restorable, "r1", 3, failed=True)
    assert "--resume r1" in continue_hint(procs, "r1", 0, failed=True)  # nothing ran yet: a resume starts afresh
    hint = continue_hint(procs, "r1", 3, failed=True)
    assert "--resume" not in hint and "cannot be resumed" in hint and "tasks f0, f1" in hint, hint


@pytest.mark.slow
@pytest.mark.usefixtures("reap_runs")
@needs_tasks
def test_a_dead_memory_only_process_fails_the_run_without_offering_a_resume(tmp_path, zk_server, creds_file):
    exp, control = process_experiment(tmp_path / "exp", steps=3, restorable=False)
    (control / "die-b-1").touch()
    for other in "ac":  # held in step 2, so the run cannot end before b's death is seen
        (control / f"hang-{other}-2").touch()
    with pytest.raises(RunFailed) as info:
        coordinator(tmp_path, exp, zk_server, creds_file, "memonly", reconfigure=None).run()
    message = str(info.value)
    assert "task b's process exited with code 9 in step 1" in message, message
    assert "--resume" not in message and "cannot be resumed" in message and "start a new run" in message
    assert_nothing_left("memonly")

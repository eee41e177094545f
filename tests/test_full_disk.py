"""A full disk under --runs-dir: every record of the run log whole (no half-written line), and run.json
saying how the run ended (interrupted, and why). The disk is a small tmpfs mounted for the test (we are
root; a test that cannot mount one is skipped), filled up by a file of the test's own."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bsp_planner.runtime.run_store import RESERVE_NAME, RunStore
from bsp_planner.runtime.runlog import RunLog

from zk_fixtures import PREFIX, assert_nothing_left, needs_tasks, tiny_experiment


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs at tmp_path/disk, unmounted after the test whatever happens."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Fill the file system up to its last page; returns the filler (removing it frees the room)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 16, 1 << 12):
            try:
                while True:
                    f.write(bytes(size))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def lines_whole(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), f"a half-written line ends {path.name}: {text[-80:]!r}"
    return [json.loads(line) for line in text.splitlines()]


def record(step: int) -> dict:
    # larger than a page: a write cut by the full disk would leave part of it
    return {"step": step, "tasks": [{"task": "a", "cpu_millicores": 1000.0}], "note": "x" * 9000}


def test_a_record_that_does_not_fit_is_left_out_whole_and_run_json_still_says_why(small_disk):
    run_dir = small_disk / "r1"
    run_dir.mkdir()
    store = RunStore(small_disk, "r1")
    store.write_meta(settings={}, status="running")
    assert (run_dir / RESERVE_NAME).is_file()  # the room run.json's last word needs, held while the run is on
    log = RunLog(run_dir, ["a"])
    log.rewrite([])
    for step in range(3):
        log.append(record(step))
    csv_before = (run_dir / "steps.csv").read_text()
    filler = fill(small_disk)
    with pytest.raises(OSError) as info:
        for step in range(3, 10):  # the first that does not fit
            log.append(record(step))
    assert info.value.errno == errno.ENOSPC
    records = lines_whole(run_dir / "steps.jsonl")
    assert [r["step"] for r in records] == list(range(len(records)))
    assert (run_dir / "steps.csv").read_text().count("\n") == csv_before.count("\n") + len(records) - 3
    assert RunLog.load(run_dir) == records  # a resume finds every record it was told was written
    store.write_meta(status="interrupted", message="the disk is full", ended="now")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["message"] == "the disk is full"
    assert not (run_dir / RESERVE_NAME).exists()
    filler.unlink()


@needs_tasks
@pytest.mark.usefixtures("reap_runs")
def test_a_run_whose_disk_fills_up_stops_interrupted_with_every_record_whole(
    small_disk, tmp_path, zk_server, creds_file
):
    exp = tiny_experiment(tmp_path / "exp", steps=400)
    run_dir = small_disk / "runs" / "full"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bsp_planner.cli", "run", "-e", str(exp), "--runs-dir", str(run_dir.parent)]
        + ["--run-id", "full", "--zookeeper", zk_server.hosts, "--zk-auth-file", str(creds_file)]
        + ["--cgroup-prefix", PREFIX, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        log = run_dir / "steps.jsonl"
        deadline = time.monotonic() + 180
        while not (log.is_file() and log.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no 2 steps in 180 s"
            time.sleep(0.05)
        fill(small_disk)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 3, err  # stopped, resumable
    assert "Traceback" not in err and "No space left on device" in err, err
    records = lines_whole(run_dir / "steps.jsonl")
    assert 2 <= len(records) < 400 and [r["step"] for r in records] == list(range(len(records)))
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted" and "No space left on device" in meta["message"], meta
    assert "--resume full" in meta["message"]
    assert_nothing_left("full")

"""Outputs honour the umask: written through temporary names, they still get the mode a plain open or mkdir
would give (0644 files, 0755 folders under umask 022), so a colleague or a web server can read them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from bsp_planner.core import atomic
from bsp_planner.core.outputs import staged_outputs
from bsp_planner.simulate.report import save_figure


@pytest.fixture(params=[0o022, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_files_get_the_mode_of_a_plain_open(tmp_path, umask):
    atomic.write_json(tmp_path / "run.json", {"status": "done"})
    assert _mode(tmp_path / "run.json") == 0o666 & ~umask
    assert atomic.current_umask() == umask


def test_a_published_output_folder_and_its_chart(tmp_path, umask):
    out = tmp_path / "results"
    with staged_outputs(out) as staging:
        atomic.write_text(staging / "comparison.csv", "strategy\n")
        fig = Figure()
        fig.add_subplot().plot([0, 1])
        save_figure(fig, staging / "comparison.png")
    assert _mode(out) == 0o777 & ~umask
    assert _mode(out / "comparison.csv") == 0o666 & ~umask
    assert _mode(out / "comparison.png") == 0o666 & ~umask


def test_umask_022_gives_0644_and_0755(tmp_path):
    old = os.umask(0o022)
    try:
        with staged_outputs(tmp_path / "out") as staging:
            atomic.write_text(staging / "a.md", "x")
    finally:
        os.umask(old)
    assert (_mode(tmp_path / "out"), _mode(tmp_path / "out" / "a.md")) == (0o755, 0o644)

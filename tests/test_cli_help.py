"""The help a newcomer reads: a flag is shown without a value type (it takes none: `--online=true` is
refused), in every command, its own --help included."""

from __future__ import annotations

import sys

import pytest

from bsp_planner import cli


@pytest.mark.parametrize("command", [["run"], ["simulate"], ["profile", "run"], ["rl", "train"], ["zk", "start"], []])
def test_no_flag_is_shown_as_taking_a_value(command, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bsp-planner", *command, "--help"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as stop:
        cli.main()
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "--help" in out
    assert "<bool>" not in out, [line for line in out.splitlines() if "<bool>" in line]

"""Tables never lose a column: piped output at full width, a narrow terminal split into several tables."""

from __future__ import annotations

import io

from rich.console import Console

from bsp_planner.simulate.report import print_table

ROWS = [
    dict(
        strategy="mpc-place:10",
        mode="perfect",
        compute_s=12345.678,
        checkpoints=12,
        checkpoint_s=1.5,
        total_s=12347.178,
        vs_floor_pct=3.25,
        mean_decision_ms=0.5,
        recreates=3,
        unpriced_recreates=1,
        stops=2,
        peak_node_pct=99.5,
    )
]
HEADERS = ["strategy", "compute s", "total s", "vs floor", "decide ms", "recr", "unpriced recr", "stops", "peak node %"]
VALUES = ["mpc-place:10", "12345.68", "12347.18", "+3.2%", "0.50", "99.50"]


def _printed(**console_args) -> str:
    out = io.StringIO()
    print_table(ROWS, Console(file=out, **console_args), title="nodes · perfect mode")
    return out.getvalue()


def test_piped_output_has_every_column_uncut_at_80_columns():
    text = _printed(width=80)  # a pipe: not a terminal, rich's default width 80
    assert "…" not in text
    for word in HEADERS + VALUES:
        assert word in text
    assert max(len(line) for line in text.splitlines()) > 80


def test_a_narrow_terminal_splits_the_columns_and_cuts_none():
    text = _printed(width=50, force_terminal=True, color_system=None)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 50
    for word in HEADERS + VALUES:
        assert word in text
    assert text.count("mpc-place:10") > 1  # every part keeps the strategy column


def test_version_and_help_texts(monkeypatch, capsys):
    import bsp_planner

    from cli_run import run_cli

    assert run_cli(["--version"], monkeypatch, capsys)[:2] == (0, f"bsp-planner {bsp_planner.__version__}")
    code, out, _ = run_cli(["simulate", "--help"], monkeypatch, capsys)
    assert code == 0
    assert "nodes-tight" in out and "greedy, threshold or exact" in out
    assert "--online <bool>" not in out.replace("│", "").replace("  ", " ")
    for command in ("train", "evaluate", "predict"):
        code, out, _ = run_cli(["forecast", command, "--help"], monkeypatch, capsys)
        assert code == 0 and "[default:" in out and " . " not in out


def test_simulate_json_is_the_rows_alone_on_stdout(tmp_path, monkeypatch, capsys):
    import json

    from cli_run import run_cli

    monkeypatch.chdir(tmp_path)
    args = ["simulate", "nodes-tight", "--steps", "3", "-s", "static:2", "-o", tmp_path / "out", "-q", "--json"]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert {r["strategy"] for r in rows} >= {"static:2"}
    assert {"unpriced_recreates", "peak_node_pct", "total_s"} <= set(rows[0])
    assert "wrote" in err

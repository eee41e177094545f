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

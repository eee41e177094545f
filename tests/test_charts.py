"""What the charts say (comparison.png, nodes.png), read from the figures as drawn: a title without nested
parentheses, the +N% labels tied to the floor, one legend, bars under the floor and peaks above 100%
explained, the peak ticks in their node's colour and inside the axes."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.colors import to_rgba

from bsp_planner.simulate import report


@pytest.fixture
def drawn(monkeypatch):
    figures = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path: figures.append(fig))
    return figures


def row(strategy, mode, compute, checkpoint, floor_total):
    total = compute + checkpoint
    return {
        "strategy": strategy,
        "mode": mode,
        "compute_s": compute,
        "checkpoint_s": checkpoint,
        "total_s": total,
        "vs_floor_pct": round(100 * (total / floor_total - 1), 2),
    }


ROWS = [
    row(s, m, c, k, 100.0)
    for m in ("perfect", "forecast")
    for s, c, k in (("even", 140.0, 0.0), ("mpc", 104.0, 3.0), ("mpc-place", 97.0, 6.0), ("floor", 100.0, 0.0))
]


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_comparison_chart_says_what_its_labels_and_the_dashed_line_are(drawn):
    report.bar_chart(ROWS, Path("unused.png"), {"forecast": "ensemble-fit (shipped forecasts default/, digest x)"})
    (fig,) = drawn
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["perfect", "forecast\nensemble-fit (shipped forecasts default/, digest x)"]  # no (( ))
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1  # one, above the panels
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("floor" in t and "+N%" in t for t in legend), legend
    assert "+40%" in texts(fig) and "+3%" in texts(fig)  # even, +40% against the floor
    note = next(t for t in texts(fig) if t.startswith("Compute under the floor line"))
    assert "(mpc-place)" in note  # the one bar whose compute is under the floor, named and explained


def test_no_note_when_no_bar_is_under_the_floor(drawn):
    report.bar_chart([r for r in ROWS if r["strategy"] != "mpc-place"], Path("unused.png"))
    assert not any(t.startswith("Compute under") for t in texts(drawn[0]))


def test_the_nodes_chart_draws_each_peak_in_its_nodes_colour_and_inside_the_axes(drawn):
    rows = [
        {"mode": "perfect", "strategy": s, "node": n, "mean_pct": mean, "peak_pct": peak}
        for s, n, mean, peak in (
            ("mpc", "node-a", 80.0, 100.0),
            ("mpc", "node-b", 70.0, 90.0),
            ("optimum/one-pool", "node-a", 85.0, 120.0),
            ("optimum/one-pool", "node-b", 60.0, 60.0),
        )
    ]
    report.nodes_chart(rows, Path("unused.png"))
    (fig,) = drawn
    (ax,) = fig.axes
    assert ax.get_ylim()[1] > 120.0  # the highest peak's tick is drawn, not cut at the frame
    bars = [p for p in ax.patches]
    ticks = [line for line in ax.lines if line.get_marker() == "_" and line.get_markeredgewidth() > 1]
    assert len(ticks) == 2  # one per node
    for tick, colour in zip(ticks, (bars[0].get_facecolor(), bars[2].get_facecolor()), strict=True):
        assert to_rgba(tick.get_color()) == pytest.approx(colour)  # node-a's bars' colour, node-b's
    assert len(fig.legends) == 1 and ax.get_legend() is None
    note = next(t for t in texts(fig) if t.startswith("Above 100%"))
    assert "optimum/one-pool" in note

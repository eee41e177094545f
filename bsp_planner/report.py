"""Comparison tables (terminal, CSV, JSON, Markdown) and charts of simulation results."""

from __future__ import annotations

import csv
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .simulation import StrategyResult

COLUMNS = (
    "strategy",
    "mode",
    "compute_s",
    "checkpoints",
    "checkpoint_s",
    "total_s",
    "vs_floor_pct",
    "mean_decision_ms",
)


def comparison_rows(results: list[StrategyResult]) -> list[dict]:
    """One row per (strategy, mode); vs_floor_pct is how far above the floor of the same mode."""
    floors = {r.mode: r.total_s for r in results if r.strategy == "floor"}
    rows = []
    for r in results:
        floor = floors.get(r.mode)
        rows.append(
            {
                "strategy": r.strategy,
                "mode": r.mode,
                "compute_s": round(r.compute_s, 3),
                "checkpoints": r.checkpoints,
                "checkpoint_s": round(r.checkpoint_s, 3),
                "total_s": round(r.total_s, 3),
                "vs_floor_pct": round(100.0 * (r.total_s / floor - 1.0), 2) if floor else None,
                "mean_decision_ms": round(r.mean_decision_ms, 3),
            }
        )
    return rows


def to_markdown(rows: list[dict], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for r in rows:
        lines.append("| " + " | ".join("" if r[c] is None else str(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict]) -> str:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def steps_csv(results: list[StrategyResult], task_names: list[str], cpu_of_level) -> str:
    """Every step of every run: mode, strategy, step, step_s, reconfigured, action, cpu per task."""
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["mode", "strategy", "step", "step_s", "reconfigured", "action"] + [f"cpu_{t}" for t in task_names])
    for r in results:
        cpu = cpu_of_level(r.levels)
        for t in range(len(r.step_s)):
            w.writerow(
                [r.mode, r.strategy, t, f"{r.step_s[t]:.6f}", int(r.reconfigured[t]), int(r.actions[t])]
                + [f"{v:g}" for v in cpu[t]]
            )
    return buf.getvalue()


LEARNING_COLUMNS = (
    "mode",
    "strategy",
    "step",
    "task",
    "workload",
    "cpu_millicores",
    "measured_s",
    "predicted_before_s",
    "predicted_after_s",
    "error_before_pct",
    "error_after_pct",
    "factor",
)


def learning_csv(results: list[StrategyResult], task_names: list[str], cpu_of_level) -> str | None:
    """Per step and task of every learning run: the duration measured, what the model predicted at that
    workload and CPU before and after learning from it, and the task's correction factor. None when no
    run learned."""
    import io

    runs = [r for r in results if r.notes.get("learning")]
    if not runs:
        return None
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LEARNING_COLUMNS)
    for r in runs:
        for rec in r.notes["learning"]:
            cpu = cpu_of_level(rec["level"])
            for i, task in enumerate(task_names):
                m, b, a = rec["measured_s"][i], rec["predicted_before_s"][i], rec["predicted_after_s"][i]
                w.writerow(
                    [
                        r.mode,
                        r.strategy,
                        rec["step"],
                        task,
                        f"{rec['workload'][i]:.6g}",
                        f"{cpu[i]:g}",
                        f"{m:.6f}",
                        f"{b:.6f}",
                        f"{a:.6f}",
                        f"{100 * (b / m - 1):.3f}",
                        f"{100 * (a / m - 1):.3f}",
                        f"{rec['factor'][i]:.6f}",
                    ]
                )
    return buf.getvalue()


def write_outputs(
    out_dir: Path, results: list[StrategyResult], meta: dict, task_names: list[str], cpu_of_level
) -> dict[str, Path]:
    """Write comparison.{csv,json,md}, steps.csv and comparison.png into out_dir; returns their paths.

    All of them are written into a temporary folder first and moved into out_dir together, only when
    every one succeeded: a failure (NaN totals in the chart, a full disk) leaves out_dir as it was."""
    from .outputs import staged_outputs

    rows = comparison_rows(results)
    names = {
        "csv": "comparison.csv",
        "json": "comparison.json",
        "md": "comparison.md",
        "steps": "steps.csv",
        "chart": "comparison.png",
    }
    with staged_outputs(out_dir) as stage:
        tmp = {k: stage / v for k, v in names.items()}
        tmp["csv"].write_text(to_csv(rows), newline="")
        tmp["json"].write_text(json.dumps({"meta": meta, "results": rows}, indent=2, default=_json_default) + "\n")
        header = [f"# Simulation: {meta.get('experiment', '')}", ""]
        for k in ("job", "profile", "steps", "penalty_s", "budget_millicores"):
            if k in meta:
                header.append(f"- {k}: {meta[k]}")
        for mode, label in meta.get("forecasts", {}).items():
            header.append(f"- {mode} mode predictions: {label}")
        tmp["md"].write_text("\n".join(header) + "\n\n" + to_markdown(rows))
        tmp["steps"].write_text(steps_csv(results, task_names, cpu_of_level), newline="")
        learned = learning_csv(results, task_names, cpu_of_level)
        if learned is not None:
            names["learning"] = "learning.csv"
            tmp["learning"] = stage / names["learning"]
            tmp["learning"].write_text(learned, newline="")
        bar_chart(rows, tmp["chart"], meta.get("forecasts", {}))
    if learned is None:
        # a learning.csv left by an earlier run would pass for this run's
        (out_dir / "learning.csv").unlink(missing_ok=True)
    return {k: out_dir / v for k, v in names.items()}


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


def bar_chart(rows: list[dict], path: Path, labels: dict[str, str] | None = None) -> None:
    """Compute and checkpoint time stacked, one bar per strategy, one panel per mode (thesis Fig. 6.1/6.2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r["mode"] for r in rows))
    per_mode = max(1, len(rows) // max(1, len(modes)))
    fig, axes = plt.subplots(
        1, len(modes), figsize=(len(modes) * max(5.0, 0.45 * per_mode + 2), 4.8), squeeze=False, sharey=True
    )
    totals = [r["total_s"] for r in rows]
    for ax, mode in zip(axes[0], modes, strict=True):
        sub = [r for r in rows if r["mode"] == mode]
        x = np.arange(len(sub))
        comp = np.array([r["compute_s"] for r in sub])
        chk = np.array([r["checkpoint_s"] for r in sub])
        ax.bar(x, comp, color="#4C72B0", label="compute")
        ax.bar(x, chk, bottom=comp, color="#DD8452", label="checkpoints")
        floor = [r["total_s"] for r in sub if r["strategy"] == "floor"]
        if floor:
            ax.axhline(floor[0], color="black", lw=0.8, ls="--", label="floor")
        for xi, r in zip(x, sub, strict=True):
            if r["vs_floor_pct"] is not None and r["strategy"] != "floor":
                ax.text(xi, r["total_s"], f"+{r['vs_floor_pct']:.0f}%", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [r["strategy"] for r in sub], rotation=60, ha="right", fontsize=8)
        # Strategies differ by percent, not by multiples: start the axis near the smallest total.
        ax.set_ylim(0.9 * min(totals), 1.04 * max(totals))
        title = f"{mode}" + (f"\n({labels[mode]})" if labels and mode in labels else "")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("total time (s), axis starts above 0")
    axes[0][-1].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Write a matplotlib figure as PNG next to its final name, then rename: never a half-written chart.
    A figure made by pyplot is closed; one made as a bare `Figure` (no pyplot) needs nothing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=dpi)
    if getattr(fig.canvas, "manager", None) is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)
    os.replace(tmp, path)


TERMINAL_HEADERS = {
    "strategy": "strategy",
    "compute_s": "compute s",
    "checkpoints": "ckpts",
    "checkpoint_s": "ckpt s",
    "total_s": "total s",
    "vs_floor_pct": "vs floor",
    "mean_decision_ms": "decide ms",
}


def print_table(rows: list[dict], console, title: str = "") -> None:
    """One mode's rows (the mode is in the title), narrow enough for an 80-column terminal."""
    from rich.table import Table

    table = Table(title=title or None)
    for c, header in TERMINAL_HEADERS.items():
        table.add_column(header, justify="left" if c == "strategy" else "right", no_wrap=True)
    for r in rows:
        cells = []
        for c in TERMINAL_HEADERS:
            v = r[c]
            if v is None:
                cells.append("")
            elif c == "vs_floor_pct":
                cells.append(f"{v:+.1f}%")
            elif isinstance(v, float):
                cells.append(f"{v:.2f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    console.print(table)

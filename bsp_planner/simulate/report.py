"""Comparison tables (terminal, CSV, JSON, Markdown) and charts of simulation results."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np

from ..core.atomic import temp_file
from ..core.steps import StrategyResult

COLUMNS = tuple("strategy mode compute_s checkpoints checkpoint_s total_s vs_floor_pct mean_decision_ms".split())
#: Added when the cluster is nodes: what each row did on them (cluster.py).
NODE_COLUMNS = ("recreates", "unpriced_recreates", "stops", "peak_node_pct")


def columns(rows: list[dict]) -> tuple[str, ...]:
    return COLUMNS + (NODE_COLUMNS if any("recreates" in r for r in rows) else ())


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
        util = r.notes.get("node_utilisation")
        if util is not None or any("node_utilisation" in x.notes for x in results):
            for k in ("recreates", "stops", "unpriced_recreates"):
                rows[-1][k] = r.notes.get(k, 0 if util is not None else None)
            rows[-1]["peak_node_pct"] = round(100 * max(u["peak"] for u in util.values()), 1) if util else None
    return rows


def to_markdown(rows: list[dict], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    cols = columns(rows)
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in rows:
        lines.append("| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict], fieldnames: tuple[str, ...] | list[str] | None = None) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fieldnames or columns(rows), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def steps_csv(results: list[StrategyResult], task_names: list[str], cpu_of_level) -> str:
    """Every step of every run: mode, strategy, step, step_s, reconfigured, action, cpu per task."""
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


LEARNING_COLUMNS = tuple(
    "mode strategy step task workload cpu_millicores measured_s predicted_before_s predicted_after_s "
    "error_before_pct error_after_pct factor".split()
)


def learning_csv(results: list[StrategyResult], task_names: list[str], cpu_of_level) -> str | None:
    """Per step and task of every learning run: the duration measured, what the model predicted at that
    workload and CPU before and after learning from it, and the task's correction factor. None when no
    run learned."""
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
                seconds = [f"{v:.6f}" for v in (m, b, a)]
                errors = [f"{100 * (v / m - 1):.3f}" for v in (b, a)]
                head = [r.mode, r.strategy, rec["step"], task, f"{rec['workload'][i]:.6g}", f"{cpu[i]:g}"]
                w.writerow(head + seconds + errors + [f"{rec['factor'][i]:.6f}"])
    return buf.getvalue()


def write_outputs(
    out_dir: Path, results: list[StrategyResult], meta: dict, task_names: list[str], cpu_of_level
) -> dict[str, Path]:
    """Write comparison.{csv,json,md}, steps.csv and comparison.png into out_dir; returns their paths.

    All of them are written into a temporary folder first and moved into out_dir together, only when
    every one succeeded: a failure (NaN totals in the chart, a full disk) leaves out_dir as it was."""
    from ..core.outputs import staged_outputs

    rows = comparison_rows(results)
    names = {k: f"comparison.{k}" for k in ("csv", "json", "md")} | {"steps": "steps.csv", "chart": "comparison.png"}
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
        if "interference" in meta:  # on nodes: what co-location is assumed to cost
            header.append(f"- {meta['interference']}")
        tmp["md"].write_text("\n".join(header) + "\n\n" + to_markdown(rows))
        tmp["steps"].write_text(steps_csv(results, task_names, cpu_of_level), newline="")
        learned = learning_csv(results, task_names, cpu_of_level)
        if learned is not None:
            names["learning"] = "learning.csv"
            tmp["learning"] = stage / names["learning"]
            tmp["learning"].write_text(learned, newline="")
        bar_chart(rows, tmp["chart"], meta.get("forecasts", {}))
        util = node_rows(results)
        if util:
            names["nodes"], names["nodes_chart"] = "nodes.csv", "nodes.png"
            tmp["nodes"], tmp["nodes_chart"] = stage / names["nodes"], stage / names["nodes_chart"]
            tmp["nodes"].write_text(to_csv(util, ["mode", "strategy", "node", "mean_pct", "peak_pct"]), newline="")
            nodes_chart(util, tmp["nodes_chart"])
    if learned is None:
        # a learning.csv left by an earlier run would pass for this run's
        (out_dir / "learning.csv").unlink(missing_ok=True)
    return {k: out_dir / v for k, v in names.items()}


def node_rows(results: list[StrategyResult]) -> list[dict]:
    """Per (mode, strategy, node): the mean and peak share of the node's CPU its tasks held."""
    return [
        {"mode": r.mode, "strategy": r.strategy, "node": node}
        | {"mean_pct": round(100 * u["mean"], 2), "peak_pct": round(100 * u["peak"], 2)}
        for r in results
        for node, u in (r.notes.get("node_utilisation") or {}).items()
    ]


def nodes_chart(rows: list[dict], path: Path) -> None:
    """Mean CPU share per node (bars) and its peak (ticks in the node's colour), one group per strategy,
    one panel per mode, one legend above the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    modes = list(dict.fromkeys(r["mode"] for r in rows))
    nodes = list(dict.fromkeys(r["node"] for r in rows))
    fig, axes = plt.subplots(len(modes), 1, figsize=(10, 3.2 * len(modes) + 0.6), squeeze=False)
    width = 0.8 / max(1, len(nodes))
    top = max([100.0] + [r["peak_pct"] for r in rows])
    over = sorted({r["strategy"] for r in rows if r["peak_pct"] > 100.0 + 1e-9})
    handles: list = []
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["mode"] == mode))
        x = np.arange(len(strategies))
        handles = []
        for j, node in enumerate(nodes):
            by = {r["strategy"]: r for r in rows if r["mode"] == mode and r["node"] == node}
            mean = [by[s]["mean_pct"] if s in by else np.nan for s in strategies]
            peak = [by[s]["peak_pct"] if s in by else np.nan for s in strategies]
            bars = ax.bar(x + j * width, mean, width, label=node, zorder=2)
            handles.append(bars)
            # the peak in the node's own colour, over the 100% line it often sits on; a thin dark core
            # keeps it visible where it meets its own bar (a configuration that never changes)
            colour = bars.patches[0].get_facecolor() if bars.patches else None
            ax.plot(x + j * width, peak, "_", color=colour, markersize=14, markeredgewidth=4, zorder=4)
            ax.plot(x + j * width, peak, "_", color="black", markersize=14, markeredgewidth=0.7, zorder=5)
        ax.axhline(100, color="grey", lw=0.8, ls="--", zorder=1)
        ax.set_ylim(0, 1.08 * top)  # room above the highest peak so its tick stays visible
        ax.set_xticks(x + 0.4 - width / 2, strategies, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("node CPU held (%)")
        ax.set_title(f"{mode}: mean per node (bars), peak (ticks)", fontsize=10)
    peak_key = Line2D([], [], color="grey", marker="_", ls="", markersize=14, markeredgewidth=4)
    line = Line2D([], [], color="grey", lw=0.8, ls="--")
    labels = nodes + ["peak (in the node's colour)", "the node's CPU (100%)"]
    fig.legend(handles + [peak_key, line], labels, loc="upper center", ncol=len(labels), fontsize=8, frameon=False)
    bottom = 0.0
    if over:  # a one-pool bound: planned as if the nodes were one machine
        note = f"Above 100% ({', '.join(over)}): planned as one pool, CPU these nodes do not have."
        fig.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom")
        bottom = 0.03
    fig.tight_layout(rect=(0, bottom, 1, 0.95))
    save_figure(fig, path)


def _json_default(o):
    if isinstance(o, np.integer | np.floating):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


def bar_chart(rows: list[dict], path: Path, labels: dict[str, str] | None = None) -> None:
    """Compute and checkpoint time stacked, one bar per strategy, one panel per mode (thesis Fig. 6.1/6.2).
    Over each bar its total against the floor of its mode (the dashed line); one legend above the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r["mode"] for r in rows))
    per_mode = max(1, len(rows) // max(1, len(modes)))
    fig, axes = plt.subplots(
        1, len(modes), figsize=(len(modes) * max(5.0, 0.45 * per_mode + 2), 5.2), squeeze=False, sharey=True
    )
    totals = [r["total_s"] for r in rows]
    below: list[str] = []  # strategies whose compute is under the floor (they plan as one pool or move tasks)
    for ax, mode in zip(axes[0], modes, strict=True):
        sub = [r for r in rows if r["mode"] == mode]
        x = np.arange(len(sub))
        comp = np.array([r["compute_s"] for r in sub])
        chk = np.array([r["checkpoint_s"] for r in sub])
        ax.bar(x, comp, color="#4C72B0", label="compute")
        ax.bar(x, chk, bottom=comp, color="#DD8452", label="checkpoints")
        floor = [r["total_s"] for r in sub if r["strategy"] == "floor"]
        if floor:
            ax.axhline(floor[0], color="black", lw=0.8, ls="--", label="floor: +N% over a bar is its total above it")
            below += [r["strategy"] for r in sub if r["compute_s"] < floor[0] - 1e-9 and r["strategy"] not in below]
        for xi, r in zip(x, sub, strict=True):
            if r["vs_floor_pct"] is not None and r["strategy"] != "floor":
                ax.text(xi, r["total_s"], f"{r['vs_floor_pct']:+.0f}%", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [r["strategy"] for r in sub], rotation=60, ha="right", fontsize=8)
        # Strategies differ by percent, not by multiples: start the axis near the smallest total.
        ax.set_ylim(0.9 * min(totals), 1.04 * max(totals))
        # the label on a line of its own: a label holding parentheses is never wrapped in more
        title = mode + (f"\n{labels[mode]}" if labels and mode in labels else "")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("total time (s), axis starts above 0")
    # one legend for every panel, above them all (a panel may lack the floor line: the first that has it)
    handles, names = max((ax.get_legend_handles_labels() for ax in axes[0]), key=lambda hl: len(hl[0]))
    fig.legend(handles, names, loc="upper center", ncol=len(names), fontsize=8, frameon=False)
    bottom = 0.0
    if below:  # on nodes: the floor keeps every task on the node it starts on
        note = (
            f"Compute under the floor line ({', '.join(below)}): these plan as one pool or move tasks between "
            "nodes; the floor keeps every task on the node it starts on."
        )
        fig.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom", wrap=True)
        bottom = 0.05
    fig.tight_layout(rect=(0, bottom, 1, 0.93))
    save_figure(fig, path)


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Write a matplotlib figure as PNG next to its final name, then rename: never a half-written chart.
    A figure made by pyplot is closed; one made as a bare `Figure` (no pyplot) needs nothing."""
    fd, tmp = temp_file(path.parent, f".{path.stem}.", ".png")  # 0644 under umask 022, as the CSV beside it
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
    """One mode's rows (the mode is in the title), every column shown (`core.tables.print_table`)."""
    from rich.table import Table

    from ..core.tables import print_table as print_whole

    table = Table(title=title or None)
    headers = dict(TERMINAL_HEADERS)
    if any("recreates" in r for r in rows):  # the cluster is nodes
        headers.update(recreates="recr", unpriced_recreates="unpriced recr", stops="stops", peak_node_pct="peak node %")
    for c, header in headers.items():
        table.add_column(header, justify="left" if c == "strategy" else "right", no_wrap=True)

    def cell(c: str, v: object) -> str:
        if v is None:
            return ""
        return f"{v:+.1f}%" if c == "vs_floor_pct" else f"{v:.2f}" if isinstance(v, float) else str(v)

    for r in rows:
        table.add_row(*(cell(c, r[c]) for c in headers))
    print_whole(console, table)

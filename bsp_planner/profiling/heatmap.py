"""Heatmaps of a profile: one PNG per task, mean duration over workload (rows) x CPU limit (columns)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..inputs.profiles import Profile, TaskProfile


def scaling_exponents(tp: TaskProfile) -> tuple[float, float]:
    """Least-squares fit of ``duration ~ workload**beta * cpu**-alpha`` (log-log); a CPU-bound stressor
    that uses its whole quota and costs ops linearly has alpha ~ beta ~ 1."""
    w, c = np.meshgrid(tp.workloads, tp.cpu_millicores, indexing="ij")
    a = np.column_stack([np.ones(w.size), np.log(w).ravel(), -np.log(c).ravel()])
    coef, *_ = np.linalg.lstsq(a, np.log(tp.duration_s).ravel(), rcond=None)
    return float(coef[2]), float(coef[1])


def plot_task(tp: TaskProfile, path: Path, *, title: str = "", note: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    d = tp.duration_s
    fig, ax = plt.subplots(figsize=(7.2, 4.8), dpi=120)
    norm = LogNorm(vmin=float(d.min()), vmax=float(d.max())) if d.max() > d.min() else None
    im = ax.imshow(d, origin="lower", aspect="auto", cmap="viridis", norm=norm)
    ax.set_xticks(range(len(tp.cpu_millicores)), [f"{c:g}" for c in tp.cpu_millicores])
    ax.set_yticks(range(len(tp.workloads)), [f"{w:g}" for w in tp.workloads])
    ax.set_xlabel("CPU limit (millicores)")
    ax.set_ylabel("workload (units)")
    mid = np.sqrt(d.min() * d.max())
    for i in range(d.shape[0]):
        for j in range(d.shape[1]):
            color = "white" if d[i, j] < mid else "black"
            ax.text(j, i, f"{d[i, j]:.2f}", ha="center", va="center", fontsize=9, color=color)
    cbar = fig.colorbar(im, ax=ax)
    if norm is not None:  # plain seconds on the log scale, not 6x10^-1
        from matplotlib.ticker import FixedLocator, NullLocator

        nice = [t for t in (0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 500) if d.min() <= t <= d.max()]
        ticks = sorted({float(d.min()), *nice, float(d.max())})
        ticks = [t for i, t in enumerate(ticks) if i == 0 or t / ticks[i - 1] > 1.15 or t == ticks[-1]]
        cbar.ax.yaxis.set_major_locator(FixedLocator(ticks))
        cbar.ax.yaxis.set_minor_locator(NullLocator())
        cbar.ax.set_yticklabels([f"{t:g}" if t in nice else f"{t:.2f}" for t in ticks])
    cbar.set_label(f"duration (s, mean of {tp.repeats} repeat{'' if tp.repeats == 1 else 's'}, log scale)")
    ax.set_title(title or tp.task)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_heatmaps(profile: Profile, out_dir: Path) -> list[Path]:
    meta = profile.metadata
    tasks_meta = meta.get("tasks", {})
    host = ", ".join(
        str(x)
        for x in (meta.get("host"), meta.get("cpu_model"), f"{meta['cores']} cores" if meta.get("cores") else None)
        if x
    )
    paths = []
    for name, tp in profile.tasks.items():
        tm = tasks_meta.get(name, {})
        alpha, beta = scaling_exponents(tp)
        title = f"{name}"
        if tm:
            title += (
                f"  (stress-ng --{tm.get('stressor', name)} x{tm.get('workers', '?')}, "
                f"{tm.get('ops_per_unit', '?')} ops/unit)"
            )
        note = f"{profile.path.name if profile.path else ''}  {host}  fit: t ~ workload^{beta:.2f} * cpu^-{alpha:.2f}"
        paths.append(plot_task(tp, out_dir / f"{name}.png", title=title, note=note.strip()))
    return paths

"""The run log of a live run: one record per superstep, appended and flushed to disk as the step ends.

``runs/<run-id>/`` holds::

    run.json        the run's settings (what --resume needs) and its status
    steps.jsonl     one JSON object per completed step (the source of truth for --resume)
    steps.csv       the same, one row per step, per-task columns (cpu_, assigned_, reported_, predicted_,
                    measured_)
    summary.{md,csv,json}  live against simulated for the same plan, in `simulate`'s table shape
    chart.png       predicted against measured step times
    logs/<task>.log  each worker's output

A step record: step, action, reconfigured, reconfig_s (the real time the reconfiguration took),
reconfig_method (how it really happened: 'in-place', 'recreate', or 'start' where a resumed run's first step
changed the configuration by starting its workers; reconfig_methods per task where they differed),
start_s (the first step each coordinator ran: its workers' start-up), decision_ms,
step_s (the step's time: in barrier mode from publishing the step to every task's release; in observe mode
from the previous step's end, or this step's first start, to its last task's end, on the tasks' own
clocks), predicted_step_s (the model's step time at the workloads the tasks ran), slowest_s (the slowest
measured task), critical_path_s (the measured compute through the job's waits, its `after`: the slowest leaf
plus the hub in a star; without waits, slowest_s), sync_s = step_s - slowest_s, barrier_s (the last task's finish to the
coordinator's release; in observe mode, where there is no barrier, the last report to the coordinator
noticing the step), restarts, decision_latency_s and previous_quota_share (how late the step's new quotas
came: `quota_timing`; absent where none changed), and per task cpu, workload (what the coordinator assigned the task),
observed_workload (what the task reported it ran, where it reported one), predicted and measured duration
(and, where the task reported them, next_workload, cpu_s, and started_at / finished_at: time.time() on the
task's clock when its compute started / ended). With a learning model, `learning` holds its
predictions before and after each step and `learned_step_s` its predicted step time. Predicted step times
(``predicted_step_s``, ``learned_step_s``) are the critical path through the job's waits, as `simulate` takes them.

steps.csv names both workloads: ``assigned_<task>`` (what the task was told: the series, or the forecast
for a task that reports its own) and ``reported_<task>`` (what it reported it ran; empty where it reported
none, e.g. a stressor). ``predicted_<task>`` is the model at the reported workload where there is one, else
at the assigned one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import numpy as np

from ..core.atomic import write_text
from ..core.structure import StepStructure

STEP_FIELDS = tuple(
    "step action reconfigured reconfig_s decision_ms step_s predicted_step_s slowest_s sync_s barrier_s restarts "
    "resumed decision_latency_s previous_quota_share".split()
)
TASK_PREFIX = {  # the per-task fields of steps.csv, each column named <prefix>_<task>
    "cpu_millicores": "cpu",
    "workload": "assigned",
    "observed_workload": "reported",
    "predicted_s": "predicted",
    "measured_s": "measured",
}


def csv_row(rec: dict, task_names: list[str]) -> list:
    row = [
        int(v) if isinstance(v, bool) else "" if v is None else f"{v:.6f}" if isinstance(v, float) else v
        for v in map(rec.get, STEP_FIELDS)
    ]
    by_task = {x["task"]: x for x in rec["tasks"]}
    for f in TASK_PREFIX:
        fmt = ".6g" if f in ("cpu_millicores", "workload", "observed_workload") else ".6f"
        # "": a task that reported no workload of its own
        row += ["" if (v := by_task[t].get(f)) is None else format(v, fmt) for t in task_names]
    return row


class RunLog:
    """Appends step records to steps.jsonl and steps.csv; every append is flushed and fsynced."""

    def __init__(self, run_dir: Path, task_names: list[str]) -> None:
        self.run_dir = Path(run_dir)
        self.task_names = list(task_names)
        self.jsonl = self.run_dir / "steps.jsonl"
        self.csv = self.run_dir / "steps.csv"

    @staticmethod
    def load(run_dir: Path) -> list[dict]:
        """The complete records in steps.jsonl, in order; a torn last line (a crash mid-write) is dropped."""
        path = Path(run_dir) / "steps.jsonl"
        if not path.is_file():
            return []
        records: list[dict] = []
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                break
            if not isinstance(rec, dict) or rec.get("step") != len(records):
                break
            records.append(rec)
        return records

    def _texts(self, records: list[dict]) -> tuple[str, str]:
        """steps.jsonl's and steps.csv's lines of `records`."""
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(csv_row(r, self.task_names) for r in records)
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records), buf.getvalue()

    def rewrite(self, records: list[dict]) -> None:
        """Make both files hold exactly `records` (on start, or on resume after a crash)."""
        lines, rows = self._texts(records)
        write_text(self.jsonl, lines)
        header = [*STEP_FIELDS, *(f"{prefix}_{t}" for prefix in TASK_PREFIX.values() for t in self.task_names)]
        write_text(self.csv, ",".join(header) + "\n" + rows)  # task names need no quoting

    def append(self, rec: dict) -> None:
        """One record, a line in each file, or (an OSError: a full disk) in neither: both files are cut back
        to where they ended, so that no half-written line is left."""
        sizes = [p.stat().st_size if p.exists() else 0 for p in (self.jsonl, self.csv)]
        try:
            for path, text in zip((self.jsonl, self.csv), self._texts([rec]), strict=True):
                with open(path, "a", newline="") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
        except OSError:
            for path, size in zip((self.jsonl, self.csv), sizes, strict=True):
                with contextlib.suppress(OSError):  # a shorter file needs no room
                    os.truncate(path, size)
            raise


def effective_workloads(res: list[dict], given: np.ndarray) -> np.ndarray:
    """(tasks,) the workload each task ran: what it reported where it did, else what it was assigned."""
    return np.array([r.get("observed_workload", given[i]) for i, r in enumerate(res)], dtype=np.float64)


def step_record(
    run,
    t,
    action,
    levels,
    reconfigured,
    reconfig_s,
    decision_ms,
    step_s,
    publish_s,
    released_at,
    reports,
    restarts,
    resumed,
    given,
    quota_at: dict[str, float] | None = None,
) -> dict:
    """One step's record (see the module docstring); `run` is the coordinator (scen, ctx, tasks, cpu_of);
    step_s: the step's time as the loop observed it (`live_steps.wall_step_s`); reports: each task's
    result; given: (tasks,) the workloads the tasks were assigned."""
    scen = run.scen
    n = len(run.tasks)
    given = np.asarray(given, dtype=np.float64)
    # the model at the workloads the tasks really ran (reported where they reported one), per task
    w_run = np.clip(effective_workloads(reports, given), *run.exp.workload_range)
    pred = (scen.true_model or scen.model).durations(w_run[:, None])[np.arange(n), levels, 0]
    forecast = run.ctx.configs.predicted[t, np.arange(n), levels, 0]
    measured = np.array([r["duration_s"] for r in reports])
    slowest = float(measured.max())
    structure = run.ctx.structure  # the job's `after`; None: independent tasks, a step is its slowest task
    tasks = [
        {
            "task": task,
            "level": int(levels[i]),
            "cpu_millicores": run.cpu_of(int(levels[i])),
            "workload": float(given[i]),  # what the task was assigned
            "predicted_s": float(pred[i]),
            "forecast_s": float(forecast[i]),
            "measured_s": float(measured[i]),
            "enter_wait_s": r["enter_wait_s"],
            "incarnation": r["incarnation"],
            # what the task itself reported (a command's {"workload": ...} line), where it did
            **{k: r[k] for k in ("observed_workload", "next_workload", "cpu_s", "started_at", "finished_at") if k in r},
            **({"quota_at": quota_at[task]} if quota_at and task in quota_at else {}),
        }
        for i, (task, r) in enumerate(zip(run.tasks, reports, strict=True))
    ]
    return {
        "step": t,
        "action": int(action),
        "reconfigured": bool(reconfigured),
        "reconfig_s": float(reconfig_s),
        "decision_ms": float(decision_ms),
        "step_s": float(step_s),
        "predicted_step_s": step_time_s(pred, structure),
        "slowest_s": slowest,
        "critical_path_s": step_time_s(measured, structure),
        "sync_s": float(step_s - slowest),
        "barrier_s": float(max(0.0, released_at - max(r["finished_at"] for r in reports))),
        "publish_s": float(publish_s),
        "restarts": int(sum(restarts.values())),
        "resumed": bool(resumed),
        "levels": [int(x) for x in levels],
        "tasks": tasks,
    }


def step_time_s(durations_s: np.ndarray, structure: StepStructure | None) -> float:
    """A step's time from its tasks' (tasks,) durations: the critical path through `structure` (the job's
    waits), the slowest task where there are none."""
    return float(durations_s.max() if structure is None else structure.step_time(durations_s))


def quota_timing(rec: dict, previous: dict | None) -> None:
    """Add to step record `rec` how late its new quotas came, per task whose quota changed (``quota_at``):
    ``decision_latency_s``, from the task's own report of the step before (its ``finished_at``) to its new
    quota in place; ``previous_quota_share``, the fraction of the task's step (``started_at`` to
    ``finished_at``, its own clock) that ran before then, on the step before's quota (0..1). The step's
    own ``decision_latency_s`` and ``previous_quota_share`` are the largest of its tasks' (absent where no
    quota changed, or the tasks report no times)."""
    before = {x["task"]: x for x in previous["tasks"]} if previous is not None else {}
    for x in rec["tasks"]:
        if "quota_at" not in x:
            continue
        if "finished_at" in before.get(x["task"], {}):
            x["decision_latency_s"] = max(0.0, x["quota_at"] - float(before[x["task"]]["finished_at"]))
        if "started_at" in x and "finished_at" in x and x["finished_at"] > x["started_at"]:
            late = (x["quota_at"] - x["started_at"]) / (x["finished_at"] - x["started_at"])
            x["previous_quota_share"] = min(1.0, max(0.0, late))
    for key in ("decision_latency_s", "previous_quota_share"):
        values = [x[key] for x in rec["tasks"] if key in x]
        if values:
            rec[key] = max(values)


def step_chart(records: list[dict], path: Path, title: str = "", penalty_s: float = 0.0) -> None:
    """Predicted against measured step time per step (reconfigurations marked; a learning run's learned
    predictions too), and the cumulative time of both: the simulator's (model + penalty per
    reconfiguration) and the live one."""
    # a bare Figure on the Agg canvas: no pyplot (its import and state cost more than this chart)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..simulate.report import save_figure

    steps = np.array([r["step"] for r in records])
    pred = np.array([r["predicted_step_s"] for r in records])
    meas = np.array([r["step_s"] for r in records])
    slow = np.array([r["slowest_s"] for r in records])
    reconf = np.array([r["reconfig_s"] for r in records])
    changed = np.array([bool(r["reconfigured"]) for r in records])
    marks = len(records) <= 200  # markers only where they can be told apart
    fig = Figure(figsize=(9, 6.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    ax1.plot(steps, pred, "o-" if marks else "-", ms=3, color="#4C72B0", label="predicted (model)")
    ax1.plot(steps, meas, "s-" if marks else "-", ms=3, color="#C44E52", label="measured (step wall time)")
    ax1.plot(steps, slow, ".", ms=4 if marks else 1, color="#8172B2", alpha=0.7, label="measured slowest task")
    if all("learned_step_s" in r for r in records):  # a learning run: what its model predicted before each step
        learned = np.array([r["learned_step_s"] for r in records])
        ax1.plot(
            steps,
            learned,
            "^-" if marks else "-",
            ms=3,
            color="#55A868",
            label="predicted (learned model)",
        )
    if changed.any():  # one collection for every reconfiguration, not one line each
        ax1.vlines(
            steps[changed] - 0.5,
            0,
            1,
            transform=ax1.get_xaxis_transform(),
            color="#DD8452",
            lw=0.8,
            alpha=0.6,
            label="reconfiguration",
        )
    ax1.set_ylabel("step time (s)")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="upper left", framealpha=0.6)
    ax1.set_title(title or "live run: predicted vs measured", fontsize=10)
    ax2.plot(
        steps,
        np.cumsum(pred + penalty_s * changed),
        "-",
        color="#4C72B0",
        label=f"simulated (model + {penalty_s:g} s per reconfiguration)",
    )
    ax2.plot(steps, np.cumsum(meas + reconf), "-", color="#C44E52", label="measured (steps + reconfigurations)")
    ax2.set_xlabel("superstep")
    ax2.set_ylabel("cumulative time (s)")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, loc="upper left")
    fig.subplots_adjust(left=0.08, right=0.98, top=0.95, bottom=0.08, hspace=0.08)
    save_figure(fig, path)

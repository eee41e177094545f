"""A live run's Prometheus metrics: `RunMetrics`, a `RunWatcher` (:mod:`.watchers`) that turns each logged step
into the metrics of `METRICS` and serves them with prometheus_client's own HTTP server
(`bsp-planner run --metrics-port PORT`; docs/metrics.md).

Every value comes from what the run records: the step records of the run log (`runlog.step_record`), the
run's run.json (its settings, the reconfiguration cost it planned with) and the watcher calls. On
``run_started`` the steps already logged (a resumed run's) are counted first, so the counters always equal
the run log's totals: a coordinator that died and resumed continues its counters where they were rather
than starting them at zero. Each `RunMetrics` has its own `CollectorRegistry` (never the process-wide
one), so several runs in one process, and tests, do not clash.

    python -m bsp_planner.runtime.metrics --table    # the Markdown table of docs/metrics.md
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, start_http_server

from .runlog import RunLog

PHASES = ("starting", "running", "finished", "interrupted", "failed")
# step and reconfiguration times run from a tenth of a second (a tiny stressor) to minutes (a pod recreated)
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_SHORT_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# never a negative bucket: OpenMetrics (what Prometheus asks for) drops a histogram's _sum then
_ABS_RATIO = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class MetricSpec:
    """One metric: `name` as declared to prometheus_client (a counter's without ``_total``, an info's
    without ``_info``), its kind (counter, gauge, histogram, info, enum), labels, help text, and where its
    value comes from (the docs' table)."""

    name: str
    kind: str
    help: str
    source: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def exposed(self) -> str:
        """The name a query uses: ``_total`` on a counter, ``_info`` on an info."""
        return self.name + {"counter": "_total", "info": "_info"}.get(self.kind, "")


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "bsp_planner_run",
        "info",
        "The run: its id and settings.",
        "run.json `settings`, `backend`",
        ("run_id", "planner", "mode", "reconfigure", "backend"),
    ),
    MetricSpec(
        "bsp_planner_run_phase",
        "enum",
        "The run's phase: " + ", ".join(PHASES) + " (one state is 1).",
        "the run's start and end",
    ),
    MetricSpec("bsp_planner_run_steps", "gauge", "Supersteps the run is planned for.", "the experiment's `steps`"),
    MetricSpec(
        "bsp_planner_steps_completed",
        "counter",
        "Supersteps run and logged, a resumed run's earlier ones included.",
        "records of steps.jsonl",
    ),
    MetricSpec(
        "bsp_planner_step_duration_seconds",
        "histogram",
        "Each superstep's time (barrier mode: publication to release; observe mode: the tasks' clocks).",
        "`step_s`",
        buckets=_SECONDS,
    ),
    MetricSpec(
        "bsp_planner_step_critical_path_seconds",
        "histogram",
        "Each superstep's critical path: its tasks' measured compute through the job's waits (`after`); "
        "without waits, the slowest task's.",
        "`critical_path_s`",
        buckets=_SECONDS,
    ),
    MetricSpec(
        "bsp_planner_step_predicted_seconds",
        "counter",
        "The model's step time (the critical path through the job's waits), summed over the steps "
        "(against step_duration_seconds_sum).",
        "`predicted_step_s`",
    ),
    MetricSpec(
        "bsp_planner_step_prediction_abs_error_ratio",
        "histogram",
        "Each step's measured time against the model's, either way: abs(step_s / predicted_step_s - 1).",
        "`step_s`, `predicted_step_s`",
        buckets=_ABS_RATIO,
    ),
    MetricSpec(
        "bsp_planner_barrier_wait_seconds",
        "histogram",
        "The last task's finish to the step's release (observe mode: to the coordinator noticing it).",
        "`barrier_s`",
        buckets=_SHORT_SECONDS,
    ),
    MetricSpec(
        "bsp_planner_decision_duration_seconds",
        "histogram",
        "The planner's time to decide each step.",
        "`decision_ms` / 1000",
        buckets=_SHORT_SECONDS,
    ),
    MetricSpec(
        "bsp_planner_decision_latency_seconds",
        "histogram",
        "A changed quota's lateness: the task's report of the step before to its new quota in place.",
        "`decision_latency_s` (steps whose quotas changed)",
        buckets=_SHORT_SECONDS,
    ),
    MetricSpec(
        "bsp_planner_reconfigurations",
        "counter",
        "Reconfigurations, by how they really happened (in-place, recreate, start: a resumed run's workers).",
        "`reconfigured`, `reconfig_method`",
        ("method",),
    ),
    MetricSpec(
        "bsp_planner_reconfiguration_seconds",
        "counter",
        "Measured time of the reconfigurations, by method.",
        "`reconfig_s`",
        ("method",),
    ),
    MetricSpec(
        "bsp_planner_reconfiguration_planned_seconds",
        "counter",
        "What the plan charged for the same reconfigurations (its cost per reconfiguration), by method.",
        "run.json `reconfigure_cost.planned_s`",
        ("method",),
    ),
    MetricSpec(
        "bsp_planner_task_restarts",
        "counter",
        "Workers restarted mid-step (each reran its step from its checkpoint).",
        "`restarts`",
    ),
    MetricSpec(
        "bsp_planner_task_cpu_millicores",
        "gauge",
        "Each task's CPU limit in the last step.",
        "`tasks[].cpu_millicores`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_task_assigned_workload",
        "gauge",
        "The workload each task was told in the last step (the series, or its forecast).",
        "`tasks[].workload`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_task_reported_workload",
        "gauge",
        "The workload a task reported it ran in the last step (tasks that report one).",
        "`tasks[].observed_workload`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_task_step_seconds",
        "gauge",
        "Each task's measured compute time in the last step.",
        "`tasks[].measured_s`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_task_forecast_error_ratio",
        "gauge",
        "Each task's last step against what the plan expected of it: measured_s / forecast_s - 1.",
        "`tasks[].measured_s`, `tasks[].forecast_s`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_task_barrier_wait_seconds",
        "counter",
        "Time each task waited at the steps' enter barrier.",
        "`tasks[].enter_wait_s`",
        ("task",),
    ),
    MetricSpec(
        "bsp_planner_run_events",
        "counter",
        "What changed the run's course between steps, by kind (deferred, infeasible, replanned, task_failed, "
        "restarted); this coordinator's only.",
        "the coordinator's notices",
        ("kind",),
    ),
)


def _make(spec: MetricSpec, registry: CollectorRegistry) -> Any:
    kw: dict[str, Any] = {"labelnames": spec.labels, "registry": registry}
    if spec.kind == "counter":
        return Counter(spec.name, spec.help, **kw)
    if spec.kind == "gauge":
        return Gauge(spec.name, spec.help, **kw)
    if spec.kind == "histogram":
        return Histogram(spec.name, spec.help, buckets=spec.buckets, **kw)
    if spec.kind == "info":
        return Info(spec.name, spec.help, registry=registry)  # its labels are its value's keys
    if spec.kind == "enum":
        return Enum(spec.name, spec.help, states=list(PHASES), registry=registry)
    raise ValueError(f"unknown metric kind {spec.kind!r}")


class RunMetrics:
    """The metrics of one live run (a `RunWatcher`); ``runs_dir`` is the folder of the run folders, where it
    reads the run's run.json and the steps logged before it started. ``serve(host, port)`` binds the
    endpoint; ``close()`` stops it (idempotent)."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = Path(runs_dir)
        self.registry = CollectorRegistry()
        self.metrics: dict[str, Any] = {spec.name: _make(spec, self.registry) for spec in METRICS}
        self.metrics["bsp_planner_run_phase"].state("starting")
        self.planned_reconfig_s = 0.0  # the plan's cost per reconfiguration (run.json), 0 until known
        self._server: Any = None
        self._thread: Any = None

    # == the endpoint =================================================================================
    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on host:port (0: a free port) in a daemon thread; the port it listens on.
        OSError where it cannot bind (the port taken, an unknown host)."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None

    # == RunWatcher ===================================================================================
    def run_started(self, run_id: str, tasks: list[str], steps: int) -> None:
        run_dir = self.runs_dir / run_id
        meta = json.loads((run_dir / "run.json").read_text())
        settings = meta.get("settings", {})
        labels = {"run_id": run_id, **{k: str(settings.get(k)) for k in ("planner", "mode", "reconfigure")}}
        # the backend that really runs the tasks (run.json's `backend`), as the setting may leave it to the caller
        labels["backend"] = str((meta.get("backend") or {}).get("backend") or settings.get("backend"))
        self.metrics["bsp_planner_run"].info(labels)
        self.planned_reconfig_s = float((meta.get("reconfigure_cost") or {}).get("planned_s") or 0.0)
        self.metrics["bsp_planner_run_steps"].set(steps)
        for rec in RunLog.load(run_dir):  # a resumed run's steps: the counters continue from the log's totals
            self.step_logged(rec)
        self.metrics["bsp_planner_run_phase"].state("running")

    def step_logged(self, rec: dict[str, Any]) -> None:
        m = self.metrics
        m["bsp_planner_steps_completed"].inc()
        m["bsp_planner_step_duration_seconds"].observe(rec["step_s"])
        m["bsp_planner_step_critical_path_seconds"].observe(rec.get("critical_path_s", rec["slowest_s"]))
        m["bsp_planner_step_predicted_seconds"].inc(rec["predicted_step_s"])
        if rec["predicted_step_s"] > 0:
            m["bsp_planner_step_prediction_abs_error_ratio"].observe(abs(rec["step_s"] / rec["predicted_step_s"] - 1))
        m["bsp_planner_barrier_wait_seconds"].observe(rec["barrier_s"])
        m["bsp_planner_decision_duration_seconds"].observe(rec["decision_ms"] / 1e3)
        if "decision_latency_s" in rec:
            m["bsp_planner_decision_latency_seconds"].observe(rec["decision_latency_s"])
        if rec["reconfigured"]:
            method = rec.get("reconfig_method") or "unknown"
            m["bsp_planner_reconfigurations"].labels(method).inc()
            m["bsp_planner_reconfiguration_seconds"].labels(method).inc(rec["reconfig_s"])
            m["bsp_planner_reconfiguration_planned_seconds"].labels(method).inc(self.planned_reconfig_s)
        m["bsp_planner_task_restarts"].inc(rec.get("restarts", 0))
        for x in rec["tasks"]:
            task = x["task"]
            m["bsp_planner_task_cpu_millicores"].labels(task).set(x["cpu_millicores"])
            m["bsp_planner_task_assigned_workload"].labels(task).set(x["workload"])
            if x.get("observed_workload") is not None:
                m["bsp_planner_task_reported_workload"].labels(task).set(x["observed_workload"])
            m["bsp_planner_task_step_seconds"].labels(task).set(x["measured_s"])
            if x.get("forecast_s"):
                m["bsp_planner_task_forecast_error_ratio"].labels(task).set(x["measured_s"] / x["forecast_s"] - 1)
            m["bsp_planner_task_barrier_wait_seconds"].labels(task).inc(x.get("enter_wait_s", 0.0))

    def noticed(self, kind: str, message: str, **counts: float) -> None:
        self.metrics["bsp_planner_run_events"].labels(kind).inc()

    def run_ended(self, status: str, message: str, summary: dict[str, Any]) -> None:
        self.metrics["bsp_planner_run_phase"].state(status if status in PHASES else "failed")


def metrics_table() -> str:
    """The Markdown table of every metric (docs/metrics.md holds it; a test keeps the two the same)."""
    rows = ["| metric | type | labels | what | from |", "| --- | --- | --- | --- | --- |"]
    for s in METRICS:
        labels = ", ".join(f"`{name}`" for name in s.labels) or "-"
        kind = "gauge (one per phase)" if s.kind == "enum" else s.kind
        cells = [f"`{s.exposed}`", kind, labels, s.help, s.source]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--table"]:
        print("usage: python -m bsp_planner.runtime.metrics --table", file=sys.stderr)
        return 2
    sys.stdout.write(metrics_table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

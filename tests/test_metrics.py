"""A live run's Prometheus metrics (bsp_planner/runtime/metrics.py) without a live run: the watcher on step
records (a resumed run's counters continue from its run log), what Prometheus reads of them, the docs'
table, and `run --metrics-port/--metrics-host` refused with one line before anything is made."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client", reason="prometheus-client is not installed (pip install 'bsp-planner[live]')")
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from bsp_planner.runtime.metrics import METRICS, RunMetrics, main, metrics_table
from bsp_planner.runtime.runlog import RunLog

from cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
PLANNED_S = 0.25


def record(step: int, *, reconfigured: bool, method: str | None, seconds: float, cpu: tuple[int, int]) -> dict:
    """A step record of two tasks as `runlog.step_record` and `live_steps.run_logged` write it (the
    fields the metrics read); task b reports its own workload, task a does not."""
    rec = {
        "step": step,
        "action": int(reconfigured),
        "reconfigured": reconfigured,
        "reconfig_s": seconds,
        "reconfig_method": method,
        "decision_ms": 1.5 + step,
        "step_s": 0.5 + 0.1 * step,
        "predicted_step_s": 0.45 + 0.1 * step,
        "slowest_s": 0.4 + 0.1 * step,
        "critical_path_s": 0.42 + 0.1 * step,  # a task waits for another: more than the slowest task
        "barrier_s": 0.002 * (step + 1),
        "restarts": step % 2,
        "levels": [0, 1],
        "tasks": [
            {
                "task": "a",
                "cpu_millicores": cpu[0],
                "workload": 10.0 + step,
                "measured_s": 0.3 + 0.1 * step,
                "forecast_s": 0.25 + 0.1 * step,
                "enter_wait_s": 0.01,
            },
            {
                "task": "b",
                "cpu_millicores": cpu[1],
                "workload": 20.0,
                "observed_workload": 21.0 + step,
                "measured_s": 0.4 + 0.1 * step,
                "forecast_s": 0.5,
                "enter_wait_s": 0.02 * step,
            },
        ],
    }
    if reconfigured and step > 0:
        rec["decision_latency_s"] = 0.003 * step
    return rec


RECORDS = [
    record(0, reconfigured=True, method="start", seconds=1.2, cpu=(500, 1000)),
    record(1, reconfigured=True, method="in-place", seconds=0.2, cpu=(750, 750)),
    record(2, reconfigured=False, method=None, seconds=0.0, cpu=(750, 750)),
    record(3, reconfigured=True, method="recreate", seconds=0.9, cpu=(1000, 500)),
]


def samples(metrics: RunMetrics, openmetrics: bool = False) -> dict[str, float]:
    """{name{labels}: value} as a Prometheus scrape reads it (the text format, or OpenMetrics)."""
    if openmetrics:
        families = openmetrics_families(generate_openmetrics(metrics.registry).decode())
    else:
        families = text_string_to_metric_families(generate_latest(metrics.registry).decode())
    out = {}
    for family in families:
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


@pytest.fixture
def resumed_run(tmp_path) -> Path:
    """runs/r1: run.json with the plan's reconfiguration cost, and its first two steps logged (a run resumed
    after a coordinator died at step 2)."""
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    meta = {
        "settings": {"planner": "mpc", "mode": "forecast", "reconfigure": "in-place", "backend": "k8s"},
        "backend": {"backend": "kubernetes", "namespace": "bsp-planner"},  # what runs the tasks, by its own name
        "reconfigure_cost": {"method": "in-place", "planned_s": PLANNED_S, "in_place_s": PLANNED_S},
    }
    (run_dir / "run.json").write_text(json.dumps(meta))
    RunLog(run_dir, ["a", "b"]).rewrite(RECORDS[:2])
    return run_dir


def test_the_counters_equal_the_run_logs_totals_and_a_resumed_run_continues_them(resumed_run):
    m = RunMetrics(resumed_run.parent)
    assert samples(m)["bsp_planner_run_phase{bsp_planner_run_phase=starting}"] == 1
    m.run_started("r1", ["a", "b"], 6)  # counts the two logged steps first
    for rec in RECORDS[2:]:
        m.step_logged(rec)
    m.noticed("deferred", "node-a has no room now", tasks=1)
    m.noticed("replanned", "re-planned on 1500m", step=3)
    m.noticed("deferred", "still no room", tasks=1)
    for openmetrics in (False, True):  # Prometheus asks for OpenMetrics; both read the same
        got = samples(m, openmetrics)
        info = "backend=kubernetes,mode=forecast,planner=mpc,reconfigure=in-place,run_id=r1"
        assert got[f"bsp_planner_run_info{{{info}}}"] == 1
        assert got["bsp_planner_run_phase{bsp_planner_run_phase=running}"] == 1
        assert got["bsp_planner_run_steps"] == 6
        assert got["bsp_planner_steps_completed_total"] == 4
        for name, field in (
            ("bsp_planner_step_duration_seconds", "step_s"),
            ("bsp_planner_step_critical_path_seconds", "critical_path_s"),
            ("bsp_planner_barrier_wait_seconds", "barrier_s"),
        ):
            assert got[f"{name}_count"] == 4
            assert got[f"{name}_sum"] == pytest.approx(sum(r[field] for r in RECORDS))
        assert got["bsp_planner_step_predicted_seconds_total"] == pytest.approx(
            sum(r["predicted_step_s"] for r in RECORDS)
        )
        assert got["bsp_planner_step_prediction_abs_error_ratio_sum"] == pytest.approx(
            sum(abs(r["step_s"] / r["predicted_step_s"] - 1) for r in RECORDS)
        )
        assert got["bsp_planner_decision_duration_seconds_sum"] == pytest.approx(
            sum(r["decision_ms"] for r in RECORDS) / 1e3
        )
        assert got["bsp_planner_decision_latency_seconds_count"] == 2  # only where quotas changed mid-run
        assert got["bsp_planner_decision_latency_seconds_sum"] == pytest.approx(0.003 + 0.009)
        for method, seconds in (("start", 1.2), ("in-place", 0.2), ("recreate", 0.9)):
            assert got[f"bsp_planner_reconfigurations_total{{method={method}}}"] == 1
            assert got[f"bsp_planner_reconfiguration_seconds_total{{method={method}}}"] == pytest.approx(seconds)
            assert got[f"bsp_planner_reconfiguration_planned_seconds_total{{method={method}}}"] == PLANNED_S
        assert got["bsp_planner_task_restarts_total"] == 2
        # per task: the last step's values, and the barrier waits summed
        assert got["bsp_planner_task_cpu_millicores{task=a}"] == 1000
        assert got["bsp_planner_task_cpu_millicores{task=b}"] == 500
        assert got["bsp_planner_task_assigned_workload{task=a}"] == 13
        assert got["bsp_planner_task_reported_workload{task=b}"] == 24
        assert "bsp_planner_task_reported_workload{task=a}" not in got  # a stressor reports no workload
        assert got["bsp_planner_task_step_seconds{task=b}"] == pytest.approx(0.7)
        assert got["bsp_planner_task_forecast_error_ratio{task=a}"] == pytest.approx(0.6 / 0.55 - 1)
        assert got["bsp_planner_task_forecast_error_ratio{task=b}"] == pytest.approx(0.7 / 0.5 - 1)
        assert got["bsp_planner_task_barrier_wait_seconds_total{task=a}"] == pytest.approx(0.04)
        assert got["bsp_planner_task_barrier_wait_seconds_total{task=b}"] == pytest.approx(0.02 * (0 + 1 + 2 + 3))
        assert got["bsp_planner_run_events_total{kind=deferred}"] == 2
        assert got["bsp_planner_run_events_total{kind=replanned}"] == 1
    m.run_ended("interrupted", "ZooKeeper lost", {})
    got = samples(m)
    assert got["bsp_planner_run_phase{bsp_planner_run_phase=interrupted}"] == 1
    assert got["bsp_planner_run_phase{bsp_planner_run_phase=running}"] == 0


def test_two_runs_in_one_process_keep_their_own_metrics(resumed_run):
    first, second = RunMetrics(resumed_run.parent), RunMetrics(resumed_run.parent)  # no clash of names
    first.run_started("r1", ["a", "b"], 6)
    assert samples(first)["bsp_planner_steps_completed_total"] == 2
    assert samples(second)["bsp_planner_steps_completed_total"] == 0


def test_the_endpoint_serves_the_registry_and_stops_when_closed(resumed_run):
    import urllib.request

    m = RunMetrics(resumed_run.parent)
    port = m.serve("127.0.0.1", 0)
    m.run_started("r1", ["a", "b"], 6)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert "bsp_planner_steps_completed_total 2.0" in text.splitlines()
    m.close()
    m.close()  # twice: nothing more to stop
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_every_name_follows_the_conventions():
    names = [s.exposed for s in METRICS]
    assert len(set(names)) == len(names)
    for s in METRICS:
        assert re.fullmatch(r"bsp_planner_[a-z_]+", s.exposed), s.exposed
        assert s.exposed.endswith("_total") == (s.kind == "counter"), s.exposed
        assert not re.search(r"_(ms|milliseconds|minutes)(_|$)", s.exposed), "base units: seconds"
        assert s.help.endswith(".") and s.source


def test_the_docs_table_is_the_one_the_code_declares(capsys):
    text = (ROOT / "docs" / "metrics.md").read_text()
    begin = text.index("<!-- metrics table: python -m bsp_planner.runtime.metrics --table -->\n")
    table = text[text.index("\n", begin) + 1 : text.index("<!-- end of the metrics table -->")]
    assert table == metrics_table()
    assert main(["--table"]) == 0
    assert capsys.readouterr().out == metrics_table()
    for s in METRICS:
        assert f"| `{s.exposed}` |" in table
    for page in ("live.md", "kubernetes.md"):  # where a user looks for it
        assert "(metrics.md)" in (ROOT / "docs" / page).read_text(), page


UNREACHABLE = ["--zookeeper", "127.0.0.1:1", "--zk-wait", "1", "-q"]


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


@pytest.mark.parametrize(
    "args, env, needles",
    [
        (["--metrics-port", "abc"], {}, ["field '--metrics-port'", "expected a TCP port from 0", "'abc'"]),
        (["--metrics-port", "65536"], {}, ["field '--metrics-port'", "to 65535"]),
        (["--metrics-port", "-1"], {}, ["field '--metrics-port'", "to 65535"]),
        (["--metrics-port", "1.5"], {}, ["field '--metrics-port'", "'1.5'"]),
        ([], {"BSP_PLANNER_METRICS_PORT": "http"}, ["field '$BSP_PLANNER_METRICS_PORT'", "'http'"]),
        (["--metrics-port", "0", "--metrics-host", " "], {}, ["field '--metrics-host'", "got an empty one"]),
        (["--metrics-port", "0", "--metrics-host", "no-such-host.invalid"], {}, ["field '--metrics-host'"]),
        (["--metrics-port", "TAKEN"], {}, ["field '--metrics-port'", "cannot serve metrics on 127.0.0.1:"]),
    ],
)
def test_a_bad_metrics_option_is_refused_with_one_line_before_anything_is_made(
    args, env, needles, taken_port, tmp_path, monkeypatch, capsys
):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    runs = tmp_path / "runs"
    args = [str(taken_port) if a == "TAKEN" else a for a in args]
    code, out, err = run_cli(["run", "--runs-dir", runs, *UNREACHABLE, *args], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("error: ") and err.count("error:") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not runs.exists(), "nothing made for a refused run"


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_the_endpoint_is_printed_and_ends_with_the_run(given, tmp_path, monkeypatch, capsys):
    """A run that stops at once (its run id taken) still closes its endpoint; the in-cluster Job gives the
    port through the environment."""
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    args = ["run", "--runs-dir", tmp_path / "runs", "--run-id", "taken", *UNREACHABLE]
    if given == "flag":
        args += ["--metrics-port", "0"]
    else:
        monkeypatch.setenv("BSP_PLANNER_METRICS_PORT", "0")
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 2 and "run 'taken' already exists" in err, err
    port = int(re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", out).group(1))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()

"""The particles application live (issue 15 goal): mpc against exppo (= the even split: the ranks share
one profile) on 8 rank processes under cgroup quotas, under our barrier and in observe mode.

    python benchmarks/bench_apps_live.py [--ranks 8] [--steps 30] [--planners mpc,exppo] [--sync barrier,observe]

Needs root (cgroup quotas), java and the ZooKeeper jars (a server is started on a free loopback port),
and the task library with process tasks. Prints one row per (sync, planner) and writes --out (JSON).

What the planner knows: the live coordinator cannot yet plan from observed workloads (no `run --online`
for a job without series), so this runs in perfect mode on the recorded trace (`forecast.actual =
traces/particles-N`): the particle counts the ranks will report, known in advance because the application
is deterministic given its seed. The ranks ignore the workloads the run publishes and report their own;
the benchmark checks every reported count against the trace. The job gets a series per task only because
the scenario loader requires one; in perfect mode with a trace it is not used for planning.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bsp_planner.inputs.shipped import data_dir
from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port
from bsp_planner.zk.credentials import generate_credentials, write_credentials_file


def write_experiment(folder: Path, ranks: int, steps: int, sync: str) -> Path:
    data = data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    job = tomllib.loads((data / "jobs" / f"particles-{ranks}.toml").read_text())
    lines = [f'name = "particles-{ranks}"', f'sync = "{sync}"']
    for i, t in enumerate(job["task"]):
        argv = [sys.executable, *t["process"][1:], "--timings", "{run_dir}/timings-{task}.jsonl"]
        first = (i * 1000) % 9000
        lines += [
            "",
            "[[task]]",
            f'name = "{t["name"]}"',
            f"process = {json.dumps(argv)}",
            f'series = {{ file = "{data / "datasets" / "nyc_taxi.csv"}", first_row = {first}, last_row = {first + 998} }}',
        ]
    (folder / "job.toml").write_text("\n".join(lines) + "\n")
    shutil.copy(data / "profiles" / f"particles-{ranks}" / "profile.csv", folder / "profile.csv")
    shipped = (data / "experiments" / f"particles-{ranks}.toml").read_text()
    exp = tomllib.loads(shipped)
    c = exp["cpu"]
    (folder / "exp.toml").write_text(f"""job = "job.toml"
profile = "profile.csv"
interpolation = "{exp["interpolation"]}"
out_of_grid = "{exp["out_of_grid"]}"
workload_range = {json.dumps(exp["workload_range"])}
steps = {steps}
penalty_s = {exp["penalty_s"]}
modes = ["perfect"]
strategies = ["mpc"]
output = "out"

[cpu]
budget_millicores = {c["budget_millicores"]}
min_millicores = {c["min_millicores"]}
step_millicores = {c["step_millicores"]}
max_millicores = {c["max_millicores"]}

[planner]
horizon = {exp["planner"]["horizon"]}
dp_max_segment = {exp["planner"]["dp_max_segment"]}

[forecast]
horizon = {exp["forecast"]["horizon"]}
actual = "{data / "traces" / f"particles-{ranks}"}"
""")
    return folder / "exp.toml"


def trace(ranks: int, steps: int) -> list[list[float]]:
    folder = data_dir() / "traces" / f"particles-{ranks}"
    cols = [[float(x) for x in (folder / f"p{r}.csv").read_text().split()[1 : steps + 1]] for r in range(ranks)]
    return [[cols[r][t] for r in range(ranks)] for t in range(steps)]


def write_online_experiment(folder: Path, ranks: int, sync: str) -> Path:
    """The shipped experiment and job as they are (no series: workloads observed, planned online), with
    `sync` and the ranks' --timings."""
    data = data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    job = (data / "jobs" / f"particles-{ranks}.toml").read_text()
    job = job.replace('sync = "barrier"', f'sync = "{sync}"').replace(
        '"{run_dir}/particles"]', '"{run_dir}/particles", "--timings", "{run_dir}/timings-{task}.jsonl"]'
    )
    (folder / "job.toml").write_text(job)
    shutil.copy(data / "profiles" / f"particles-{ranks}" / "profile.csv", folder / "profile.csv")
    exp = (data / "experiments" / f"particles-{ranks}.toml").read_text()
    exp = exp.replace(f'job = "../jobs/particles-{ranks}.toml"', 'job = "job.toml"').replace(
        f'profile = "../profiles/particles-{ranks}/profile.csv"', 'profile = "profile.csv"'
    )
    (folder / "exp.toml").write_text(exp)
    return folder / "exp.toml"


def run_one(work: Path, server, ranks: int, steps: int, sync: str, planner: str, plan: str = "perfect") -> dict:
    from bsp_planner.runtime.coordinator import Coordinator, RunSettings

    tag = f"{plan}-{sync}-{planner.replace(':', '')}"
    if plan == "online":
        exp = write_online_experiment(work / tag, ranks, sync)
        mode, overrides = "forecast", [f"steps={steps}", "online=true"]
    else:
        exp = write_experiment(work / tag, ranks, steps, sync)
        mode, overrides = "perfect", []
    creds = write_credentials_file(work / f"auth-{tag}", generate_credentials())
    settings = RunSettings(
        experiment=str(exp),
        planner=planner,
        mode=mode,
        reconfigure="in-place",
        overrides=overrides,
        zookeeper=server.hosts,
        zk_auth=f"file:{creds}",
    )
    from bsp_planner.runtime.executor import RunFailed

    run_id = f"particles-{tag}-{os.getpid()}"
    t0 = time.perf_counter()
    try:
        result = Coordinator(settings, run_id, work / "runs").run()
        status, message, run_dir = result.status, "", result.run_dir
    except RunFailed as exc:  # recorded with the steps it logged, so the other rows still run
        status, message, run_dir = "failed", str(exc).splitlines()[0], work / "runs" / run_id
    wall = time.perf_counter() - t0
    log = run_dir / "steps.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    if not records:
        return {"sync": sync, "planner": planner, "status": status, "message": message, "steps": 0}
    want = trace(ranks, steps)
    mismatched = sum(
        1 for r in records for i, t in enumerate(r["tasks"]) if t.get("observed_workload") != want[r["step"]][i]
    )
    step_s = [r["step_s"] for r in records]
    # the library's cost per step, seen from the rank: entering plus leaving `session.step` (in barrier
    # mode this includes waiting for the publication and for the barrier; in observe mode it is all the
    # library's own work: a stop check and the report)
    overhead_ms = []
    for path in run_dir.glob("timings-*.jsonl"):
        for line in path.read_text().splitlines():
            x = json.loads(line)
            overhead_ms.append(1000 * (x["enter_s"] + x["leave_s"]))
    reconfig_s = [r["reconfig_s"] for r in records]
    return {
        "plan": plan,
        "sync": sync,
        "planner": planner,
        "status": status,
        "message": message,
        "steps": len(records),
        "total_s": round(sum(step_s) + sum(reconfig_s), 3),
        "compute_s": round(sum(step_s), 3),
        # the slowest rank's compute block per step, summed: the run's critical path without any
        # synchronisation; comparable between modes (in observe mode the coordinator times a step from
        # publishing it, while the ranks may already be running it)
        "slowest_compute_s": round(sum(r["slowest_s"] for r in records), 3),
        "reconfigurations": sum(1 for r in records if r["reconfigured"]),
        "reconfig_s": round(sum(reconfig_s), 4),
        "predicted_s": round(sum(r["predicted_step_s"] for r in records), 3),
        "median_step_s": round(statistics.median(step_s), 4),
        "wall_s": round(wall, 1),
        "session_step_overhead_ms": {
            "median": round(statistics.median(overhead_ms), 3),
            "p95": round(sorted(overhead_ms)[int(0.95 * (len(overhead_ms) - 1))], 3),
            "samples": len(overhead_ms),
        }
        if overhead_ms
        else None,
        "first_step_cpu_millicores": [t["cpu_millicores"] for t in records[0]["tasks"]],
        "reported_counts_off_trace": mismatched,
        "run_dir": str(run_dir),
        "record_keys": sorted(records[0]["tasks"][0]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--planners", default="mpc,exppo")
    ap.add_argument("--sync", default="barrier,observe")
    ap.add_argument(
        "--plan",
        default="online",
        choices=("online", "perfect"),
        help="online: the shipped experiment, workloads observed and forecast (persistence) step by step; "
        "perfect: the recorded trace known in advance",
    )
    ap.add_argument("--out", default="bench_apps_live.json")
    ap.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args(argv)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-apps-live-"))
    server = LocalZooKeeper(work / "zk", port=free_port())
    server.start()
    rows = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        for sync in args.sync.split(","):
            for planner in args.planners.split(","):
                row = run_one(work, server, args.ranks, args.steps, sync, planner, args.plan)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("run_dir", "record_keys")}), flush=True)
    finally:
        server.stop()
    out = {"started": started, "load_average": os.getloadavg(), "ranks": args.ranks, "steps": args.steps, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for sync in args.sync.split(","):
        by = {r["planner"]: r for r in rows if r["sync"] == sync}
        if "mpc" in by and "exppo" in by and by["mpc"].get("total_s") and by["exppo"].get("total_s"):
            m, e = by["mpc"], by["exppo"]
            print(
                f"{sync}: mpc {m['total_s']:.2f} s, exppo (even split) {e['total_s']:.2f} s: {m['total_s'] / e['total_s']:.2f}x; "
                f"slowest compute {m['slowest_compute_s']:.2f} vs {e['slowest_compute_s']:.2f} s: "
                f"{m['slowest_compute_s'] / e['slowest_compute_s']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

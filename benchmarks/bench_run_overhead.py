"""What a live `bsp-planner run` adds around the tasks' own compute, end to end (issue 22's overhead goals).

    .venv/bin/python benchmarks/bench_run_overhead.py --tasks 4 --steps 20 --rounds 3          # needs root
    .venv/bin/python benchmarks/bench_run_overhead.py --sync barrier --planner mpc
    .venv/bin/python benchmarks/bench_run_overhead.py --compare-with /tmp/old-checkout   # the same runs, interleaved

Starts its own ZooKeeper on a free loopback port, writes a job of N process tasks
(`bsp_planner.testing.bsp_app`: pure-Python CPU work per step, in observe mode synchronising itself
through files), and runs it with the real CLI (`python -m bsp_planner.cli run`, local backend, cgroup
quotas, in-place reconfiguration) as a user does, `--rounds` times. Per run it reads the run log and
reports:

- ``startup_s``: from starting the CLI to the first task's start of step 0 (the tasks' clocks and this
  process's are the same host's wall clock);
- ``overhead_ms``: per step, the step's time minus its slowest task's compute (``step_s - slowest_s``:
  publication, barriers or the application's own exchange, reports), median and p95 over every step of
  every round; ``wall_overhead_ms_per_step``: the same from the application's side, per run: its wall
  time (first task's start to last task's end) minus the sum of its slowest tasks' compute, per step,
  which in barrier mode also holds the coordinator's work between two steps (reading the reports,
  logging, deciding, reconfiguring, publishing);
- ``after_last_step_s``: from the last task's end to the CLI's exit (summary, chart, clean-up), and
  ``chart_s``: drawing chart.png from the run log alone;
- ``wall_s``: the whole command;
- ``reconfig_ms``: what each in-place reconfiguration really took (planned at 0.2 ms: a quota write).

``--compare-with DIR`` runs every round a second time with the bsp-planner of another checkout (e.g. an
earlier commit's `git archive`), interleaved, under the key ``baseline``.

The machine's load average is recorded beside the figures (the host is shared). Writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _zk import credentials, local_server  # noqa: E402

TASK = """
[[task]]
name = "t{i}"
process = ["{python}", "-m", "bsp_planner.testing.bsp_app", "--ranks", "{n}", "--work-per-unit", "{work}"{extra}]
series = {{ file = "{data}/nyc_taxi.csv", first_row = {first}, last_row = {last} }}
"""

EXPERIMENT = """job = "job.toml"
profile = "profile.csv"
steps = {steps}
penalty_s = 0.001
modes = ["perfect"]
strategies = ["mpc"]
output = "out"

[cpu]
budget_millicores = {budget}
min_millicores = 250
step_millicores = 50
max_millicores = 1000

[planner]
horizon = 4

[forecast]
horizon = 8
"""


def write_inputs(folder: Path, n: int, steps: int, sync: str, work: int, budget: float) -> Path:
    from bsp_planner.inputs.shipped import data_dir

    data = data_dir() / "datasets"
    extra = ', "--self-sync"' if sync == "observe" else ""
    rows = [(0, 1998), (1999, 3997)]
    tasks = "".join(
        TASK.format(
            i=i,
            python=sys.executable,
            n=n,
            work=work,
            extra=extra,
            data=data,
            first=rows[i % 2][0],
            last=rows[i % 2][1],
        )
        for i in range(n)
    )
    (folder / "job.toml").write_text(f'name = "overhead"\nsync = "{sync}"\n' + tasks)
    lines = ["task,workload,cpu_millicores,duration_s,repeat"]
    for i in range(n):  # roughly the app's: 100 ns per unit of work and workload unit at one core
        for w in (10, 20, 30, 40, 50):
            for c in (250, 500, 750, 1000):
                lines.append(f"t{i},{w},{c},{1e-7 * work * w * 1000 / c:.5f},0")
    (folder / "profile.csv").write_text("\n".join(lines) + "\n")
    exp = folder / "exp.toml"
    exp.write_text(EXPERIMENT.format(steps=steps, budget=budget))
    return exp


def one_run(folder: Path, exp: Path, zk: str, creds: Path, planner: str, run_id: str, root: Path = ROOT) -> dict:
    cmd = [
        sys.executable, "-m", "bsp_planner.cli", "run", "--experiment", str(exp), "--planner", planner,
        "--zookeeper", zk, "--zk-auth-file", str(creds), "--runs-dir", str(folder / "runs"), "--run-id", run_id,
        "--reconfigure", "in-place", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    t_end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    run_dir = folder / "runs" / run_id
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    first_start = min(t.get("started_at", t["finished_at"] - t["measured_s"]) for t in records[0]["tasks"])
    last_end = max(t["finished_at"] for t in records[-1]["tasks"])
    from bsp_planner.runtime.runlog import step_chart

    c0 = time.perf_counter()
    step_chart(records, folder / f"chart-{run_id}.png", run_id)
    chart_s = time.perf_counter() - c0
    return {
        "startup_s": first_start - t0,
        "wall_s": t_end - t0,
        "after_last_step_s": t_end - last_end,
        "chart_s": chart_s,
        "overhead_s": [r["step_s"] - r["slowest_s"] for r in records],
        # the application's own view: its wall time from first start to last end, beyond its slowest tasks
        "wall_overhead_s": (last_end - first_start - sum(r["slowest_s"] for r in records)) / len(records),
        "slowest_s": [r["slowest_s"] for r in records],
        "reconfigurations": sum(bool(r["reconfigured"]) for r in records),
        "reconfig_s": [r["reconfig_s"] for r in records if r["reconfigured"]],
    }


def summarise(runs: list[dict]) -> dict:
    over = [x for r in runs for x in r["overhead_s"]]
    rec = [x for r in runs for x in r["reconfig_s"]] or [0.0]
    slow = [x for r in runs for x in r["slowest_s"]]
    q = statistics.quantiles(over, n=20, method="inclusive") if len(over) >= 2 else [over[0]] * 19
    return {
        "overhead_ms": {
            "median": round(1e3 * statistics.median(over), 2),
            "p95": round(1e3 * q[18], 2),
            "max": round(1e3 * max(over), 2),
        },  # fmt: skip
        "slowest_task_ms_median": round(1e3 * statistics.median(slow), 1),
        "wall_overhead_ms_per_step": [round(1e3 * r["wall_overhead_s"], 1) for r in runs],
        "startup_s": [round(r["startup_s"], 2) for r in runs],
        "after_last_step_s": [round(r["after_last_step_s"], 2) for r in runs],
        "chart_s": [round(r["chart_s"], 2) for r in runs],
        "wall_s": [round(r["wall_s"], 2) for r in runs],
        "reconfigurations": [r["reconfigurations"] for r in runs],
        "reconfig_ms": {"median": round(1e3 * statistics.median(rec), 2), "max": round(1e3 * max(rec), 2)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync", choices=["observe", "barrier", "both"], default="both")
    ap.add_argument("--planner", default="mpc")
    ap.add_argument("--work", type=int, default=20000, help="the app's work per workload unit (iterations)")
    ap.add_argument("--budget", type=float, default=2000, help="millicores over all tasks")
    ap.add_argument("--compare-with", type=Path, default=None, help="another checkout's root, run interleaved")
    ap.add_argument("--out", default="bench_run_overhead.json")
    args = ap.parse_args()
    syncs = ["observe", "barrier"] if args.sync == "both" else [args.sync]
    results: dict = {
        "date": date.today().isoformat(),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"},
        "by_sync": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-run-overhead-") as tmp:
        folder = Path(tmp)
        _, creds = credentials(folder / "zk-auth")
        with local_server(folder / "zk") as server:
            trees = {"current": ROOT, **({"baseline": args.compare_with.resolve()} if args.compare_with else {})}
            runs: dict[tuple[str, str], list[dict]] = {(t, s): [] for t in trees for s in syncs}
            for k in range(args.rounds):
                for sync in syncs:  # interleaved, so a drift in the shared host's load hits every variant
                    for tree, root in trees.items():
                        sub = folder / tree / sync
                        sub.mkdir(parents=True, exist_ok=True)
                        exp = write_inputs(sub, args.tasks, args.steps, sync, args.work, args.budget)
                        r = one_run(sub, exp, server.hosts, creds, args.planner, f"r{k}", root)
                        runs[tree, sync].append(r)
                        over = 1e3 * statistics.median(r["overhead_s"])
                        print(f"{tree} {sync} round {k}: startup {r['startup_s']:.2f} s, overhead median {over:.1f} ms")
            for (tree, sync), rs in runs.items():
                results["by_sync"].setdefault(tree, {})[sync] = summarise(rs)
    results["load_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a recreation costs: the local backend's pre-run measurement against the recreations of a real run.

    .venv/bin/python benchmarks/bench_recreate_cost.py              # probe at 250/500/1000m, then a live run
    .venv/bin/python benchmarks/bench_recreate_cost.py --steps 12 --probe-only

probe     LocalBackend.measure_reconfigure_cost('recreate') under a quota of 250, 500 and 1000 millicores
          (median of three recreations of a worker-like process, see runtime/backends/local.py), wall and
          CPU seconds of the measurement itself.
live      A short run of the live-default experiment with static:1, penalty_s=0 and --reconfigure
          recreate (a new configuration almost every step), planned with the probe's figure (run.json
          says so): the planned cost against every reconfiguration's measured reconfig_s (stop, start,
          restore and ZooKeeper join of each changed worker).

Needs root (cgroups), stress-ng and Java (the ZooKeeper server it starts on a free loopback port).
Prints the load average with every figure: the host is shared.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import load, write_results  # noqa: E402


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def probe(levels: list[int], tasks: int) -> dict:
    from bsp_planner.runtime.backends.local import LocalBackend

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        b = LocalBackend("bench-probe", tmp)
        b.workers = {f"t{i}": 1 for i in range(tasks)}  # what check() reads from a job of `tasks` tasks
        try:
            for m in levels:
                b.probe_millicores = float(m)
                w0, c0 = time.perf_counter(), cpu_s()
                cost = b.measure_reconfigure_cost("recreate")
                out[str(m)] = {
                    "recreate_s": round(cost or 0.0, 4),
                    "measurement_wall_s": round(time.perf_counter() - w0, 3),
                    "measurement_cpu_s": round(cpu_s() - c0, 3),
                    "load": load(),
                }
                print(f"probe, {tasks} task(s) at {m}m: {out[str(m)]}", flush=True)
        finally:
            b.close()
    return out


def live(steps: int) -> dict:
    from _zk import local_server
    from bench_live import live_run

    from bsp_planner.inputs.shipped import data_path

    experiment = data_path("experiments/live-default.toml")
    with tempfile.TemporaryDirectory() as tmp, local_server(Path(tmp) / "zk") as server:
        work = Path(tmp)
        w0, c0 = time.perf_counter(), cpu_s()
        r = live_run(experiment, "static:1", "recreate", steps, work, server, "recreate-cost", ["penalty_s=0"])
        wall, cpu = time.perf_counter() - w0, cpu_s() - c0
        meta = json.loads((Path(r["run_dir"]) / "run.json").read_text())
    costs = r["reconfig_s_all"]
    planned = meta["reconfigure_cost"]
    out = {
        "planned_s": round(planned["planned_s"], 4),
        "planned_source": planned["source"],
        "reconfigurations": len(costs),
        "measured_median_s": round(statistics.median(costs), 4) if costs else None,
        "measured_min_s": round(min(costs), 4) if costs else None,
        "measured_max_s": round(max(costs), 4) if costs else None,
        "run_wall_s": round(wall, 2),
        "run_cpu_s_coordinator": round(cpu, 2),
        "load": load(),
    }
    print(f"live recreate run, {steps} steps: {out}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="250,500,1000", help="probe quotas in millicores")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--tasks", type=int, default=3, help="tasks recreated at once by the probe (live-default: 3)")
    ap.add_argument("--probe-only", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_recreate_cost.json")
    args = ap.parse_args()
    results: dict = {"date": date.today().isoformat(), "load_before": load()}
    results["probe"] = probe([int(x) for x in args.levels.split(",")], args.tasks)
    if not args.probe_only:
        results["live"] = live(args.steps)
    write_results(results, args.out)


if __name__ == "__main__":
    main()

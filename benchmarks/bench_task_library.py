"""Overhead of the task library (bsp_planner.task) per superstep, beyond the barrier itself.

    .venv/bin/python benchmarks/bench_task_library.py --tasks 8 --steps 200

Starts its own ZooKeeper on a free loopback port, creates a run with N tasks, and starts N processes
that each join it (`task.join()`, observe mode: no barrier) and run `with session.step(t): pass` for
every step: everything such a step costs is the library's own work (the checks, the CPU and wall
timing, and the report + checkpoint written in one ZooKeeper transaction), since there is no compute
and no barrier to wait for. All N processes report at the same time, as the tasks of a BSP job do.
Prints the median and p95 per step over all tasks, and writes them to --out (JSON).
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

from bsp_planner.runtime import zk as Z  # noqa: E402
from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port  # noqa: E402

CHILD = """
import json, sys, time
from bsp_planner import task
steps, go = int(sys.argv[1]), sys.argv[2]
times = []
with task.join() as session:
    import os
    while not os.path.exists(go):  # all tasks start together
        time.sleep(0.001)
    for t in range(session.first_step, steps):
        t0 = time.perf_counter()
        with session.step(t, workload=10.0):
            pass
        times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="bench_task_library.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalZooKeeper(Path(tmp) / "zk", port=free_port())
        server.start()
        creds = Z.Credentials("bench", "bench-" + os.urandom(6).hex())
        root = "/bench-task-library"
        s = Z.ZkSession(server.hosts, creds).start()
        try:
            names = [f"p{i}" for i in range(args.tasks)]
            s.create(
                root,
                Z.run_value(
                    "bench", "bench", [{"name": n, "process": ["-"], "workers": 1} for n in names], (0, 100), args.steps
                ),
            )
            paths = Z.RunPaths(root)
            for p in (paths.members, paths.tasks, paths.barriers):
                s.create(p)
            for n in names:
                for p in (paths.task(n), paths.steps(n), paths.results(n)):
                    s.create(p)
                s.create(paths.checkpoint(n), Z.checkpoint_value(-1, 0))
            go = Path(tmp) / "go"
            procs = []
            for n in names:
                env = dict(
                    os.environ,
                    BSP_RUN_ID="bench",
                    BSP_TASK=n,
                    BSP_ZOOKEEPER=server.hosts,
                    BSP_ZK_ROOT=root,
                    BSP_ZK_AUTH=f"{creds.user}:{creds.password}",
                    BSP_SYNC="observe",
                    PYTHONPATH=str(ROOT),
                )
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", CHILD, str(args.steps), str(go)],
                        env=env,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            deadline = time.monotonic() + 60
            while len(s.children(paths.members)) < args.tasks and time.monotonic() < deadline:
                time.sleep(0.01)
            go.touch()
            times = []
            for p in procs:
                out, _ = p.communicate(timeout=600)
                times += json.loads(out.strip().splitlines()[-1])
        finally:
            s.delete_tree(root)
            s.close()
            server.stop()
    times.sort()
    result = {
        "date": date.today().isoformat(),
        "tasks": args.tasks,
        "steps": args.steps,
        "median_ms": round(1e3 * statistics.median(times), 3),
        "p95_ms": round(1e3 * times[int(0.95 * (len(times) - 1))], 3),
        "load_1m": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

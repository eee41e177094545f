"""Overhead of the task library (bsp_planner.task) per superstep, beyond the barrier itself.

    .venv/bin/python benchmarks/bench_task_library.py --tasks 8 --steps 200            # barrier mode, both barriers
    .venv/bin/python benchmarks/bench_task_library.py --sync observe                   # observe mode (no barrier)
    .venv/bin/python benchmarks/bench_task_library.py --profile prof.txt               # cProfile of task p0's steps

Starts its own ZooKeeper on a free loopback port, creates a run with N tasks, and starts N processes that
each join it (`task.join()`) and run `with session.step(t, workload=10.0): pass` for every step, all at
once, as the tasks of a BSP job do. With no compute in the block, a step's time is the library's own work
plus the barrier's. Every step is published before the processes start (so waiting for the coordinator
is not counted); with the counting barrier, a thread of this process counts the arrivals, as the
coordinator does.

Barrier mode measures, in the same processes, a bare barrier step (the same kind, `enter` then `leave`, on
a step of its own) right after each library step, so both see the same load, and reports the library's
overhead beyond the barrier three ways:

- ``overhead_ms``: median library step minus median bare barrier step (wall), and the same for the CPU
  time of the process (``overhead_cpu_ms``: what the library costs whatever the load on the machine);
- ``paired_overhead_ms``: the median of (library step - the bare barrier step right after it);
- ``beyond_barrier_ms``: the median of (step wall - time inside the barrier's enter and leave) per step.

and where a step's time goes (`TaskSession.timings` medians). Writes everything to --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port  # noqa: E402
from bsp_planner.zk.barrier import CountingBarrier, step_barrier  # noqa: E402
from bsp_planner.zk.credentials import Credentials  # noqa: E402
from bsp_planner.zk.schema import RunPaths, checkpoint_value, run_value, step_value  # noqa: E402
from bsp_planner.zk.session import ZkSession  # noqa: E402

CHILD = """
import json, os, sys, time
from bsp_planner import task
from bsp_planner.zk.barrier import step_barrier
steps, go, bare, profile = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4]
lib, timings, base = [], [], []
with task.join() as session:
    while not os.path.exists(go):  # all tasks start together
        time.sleep(0.001)
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    names = list(session.info.tasks)
    for t in range(steps):
        w0, c0 = time.perf_counter(), time.process_time()
        with session.step(t, workload=10.0):
            pass
        lib.append((time.perf_counter() - w0, time.process_time() - c0))
        timings.append(session.timings)
        if bare:  # the bare barrier of the same kind on a step of its own, right after: the same load
            b = step_barrier(session.info.barrier, session.session, session.paths, steps + t, names)
            w0, c0 = time.perf_counter(), time.process_time()
            b.enter(session.task_name, 120)
            b.leave(session.task_name, 120)
            base.append((time.perf_counter() - w0, time.process_time() - c0))
    if profile:
        prof.disable()
        import io, pstats
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        open(profile, "w").write(out.getvalue())
print(json.dumps({"lib": lib, "timings": timings, "bare": base}))
"""


def _publish_all(s: ZkSession, paths: RunPaths, names: list[str], steps: int, barrier: str, sync: str) -> None:
    ops: list[tuple] = []
    for t in range(steps):
        if sync == "barrier":
            ops += step_barrier(barrier, s, paths, t, names).setup_ops()
        ops += [("create", paths.step(n, t), step_value(t, 10.0)) for n in names]
        if len(ops) > 400:
            s.commit(ops)
            ops = []
    if ops:
        s.commit(ops)


def _count(s: ZkSession, paths: RunPaths, names: list[str], order: list[int], stop: threading.Event) -> None:
    """The coordinator's part of the counting barrier: release every step's phases in turn (in `order`)."""
    for t in order:
        b = CountingBarrier(s, paths, t, names)
        if s.wait_for(lambda watch, b=b: True if b.poll(watch) else None, None, interrupt=stop.is_set) is None:
            return


def median_ms(xs: list[float]) -> float:
    return round(1e3 * statistics.median(xs), 3)


def p95_ms(xs: list[float]) -> float:
    xs = sorted(xs)
    return round(1e3 * xs[int(0.95 * (len(xs) - 1))], 3)


def bench(tasks: int, steps: int, sync: str, barrier: str, profile: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalZooKeeper(Path(tmp) / "zk", port=free_port())
        server.start()
        creds = Credentials("bench", "bench-" + os.urandom(6).hex())
        root = "/bench-task-library"
        s = ZkSession(server.hosts, creds).start()
        stop = threading.Event()
        bare = sync == "barrier"
        total = 2 * steps if bare else steps
        try:
            names = [f"p{i}" for i in range(tasks)]
            value = run_value(
                "bench", "bench", [{"name": n, "process": ["-"], "workers": 1} for n in names], (0, 100), total, barrier
            )
            s.create(root, value)
            paths = RunPaths(root)
            for p in (paths.members, paths.tasks, paths.barriers):
                s.create(p)
            for n in names:
                for p in (paths.task(n), paths.steps(n), paths.results(n)):
                    s.create(p)
                s.create(paths.checkpoint(n), checkpoint_value(-1, 0))
            _publish_all(s, paths, names, total, barrier, sync)
            counter = None
            if bare and barrier == "counting":
                order = [x for t in range(steps) for x in (t, steps + t)]  # library step t, then its bare twin
                counter = threading.Thread(target=_count, args=(s, paths, names, order, stop), daemon=True)
                counter.start()
            go = Path(tmp) / "go"
            procs = []
            for i, n in enumerate(names):
                env = dict(
                    os.environ,
                    BSP_RUN_ID="bench",
                    BSP_TASK=n,
                    BSP_ZOOKEEPER=server.hosts,
                    BSP_ZK_ROOT=root,
                    BSP_ZK_AUTH=f"{creds.user}:{creds.password}",
                    BSP_SYNC=sync,
                    PYTHONPATH=str(ROOT),
                )
                args = [str(steps), str(go), "1" if bare else "0", profile if (profile and i == 0) else ""]
                procs.append(
                    subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stdout=subprocess.PIPE, text=True)
                )
            deadline = time.monotonic() + 60
            while len(s.children(paths.members)) < tasks and time.monotonic() < deadline:
                time.sleep(0.01)
            load_before = os.getloadavg()[0]
            go.touch()
            runs = []
            for p in procs:
                out, _ = p.communicate(timeout=600)
                runs.append(json.loads(out.strip().splitlines()[-1]))
            load_after = os.getloadavg()[0]
        finally:
            stop.set()
            s.delete_tree(root)
            s.close()
            server.stop()
    lib_wall = [w for r in runs for w, _ in r["lib"]]
    lib_cpu = [c for r in runs for _, c in r["lib"]]
    timings = [x for r in runs for x in r["timings"]]
    result: dict = {
        "date": date.today().isoformat(),
        "tasks": tasks,
        "steps": steps,
        "sync": sync,
        "barrier": barrier if bare else None,
        "step_median_ms": median_ms(lib_wall),
        "step_p95_ms": p95_ms(lib_wall),
        "step_cpu_median_ms": median_ms(lib_cpu),
        "where_median_ms": {k: median_ms([x[k] for x in timings]) for k in timings[0]},
        "load_1m": [load_before, load_after],
    }
    if bare:
        base_wall = [w for r in runs for w, _ in r["bare"]]
        base_cpu = [c for r in runs for _, c in r["bare"]]
        result |= {
            "bare_barrier_median_ms": median_ms(base_wall),
            "bare_barrier_cpu_median_ms": median_ms(base_cpu),
            "overhead_ms": round(median_ms(lib_wall) - median_ms(base_wall), 3),
            "overhead_cpu_ms": round(median_ms(lib_cpu) - median_ms(base_cpu), 3),
            # each library step against the bare barrier step right after it, in the same process
            "paired_overhead_ms": median_ms(
                [lw - bw for r in runs for (lw, _), (bw, _) in zip(r["lib"], r["bare"], strict=True)]
            ),
            "beyond_barrier_ms": median_ms([x["total_s"] - x["enter_s"] - x["leave_s"] for x in timings]),
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sync", choices=["barrier", "observe"], default="barrier")
    ap.add_argument("--barrier", choices=["double", "counting", "both"], default="both")
    ap.add_argument("--profile", default=None, help="write task p0's cProfile (cumulative, top 40) here")
    ap.add_argument("--out", default="bench_task_library.json")
    args = ap.parse_args()
    kinds = ["double", "counting"] if args.barrier == "both" else [args.barrier]
    if args.sync == "observe":
        kinds = ["double"]  # no barrier: the kind does not matter
    results = [bench(args.tasks, args.steps, args.sync, k, args.profile) for k in kinds]
    print(json.dumps(results, indent=2))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

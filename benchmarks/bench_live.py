"""Live execution benchmarks: barrier overhead, live against simulated time, reconfiguration cost.

    .venv/bin/python benchmarks/bench_live.py barrier            # 8 and 128 participants on loopback
    .venv/bin/python benchmarks/bench_live.py live --steps 20    # experiments/live-default.toml, mpc
    .venv/bin/python benchmarks/bench_live.py reconfig           # recreate vs in-place, measured
    .venv/bin/python benchmarks/bench_live.py all

Each section starts its own ZooKeeper server (the one `bsp-planner zk start` runs) on a free loopback
port and stops it at the end; results are printed and written to --out (JSON), the live runs' folders
(run log, chart, summary) beside it in bench_live_runs/.

barrier   Participants are separate processes (`--per-process` participants each, default 1) that do no
          work but a random 0-20 ms pause, so they reach the leave barrier at different times. The
          overhead of a step is the time from the last participant's finish to the release of the
          last participant (max over participants of release - max over participants of finish),
          all on CLOCK_MONOTONIC, which every process on the host shares.
live      A live run of the default live experiment (needs root, stress-ng and the profile), compared
          with the simulator's prediction for the same plan.
reconfig  Short runs of `static:1` with no penalty (a new configuration almost every step), once with
          --reconfigure recreate and once with in-place; the real cost of each reconfiguration.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from _report import load, write_results
from _zk import ROOT, collect, credentials, in_threads, kill_left, local_server, make_root, spawn

from bsp_planner.zk.barrier import StepBarrier
from bsp_planner.zk.credentials import generate_credentials, read_credentials_file, write_credentials_file
from bsp_planner.zk.schema import RunPaths
from bsp_planner.zk.session import ZkSession


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


# -- barrier -----------------------------------------------------------------------------------------
def participant_main(hosts: str, root: str, names: list[str], all_names: list[str], steps: int, auth_file: str) -> None:
    """A participant process: for every step, wait for its barrier, enter, pause, leave; print timings."""
    import threading

    sys.setswitchinterval(0.0005)  # several participants in one process share the GIL: hand it over fast
    creds = read_credentials_file(auth_file)
    paths = RunPaths(root)
    out: list[tuple] = []
    lock = threading.Lock()

    def one(name: str) -> None:
        s = ZkSession(hosts, creds, connect_timeout_s=60).start()
        rng = random.Random(name)
        try:
            for t in range(steps):
                s.wait_exists(paths.barrier(t), timeout_s=120)
                b = StepBarrier(s, paths, t, all_names)
                b.enter(name, timeout_s=120)
                time.sleep(rng.uniform(0, 0.02))
                fin = time.monotonic()
                b.leave(name, timeout_s=120)
                rel = time.monotonic()
                with lock:
                    out.append((t, name, fin, rel))
        finally:
            s.close()

    in_threads(names, one)
    print(json.dumps(out), flush=True)


def bench_barrier(n: int, steps: int, per_process: int, workdir: Path) -> dict:
    root = f"/bench/barrier-{n}-{os.getpid()}"
    paths = RunPaths(root)
    names = [f"p{i:03d}" for i in range(n)]
    procs = []
    with local_server(workdir / f"zk-{n}") as server:
        creds, auth = credentials(workdir / f"auth-{n}")
        coord = ZkSession(server.hosts, creds).start()
        try:
            make_root(coord, root)
            groups = [names[i : i + per_process] for i in range(0, n, per_process)]
            procs = spawn(
                __file__, groups, lambda g: [server.hosts, root, ",".join(g), ",".join(names), str(steps), str(auth)]
            )
            # the first step waits for every process to start and connect; it is not counted
            for t in range(steps):
                coord.commit(StepBarrier(coord, paths, t, names).setup_ops())
                if not coord.wait_exists(f"{paths.barrier(t)}/done", timeout_s=300):
                    raise RuntimeError(f"step {t} did not finish")
                if t >= 2:
                    coord.commit(StepBarrier(coord, paths, t - 2, names).cleanup_ops())
            rows = [row for got in collect(procs, 120) for row in got]
        finally:
            kill_left(procs)
            coord.delete_tree(root)
            coord.close()
    overhead, first = [], []
    for t in range(1, steps):
        fin = [r[2] for r in rows if r[0] == t]
        rel = [r[3] for r in rows if r[0] == t]
        overhead.append(max(rel) - max(fin))
        first.append(min(rel) - max(fin))
    ms = [1e3 * x for x in overhead]
    return {
        "participants": n,
        "processes": len(procs),
        "steps_measured": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p95_ms": round(pct(ms, 95), 2),
        "max_ms": round(max(ms), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "first_release_median_ms": round(1e3 * statistics.median(first), 2),
    }


# -- live runs ---------------------------------------------------------------------------------------
def live_run(
    experiment: Path,
    planner: str,
    reconfigure: str,
    steps: int,
    workdir: Path,
    server,
    tag: str,
    overrides=(),
    cpu_weight="guaranteed",
    runs_dir: Path | None = None,
) -> dict:
    from bsp_planner.runtime.coordinator import Coordinator, RunSettings

    creds = write_credentials_file(workdir / f"auth-{tag}", generate_credentials())
    settings = RunSettings(
        experiment=str(experiment),
        planner=planner,
        mode="perfect",
        reconfigure=reconfigure,
        overrides=[f"steps={steps}", *overrides],
        zookeeper=server.hosts,
        zk_auth=f"file:{creds}",
        cpu_weight=cpu_weight,
    )
    run_id = f"bench-{tag}-{time.strftime('%H%M%S')}-{os.getpid()}"
    t0 = time.perf_counter()
    result = Coordinator(settings, run_id, runs_dir or workdir / "runs").run()
    wall = time.perf_counter() - t0
    sm = dict(result.summary)
    sm.pop("rows", None)
    records = result.records
    sm["wall_s"] = round(wall, 2)
    sm["run_dir"] = str(result.run_dir)
    sm["per_step"] = [
        {
            "step": r["step"],
            "predicted_s": round(r["predicted_step_s"], 4),
            "measured_s": round(r["step_s"], 4),
            "error_pct": round(100 * (r["step_s"] / r["predicted_step_s"] - 1), 2),
            "reconfig_s": round(r["reconfig_s"], 4),
        }
        for r in records
    ]
    sm["reconfig_s_all"] = [round(r["reconfig_s"], 4) for r in records if r["reconfigured"]]
    return sm


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_participant":
        _, _, hosts, root, names, all_names, steps, auth = sys.argv
        participant_main(hosts, root, names.split(","), all_names.split(","), int(steps), auth)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("section", choices=["barrier", "live", "reconfig", "all"])
    ap.add_argument("--steps", type=int, default=20, help="steps of the live run (and of each barrier run)")
    ap.add_argument(
        "--experiment", type=Path, default=ROOT / "bsp_planner" / "data" / "experiments" / "live-default.toml"
    )
    ap.add_argument("--planner", default="mpc")
    ap.add_argument("--reconfigure", default="in-place")
    ap.add_argument("--per-process", type=int, default=1, help="barrier participants per process")
    ap.add_argument("--sizes", default="8,128", help="barrier participant counts")
    ap.add_argument("--reconfig-steps", type=int, default=12)
    ap.add_argument("--cpu-weight", default="guaranteed", choices=["guaranteed", "workers"])
    ap.add_argument(
        "--profile", type=Path, help="profile CSV instead of the experiment's (e.g. one measured just before)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_live.json")
    args = ap.parse_args()
    results: dict = {"date": date.today().isoformat(), "load_before": load(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        work = Path(tmp)
        if args.section in ("barrier", "all"):
            results["barrier"] = []
            for n in (int(x) for x in args.sizes.split(",")):
                r = bench_barrier(n, max(args.steps, 10), args.per_process, work)
                results["barrier"].append(r)
                print(
                    f"barrier n={n:4d} ({r['processes']} processes): median {r['median_ms']} ms, p95 {r['p95_ms']} "
                    f"ms, max {r['max_ms']} ms (first release: median {r['first_release_median_ms']} ms)",
                    flush=True,
                )
        extra = [f"profile={args.profile.resolve()}"] if args.profile else []
        results["profile"] = str(args.profile.resolve()) if args.profile else "the experiment's"
        if args.section in ("live", "reconfig", "all"):
            with local_server(work / "zk-live") as server:
                if args.section in ("live", "all"):
                    r = live_run(
                        args.experiment,
                        args.planner,
                        args.reconfigure,
                        args.steps,
                        work,
                        server,
                        "live",
                        extra,
                        args.cpu_weight,
                        args.out.parent / "bench_live_runs",
                    )
                    results["live"] = r
                    print(
                        f"live {args.planner} ({args.reconfigure}, cpu weight {args.cpu_weight}), {r['steps_done']} "
                        f"steps: live {r['live_total_s']} s, simulated "
                        f"{r['simulated_total_s']} s ({r['total_error_pct']:+}%), with measured reconfiguration cost "
                        f"{r['simulated_total_measured_penalty_s']} s ({r['total_error_measured_penalty_pct']:+}%); "
                        "per-step error "
                        f"mean {r['step_error_pct']['mean']:+}%, mean |.| {r['step_error_pct']['mean_abs']}%, max |.| "
                        f"{r['step_error_pct']['max_abs']}%; barrier mean {1e3 * r['barrier_s']['mean']:.1f} ms",
                        flush=True,
                    )
                if args.section in ("reconfig", "all"):
                    results["reconfig"] = {}
                    for how in ("in-place", "recreate"):
                        r = live_run(
                            args.experiment,
                            "static:1",
                            how,
                            args.reconfig_steps,
                            work,
                            server,
                            f"re-{how}",
                            ["penalty_s=0", *extra],
                            args.cpu_weight,
                            args.out.parent / "bench_live_runs",
                        )
                        costs = r["reconfig_s_all"]
                        results["reconfig"][how] = {
                            "reconfigurations": len(costs),
                            "median_s": round(statistics.median(costs), 4) if costs else None,
                            "mean_s": round(statistics.fmean(costs), 4) if costs else None,
                            "max_s": round(max(costs), 4) if costs else None,
                        }
                        print(f"reconfigure {how}: {results['reconfig'][how]}", flush=True)
    write_results(results, args.out)


if __name__ == "__main__":
    main()

"""Barrier cost per step at growing participant counts: today's StepBarrier against the CountingBarrier,
in one run on one loopback ZooKeeper, plus a model of both on a real ensemble at 10,000 participants.

    .venv/bin/python benchmarks/bench_barrier.py                       # 8, 128, 512 participants
    .venv/bin/python benchmarks/bench_barrier.py --sizes 8,128 --steps 8 --processes 4

Participants do no work: each loops enter -> leave over the steps, one ZooKeeper session (kazoo client)
each, as threads spread over `--processes` processes. The step time is the period between the releases of
the last participant of consecutive steps (both phases of a step, nothing else); the first step absorbs
the connecting and is not counted. Requests are counted on every participant's client (each create,
exists, getChildren... it sends), and on the counter's client for the counting barrier. Every wait has a
bound (`--timeout-s`), so a run always ends.

The model (`model()`) prints per-step server load and a lower bound on the step time of both barriers
at `--model-n` participants on an ensemble; its assumptions are printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from _zk import ROOT, collect, credentials, in_threads, kill_left, local_server, make_root, spawn

from bsp_planner.runtime.zkserver import LocalZooKeeper
from bsp_planner.zk.barrier import CountingBarrier, StepBarrier
from bsp_planner.zk.credentials import read_credentials_file
from bsp_planner.zk.schema import RunPaths
from bsp_planner.zk.session import ZkSession, quiet_kazoo

KINDS = {"step": StepBarrier, "counting": CountingBarrier}
COUNTED = ("create_async", "exists_async", "get_children_async", "get_async", "set_async", "delete_async")


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def count_requests(client) -> list[int]:
    """Wrap the client's request methods (the sync ones call these) to count what it sends."""
    box = [0]
    for name in COUNTED:
        fn = getattr(client, name)

        def counted(*a, _fn=fn, **kw):
            box[0] += 1
            return _fn(*a, **kw)

        setattr(client, name, counted)
    return box


# -- participants ----------------------------------------------------------------------------------
def participant_main(
    kind: str,
    hosts: str,
    root: str,
    names: list[str],
    all_names: list[str],
    steps: int,
    auth_file: str,
    timeout_s: float,
) -> None:
    """One process: a thread and a session per participant; prints [(t, name, release), ...] and requests."""
    sys.setswitchinterval(0.0005)  # many participants share the GIL: hand it over fast
    creds = read_credentials_file(auth_file)
    paths = RunPaths(root)
    barrier = KINDS[kind]
    out: list[tuple] = []
    requests = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def one(name: str) -> None:
        s = ZkSession(hosts, creds, connect_timeout_s=timeout_s).start()
        box = count_requests(s.client)
        try:
            for t in range(steps):
                b = barrier(s, paths, t, all_names)
                b.enter(name, timeout_s=timeout_s)
                b.leave(name, timeout_s=timeout_s)
                rel = time.monotonic()
                with lock:
                    out.append((t, name, rel))
        except Exception as exc:  # reported to the parent, which fails the run
            errors.append(f"{name}: {exc}")
        finally:
            with lock:
                requests[0] += box[0]
            s.close()

    in_threads(names, one)
    print(json.dumps({"rows": out, "requests": requests[0], "errors": errors}), flush=True)


def bench(
    kind: str, n: int, steps: int, processes: int, server: LocalZooKeeper, creds, auth: Path, timeout_s: float
) -> dict:
    root = f"/bench/{kind}-{n}-{os.getpid()}"
    paths = RunPaths(root)
    names = [f"p{i:04d}" for i in range(n)]
    coord = ZkSession(server.hosts, creds, connect_timeout_s=timeout_s).start()
    procs = []
    counter_box = count_requests(coord.client)
    try:
        make_root(coord, root)
        for t in range(steps):  # every step's nodes up front: the loop measures the barrier alone
            coord.commit(KINDS[kind](coord, paths, t, names).setup_ops())
        setup_requests = counter_box[0]
        p = max(1, min(processes, n))
        groups = [names[i::p] for i in range(p)]
        procs = spawn(
            __file__,
            groups,
            lambda g: [kind, server.hosts, root, ",".join(g), ",".join(names), str(steps), str(auth), str(timeout_s)],
        )
        if kind == "counting":
            for t in range(steps):
                CountingBarrier(coord, paths, t, names).run_step(timeout_s=timeout_s)
        counter_requests = counter_box[0] - setup_requests
        rows, requests, errors = [], 0, []
        for got in collect(procs, timeout_s * 2):
            rows += got["rows"]
            requests += got["requests"]
            errors += got["errors"]
        if errors:
            raise RuntimeError(f"{kind} n={n}: {errors[:3]}")
    finally:
        kill_left(procs)
        coord.delete_tree(root)
        coord.close()
    last = [max(r[2] for r in rows if r[0] == t) for t in range(steps)]
    ms = [1e3 * (last[t] - last[t - 1]) for t in range(1, steps)]
    return {
        "barrier": kind,
        "participants": n,
        "processes": len(procs),
        "steps_measured": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p95_ms": round(pct(ms, 95), 1),
        "requests_per_participant_step": round(requests / (n * steps), 2),
        "counter_requests_per_step": round(counter_requests / steps, 1) if kind == "counting" else 0,
    }


# -- the model ---------------------------------------------------------------------------------------
ASSUMPTIONS = {
    "servers": 5,  # ensemble size; sessions spread evenly, reads and notifications served by each session's server
    "writes_per_s": 20_000,  # the leader's committed writes/s (Zab serialises every write through it)
    "reads_per_s_per_server": 50_000,  # small reads (exists, short getChildren) per server
    "notifications_per_s_per_server": 100_000,  # watch events a server sends (one small packet each)
    "rtt_ms": 0.5,  # client <-> server round trip in one data centre
    "write_commit_ms": 2.0,  # a write's quorum commit (leader -> followers -> ack, fsync on SSD, batched)
    "name_bytes": 6,  # a child name in a getChildren reply
    "bytes_per_s_per_server": 100e6,  # a server's reply bandwidth to one client (1 Gbit/s)
}


def model(n: int, a: dict = ASSUMPTIONS) -> dict:
    """Per-step server load and a lower bound on the step time (two phases) of both barriers.

    StepBarrier per participant and phase: 1 write (arrival), 2 reads (child count, flag watch),
    1 notification; the last one in creates the flag (1 write) after reading the count, so the release
    needs the whole arrival write stream committed, then ~2 round trips and the flag's commit.
    CountingBarrier per participant and phase: 1 write, 1 read, 1 notification; the counter reads the
    children k times (here k = servers x 4 bursts, an assumption: arrivals batch while it reads) with
    n names each, then writes the flag.
    A phase cannot finish before the leader has committed its n arrival writes, the servers have answered
    its reads and sent its n notifications; these resources work in parallel, so the bound is the largest
    of the three plus the latency chain of the last arrival (commit, the release's round trips, the flag's
    commit, its notification).
    """
    s = a["servers"]
    out = {}
    for kind, reads_pp, counter_reads in (("step", 2, 0), ("counting", 1, 4 * s)):
        writes = n + 1
        reads = reads_pp * n
        notes = n
        children_s = counter_reads * n * a["name_bytes"] / a["bytes_per_s_per_server"]
        load_s = max(
            writes / a["writes_per_s"],
            reads / (s * a["reads_per_s_per_server"]) + children_s,
            notes / (s * a["notifications_per_s_per_server"]),
        )
        chain_ms = a["write_commit_ms"] * 2 + a["rtt_ms"] * (2 if kind == "step" else 3)
        phase_ms = 1e3 * load_s + chain_ms
        out[kind] = {
            "writes_per_step": 2 * writes,
            "reads_per_step": 2 * (reads + counter_reads),
            "notifications_per_step": 2 * notes,
            "requests_per_participant_step": 2 * (1 + reads_pp),
            "step_ms_lower_bound": round(2 * phase_ms, 1),
            "bound_by": "leader writes" if writes / a["writes_per_s"] >= load_s * 0.999 else "reads/notifications",
        }
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_participant":
        _, _, kind, hosts, root, names, all_names, steps, auth, timeout_s = sys.argv
        participant_main(kind, hosts, root, names.split(","), all_names.split(","), int(steps), auth, float(timeout_s))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,128,512", help="participant counts")
    ap.add_argument("--steps", type=int, default=10, help="steps per run (the first is not counted)")
    ap.add_argument("--processes", type=int, default=8, help="participant processes per run")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="bound on every wait")
    ap.add_argument("--model-n", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_barrier.json")
    args = ap.parse_args()
    quiet_kazoo()
    results: dict = {
        "date": datetime.now(UTC).isoformat(timespec="minutes"),
        "load_before": os.getloadavg(),
        "cpus": os.cpu_count(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-barrier-") as tmp, local_server(Path(tmp) / "zk") as server:
        creds, auth = credentials(Path(tmp) / "auth")
        for n in (int(x) for x in args.sizes.split(",")):
            for kind in KINDS:  # one after the other at each size, on the same server
                r = bench(kind, n, args.steps, args.processes, server, creds, auth, args.timeout_s)
                r["load"] = round(os.getloadavg()[0], 1)
                results["runs"].append(r)
                print(
                    f"{kind:8s} n={n:4d} ({r['processes']} proc): step median {r['median_ms']} ms, p95 {r['p95_ms']} ms; "
                    f"{r['requests_per_participant_step']} requests/participant/step; counter "
                    f"{r['counter_requests_per_step']}/step; load {r['load']}",
                    flush=True,
                )
    results["model_assumptions"] = ASSUMPTIONS
    results["model"] = {args.model_n: model(args.model_n), 512: model(512)}
    print(f"model at {args.model_n} participants, assumptions {json.dumps(ASSUMPTIONS)}:")
    for kind, m in results["model"][args.model_n].items():
        print(f"  {kind:8s} {json.dumps(m)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

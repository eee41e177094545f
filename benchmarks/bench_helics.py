"""The shipped HELICS federations live (issue 22's goal): `even`, `static:4` and online `mpc`, interleaved.

    python benchmarks/bench_helics.py [--federation ring|star] [--rounds 10] [--strategies even,static:4,mpc]

Each round runs a shipped experiment once per strategy: `--federation ring` (the default),
`experiments/helics-4.toml`: 4 federates in a ring, a hotspot moving from federate 0 to 3; `--federation
star`, `experiments/helics-star-5.toml`: 4 leaves with irregular load and a hub that computes after them,
so a step is the slowest leaf plus the hub. Both: 1600m in all, the broker a service of the run. Each run
is as a user would start it, `bsp-planner run --experiment E --planner P --online --reconfigure in-place`
(and `--learn` with this script's `--learn`),
a fresh process, the strategies' order rotated from round to round so that none always runs first (load on
a shared host drifts). Needs root (cgroup quotas), java and the ZooKeeper jars (a server is started on a free loopback
port) and the helics wheel.

Per run it records the run's own accounting (`summary.json`: the live total and the simulated total of the
same plan; with `--learn`, charged at what the learned model predicted before each step, the profile's
total beside it) and the federation's own wall time: from the first federate's first compute to the last one's
last, from the federates' `--timings` files (wall-clock stamps written by the application, not by
bsp-planner). It prints, per strategy, the median federation wall time, the medians of the per-round
ratios mpc/even and mpc/static:4, and per mpc round the simulated total against the live total and the
live total against the federation's wall time. Writes --out (JSON).
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
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import load, write_results  # noqa: E402

from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port  # noqa: E402
from bsp_planner.zk.credentials import generate_credentials, write_credentials_file  # noqa: E402

FEDERATIONS = {"ring": "helics-4", "star": "helics-star-5"}  # --federation: its shipped experiment
GOAL_OVER_EVEN = {"ring": 0.55, "star": 0.75}  # online mpc's median wall time over even's (issue 31)
# per mpc run in the results' `mpc_accounting` (the profile's total is there with --learn only)
ACCOUNTING_KEYS = (
    "round",
    "live_total_s",
    "simulated_total_s",
    "simulated_total_profile_s",
    "federation_wall_s",
    "load_1m",
)


def federation_wall_s(run_dir: Path) -> float | None:
    """The federation's own wall time (s): first compute start to last compute end over every federate's
    timings (None when a federate wrote none)."""
    rows = []
    for path in sorted(run_dir.glob("timings-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    return max(r["end"] for r in rows) - min(r["start"] for r in rows)


def summary_totals(summary: dict) -> tuple[float | None, float | None]:
    """(live total, simulated total) from a run's summary.json."""
    live = summary.get("live_total_s")
    sim = summary.get("simulated_total_s")
    if live is None or sim is None:  # from the rows, should the summary's top-level keys be absent
        rows = {r["strategy"]: r for r in summary.get("rows", [])}
        live = next((r["total_s"] for k, r in rows.items() if k.endswith("(live)")), live)
        sim = next((r["total_s"] for k, r in rows.items() if k.endswith("(simulated)")), sim)
    return live, sim


def run_one(work: Path, zk: LocalZooKeeper, creds: Path, planner: str, round_no: int, args) -> dict:
    run_id = f"{args.federation}-{planner.replace(':', '')}-r{round_no}-{os.getpid()}"
    cmd = [
        sys.executable,
        "-m",
        "bsp_planner.cli",
        "run",
        "--experiment",
        args.experiment,
        "--planner",
        planner,
        "--online",
        "--reconfigure",
        "in-place",
        "--zookeeper",
        zk.hosts,
        "--zk-auth-file",
        str(creds),
        "--runs-dir",
        str(work / "runs"),
        "--run-id",
        run_id,
        "--quiet",
    ]
    if args.steps is not None:
        cmd += ["--steps", str(args.steps)]
    if args.learn:
        cmd += ["--learn"]
    for kv in args.set:
        cmd += ["--set", kv]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    load_before = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.run_timeout_s, check=False)
    command_s = time.perf_counter() - t0
    run_dir = work / "runs" / run_id
    row: dict = {"round": round_no, "planner": planner, "exit": p.returncode, "command_s": round(command_s, 2)}
    row["load_1m"] = [load_before, round(os.getloadavg()[0], 2)]
    if p.returncode != 0:
        row["error"] = (p.stderr.strip() or p.stdout.strip()).splitlines()[-3:]
        return row
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    live, sim = summary_totals(summary)
    wall = federation_wall_s(run_dir)
    row.update(
        steps=len(records),
        steps_once=[r["step"] for r in records] == list(range(len(records))),
        live_total_s=live,
        simulated_total_s=sim,
        federation_wall_s=round(wall, 3) if wall is not None else None,
        reconfigurations=sum(1 for r in records if r.get("reconfigured")),
        # a task's report of a step to its quota for the next in place (observe mode, in place)
        decision_latency_s=summary.get("decision_latency_s"),
        sim_vs_live_pct=round(100 * (sim - live) / live, 2) if live and sim is not None else None,
        # with --learn the simulated total is charged at the learned model's durations; the profile's beside it
        simulated_total_profile_s=summary.get("simulated_total_profile_s"),
        live_vs_wall_pct=round(100 * (live - wall) / wall, 2) if live is not None and wall else None,
        run_dir=str(run_dir),
    )
    return row


def median_ratio(rows: list[dict], a: str, b: str) -> dict | None:
    """Per round, a's federation wall time over b's; their median, min and max."""
    by_round: dict[int, dict[str, float]] = {}
    for r in rows:
        if r.get("federation_wall_s"):
            by_round.setdefault(r["round"], {})[r["planner"]] = r["federation_wall_s"]
    ratios = [x[a] / x[b] for x in by_round.values() if a in x and b in x]
    if not ratios:
        return None
    return {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
        "rounds": len(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--strategies", default="even,static:4,mpc")
    ap.add_argument("--federation", choices=sorted(FEDERATIONS), default="ring", help="which shipped federation")
    ap.add_argument(
        "--experiment", default=None, help="a shipped experiment's name, or a file (default: the federation's)"
    )
    ap.add_argument("--steps", type=int, default=None, help="default: the experiment's")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE passed to every run (run --set)")
    ap.add_argument(
        "--learn",
        action="store_true",
        help="every run learns its performance model from its steps (run --learn): a host that runs slower or "
        "faster today than when it was profiled is learned within a few steps",
    )
    ap.add_argument("--run-timeout-s", type=float, default=600.0)
    ap.add_argument("--out", default="bench_helics.json")
    ap.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args(argv)
    args.experiment = args.experiment or FEDERATIONS[args.federation]
    strategies = args.strategies.split(",")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-helics-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": load(),
        "command": " ".join(["python", "benchmarks/bench_helics.py", *(argv if argv is not None else sys.argv[1:])]),
        "federation": args.federation,
        "experiment": args.experiment,
        "rows": [],
    }
    creds = write_credentials_file(work / "zk-auth", generate_credentials())
    server = LocalZooKeeper(work / "zk", port=free_port())
    server.start()
    rows: list[dict] = results["rows"]
    try:
        for rnd in range(args.rounds):
            k = rnd % len(strategies)
            for planner in strategies[k:] + strategies[:k]:
                row = run_one(work, server, creds, planner, rnd, args)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "run_dir"}), flush=True)
    finally:
        server.stop()
    per: dict = {}
    for s in strategies:
        walls = [r["federation_wall_s"] for r in rows if r["planner"] == s and r.get("federation_wall_s")]
        lives = [r["live_total_s"] for r in rows if r["planner"] == s and r.get("live_total_s")]
        per[s] = {
            "runs": sum(1 for r in rows if r["planner"] == s),
            "failed": sum(1 for r in rows if r["planner"] == s and r["exit"] != 0),
            "median_wall_s": round(statistics.median(walls), 3) if walls else None,
            "median_live_s": round(statistics.median(lives), 3) if lives else None,
        }
    results["per_strategy"] = per
    results["mpc_over_even"] = median_ratio(rows, "mpc", "even")
    results["mpc_over_static4"] = median_ratio(rows, "mpc", "static:4")
    mpc = [r for r in rows if r["planner"] == "mpc" and r["exit"] == 0]
    results["mpc_accounting"] = [
        {k: r.get(k) for k in ACCOUNTING_KEYS}
        | {"decision_latency_p95_s": (r.get("decision_latency_s") or {}).get("p95")}
        | {"sim_vs_live_pct": r.get("sim_vs_live_pct"), "live_vs_wall_pct": r.get("live_vs_wall_pct")}
        for r in mpc
    ]
    results["goals"] = {
        f"mpc_le_{GOAL_OVER_EVEN[args.federation]}x_even": (results["mpc_over_even"] or {}).get("median", 9)
        <= GOAL_OVER_EVEN[args.federation],
        "mpc_le_static4": (results["mpc_over_static4"] or {}).get("median", 9) <= 1.0,
        "sim_within_10pct_every_mpc_round": bool(mpc)
        and all(r.get("sim_vs_live_pct") is not None and abs(r["sim_vs_live_pct"]) <= 10 for r in mpc),
        "decision_latency_p95_le_20ms_every_mpc_round": bool(mpc)
        and all((r.get("decision_latency_s") or {}).get("p95", 9) <= 0.020 for r in mpc),
        "live_within_3pct_of_wall_every_mpc_round": bool(mpc)
        and all(r.get("live_vs_wall_pct") is not None and abs(r["live_vs_wall_pct"]) <= 3 for r in mpc),
    }
    print()
    for s, x in per.items():
        print(
            f"{s:>10}: {x['runs']} runs, {x['failed']} failed, median wall {x['median_wall_s']} s, live {x['median_live_s']} s"
        )
    print(f"mpc / even (per-round wall ratio): {results['mpc_over_even']}")
    print(f"mpc / static:4 (per-round wall ratio): {results['mpc_over_static4']}")
    for r in results["mpc_accounting"]:
        print(
            f"mpc round {r['round']}: live {r['live_total_s']} s, simulated {r['simulated_total_s']} s "
            f"({r['sim_vs_live_pct']:+}%), federation wall {r['federation_wall_s']} s (live {r['live_vs_wall_pct']:+}%), "
            f"decision latency p95 {r['decision_latency_p95_s']} s, load {r['load_1m']}"
        )
    print(f"goals: {results['goals']}")
    write_results(results, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A performance model that learns, live (issue 10 §3): real command tasks under cgroup quotas, synchronised
through a real ZooKeeper, planned by mpc on a profile 40% off with `run --learn`.

    python benchmarks/bench_learning_live.py [--steps 30] [--cases uniform,machine] [--planner mpc] [--out FILE]
                                             [--job kernel-3|kernel-3p] [--period-us 100000]

`--job kernel-3p` runs the same kernel as long-running process tasks on their own profile
(`profiles/kernel-3p/`, measured with a 10 ms CFS period at 8 CPU levels); `--period-us` is the CFS period
of the run's quotas (the local backend's `cfs_period_us`; give the one the profile was measured with, its
profile.meta.json `cfs_period_us`). Default: the shipped job `jobs/kernel-3` (three tasks running
bsp_planner.apps.kernel, a CPU-bound Python kernel,
budget 1500m, 250-1000m each, quotas rewritten in place) on its shipped profile. Per case the same run
is made three times, in this order: on the true (shipped) profile without learning, on the wrong
profile with `--learn`, and on the wrong profile without learning. Wrong profiles (a copy of the shipped
one, every duration scaled):

* uniform: x1.4 (the issue's "scaled x1.4");
* machine: x1.4 (cpu / 1000m)^0.15 (another machine class: 1.14x at 250m, 1.4x at 1000m);
* mixed: k-taxi and k-art x1.4, k-temp x0.6 (the wrong profile also misleads the split between tasks).

Reported per run: the per-step prediction error, the worst task's |predicted / measured - 1| of the
prediction made before the step at the workload and CPU the task ran with (for the learning run, the
learning model's prediction before it learned from that step; for the others, the fixed profile's);
the first step from which it stays below 5%; and the total (the sum of the step times and
reconfiguration times the coordinator measured). The true profile's own error is the floor: what
run-to-run noise and the profile's own inaccuracy leave. Needs root, java and the ZooKeeper jars (a
server is started on a free loopback port and stopped at the end). Prints Markdown for BENCHMARKS.md and
writes --out (JSON, with every step's errors).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learning import settled_at, wrong_profile

from bsp_planner.inputs.shipped import data_dir
from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port
from bsp_planner.zk.credentials import generate_credentials, write_credentials_file

CASES = {
    "uniform": ("x1.4", lambda i, c, w: 1.4),
    "machine": ("x1.4 (cpu/1000m)^0.15", lambda i, c, w: 1.4 * (c / 1000) ** 0.15),
    "mixed": ("k-taxi, k-art x1.4; k-temp x0.6", lambda i, c, w: 0.6 if i == 1 else 1.4),
}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def experiment(folder: Path, profile: Path, steps: int, job: str = "kernel-3") -> Path:
    """The shipped `job` experiment with its job and datasets where they are, on `profile`."""
    data = data_dir()
    text = (data / "experiments" / f"{job}.toml").read_text()
    text = text.replace(f'job = "../jobs/{job}.toml"', f'job = "{data / "jobs" / f"{job}.toml"}"')
    text = text.replace(f'profile = "../profiles/{job}/profile.csv"', f'profile = "{profile}"')
    text = text.replace("steps = 20", f"steps = {steps}")
    text = text.replace(f'output = "out/{job}"', f'output = "{folder / "out"}"')
    path = folder / "exp.toml"
    path.write_text(text)
    return path


def run_once(work: Path, server, tag: str, exp: Path, planner: str, learn: bool, period_us: int) -> dict:
    from bsp_planner.runtime.backends.local import LocalBackend
    from bsp_planner.runtime.coordinator import Coordinator, RunSettings
    from bsp_planner.runtime.executor import RunFailed

    creds = write_credentials_file(work / f"auth-{tag}", generate_credentials())
    settings = RunSettings(
        experiment=str(exp),
        planner=planner,
        mode="perfect",
        reconfigure="in-place",
        overrides=["learn=true"] if learn else [],
        zookeeper=server.hosts,
        zk_auth=f"file:{creds}",
        cfs_period_us=period_us,
    )
    run_id = f"learn-{tag}-{os.getpid()}"
    # the backend built here with the run's CFS period (the coordinator builds the default one)
    backend = LocalBackend(run_id, work / "runs" / run_id / "logs", cfs_period_us=period_us)
    t0, cpu0 = time.perf_counter(), time.process_time() + children_cpu_s()
    load_before = load()
    status, message = "done", ""
    try:
        Coordinator(settings, run_id, work / "runs", backend=backend).run()
    except RunFailed as exc:  # recorded, so the other runs still go
        status, message = "failed", str(exc).splitlines()[0]
    wall = time.perf_counter() - t0
    cpu_s = time.process_time() + children_cpu_s() - cpu0
    log = work / "runs" / run_id / "steps.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    measured = np.array([[t["measured_s"] for t in r["tasks"]] for r in records])
    if learn:
        predicted = np.array([r["learning"]["predicted_before_s"] for r in records])
        after = np.array([r["learning"]["predicted_after_s"] for r in records])
    else:
        predicted = np.array([[t["predicted_s"] for t in r["tasks"]] for r in records])
        after = predicted
    per_task = np.abs(predicted / measured - 1) if records else np.zeros((0, 0))  # (steps, tasks)
    err = per_task.max(axis=1) if records else np.array([])
    late = per_task[15:].ravel()  # every task-step from step 15: the floor without the worst-of-three
    err_after = np.abs(after / measured - 1).max(axis=1) if records else np.array([])
    return {
        "tag": tag,
        "learn": learn,
        "status": status,
        "message": message,
        "steps": len(records),
        "total_s": float(sum(r["step_s"] + r["reconfig_s"] for r in records)),
        "reconfigurations": int(sum(bool(r["reconfigured"]) for r in records)),
        "error_by_step": [round(float(x), 5) for x in err],
        "error_after_learning_by_step": [round(float(x), 5) for x in err_after],
        "settled": settled_at(err) if len(err) else None,
        "task_steps_median_error_from_15": float(np.median(late)) if late.size else None,
        "task_steps_under_5pct_from_15": float((late < 0.05).mean()) if late.size else None,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu_s, 1),
        "load_before": load_before,
        "load_after": load(),
    }


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--cases", default="uniform,machine", help=f"Comma-separated, of {', '.join(CASES)}.")
    ap.add_argument("--planner", default="mpc")
    ap.add_argument("--out", type=Path, default=Path("bench_learning_live.json"))
    ap.add_argument("--job", default="kernel-3", choices=("kernel-3", "kernel-3p"))
    ap.add_argument("--period-us", type=int, default=100_000, help="CFS period of the run's quotas (us)")
    ap.add_argument("--true-learn", action="store_true", help="also run the true profile with --learn")
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    true_csv = data_dir() / "profiles" / args.job / "profile.csv"
    work = Path(tempfile.mkdtemp(prefix="bench-learning-live-"))
    server = LocalZooKeeper(work / "zk", port=free_port())
    server.start()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    runs = []
    try:
        (work / "true").mkdir()
        true_exp = experiment(work / "true", true_csv, args.steps, args.job)
        true_run = run_once(work, server, "true", true_exp, args.planner, False, args.period_us)
        runs.append({"case": "true profile", **true_run})
        if args.true_learn:  # the floor learning reaches: the true profile, learning its own inaccuracy
            r = run_once(work, server, "true-learn", true_exp, args.planner, True, args.period_us)
            runs.append({"case": "true profile", **r})
        for case in cases:
            label, factor_of = CASES[case]
            wrong = wrong_profile(true_csv, work / case, factor_of)
            exp = experiment(work / case, wrong, args.steps, args.job)
            for learn in (True, False):
                tag = f"{case}-{'learn' if learn else 'blind'}"
                r = run_once(work, server, tag, exp, args.planner, learn, args.period_us)
                runs.append({"case": f"{case} {label}", **r})
    finally:
        server.stop()
    ended = time.strftime("%H:%M", time.gmtime())
    args.out.write_text(json.dumps({"started": started, "ended": ended, "runs": runs}, indent=1))
    true_total = runs[0]["total_s"]
    print(
        f"Command: `python benchmarks/bench_learning_live.py --steps {args.steps} --cases {args.cases} "
        f"--planner {args.planner} --job {args.job} --period-us {args.period_us}{' --true-learn' if args.true_learn else ''}`, "
        f"{platform.node() or 'host'} ({os.cpu_count()} cores), {started}-{ended} UTC.\n"
    )
    print(
        "| profile | learning | status | steps | error step 0 | error step 14 | max error from step 15 | "
        "error < 5% from step | task-steps from 15: median error, share < 5% | "
        "total (s) | vs true profile | reconfigurations | wall s | CPU s | load before, after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        e = r["error_by_step"]
        print(
            f"| {r['case']} | {'yes' if r['learn'] else 'no'} | {r['status']} | {r['steps']} | "
            f"{pct(e[0]) if e else '-'} | {pct(e[14]) if len(e) > 14 else '-'} | "
            f"{pct(max(e[15:])) if len(e) > 15 else '-'} | {r['settled'] if r['settled'] is not None else 'never'} | "
            f"{pct(r['task_steps_median_error_from_15'] or 0)}, {pct(r['task_steps_under_5pct_from_15'] or 0)} | "
            f"{r['total_s']:.2f} | {100 * (r['total_s'] / true_total - 1):+.1f}% | {r['reconfigurations']} | "
            f"{r['wall_s']} | {r['cpu_s']} | {r['load_before']}; {r['load_after']} |"
        )
    for r in runs:
        if r["status"] != "done":
            print(f"\n{r['case']} ({'learning' if r['learn'] else 'no learning'}): {r['message']}")
    print(f"\nper-step errors: {args.out}")
    shutil.rmtree(work / "zk", ignore_errors=True)
    return 0 if all(r["status"] == "done" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

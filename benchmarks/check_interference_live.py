"""Live check of the interference model: two memory-bound tasks sharing this host, each under its own quota.

    .venv/bin/python benchmarks/check_interference_live.py                       # memcpy + zero, 5 runs
    .venv/bin/python benchmarks/check_interference_live.py --pair memcpy,bsearch --runs 5 --workload 20

Independent of how `profile pairs` measured the shipped pair profile (one task timed while the other runs
on and on beside it): here both tasks of the pair start at the same instant, as the tasks of one BSP step
on one node, each in its own cgroup under `--cpu` millicores (the pair profile's level), each sized so
that alone they would take about as long (the second task's workload scaled by the first runs' solo
times), so that each has company for (nearly) its whole run. Per run: each task alone, then both
together; measured slowdown = together / the median alone (of all runs so far). Reports, per task, the
median measured slowdown of `--runs` runs against the modelled one (the pair profile's), and whether they
agree within `--tolerance` (goal 15%, on an idle machine). The load average is printed: on a busy host
the solo times drift and the figure says little. Exit status 1 when a task is outside the tolerance.
Needs root (cgroups) and stress-ng.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load, write_results  # noqa: E402

from bsp_planner.inputs.job import load_job  # noqa: E402
from bsp_planner.inputs.pair_profiles import load_pair_profile  # noqa: E402
from bsp_planner.inputs.shipped import data_path  # noqa: E402
from bsp_planner.profiling.local import LocalBackend  # noqa: E402


def together(backend: LocalBackend, tasks, workloads, cpu: float, timeout_s: float) -> list[float]:
    """Both tasks started at once (a barrier), each under its own quota; their durations in seconds."""
    start = threading.Barrier(len(tasks))
    out: list[float | None] = [None] * len(tasks)
    errors: list[str] = []

    def one(i: int) -> None:
        start.wait()
        r = backend.run(tasks[i], workloads[i], cpu, timeout_s)
        if r.ok:
            out[i] = r.duration_s
        else:
            errors.append(f"{tasks[i].name}: {r.reason}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(tasks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("a run failed: " + "; ".join(errors))
    return [float(d) for d in out if d is not None]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default="memcpy,zero", help="two tasks of the job, comma-separated")
    ap.add_argument("--job", type=Path, default=data_path("jobs/thesis-8.toml"))
    ap.add_argument("--pairs", type=Path, default=data_path("profiles/local-2core/pairs.csv"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu", type=float, default=None, help="millicores per task (default: the pair profile's)")
    ap.add_argument("--workload", type=float, default=None, help="the first task's (default: the pair profile's)")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "check_interference_live.json")
    args = ap.parse_args()
    names = args.pair.split(",")
    if len(names) != 2 or names[0] == names[1]:
        raise SystemExit(f"--pair: expected two different task names, got {args.pair!r}")
    job = load_job(args.job)
    tasks = [next((t for t in job.tasks if t.name == n), None) for n in names]
    if None in tasks:
        raise SystemExit(f"--pair: the job has {', '.join(job.task_names)}")
    profile = load_pair_profile(args.pairs)
    rows = {(r.task, r.co_task): r for r in profile.rows}
    if (names[0], names[1]) not in rows or (names[1], names[0]) not in rows:
        raise SystemExit(f"{args.pairs}: no row for {names[0]},{names[1]} and {names[1]},{names[0]}")
    ref = rows[(names[0], names[1])]
    cpu = args.cpu or ref.cpu_millicores
    w0 = args.workload or ref.workload
    # alone, the two would take about as long: the second task's workload scaled by the profile's solo times
    w1 = w0 * ref.solo_s / rows[(names[1], names[0])].solo_s * rows[(names[1], names[0])].workload / ref.workload
    workloads = [w0, w1]
    modelled = [max(1.0, rows[(names[0], names[1])].slowdown), max(1.0, rows[(names[1], names[0])].slowdown)]
    results: dict = {
        "load_before": load(),
        "pair": names,
        "cpu_millicores": cpu,
        "workloads": workloads,
        "runs": [],
        "pair_profile": str(args.pairs),
    }
    print(f"{names[0]} (w={w0:g}) + {names[1]} (w={w1:.3g}), {cpu:g}m each; load {results['load_before']}")
    alone: list[list[float]] = [[], []]
    measured: list[list[float]] = [[], []]
    with LocalBackend() as backend:
        backend.check(tasks, job.path)  # type: ignore[arg-type]
        for k in range(args.runs):
            for i, t in enumerate(tasks):
                r = backend.run(t, workloads[i], cpu, args.timeout)  # type: ignore[arg-type]
                if not r.ok or r.duration_s is None:
                    raise SystemExit(f"{names[i]} alone failed: {r.reason}")
                alone[i].append(r.duration_s)
            both = together(backend, tasks, workloads, cpu, args.timeout)
            for i in range(2):
                measured[i].append(both[i] / statistics.median(alone[i]))
            results["runs"].append({"alone_s": [a[-1] for a in alone], "together_s": both})
            print(
                f"run {k + 1}: alone {alone[0][-1]:.3f} / {alone[1][-1]:.3f} s, together {both[0]:.3f} / "
                f"{both[1]:.3f} s, load {load()}",
                flush=True,
            )
    ok = True
    results["tasks"] = {}
    for i, n in enumerate(names):
        med = statistics.median(measured[i])
        err = med / modelled[i] - 1
        ok &= abs(err) <= args.tolerance
        results["tasks"][n] = {"measured_median": med, "modelled": modelled[i], "error": err}
        print(
            f"{n} beside {names[1 - i]}: measured x{med:.3f} (median of {len(measured[i])}), modelled x{modelled[i]:.3f}: "
            f"{100 * err:+.1f}% ({'within' if abs(err) <= args.tolerance else 'outside'} {100 * args.tolerance:g}%)"
        )
    results["within_tolerance"] = ok
    write_results(results, args.out)
    if not ok:
        sys.exit(1)  # a re-run on an idle machine can gate on it


if __name__ == "__main__":
    main()

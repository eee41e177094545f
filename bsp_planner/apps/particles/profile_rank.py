"""Profile the particles application: one rank's superstep time over particle counts x CPU limits, under
real cgroup CPU quotas, written in the project's profile format (``bsp_planner.profiles``).

    python -m bsp_planner.apps.particles.profile_rank --job bsp_planner/data/jobs/particles-8.toml \\
        --out bsp_planner/data/profiles/particles/profile.csv --cpu 100,250,500,1000 \\
        --workloads 500,2500,10000,20000

A stand-in for ``bsp-planner profile run`` until that profiles ``process`` tasks. Every cell starts one
rank (``--ranks 1``: no exchange, so nothing but its own compute is timed) holding `workload` particles,
in a fresh cgroup whose CFS quota is the CPU level and whose weight is the highest (as the project's
local profiler does, so that the quota and not the busy host limits it); the rank runs
``--measure-steps`` supersteps and the cell's duration is the median wall time of its step blocks after
the first (the process's start-up and numpy's import are not part of a superstep of a long-running
task). All ranks run the same code, so one measurement per cell is written for every task of the job
(the metadata says so).
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
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from ...profiles import PROFILE_COLUMNS
from ...profiling.cgroups import DEFAULT_PREFIX, MAX_SHARES, CpuQuotaGroup
from ...profiling.local import cpu_model
from .model import Physics


def measure_in_group(
    workload: int, cpu_millicores: float, steps: int, timeout_s: float, prefix: str = DEFAULT_PREFIX
) -> list[float]:
    """Wall seconds of each superstep block of a one-rank run of `workload` particles under the quota."""
    with tempfile.TemporaryDirectory(prefix="particles-profile-") as tmp:
        reports = Path(tmp) / "reports.jsonl"
        args = [
            sys.executable,
            "-m",
            "bsp_planner.apps.particles",
            "--rank",
            "0",
            "--ranks",
            "1",
            "--particles",
            str(workload),
            "--steps",
            str(steps),
            "--exchange-dir",
            str(Path(tmp) / "x"),
            "--reports",
            str(reports),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}  # standalone, not a run
        with CpuQuotaGroup(
            f"particles-{os.getpid()}-{time.monotonic_ns()}", millicores=cpu_millicores, prefix=prefix
        ) as group:
            group.set_weight(MAX_SHARES)
            proc = subprocess.run(
                args, preexec_fn=group.preexec_fn, env=env, capture_output=True, timeout=timeout_s, check=False
            )
        if proc.returncode != 0:
            raise RuntimeError(f"rank exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
        return [json.loads(line)["wall_s"] for line in reports.read_text().splitlines()]


def _job_tasks(path: str) -> tuple[str, Path, list[dict]]:
    """(name, path, [[task]] tables) of a job file: read directly, so this works whichever job fields the
    installed bsp_planner.job knows."""
    data = tomllib.loads(Path(path).read_text())
    return data.get("name", Path(path).stem), Path(path), data["task"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bsp_planner.apps.particles.profile_rank", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--job", required=True, action="append", help="job file(s) whose tasks get the rows")
    p.add_argument("--out", required=True, action="append", help="profile CSV per job (same order)")
    p.add_argument("--cpu", default="100,250,500,1000", help="CPU levels, millicores")
    p.add_argument("--workloads", default="500,2500,10000,20000", help="particle counts")
    p.add_argument("--measure-steps", type=int, default=4, help="supersteps per run (the first is not timed)")
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--cgroup-prefix", default=DEFAULT_PREFIX, help="parent cgroup of the runs' groups")
    args = p.parse_args(argv)
    if len(args.job) != len(args.out):
        p.error("--job and --out: give one --out per --job")
    cpus = [float(c) for c in args.cpu.split(",")]
    workloads = [int(w) for w in args.workloads.split(",")]
    jobs = [_job_tasks(j) for j in args.job]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()[0]
    cells: list[tuple[int, float, float, list[float]]] = []
    for cpu in cpus:
        for w in workloads:
            walls = measure_in_group(w, cpu, args.measure_steps, args.timeout_s, args.cgroup_prefix)
            d = statistics.median(walls[1:])
            cells.append((w, cpu, d, walls))
            print(f"{w:>6} particles {cpu:>6g}m: {d:.3f} s (steps {', '.join(f'{x:.3f}' for x in walls)})", flush=True)
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    for (job_name, job_path, tasks), out in zip(jobs, args.out, strict=True):
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        lines = [",".join(PROFILE_COLUMNS)]
        for t in tasks:
            for w, cpu, d, _ in cells:
                lines.append(f"{t['name']},{w},{cpu:g},{d:.6f},0")
        out.write_text("\n".join(lines) + "\n")
        meta = {
            "format": 1,
            "host": os.uname().nodename,
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "kernel": os.uname().release,
            "backend": "local-cgroup (bsp_planner.apps.particles.profile_rank)",
            "cpu_shares": MAX_SHARES,
            "job": {"name": job_name, "file": f"jobs/{job_path.name}"},
            "grid": {"cpu_millicores": cpus, "workloads": workloads, "repeats": 1},
            "tasks": {t["name"]: {"process": t.get("process"), "workers": 1} for t in tasks},
            "physics": {"substeps": Physics.substeps, "neighbours": Physics.neighbours},
            "duration": (
                "median wall seconds of one rank's superstep block (steps 2..N of a one-rank run of `workload` "
                "particles), in its own cgroup with a CFS quota of cpu_millicores * 100 us per 100000 us; one "
                "measurement per cell, written for every task (all ranks run the same code)"
            ),
            "sessions": [
                {
                    "started": started,
                    "finished": finished,
                    "load_average_1m_start": round(load_start, 2),
                    "load_average_1m_end": round(os.getloadavg()[0], 2),
                    "step_walls_s": {f"{w}@{cpu:g}": [round(x, 4) for x in walls] for w, cpu, _, walls in cells},
                }
            ],
        }
        out.with_name(out.stem + ".meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

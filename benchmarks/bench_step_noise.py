"""How much one task's step time varies at a fixed workload and CPU limit: the floor under any per-step
prediction error of a live run (issue 10 §3).

    python benchmarks/bench_step_noise.py [--forms command,process] [--periods-ms 100,10]
                                          [--weights max,default] [--cpu 250,1000] [--workloads 10,30]
                                          [--repeats 15] [--seed 1] [--out FILE]

Each configuration runs the kernel of `jobs/kernel-3` (bsp_planner.apps.kernel) `--repeats` times at one
workload, in one fresh CPU-quota cgroup (the mechanism of the local backend and the local profiler):

* form `command`: a fresh Python process per step (as a command task's worker starts it), timed from
  its start to its exit, as the worker times it;
* form `process`: one long-running Python process in the group that runs the kernel when told (as a
  process task does inside `session.step`), timed inside the process around the kernel only;
* period: the group's `cpu.cfs_period_us` (the quota scaled to keep the CPU limit);
* weight: `max` gives the group and its parent the largest cpu.shares (262144, as a live run's
  `--cpu-weight guaranteed` and the profiler do), `default` leaves 1024 (one ordinary process).

Between steps the driver idles a seeded random 0-200 ms, as a task waits in a barrier, so each step
starts at a random phase of the CFS period. Reported per configuration: the median step time, the
coefficient of variation, and the largest |step / median - 1|. Needs root (cgroup v1 or v2). The host's
load averages are printed with each row.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bsp_planner.apps.kernel import DEFAULT_OPS_PER_UNIT
from bsp_planner.profiling.cgroups import MAX_SHARES, CpuQuotaGroup, quota_us

# the long-running form: one kernel per line of stdin, its wall seconds back on stdout
SERVE = (
    "import sys, time\n"
    "from bsp_planner.apps.kernel import kernel\n"
    "for line in sys.stdin:\n"
    "    n = int(line)\n"
    "    c = time.process_time(); t = time.perf_counter(); kernel(n)\n"
    "    d, u = time.perf_counter() - t, time.process_time() - c\n"
    "    sys.stdout.write(f'{d!r} {u!r}\\n'); sys.stdout.flush()\n"
)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Config:
    """One configuration's group (and, for the process form, its long-running process)."""

    def __init__(self, form: str, period_ms: float, weight: str, cpu: float, workload: float) -> None:
        self.form, self.period_ms, self.weight, self.cpu, self.workload = form, period_ms, weight, cpu, workload
        period_us = int(round(period_ms * 1000))
        quota_us(cpu, period_us)  # a clear error for a quota under the kernel's minimum
        self.group = CpuQuotaGroup(
            f"noise-{os.getpid()}-{time.monotonic_ns()}",
            millicores=cpu,
            prefix="bsp-planner-noise",
            period_us=period_us,
        )
        self.env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.proc: subprocess.Popen | None = None
        self.times_s: list[float] = []
        self.cpu_s: list[float] = []

    def start(self) -> None:
        g = self.group.create()
        g.set_weight(MAX_SHARES if self.weight == "max" else 1024)
        if self.form == "process":
            self.proc = subprocess.Popen(
                [sys.executable, "-c", SERVE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                preexec_fn=g.preexec_fn,
                env=self.env,
                text=True,
            )
            self._ask(1)  # the interpreter and its imports, untimed

    def _ask(self, n: int) -> tuple[float, float]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def step(self) -> None:
        """One step at the configuration's workload: its wall and CPU seconds appended."""
        if self.form == "process":
            wall, cpu = self._ask(round(self.workload * DEFAULT_OPS_PER_UNIT))
        else:
            args = [sys.executable, "-m", "bsp_planner.apps.kernel", "--size", f"{self.workload:g}"]
            t = time.perf_counter()
            p = subprocess.Popen(args, preexec_fn=self.group.preexec_fn, env=self.env, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            p.returncode = os.waitstatus_to_exitcode(status)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(args)} exited with code {p.returncode}")
            cpu = usage.ru_utime + usage.ru_stime
        self.times_s.append(wall)
        self.cpu_s.append(cpu)

    def stop(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.group.remove()


def summary(xs: list[float]) -> dict:
    med = statistics.median(xs)
    return {
        "median_s": med,
        "cv": statistics.pstdev(xs) / statistics.fmean(xs),
        "max_dev": max(abs(x / med - 1) for x in xs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forms", default="command,process")
    ap.add_argument("--periods-ms", default="100,10")
    ap.add_argument("--weights", default="max")
    ap.add_argument("--cpu", default="250,1000")
    ap.add_argument("--workloads", default="10,30")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="JSON with every step time")
    args = ap.parse_args(argv)
    forms = args.forms.split(",")
    if set(forms) - {"command", "process"}:
        ap.error("--forms: command and/or process")
    weights = args.weights.split(",")
    if set(weights) - {"max", "default"}:
        ap.error("--weights: max and/or default")
    rng = random.Random(args.seed)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    loads = [load()]
    configs = [
        Config(*c)
        for c in itertools.product(
            forms,
            [float(x) for x in args.periods_ms.split(",")],
            weights,
            [float(x) for x in args.cpu.split(",")],
            [float(x) for x in args.workloads.split(",")],
        )
    ]
    try:
        for c in configs:
            c.start()
        # round-robin in a seeded random order: a change of the host's load hits every configuration alike
        for _ in range(args.repeats):
            for c in rng.sample(configs, len(configs)):
                time.sleep(rng.uniform(0, 0.2))  # as a task waits in a barrier: a random phase of the period
                c.step()
            loads.append(load())
    finally:
        for c in configs:
            c.stop()
    ended = time.strftime("%H:%M", time.gmtime())
    print(
        f"Command: `python benchmarks/bench_step_noise.py {' '.join(sys.argv[1:] if argv is None else argv)}`, "
        f"{started}-{ended} UTC, load averages {loads[0]} at the start, {loads[-1]} at the end "
        f"(1 min: {min(float(x.split()[0]) for x in loads):.2f}-{max(float(x.split()[0]) for x in loads):.2f})\n"
    )
    print("| form | period | weight | cpu | workload | median s | CV | max abs(x/median-1) | CPU s median | CPU CV |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c in configs:
        s, u = summary(c.times_s), summary(c.cpu_s)
        rows.append(
            {
                "form": c.form,
                "period_ms": c.period_ms,
                "weight": c.weight,
                "cpu": c.cpu,
                "workload": c.workload,
                "times_s": c.times_s,
                "cpu_s": c.cpu_s,
                **s,
            }
        )
        print(
            f"| {c.form} | {c.period_ms:g} ms | {c.weight} | {c.cpu:g}m | {c.workload:g} | {s['median_s']:.3f} | "
            f"{100 * s['cv']:.1f}% | {100 * s['max_dev']:.1f}% | {u['median_s']:.3f} | {100 * u['cv']:.1f}% |"
        )
    if args.out is not None:
        args.out.write_text(json.dumps({"started": started, "loads": loads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

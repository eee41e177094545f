"""A HELICS federate that knows nothing of bsp-planner, as a task of a run: its steps read from HELICS's profiler.

    python -m bsp_planner.apps.helics.observe --profile FILE [--federate NAME] [--work-unit-s 0.01] -- FEDERATE ...

Joins the run as the task (from the environment the run sets, as ``bsp_planner.task.join`` does), starts
the federate program unchanged, and follows FILE, where the broker appends HELICS's profiler lines as they
happen (``python -m bsp_planner.apps.helics.broker --profile FILE``). Each of the federate's granted time
steps, from the grant to its next time request (:mod:`.profiler`), is reported as the task's step, with
its start and end on the federate's clock.

A plain federate tells nobody its workload, so its work is taken from its compute: the CPU seconds it had
(the compute's time times the CPU its group's quota allows, at most ``--threads`` cores) in units of
``--work-unit-s`` CPU seconds (the ring's unit: 10 ms of one core); so the workloads a run observes are
the ones the profile (workload units against CPU) was measured in.

It ends with the federate, with its exit code, once the federate's last step is reported (waiting up to
``--drain-s`` for the broker's last lines). SIGTERM and SIGINT are passed on to the federate.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ... import task
from ...task.reporter import cpu_cgroup
from .profiler import FederateSteps


def quota_cores(group: str | None = None) -> float | None:
    """The CPU (cores) this process's group may use per CFS period; None without a quota."""
    group = cpu_cgroup() if group is None else group
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):  # cgroup v1
        d = Path("/sys/fs/cgroup", mount, (group or "").lstrip("/"))
        try:
            quota, period = int((d / "cpu.cfs_quota_us").read_text()), int((d / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 else None
    try:  # cgroup v2: "max 100000" or "40000 100000"
        v2 = Path("/proc/self/cgroup").read_text().splitlines()[0].split(":", 2)[2]
        quota_s, period_s = Path("/sys/fs/cgroup", v2.lstrip("/"), "cpu.max").read_text().split()
        return None if quota_s == "max" else int(quota_s) / int(period_s)
    except (OSError, ValueError, IndexError):
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.observe", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="the file the broker appends HELICS's profiler lines to")
    p.add_argument("--federate", default=None, help="the federate's HELICS name (default: the task's name)")
    p.add_argument("--work-unit-s", type=float, default=0.01, help="CPU seconds per workload unit")
    p.add_argument("--threads", type=float, default=1.0, help="cores the federate's compute can use at most")
    p.add_argument("--drain-s", type=float, default=5.0, help="after the federate ends: wait for its last step")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- the federate's command")
    args = p.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        p.error("expected the federate's command after --")
    for name in ("work_unit_s", "threads", "drain_s"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')}: expected a positive number, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        session = task.join()
    except task.TaskJoinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with session:
        steps = FederateSteps(args.federate or session.task_name)
        proc = subprocess.Popen(args.program)

        def forward(signum: int, _frame: object) -> None:
            if proc.poll() is None:
                proc.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, forward)
        profile = Path(args.profile)
        fh = None
        ended_at = None  # monotonic time the federate ended
        last_line = time.monotonic()
        try:
            while True:
                if fh is None and profile.exists():
                    fh = open(profile, "rb")
                raw = fh.readline() if fh is not None else b""
                if raw.endswith(b"\n"):
                    last_line = time.monotonic()
                    step = steps.feed(raw.decode(errors="replace"))
                    if step is not None and step.step >= session.steps:
                        return 0  # the run's last step is done (`run --steps N` on a longer federation)
                    if step is not None:
                        cores = min(args.threads, quota_cores() or args.threads)
                        session.report(
                            step.step,
                            duration_s=step.compute_s,
                            ended_at=step.ended_at,
                            workload=step.compute_s * cores / args.work_unit_s,
                        )
                    continue
                if fh is not None and raw:  # half a line: read it again once whole
                    fh.seek(-len(raw), os.SEEK_CUR)
                if proc.poll() is not None:
                    ended_at = ended_at or time.monotonic()
                    now = time.monotonic()
                    # its last lines reach the broker after it ended: read until they stop coming
                    quiet = now - max(last_line, ended_at) > 0.3 and not steps.open
                    if proc.returncode != 0 or quiet or now - ended_at > args.drain_s:
                        break
                time.sleep(0.005)  # the profile is a plain file: nothing to wait on but its growth
        finally:
            if fh is not None:
                fh.close()
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    code = proc.returncode
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())

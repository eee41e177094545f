"""A stand-in BSP application for the live tests: N long-running task processes written with
:mod:`bsp_planner.task`, doing CPU work in proportion to their workload every superstep.

    python -m bsp_planner.testing.bsp_app --ranks 3 [--self-sync] [--control DIR]

In barrier mode (BSP_SYNC=barrier) it runs the workload the run assigns. With ``--self-sync`` (the job's
``sync = "observe"``) it is an application that synchronises itself: its workload drifts on its own
(what it reports) and its ranks wait for each other through a barrier of files in BSP_RUN_DIR, never
through ours. Each step it appends its pid to ``<run_dir>/pids-<task>`` (so a test sees it was never
restarted). Files in ``--control`` steer a fault into a known task and step: ``die-<task>-<step>``
(exits mid-step), ``hang-<task>-<step>`` (until ``release-<task>-<step>``), ``repeat-<task>-<step>``
(reports that step twice), ``nan-<task>-<step>`` (reports a NaN workload).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bsp_planner import task


def own_workload(rank: int, step: int) -> float:
    """The drifting load of a self-synchronising rank: deterministic, different per rank and step."""
    return float(10 + (rank * 7 + step * 3) % 30)


def compute(workload: float, work_per_unit: int) -> int:
    x = 0
    for i in range(int(workload * work_per_unit)):
        x += i * i
    return x


def file_barrier(folder: Path, step: int, rank: int, ranks: int) -> None:
    """The application's own barrier: every rank's file for `step` present."""
    d = folder / f"{step:06d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / str(rank)).touch()
    while len(os.listdir(d)) < ranks:
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--work-per-unit", type=int, default=2000)
    ap.add_argument("--self-sync", action="store_true")
    ap.add_argument("--control", default=None)
    ap.add_argument("--steps", type=int, default=None, help="the application's own length (observe mode)")
    ap.add_argument("--self-timed", action="store_true", help="time the compute itself: session.report()")
    args = ap.parse_args(argv)
    control = Path(args.control) if args.control else None

    def flag(name: str, name_task: str, step: int) -> bool:
        return control is not None and (control / f"{name}-{name_task}-{step}").exists()

    with task.join() as session:
        name = session.task_name
        assert session.info is not None  # read when the task joined
        rank = args.rank if args.rank is not None else sorted(session.info.tasks).index(name)
        run_dir = Path(session.run_dir)
        (run_dir / f"report-group-{name}").write_text(str(getattr(session, "report_group", None)))
        step = session.first_step
        while not session.ended and (args.steps is None or step < args.steps):
            if args.self_timed:  # the application times its compute and reports it afterwards
                t0 = time.perf_counter()
                compute(own_workload(rank, step), args.work_per_unit)
                session.report(step, workload=own_workload(rank, step), duration_s=time.perf_counter() - t0)
                file_barrier(run_dir / "selfsync", step, rank, args.ranks)
                step += 1
                continue
            try:
                with session.step(step) as st:
                    w = (
                        st.assigned_workload
                        if st.assigned_workload is not None and not args.self_sync
                        else own_workload(rank, step)
                    )
                    st.workload = w if not flag("nan", name, step) else float("nan")
                    with open(run_dir / f"pids-{name}", "a") as fh:
                        fh.write(f"{step} {os.getpid()}\n")
                    if flag("die", name, step):
                        os._exit(9)
                    while flag("hang", name, step) and not flag("release", name, step):
                        time.sleep(0.02)
                    compute(w, args.work_per_unit)
            except task.RunEnded:
                break
            if flag("repeat", name, step):
                with session.step(step):
                    pass
            if args.self_sync:
                file_barrier(run_dir / "selfsync", step, rank, args.ranks)
            step += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

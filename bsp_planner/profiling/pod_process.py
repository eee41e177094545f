"""The in-pod half of profiling a `process` task on Kubernetes (one Job per CPU level).

The Job's pod has three containers sharing the scratch volume (``/scratch``):

    init  plan       (the run's image)   ``python -m bsp_planner.profiling.pod_process plan``: writes the
                                         profiling plan from $BSP_PROFILE_PLAN_JSON to /scratch/plan.json
    main  profiled   (the task's image)  the task's process, or the image as built (its ENTRYPOINT/CMD),
                                         with BSP_PROFILE=/scratch/plan.json; CPU limit = the CPU level
    main  collector  (the run's image)   ``python -m bsp_planner.profiling.pod_process collect ...``: follows
                                         the reports the profiling session appends, and writes each
                                         workload's cell to its termination message

Why a collector: the step reports (one JSON line per step) outgrow the 4096 bytes the kubelet keeps of a
termination message, and the profiler has no log access; the collector reduces them to one line per
workload with the local profiler's own code (:class:`~bsp_planner.profiling.process.ReportFollower`,
:func:`~bsp_planner.profiling.process.cell_results`), so the cells mean exactly what they mean locally
(the mean wall time of a workload's measured consecutive steps). It ends when every workload's last
step is reported, or when no step was reported for ``--timeout`` seconds (the process hangs or ended
early: it cannot see the other container end). Its message::

    {
        "cells": {"500": {"duration_s": 0.021, "cpu_s": 0.02}, "2500": {"reason": "..."}},
        "done": 1,
        "where": "after step 7 (workload 500)",
        "node": "...",
        "cpu_model": "...",
    }
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..inputs.job import Task
from .local import cpu_model
from .pod_measure import MAX_MESSAGE, TERMINATION_LOG
from .process import ReportFollower, cell_results, where_stopped

PLAN_ENV = "BSP_PROFILE_PLAN_JSON"  # the plan, for the init container to write where BSP_PROFILE points
POLL_S = 0.2


def write_plan(path: str) -> int:
    text = os.environ.get(PLAN_ENV, "")
    try:
        json.loads(text)
    except ValueError:
        print(f"${PLAN_ENV} is not a JSON plan: {text[:200]!r}", file=sys.stderr)
        return 2
    Path(path).write_text(text)
    return 0


def collect(plan_path: str, timeout_s: float, clock=time.monotonic, sleep=time.sleep) -> dict:
    """Follow the plan's reports file until every workload is done or none was reported for `timeout_s`
    seconds; each workload's cell (see the module)."""
    plan = json.loads(Path(plan_path).read_text())
    workloads = [float(w) for w in plan["workloads"]]
    follower = ReportFollower(Path(plan["reports_file"]))
    last = clock()
    while True:
        if follower.poll():
            last = clock()
        done = sum(1 for r in follower.reports if r.get("cell_done"))
        if done >= len(workloads):
            failure = None
            break
        if clock() - last > timeout_s:
            failure = f"no step reported within {timeout_s:g} s {where_stopped(follower.reports)}"
            break
        sleep(POLL_S)
    task = Task(plan["task"], None, 1.0, None)
    results = cell_results(task, follower.reports, workloads, failure)
    return {
        "cells": {
            f"{w:g}": {"duration_s": r.duration_s, "cpu_s": r.cpu_s} if r.ok else {"reason": r.reason}
            for w, r in results.items()
        },
        "done": done,
        "where": where_stopped(follower.reports),
        "node": os.environ.get("BSP_PLANNER_NODE", ""),
        "cpu_model": cpu_model(),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m bsp_planner.profiling.pod_process plan PLAN_FILE | collect PLAN_FILE TIMEOUT_S"
    if len(argv) == 2 and argv[0] == "plan":
        return write_plan(argv[1])
    if len(argv) != 3 or argv[0] != "collect":
        print(f"{usage}; got {argv!r}", file=sys.stderr)
        return 2
    result = collect(argv[1], float(argv[2]))
    text = json.dumps(result, separators=(",", ":"))
    if len(text) > MAX_MESSAGE:  # reasons are the long part: shorten them, keep every cell
        for c in result["cells"].values():
            if "reason" in c:
                c["reason"] = c["reason"][:120]
        text = json.dumps(result, separators=(",", ":"))[:MAX_MESSAGE]
    print(text, flush=True)
    Path(os.environ.get("BSP_PLANNER_TERMINATION_LOG", TERMINATION_LOG)).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

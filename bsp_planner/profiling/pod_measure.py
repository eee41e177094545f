"""One profiling run inside a Kubernetes Job's container: time a command, report in the termination message.

    python -m bsp_planner.profiling.pod_measure --timeout 60 -- stress-ng --cpu 2 --cpu-ops 4000 --quiet

The container's CPU limit is the run's CPU level (the kubelet's CFS quota, as the local profiler's
cgroup), so this only times the process: wall-clock seconds from just before it starts to its exit, like
the local backend. The result is one JSON object written to the termination-message file
(``/dev/termination-log``, read by the profiler from the pod's status: no log access needed) and to
stdout::

    {"duration_s": 1.2345, "exit_code": 0, "reason": "", "node": "kind-worker", "cpu_model": "..."}

Exit status 0 when the command succeeded within the timeout, 1 otherwise (the Job then reads Failed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..core.signals import kill_group
from .local import cpu_model
from .results import stderr_tail

TERMINATION_LOG = "/dev/termination-log"
MAX_MESSAGE = 4096  # the kubelet keeps at most this many bytes of a termination message


def measure(args: list[str], timeout_s: float) -> dict:
    result: dict[str, Any] = {
        "duration_s": None,
        "exit_code": None,
        "reason": "",
        "node": os.environ.get("BSP_PLANNER_NODE", ""),
        "cpu_model": cpu_model(),
    }
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        result["reason"] = f"cannot start {args[0]}: {exc.strerror}"
        return result
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)  # the command and whatever it started
        proc.communicate()
        result["reason"] = f"timeout after {timeout_s:g} s"
        return result
    duration = time.perf_counter() - start
    result["exit_code"] = proc.returncode
    if proc.returncode != 0:
        tail = stderr_tail(err)
        result["reason"] = f"exit code {proc.returncode}" + (f": {tail}" if tail else "")
    else:
        result["duration_s"] = round(duration, 6)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    timeout_s = 60.0
    out = os.environ.get("BSP_PLANNER_TERMINATION_LOG", TERMINATION_LOG)
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--timeout" and argv:
            timeout_s = float(argv.pop(0))
        elif flag == "--out" and argv:
            out = argv.pop(0)
        else:
            print(
                f"usage: python -m bsp_planner.profiling.pod_measure [--timeout S] [--out FILE] -- COMMAND...; got {flag!r}",
                file=sys.stderr,
            )
            return 2
    # `{python}` in a command task's arguments: this container's Python (the profiler's path means nothing here)
    command = [sys.executable if a == "{python}" else a for a in argv[1:]]
    if not command:
        print("no command after --", file=sys.stderr)
        return 2
    result = measure(command, timeout_s)
    text = json.dumps(result, separators=(",", ":"))[:MAX_MESSAGE]
    print(text, flush=True)
    try:
        Path(out).write_text(text)
    except OSError as exc:
        print(f"cannot write the termination message to {out}: {exc.strerror}", file=sys.stderr)
    return 0 if result["duration_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())

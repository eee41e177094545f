"""What a command reports on its stdout (read by the command worker and the profiler)."""

from __future__ import annotations

import json

from ..core.errors import InputError
from ..zk.schema import check_workload


def parse_workload_report(stdout: bytes, what: str) -> dict:
    """The workload a command reported: its last stdout line that is a JSON object with "workload"
    (optionally "next_workload"); {} if it printed none. A line that starts like one but is not valid
    JSON, or a workload that is not a finite number in 0..MAX_WORKLOAD, is an InputError naming `what`."""
    found: dict = {}
    for raw in stdout.decode(errors="replace").splitlines():
        line = raw.strip()
        if not (line.startswith("{") and '"workload"' in line):
            continue
        try:
            v = json.loads(line, parse_constant=lambda c: float(c))  # NaN/Infinity parsed, then refused below
        except ValueError:
            raise InputError(
                f'{what} printed a malformed workload report {line[:200]!r} (expected one JSON line like {{"workload": 37.5}})',
                field="workload",
            ) from None
        if not isinstance(v, dict):
            continue
        found = {"workload": check_workload(v.get("workload"), what)}
        if v.get("next_workload") is not None:
            found["next_workload"] = check_workload(v["next_workload"], what, "next_workload")
    return found

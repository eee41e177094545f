"""The one-line step report, for programs in any language (read by :mod:`.serve`).

One line per step, ``key=value`` pairs separated by spaces (or the same keys as one JSON object)::

    step=3 workload=12.5 duration_s=0.42
    step=3 workload=12.5 started_at=1764326400.10 ended_at=1764326400.52
    {"step": 3, "workload": 12.5, "duration_s": 0.42, "cpu_s": 0.40}

``step`` (an integer, the steps counted from the task's first step, 0 on a first start) and the compute's
time are required: ``duration_s`` (seconds, ending when the line is read, or at ``ended_at``) or both
``started_at`` and ``ended_at`` (``date +%s.%N``: seconds since the epoch, on this host's clock).
``workload``, ``next_workload`` and ``cpu_s`` are optional, as for ``session.report``.
"""

from __future__ import annotations

import json
import math

from ..core.errors import InputError

KEYS = ("step", "workload", "next_workload", "duration_s", "cpu_s", "started_at", "ended_at")
LINE_EXAMPLE = "step=3 workload=12.5 duration_s=0.42"


def _number(key: str, raw: object, what: str) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{what}: {key}={raw!r} is not a number", field=key) from None
    if not math.isfinite(value) or isinstance(raw, bool):
        raise InputError(f"{what}: {key}={raw!r} is not a finite number", field=key)
    return value


def parse_report_line(line: str, what: str = "report line") -> dict:
    """The keyword arguments of ``session.report`` for one line: {"step": int, "duration_s": float,
    optionally "ended_at", "workload", "next_workload", "cpu_s"}. A line that is not a step report
    (unknown key, missing step or time, not a number) is an InputError naming `what` and the line."""
    text = line.strip()
    where = f"{what} {text[:200]!r}"
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            raise InputError(f"{where}: not valid JSON (expected e.g. {LINE_EXAMPLE})", field="line") from None
        if not isinstance(fields, dict):
            raise InputError(f"{where}: expected a JSON object", field="line")
    else:
        fields = {}
        for token in text.split():
            key, sep, value = token.partition("=")
            if not sep:
                raise InputError(f"{where}: {token!r} is not key=value (expected e.g. {LINE_EXAMPLE})", field="line")
            fields[key] = value
    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(KEYS)})", field=unknown[0])
    if "step" not in fields:
        raise InputError(f"{where}: no step= (expected e.g. {LINE_EXAMPLE})", field="step")
    step = _number("step", fields["step"], where)
    if step != int(step) or step < 0:
        raise InputError(f"{where}: step={fields['step']!r} is not a step number (0, 1, ...)", field="step")
    values = {k: _number(k, v, where) for k, v in fields.items() if k != "step"}
    out: dict = {"step": int(step)}
    if "duration_s" in values:
        out["duration_s"] = values.pop("duration_s")
        values.pop("started_at", None)
    elif "started_at" in values and "ended_at" in values:
        out["duration_s"] = values["ended_at"] - values.pop("started_at")
    else:
        raise InputError(f"{where}: no time: give duration_s=, or started_at= and ended_at=", field="duration_s")
    return out | values

"""The one rule for every name a user gives (tasks, services, nodes, runs, pair-profile tasks): names become
file names (a service's log, a task's forecasts), cgroup and znode names and run folders, so a name is
letters, digits, '_', '-' and '.', not empty and not starting with '.' (no '/', no '..', no blank, no brace
that a placeholder would read)."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import InputError

NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
RULE = "letters, digits, '_', '-' or '.', not starting with '.'"


def check_name(
    name: object, what: str, *, path: str | Path | None = None, line: int | None = None, field: str | None = None
) -> str:
    """`name` if it obeys the rule; otherwise an InputError naming the file and field, e.g.
    `expected a service name of letters, digits, ... got '../zk-auth'`. `what`: 'service', 'node', ..."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InputError(f"expected a {what} name of {RULE}, got {name!r}", path=path, line=line, field=field)
    return name

"""Hidden working files beside an output, and their removal once the command that made them is gone.

A command writes a result under a temporary name first (a staging folder for a results folder or an
`init` copy, a temporary file for one file) and renames it into place when it is whole. Each such name
carries its writer's pid: ``.NAME.KIND.PID.RANDOM`` (KIND: ``staging``, ``init`` or ``tmp``). A signal
the command can catch removes them; SIGKILL cannot be caught, so they stay. The next command that takes
the output's lock (:func:`bsp_planner.filelock.output_lock`) calls :func:`sweep`, which removes those
whose writer is no longer running, so they never pile up and are never mistaken for a result.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

KINDS = ("staging", "init", "tmp")
_NAME = re.compile(r"\.(?P<target>.*)\.(?P<kind>staging|init|tmp)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+")


def prefix(target: str | Path, kind: str) -> str:
    """The start of a working name for `target` (a ``tempfile`` prefix): ``.NAME.KIND.PID.``."""
    assert kind in KINDS, kind
    return f".{Path(target).name}.{kind}.{os.getpid()}."


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie, killed and not yet reaped, has ended)."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")  # the state follows the command's name


def sweep(folder: str | Path) -> dict[int, list[str]]:
    """Remove the working files and folders in `folder` whose writer is no longer running.

    Returns the names removed, by the pid that left them (empty when there was nothing to remove). A name
    that cannot be removed (permissions) is left and not reported."""
    removed: dict[int, list[str]] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _NAME.fullmatch(entry.name)
        if m is None:
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or running(pid):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:
            continue  # another command's sweep got there first
        except OSError:
            continue
        removed.setdefault(pid, []).append(entry.name)
    return removed

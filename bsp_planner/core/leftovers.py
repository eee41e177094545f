"""Hidden working files beside an output, and their removal once the command that made them is gone.

A command writes a result under a temporary name first (a staging folder for a results folder or an
`init` copy, a temporary file for one file) and renames it into place when it is whole. Each such name
carries its writer's pid: ``.NAME.KIND.PID.RANDOM`` (KIND: ``staging``, ``init`` or ``tmp``). A signal
the command can catch removes them; SIGKILL cannot be caught, so they stay. The next command that takes
the output's lock (:func:`bsp_planner.core.filelock.output_lock`) calls :func:`sweep`, which removes those
whose writer is no longer running, so they never pile up and are never mistaken for a result.

A pid is judged on this machine (in this pid namespace): a folder written at the same time by commands
on other machines or in other containers is not one to share.

One exception: a staging (or `init`) folder whose files had begun to move into the output (marked by
:data:`PUBLISHING`) holds the rest of a complete set; dropping it would leave the output mixing new
files with old ones, so :func:`sweep` moves the rest into place instead.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import NamedTuple

KINDS = ("staging", "init", "tmp")
#: put in a staging folder just before its files start moving into the output folder, one by one
PUBLISHING = ".publishing"
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


class Leftover(NamedTuple):
    """What a writer that is gone left: `name` beside the output, removed; or, when `finished`, a
    staging folder half moved into place, whose remaining files `sweep` moved into `output`. `kind`: one of
    :data:`KINDS` ("" for what is not a working name, such as a lock file)."""

    pid: int
    name: str
    finished: bool = False
    output: str = ""
    kind: str = ""


def sweep(folder: str | Path) -> list[Leftover]:
    """Remove the working files and folders in `folder` whose writer is no longer running (finishing a
    staging folder's half-done move into place first). Returns what was found and handled, empty when
    there was nothing; a name that cannot be removed (permissions) is left and not reported."""
    found: list[Leftover] = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        m = _NAME.fullmatch(entry.name)
        if m is None:
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or running(pid):
            continue
        path = Path(entry.path)
        output = Path(folder) / m["target"]
        try:
            finished = m["kind"] in ("staging", "init") and (path / PUBLISHING).exists() and output.is_dir()
            if finished:
                finish_publishing(path, output)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:  # another command's sweep got there first, or it may not be removed (permissions)
            continue
        found.append(Leftover(pid, entry.name, finished, output.name or str(output), m["kind"]))
    return found


def finish_publishing(staging: Path, output: Path) -> None:
    """Move what is left in `staging` into `output`, each file in one `os.replace` (the move
    `bsp_planner.core.outputs.staged_outputs` had begun)."""
    for item in sorted(staging.iterdir()):
        if item.name != PUBLISHING:
            os.replace(item, output / item.name)

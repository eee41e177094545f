"""Where results go: the output location is checked before any work starts, and a set of result files
is published all together only after every one of them was written.

A failed run (bad input found late, a crash while drawing the chart, a full disk) therefore leaves an
existing output folder exactly as it was: the files are written into a fresh temporary folder beside
it (``.NAME.staging.PID.XXXX``; one a SIGKILL left is removed by the next writer, see
`bsp_planner.core.leftovers`) and moved into place one `os.replace` each, only once all exist.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .atomic import temp_folder
from .errors import InputError, OutputUnwritable
from .leftovers import PUBLISHING, finish_publishing, prefix


def _probe_writable(path: Path, start: Path, flag: str, expected: str) -> Path:
    """Create and remove a file in the nearest existing folder at or above `start`: the only test that
    also catches read-only mounts and pseudo file systems (os.access says yes to root everywhere)."""
    folder = start
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"expected {expected}, but {folder} is a file, not a folder", path=path, field=flag)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix(folder / "bsp-planner-probe", "tmp"))
    except OSError as exc:
        raise InputError(f"cannot write into {folder}: {exc.strerror or exc}", path=path, field=flag) from None
    os.close(fd)
    os.unlink(tmp)
    return path


def check_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """A folder results can be written into: it is a folder or can be made one, and it is writable.
    Nothing is created. Raises InputError naming the path and the flag (or setting) otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError("expected an output folder, but this is an existing file", path=path, field=flag)
    return _probe_writable(path, path, flag, "an output folder")


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """A file that can be written (or appended to): not a folder, its folder can be made and written."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise InputError("expected a file path, this is a folder", path=path, field=flag)
    if path.exists():
        try:
            with path.open("ab"):
                pass
        except OSError as exc:
            raise InputError(f"cannot write it: {exc.strerror or exc}", path=path, field=flag) from None
        return path
    return _probe_writable(path, path.parent, flag, "a file in a folder")


@contextlib.contextmanager
def staged_outputs(out_dir: str | Path, flag: str | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside out_dir to write every result file into; on success move them
    all into out_dir (created if needed), on any exception leave out_dir untouched and drop them. An
    OSError (a full disk) comes out as :class:`OutputUnwritable` naming out_dir (and `flag`)."""
    out_dir = Path(out_dir)
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = temp_folder(parent, prefix(out_dir, "staging"))  # 0755 under umask 022, as it is renamed out_dir
    except OSError as exc:
        raise OutputUnwritable.from_os_error(exc, out_dir, flag) from None
    try:
        try:
            yield staging
        except OSError as exc:  # a full disk while writing: one line, the folder as it was
            raise OutputUnwritable.from_os_error(exc, out_dir, flag) from None
        if not out_dir.exists():
            staging.rename(out_dir)  # one atomic step
            return
        (staging / PUBLISHING).touch()  # from here on the set is complete: if killed, the next writer moves the rest
        finish_publishing(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

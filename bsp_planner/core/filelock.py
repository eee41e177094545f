"""One writer at a time per output: ``with output_lock(path, "--out"):`` around everything a command
writes to `path` (a profile, a results folder, an `init` target). A second command that wants the same
path is refused at once, naming the pid of the first, before it changes anything.

The lock is ``flock`` on a hidden file beside the target (``.NAME.lock``, holding the pid): the kernel
releases it when its holder ends, however it ends (SIGKILL included), so a stale lock never blocks a
retry. The holder removes the file when it is done; a contender that opened the file just before it was
removed finds it no longer at its path and tries again, so two writers can never both hold it.

A holder that was SIGKILLed could not tidy up: its lock file (with its pid) and its half-made working
files (`bsp_planner.core.leftovers`) stay beside the target. Whoever takes the lock next removes those of
every writer that is gone and says so in one line; none of it is ever read as a result.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from . import leftovers
from .errors import InputError, InputWarning


def lock_path(target: str | Path) -> Path:
    target = Path(target)
    return target.parent / f".{target.name}.lock"


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


@contextlib.contextmanager
def output_lock(target: str | Path, field: str | None = None) -> Iterator[list[leftovers.Leftover]]:
    """Hold `target`'s lock for the block, or raise an InputError naming the holder's pid (and
    `field`, the flag or setting that named `target`). The target's folder is created if needed. Yields
    what writers that are gone had left beside `target` and taking the lock tidied (empty: nothing)."""
    target = Path(target)
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid is not None else "another process"
            raise InputError(
                f"{who} is writing here right now; nothing was changed. Wait for it to end (or stop it) and run this again",
                path=target,
                field=field,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the holder before us may have removed the file after we opened it: then lock the new one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        before = _read_pid(fd)  # a pid here means its writer ended without removing the file: killed
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield _tidy_after_the_killed(target, before)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while still holding it: a contender then retries on a fresh file
        os.close(fd)


def _tidy_after_the_killed(target: Path, lock_pid: int | None) -> list[leftovers.Leftover]:
    """Remove what writers that are gone left beside `target` (their working files; the lock file is
    ours now), with one line saying so; returns what was found."""
    found = leftovers.sweep(target.parent)
    if lock_pid is not None and lock_pid != os.getpid():
        found.insert(0, leftovers.Leftover(lock_pid, lock_path(target).name))
    if not found:
        return found
    pids = ", ".join(sorted({str(f.pid) for f in found}, key=int))
    removed = [f.name for f in found if not f.finished]
    what = [f"removed {', '.join(removed)} (none of it a result)"] if removed else []
    what += [f"finished moving its complete results from {f.name} into {f.output}" for f in found if f.finished]
    warnings.warn(
        f"an earlier command writing in {target.parent} (pid {pids}) was killed before it could tidy up: "
        + "; ".join(what),
        InputWarning,
        stacklevel=3,
    )
    return found

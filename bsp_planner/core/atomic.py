"""Files written whole or not at all: the content goes to a temporary name beside the target (a unique
one, so two writers never share it), is flushed to disk, and replaces the target in one `os.replace`.

A full disk, a signal or any error half-way leaves the target as it was and removes the temporary file;
only SIGKILL or a power cut between the write and the rename can leave one (``.NAME.tmp.PID.XXXX``,
hidden), which the next writer of an output in that folder removes (`bsp_planner.core.leftovers`).

Temporary files and folders are made by `tempfile`, which keeps them private (0600, 0700); once renamed
they are outputs, so `temp_file` and `temp_folder` give them the mode a plain `open` or `mkdir` would
(0644 and 0755 under umask 022): a colleague or a web server can read a chart as it can the CSV beside it."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from .leftovers import prefix


def current_umask() -> int:
    """The process's umask, read without changing it (os.umask can only set it, which a thread writing a
    file at that moment would see); /proc/self/status has it on Linux since 4.7."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_file(folder: str | Path, name_prefix: str, suffix: str = "") -> tuple[int, str]:
    """`tempfile.mkstemp` in `folder`, the file given the mode a plain `open` would (0666 less the umask)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=name_prefix, suffix=suffix)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def temp_folder(folder: str | Path, name_prefix: str) -> Path:
    """`tempfile.mkdtemp` in `folder`, given the mode a plain `mkdir` would (0777 less the umask)."""
    made = Path(tempfile.mkdtemp(dir=folder, prefix=name_prefix))
    try:
        made.chmod(0o777 & ~current_umask())
    except BaseException:
        made.rmdir()
        raise
    return made


def write_bytes(path: str | Path, data: bytes) -> None:
    """Replace (or create) `path` with `data`, atomically; its folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file(path.parent, prefix(path, "tmp"))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a full disk: no half-written temporary file left beside the intact original
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> None:
    """`write_bytes` of UTF-8 text, newlines as written."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, data: object) -> None:
    """`write_text` of indented JSON with a final newline."""
    write_text(path, json.dumps(data, indent=2) + "\n")

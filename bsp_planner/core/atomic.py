"""Files written whole or not at all: the content goes to a temporary name beside the target (a unique
one, so two writers never share it), is flushed to disk, and replaces the target in one `os.replace`.

A full disk, a signal or any error half-way leaves the target as it was and removes the temporary file;
only SIGKILL or a power cut between the write and the rename can leave one (``.NAME.tmp.PID.XXXX``,
hidden), which the next writer of an output in that folder removes (`bsp_planner.core.leftovers`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from .leftovers import prefix


def write_bytes(path: str | Path, data: bytes) -> None:
    """Replace (or create) `path` with `data`, atomically; its folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix(path, "tmp"))
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

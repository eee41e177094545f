"""The profile's files as the runner writes them: rows appended whole (one write + fsync each), headers
checked, a torn last row dropped, the cells a (partial) profile already holds."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

from ..core import atomic
from ..core.errors import InputError
from ..inputs.profiles import read_profile_rows
from .grid import Cell

FAILURE_COLUMNS = ("task", "workload", "cpu_millicores", "repeat", "reason", "date")


def failures_path(profile_path: str | Path) -> Path:
    p = Path(profile_path)
    return p.with_name(p.stem + ".failures.csv")


def csv_line(values: Sequence) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue().encode()


def append_line(path: Path, data: bytes) -> None:
    """One write on an O_APPEND descriptor, then fsync: the row is in the file whole, or not at all."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_csv(path: Path, columns: Sequence[str]) -> None:
    """Create the file with its header, or check an existing one (dropping a torn last line)."""
    header = ",".join(columns)
    if not path.exists() or path.stat().st_size == 0:
        atomic.write_text(path, header + "\n")
        return
    data = path.read_bytes()
    first = data.split(b"\n", 1)[0].decode(errors="replace").strip()
    if tuple(h.strip() for h in first.split(",")) != tuple(columns):
        raise InputError(f"expected the header {header}; is this the right file?", path=path, line=1)
    if not data.endswith(b"\n"):
        # a row torn by a crash mid-write: drop it (its cell is measured again)
        keep = data[: data.rfind(b"\n") + 1] if b"\n" in data else (header + "\n").encode()
        with open(path, "r+b") as fh:
            fh.truncate(len(keep))


def measured_cells(profile_path: Path) -> set[Cell]:
    """The cells a (possibly partial) profile already holds."""
    if not profile_path.exists():
        return set()
    with profile_path.open() as fh:
        next(fh, None)
        if not any(line.strip() for line in fh):  # a header only: nothing measured yet
            return set()
    return {
        (r["task"], float(r["workload"]), float(r["cpu_millicores"]), int(r["repeat"]))
        for r in read_profile_rows(profile_path)
    }

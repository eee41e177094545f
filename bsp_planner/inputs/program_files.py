"""The files a command or process task's program is made of, and a digest of them kept in its profile.

A profile times a program; if the program's code changes afterwards (a faster kernel, a new exchange),
the profile's predictions silently describe another program. `profile run` records, per task, the SHA-256
of the program's files (``program_sha256`` and their names, ``program_files``, in ``profile.meta.json``),
and `simulate` and `run` warn when the files now differ (:func:`changed_programs`).

A task's program files: the program itself when it names a file (``./kernel.py``), every later argument
that names an existing file (the job loader already resolved those against the job file:
``cmd_task.py``), and for ``-m MODULE`` the module's source file, or every ``.py`` file of a package's
folder (``-m my_app.federate``; found without running the program). The program is counted only where it
lies in the job's folder (not ``python3`` or another system binary); arguments with placeholders other
than ``{job_dir}`` are not part of it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

MAX_PACKAGE_FILES = 500  # a package folder with more .py files is digested by its first (sorted) ones


def _module_files(name: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return []
    if spec is None or not spec.origin or not spec.has_location:
        return []
    origin = Path(spec.origin)
    if spec.submodule_search_locations:  # a package run with -m: its __main__ and everything beside it
        return sorted(origin.parent.rglob("*.py"))[:MAX_PACKAGE_FILES]
    return [origin]


def program_files(task) -> list[Path]:
    """The existing files `task`'s command/process is made of (empty for a stressor or an image task)."""
    argv = task.command or task.process or ()
    if not argv or getattr(task, "image", None):
        return []
    job_dir = getattr(task, "job_dir", "")
    files: list[Path] = []
    for i, raw in enumerate(argv):
        arg = raw.replace("{job_dir}", job_dir) if job_dir else raw
        if "{" in arg or arg == sys.executable:
            continue
        if i > 0 and argv[i - 1] == "-m":
            files += _module_files(arg)
            continue
        p = Path(arg)
        # the program itself only where it is the user's (beside the job), never an interpreter of the system
        own = i > 0 or (bool(job_dir) and p.resolve().is_relative_to(Path(job_dir).resolve()))
        if p.is_absolute() and p.is_file() and own:
            files.append(p)
    return list(dict.fromkeys(f.resolve() for f in files))


def program_digest(task) -> dict | None:
    """``{"program_sha256": ..., "program_files": [...]}`` for the profile's metadata, or None (no files)."""
    files = program_files(task)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:
            continue
        h.update(str(f.name).encode() + b"\0" + hashlib.sha256(data).digest())
    return {"program_sha256": h.hexdigest(), "program_files": [_name(f, task) for f in files]}


def _name(f: Path, task) -> str:
    job_dir = getattr(task, "job_dir", "")
    try:
        return str(f.relative_to(job_dir)) if job_dir else str(f)
    except ValueError:
        return str(f)


def changed_programs(job, measured: dict, meta_file: Path | str | None) -> list[str]:
    """One warning per task whose program files differ from those its profile recorded (`measured`: the
    metadata's ``tasks`` table); none where the profile recorded no digest (profiles measured before it was
    kept, stressors)."""
    notes = []
    for t in job.tasks:
        before = measured.get(t.name)
        if not isinstance(before, dict) or "program_sha256" not in before:
            continue
        now = program_digest(t)
        if now is None or now["program_sha256"] != before["program_sha256"]:
            names = ", ".join(str(n) for n in before.get("program_files", [])[:5]) or "its files"
            notes.append(
                f"task '{t.name}': its program ({names}) changed since it was profiled ({meta_file}); the "
                "profile's predictions may no longer hold: re-measure it with `bsp-planner profile run`"
            )
    return notes

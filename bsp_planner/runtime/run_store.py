"""A live run's folder, ``runs/<run-id>/``: claimed by exactly one new run, its ``run.json`` (settings,
status, incarnations, resumes) written atomically, and the checks a resume makes before anything else.

What is in the folder is described in :mod:`.runlog`. Every write here is atomic (a temporary file, fsync,
rename), so a crash leaves the previous version whole. A write that fails (a full disk, a file made
read-only) raises :class:`RunStoreUnwritable`, which the coordinator treats as an interruption: the run
stops, resumable once the disk has room again. So that a full disk still lets ``run.json`` say how the run
ended, the folder holds a little room in reserve while the run is on (``.space-reserve``,
:data:`RESERVE_BYTES`): a write of ``run.json`` that fails gives it up and tries once more, and the run's
last write removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path

from ..core.atomic import write_text as atomic_write
from ..core.errors import InputError
from ..inputs.names import check_name

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RUN_FORMAT = 1
RESERVE_BYTES = 128 * 1024  # several times a run.json of many tasks and resumes
RESERVE_NAME = ".space-reserve"


class RunStoreUnwritable(Exception):
    """A file of the run folder cannot be written (full disk, permissions): the run stops, resumable."""


def new_run_id() -> str:
    return f"live-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    check_name(run_id, "run", field="--run-id")  # the rule every name obeys; a run id is narrower still
    if not RUN_ID.match(run_id):
        raise InputError(f"a run id is 1-64 letters, digits, '_' or '-', got {run_id!r}", field="--run-id")
    return run_id


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


SHIPPED = "shipped:"  # a recorded path inside the package's data: "shipped:experiments/live-default.toml"


def recorded_path(path: Path | str, run_dir: Path) -> str:
    """How run.json names an input file, never by a machine's absolute path: a shipped one by its place in
    the package's data ("shipped:experiments/live-default.toml"), another by its path relative to the
    run folder ("../../exp.toml"), so a run folder moved with its inputs (or a fresh install) resumes."""
    from ..inputs.shipped import data_dir, is_shipped

    p = Path(path).resolve()
    if is_shipped(p):
        return SHIPPED + p.relative_to(data_dir().resolve()).as_posix()
    return Path(os.path.relpath(p, Path(run_dir).resolve())).as_posix()


def resolved_path(recorded: str, run_dir: Path) -> Path:
    """The file a run.json's `recorded_path` names."""
    from ..inputs.shipped import data_path

    if recorded.startswith(SHIPPED):
        return data_path(recorded[len(SHIPPED) :])
    return (Path(run_dir) / recorded).resolve()


class RunStore:
    """``RunStore(runs_dir, run_id)``: the folder of one run and its ``run.json``."""

    def __init__(self, runs_dir: Path, run_id: str) -> None:
        self.run_id = check_run_id(run_id)
        self.runs_dir = Path(runs_dir)
        self.run_dir = self.runs_dir / run_id
        self.meta_path = self.run_dir / "run.json"
        self.meta: dict = {}
        self.claimed = False  # this process created the folder (a new run): it may remove it again

    # -- a new run ---------------------------------------------------------------------------------
    def claim_new(self) -> None:
        """Create the folder, atomically: of two runs started with the same id at the same moment,
        exactly one gets it and the other is refused before it has touched anything."""
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            self.run_dir.mkdir()
        except FileExistsError:
            raise InputError(
                f"run {self.run_id!r} already exists in {self.runs_dir} (started, running or ended); "
                f"continue it with --resume {self.run_id}, or choose another --run-id",
                field="--run-id",
            ) from None
        except OSError as exc:
            raise InputError(
                f"cannot create the run folder {self.run_dir}: {exc.strerror}", path=self.run_dir, field="--runs-dir"
            ) from None
        self.claimed = True

    def discard(self) -> None:
        """Remove the folder of a new run that never started (only one this process created)."""
        if self.claimed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.claimed = False

    # -- an existing run ---------------------------------------------------------------------------
    def read_meta(self) -> dict:
        """run.json of a run to resume, checked to be resumable; nothing is written."""
        if not self.meta_path.is_file():
            raise InputError(
                f"no run {self.run_id!r} in {self.runs_dir} (run.json missing)", path=self.meta_path, field="--resume"
            )
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the run's state: {exc}", path=self.meta_path, field="--resume") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict):
            raise InputError(
                "not a run.json of bsp-planner (no settings object)", path=self.meta_path, field="--resume"
            )
        if meta.get("status") == "finished":
            raise InputError(
                f"run {self.run_id!r} has finished; nothing to resume", path=self.meta_path, field="--resume"
            )
        self.meta = meta
        return meta

    def ended_instance(self) -> str | None:
        """The coordinator that last ran this run, if it recorded that it ended (its lock, left while its
        session expires, is stale)."""
        if self.meta.get("status") in ("interrupted", "failed"):
            return self.meta.get("instance")
        return None

    def incarnations(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.meta.get("incarnations", {}).items()}

    # -- writing -----------------------------------------------------------------------------------
    def write_meta(self, **changes) -> None:
        """run.json with `changes`, atomically; one that sets ``ended`` is the run's last write (for now: a
        resume starts again), after which the reserve goes."""
        self.meta.update(changes)
        text = json.dumps(self.meta, indent=2, default=str) + "\n"
        try:
            atomic_write(self.meta_path, text)
        except OSError as exc:
            if not self._give_up_reserve():
                raise RunStoreUnwritable(f"cannot write {self.meta_path}: {exc.strerror or exc}") from None
            try:  # with the room the reserve held
                atomic_write(self.meta_path, text)
            except OSError as again:
                raise RunStoreUnwritable(f"cannot write {self.meta_path}: {again.strerror or again}") from None
        if "ended" in changes:
            self._give_up_reserve()
        else:
            self._hold_reserve()

    @property
    def reserve_path(self) -> Path:
        return self.run_dir / RESERVE_NAME

    def _hold_reserve(self) -> None:
        """The reserve in place (written, so that the file system has given it its blocks); where there is no
        room for it, none: the run goes on as it would without."""
        if self.reserve_path.is_file():
            return
        try:
            with open(self.reserve_path, "wb") as f:
                f.write(bytes(RESERVE_BYTES))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                self.reserve_path.unlink()

    def _give_up_reserve(self) -> bool:
        try:
            self.reserve_path.unlink()
            return True
        except OSError:
            return False

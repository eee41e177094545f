"""The defaults shipped inside the package, under ``bsp_planner/data/``, found through importlib.resources.

    data/experiments/   default.toml (what `bsp-planner simulate` runs), large.toml, live-*.toml,
                        forecasts/default/ (the default experiment's ensemble-fit forecasts), default-lstm/
    data/jobs/          thesis-8.toml, live-3.toml
    data/profiles/      local-2core/ (profile.csv, profile.meta.json, heatmaps)
    data/datasets/      the NAB series the jobs read (LICENSE-NAB.txt, README.md)
    data/models/        the forecasting models behind the shipped forecasts
    data/agents/        the DQN agent of the `dqn` planner
    data/envs/          the RL environment settings the agents were trained in

A shipped experiment is read where it lies (inside the installed package) but never written beside:
its relative output paths resolve against ``./experiments/`` of the current directory, as if the
current directory were its project (see `output_base`). `bsp-planner init DIR` writes an editable
copy with the same layout.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

from ..core import leftovers
from ..core.errors import InputError, OutputUnwritable
from ..core.filelock import output_lock
from ..core.outputs import check_output_dir

#: What `bsp-planner init` copies (files or folders under data/, kept at the same relative places so the
#: experiment's and the job's relative paths point at the copies): the default experiment, its job,
#: profile, series (with their licence) and shipped forecasts.
INIT_FILES = (
    "experiments/default.toml",
    "experiments/forecasts/default",
    "jobs/thesis-8.toml",
    "profiles/local-2core/profile.csv",
    "profiles/local-2core/profile.meta.json",
    "datasets",
)


def data_dir() -> Path:
    """The package's data folder as a file-system path (pip installs packages as files)."""
    root = files("bsp_planner") / "data"
    if not isinstance(root, Path):  # pragma: no cover - only a zipped install gets here
        raise TypeError(f"bsp-planner's data must be installed as files, found {root!r}; reinstall it with pip")
    return root


def data_path(relative: str) -> Path:
    """A shipped file or folder, e.g. data_path("jobs/thesis-8.toml")."""
    return data_dir() / relative


def shipped_or_given(given: Path | None, kind: str) -> Path | None:
    """A path as given, or, when nothing is there and it is a bare name, the shipped one of that name:
    `--actual particles-8` is data/traces/particles-8, `--job helics-4` data/jobs/helics-4.toml (kind:
    "traces" or "jobs"), so that the docs' commands work from any folder."""
    if given is None or given.exists() or len(given.parts) != 1:
        return given
    shipped = data_dir() / kind / (given.name if kind == "traces" else f"{given.stem}.toml")
    return shipped if shipped.exists() else given


def experiments_dir() -> Path:
    return data_dir() / "experiments"


def experiment_names() -> list[str]:
    """Names of the shipped experiments (file stems): default, large, live-default, ..."""
    return sorted(p.stem for p in experiments_dir().glob("*.toml"))


def default_experiment() -> Path:
    """The experiment `bsp-planner simulate` runs when given none."""
    return experiments_dir() / "default.toml"


def is_shipped(path: Path | str | None) -> bool:
    """Whether a file lies inside the package's data (and so must not be written beside)."""
    if path is None:
        return False
    return Path(path).resolve().is_relative_to(data_dir().resolve())


def find_experiment(given: Path | str | None) -> Path:
    """The experiment file meant by a command's argument: a file, the name of a shipped experiment
    (`default`, `large`, ...), or None for the shipped default."""
    if given is None:
        return default_experiment()
    path = Path(given).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise InputError("expected an experiment file (.toml), this is a folder", path=path)
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python 3.11 says a loop this way
            raise InputError("this symbolic link leads round in a loop, never to a file", path=path) from None
        except OSError as exc:
            loop = "loop" in str(exc).lower()
            why = "leads round in a loop" if loop else f"points at {os.readlink(path)}, which does not exist"
            raise InputError(f"this symbolic link {why}", path=path) from None
    if path.parent == Path(".") and path.stem in experiment_names() and path.suffix in ("", ".toml"):
        return experiments_dir() / f"{path.stem}.toml"
    raise InputError(
        f"experiment file not found (shipped experiments, usable by name: {', '.join(experiment_names())}; "
        "`bsp-planner init DIR` writes an editable copy of the default)",
        path=path,
    )


def output_base(experiment_path: Path | None) -> Path:
    """The folder an experiment's relative output paths resolve against: its own folder, or for a
    shipped experiment ``./experiments`` of the current directory (the package may be read-only)."""
    if experiment_path is None:
        return Path.cwd()
    if is_shipped(experiment_path):
        return Path.cwd() / "experiments"
    return Path(experiment_path).resolve().parent


def describe_experiment(experiment_path: Path | None, out_dir: Path) -> str:
    """How outputs name the experiment they came from, never by a machine's absolute path: a shipped
    one by its name, another by its path relative to the output folder."""
    if experiment_path is None:
        return "(built-in settings)"
    if is_shipped(experiment_path):
        return f"{Path(experiment_path).name} (shipped)"
    return Path(os.path.relpath(Path(experiment_path).resolve(), Path(out_dir).resolve())).as_posix()


def copy_defaults(dest: Path | str) -> list[Path]:
    """Write an editable copy of the shipped default experiment (with its job, profile, series and
    forecasts) into `dest`, which must not exist or be an empty folder. Returns the files written.

    The copy is made in a hidden folder beside `dest` and renamed into place whole, under `dest`'s lock:
    a full disk, a signal or a second `init` of the same folder leaves no partial copy behind."""
    dest = Path(dest).expanduser()
    if dest.is_symlink() and not dest.exists():
        raise InputError(
            f"this is a symbolic link to {os.readlink(dest)}, which does not exist; give a new or empty folder",
            path=dest,
        )
    if dest.exists() and not dest.is_dir():
        raise InputError("expected a folder to create (or an empty one), found a file", path=dest)
    check_output_dir(dest, "DIR")  # a path under a file, a read-only place: a bad DIR (exit 2), nothing made
    place = dest.resolve()  # `init .`: the lock and the staging folder go beside the folder, not in it
    blocking = next((p for p in place.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise InputError(f"cannot write the copy here: {blocking} is a file, not a folder", path=dest)
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputUnwritable.from_os_error(exc, dest) from None
    with output_lock(place) as tidied:
        if dest.is_dir() and any(dest.iterdir()):
            # an earlier `init` of this folder killed half-way through moving its whole copy in: taking the
            # lock finished that move, and the copy asked for is there
            if any(f.finished and f.kind == "init" and f.output == place.name for f in tidied):
                return sorted(p for p in dest.rglob("*") if p.is_file())
            raise InputError("the folder is not empty; give a new or empty folder (nothing was written)", path=dest)
        try:
            staging = Path(tempfile.mkdtemp(dir=place.parent, prefix=leftovers.prefix(place, "init")))
            umask = os.umask(0)
            os.umask(umask)
            staging.chmod(0o777 & ~umask)  # as a plain mkdir would make it (mkdtemp's is private)
        except OSError as exc:
            raise OutputUnwritable.from_os_error(exc, dest) from None
        try:
            files = _copy_files(staging)
            if dest.is_dir():  # empty (checked above), perhaps the current folder: fill it, top entry by entry
                (staging / leftovers.PUBLISHING).touch()  # if killed now, the next `init` here moves the rest
                leftovers.finish_publishing(staging, dest)
            else:
                staging.rename(dest)
        except OSError as exc:
            raise OutputUnwritable.from_os_error(exc, dest) from None
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return [dest / f for f in files]


def _copy_files(into: Path) -> list[Path]:
    """Copy INIT_FILES under `into`, file by file (the first error stops it); returns the relative paths."""
    copied: list[Path] = []
    for relative in INIT_FILES:
        src = data_path(relative)
        sources = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for f in sources:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            rel = Path(relative) / f.relative_to(src) if f != src else Path(relative)
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, into / rel)
            copied.append(rel)
    return copied

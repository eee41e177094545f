"""What a live run plans from, checked before anything starts: the experiment, its job and profile, and
the profile cut down to the job's tasks when it has more (written into the run folder)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.errors import InputError


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_profile_matches(exp) -> None:
    """The profile predicts a task only if it timed that very task: same stressor, ops per workload unit
    and stress-ng instances (its metadata records them). A live run measures the job's tasks, so a
    mismatch would compare them with predictions for something else."""
    from ..inputs.job import load_job
    from ..inputs.profiles import metadata_path

    meta_file = metadata_path(exp.profile_path)
    if not meta_file.is_file():
        return
    try:
        measured = json.loads(meta_file.read_text()).get("tasks", {})
    except ValueError:
        return
    job = load_job(exp.job_path)
    for t in job.tasks:
        m = measured.get(t.name)
        if not isinstance(m, dict):
            continue
        mine = t.identity()
        theirs = {k: m.get(k) for k in mine}
        if any(theirs[k] is not None and theirs[k] != mine[k] for k in mine):
            raise InputError(
                f"task {t.name!r} is {mine} in the job but the profile timed {theirs} ({meta_file}); "
                "re-measure the profile for this job (`bsp-planner profile run`) or make the task the profiled one",
                path=exp.job_path,
                field=f"task '{t.name}'",
            )


def fit_profile(exp, run_dir: Path, write: bool, say) -> None:
    """A job made of some of a profile's tasks: predict from those tasks' rows, kept in the run folder
    (the performance model wants a profile with exactly the job's tasks). A new run writes that copy
    (`write`); a resumed one uses the copy its run made, and refuses one that no longer matches the
    source profile rather than rewrite it."""
    from ..core.atomic import write_text as atomic_write
    from ..inputs.job import load_job
    from ..inputs.profiles import load_profile, metadata_path, read_profile_rows
    from .run_store import recorded_path

    job = load_job(exp.job_path)
    profile = load_profile(exp.profile_path)
    names = set(job.task_names)
    if not names < set(profile.tasks):
        return  # exactly the job's tasks (fine), or some are missing (build_scenario says so)
    rows = [r for r in read_profile_rows(exp.profile_path) if r["task"] in names]
    sub = run_dir / "profile.csv"
    lines = ["task,workload,cpu_millicores,duration_s,repeat"]
    lines += [f"{r['task']},{r['workload']:g},{r['cpu_millicores']:g},{r['duration_s']!r},{r['repeat']}" for r in rows]
    text = "\n".join(lines) + "\n"
    if write:
        atomic_write(sub, text)
        meta = metadata_path(exp.profile_path)
        if meta.is_file():
            d = json.loads(meta.read_text())
            d["subset_of"] = recorded_path(exp.profile_path, run_dir)  # never a machine's absolute path
            atomic_write(metadata_path(sub), json.dumps(d, indent=2) + "\n")
        say(f"the profile has more tasks than the job; predicting from {sub} (the job's {len(names)} tasks)")
    elif not sub.is_file() or sub.read_text() != text:
        raise InputError(
            f"the run's copy of the profile ({sub}) is missing or differs from {exp.profile_path}; "
            "a resumed run must plan from the same inputs",
            path=sub,
            field="--resume",
        )
    exp.profile = str(sub.resolve())


def profile_period_us(exp) -> int | None:
    """The CFS period (us) the experiment's profile was measured with: its metadata's, the default for a
    local profile from before the setting; None where the profile does not say (no metadata, measured as
    Kubernetes Jobs)."""
    from ..inputs.profiles import metadata_path
    from ..profiling.cgroups import CFS_PERIOD_US, check_period_us

    meta_file = metadata_path(exp.profile_path)
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("backend") != "local-cgroup":
        return None
    period = meta.get("cfs_period_us", CFS_PERIOD_US)
    try:
        return check_period_us(period, field="cfs_period_us")
    except InputError as exc:  # a hand-edited file: name it (the one the run's subset copy was made from)
        source = (
            meta_file
            if "subset_of" not in meta
            else metadata_path((meta_file.parent / str(meta["subset_of"])).resolve())
        )
        raise InputError(exc.message, path=source, field="cfs_period_us") from None


def period_mismatch(exp, cfs_period_us: int) -> str | None:
    """A warning when the profile was measured under another CFS period than the run's quotas use (a
    short step's time depends on the period: BENCHMARKS.md "Live per-step noise"); None if they agree or
    the profile does not say."""
    from ..inputs.profiles import metadata_path

    measured = profile_period_us(exp)
    if measured is None or measured == int(cfs_period_us):
        return None
    return (
        f"warning: the profile was measured with a {measured} us CFS period ({metadata_path(exp.profile_path)}) "
        f"and this run's quotas use {cfs_period_us} us; predictions may be off (run with --cfs-period-us {measured})"
    )

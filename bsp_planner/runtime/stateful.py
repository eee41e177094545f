"""Tasks that keep their state in memory: never recreated, and never told to `--resume` what they cannot.

A `process` task (observe mode's tasks are all such) is a long-running program whose state lives in its
memory: a HELICS federate, a particle rank. Stopping and starting it again under a new CPU limit
(``--reconfigure recreate``) starts it from nothing, and so does a `--resume` of a run it was part of;
only a program that restores from its own checkpoint (``restorable = true`` on its task) survives either.
"""

from __future__ import annotations

from ..core.errors import InputError


def memory_only(job) -> list[str]:
    """The job's tasks whose state would be lost by a restart: process tasks without `restorable = true`."""
    return [t.name for t in job.tasks if t.kind == "process" and not t.restorable]


def resolve_reconfigure(requested: str | None, job, default: str, in_place: bool, backend: str) -> str:
    """The run's reconfiguration method, chosen before anything starts ('in-place' or 'recreate'; 'auto'
    resolved by the caller): in place for a job with process tasks, and a ``recreate`` that would restart
    a non-restorable one refused, saying why. `requested`: --reconfigure (None: not given)."""
    lost = memory_only(job)
    who = f"task{'s' if len(lost) > 1 else ''} {', '.join(lost)}"
    if requested == "recreate" and lost:
        raise InputError(
            f"--reconfigure recreate would stop and restart {who} at every reconfiguration, and "
            f"{'they keep their' if len(lost) > 1 else 'it keeps its'} state in memory (a process task): restarted, "
            "it would begin again from nothing; use --reconfigure in-place (the default for process tasks), or set "
            "`restorable = true` on a task whose program restores from its own checkpoint",
            path=job.path,
            field="--reconfigure",
        )
    if requested is None and any(t.kind == "process" for t in job.tasks):
        requested = "in-place"  # a process task's CPU limit changes without a restart
    if requested in ("in-place", "auto") and lost and not in_place:
        raise InputError(
            f"the {backend} backend cannot change a running task's CPU limit in place here, and {who} "
            "cannot be recreated (state in memory; see `restorable` in docs/tasks.md); run on a backend that "
            "resizes in place (local; Kubernetes 1.33+)",
            path=job.path,
            field="--reconfigure",
        )
    return requested or default


def refuse_resume(job, run_id: str, steps_logged: int) -> None:
    """A resume of a run that :func:`continue_hint` called one that cannot be resumed: refused (InputError,
    field --resume) before anything of it is touched."""
    lost = memory_only(job)
    if lost and steps_logged > 0:
        who = f"task{'s' if len(lost) > 1 else ''} {', '.join(lost)}"
        raise InputError(
            f"run {run_id!r} cannot be resumed: {who} kept {'their' if len(lost) > 1 else 'its'} state in memory, "
            f"lost when the run stopped after {steps_logged} step(s) (a task whose program restores from its own "
            "checkpoint says `restorable = true`); start a new run",
            path=job.path,
            field="--resume",
        )


def continue_hint(job, run_id: str, steps_logged: int, *, failed: bool) -> str:
    """What to do after the run stopped: `--resume` when it can continue; else why it cannot (a task that
    keeps its state in memory had run steps: resumed, it would begin again from nothing)."""
    lost = memory_only(job)
    if lost and steps_logged > 0:
        who = f"task{'s' if len(lost) > 1 else ''} {', '.join(lost)}"
        return (
            f"it cannot be resumed: {who} kept {'their' if len(lost) > 1 else 'its'} state in memory, lost with "
            "the process (a task whose program restores from its own checkpoint says `restorable = true`); "
            "start a new run" + (" once the cause is fixed" if failed else "")
        )
    hint = f"`bsp-planner run --resume {run_id}`"
    return f"once the cause is fixed, continue it with {hint}" if failed else f"continue it with {hint}"

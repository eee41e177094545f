"""What the task library raises into the user's program."""

from __future__ import annotations

from ..core.errors import InputError


class TaskJoinError(InputError):
    """The process cannot join the run: a variable missing or wrong, a run it does not belong to, or
    credentials that are not the run's. The message names what and what to do."""


class RunEnded(Exception):
    """The coordinator ended the run (its last step is done, or it stopped it): leave the step loop."""


class StepOrderError(InputError):
    """A step reported out of order or twice (the program's step counter is wrong): nothing is recorded."""

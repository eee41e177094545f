"""`bsp-planner init DIR`: an editable copy of the shipped default experiment in a folder the user owns."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def init(
    folder: Annotated[Path, typer.Argument(help="A new (or empty) folder for the copy.", show_default=False)],
) -> None:
    """Write the default experiment, its job, profile, series and forecasts into FOLDER, ready to edit."""
    from .shipped import copy_defaults

    written = copy_defaults(folder)
    experiment = folder / "experiments" / "default.toml"
    console = Console()
    console.print(
        f"wrote {len(written)} files into {folder}: experiments/default.toml, jobs/thesis-8.toml, "
        "profiles/local-2core/, datasets/, experiments/forecasts/default/",
        highlight=False,
    )
    console.print(
        f"run it with: bsp-planner simulate --experiment {experiment}  (results in {folder / 'experiments' / 'out' / 'default'})",
        highlight=False,
    )

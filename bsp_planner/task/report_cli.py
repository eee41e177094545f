"""`bsp-planner report`: a task's step reports from a program in any language (:mod:`.serve`)."""

from __future__ import annotations

import typer

from ..core.errors import InputError
from .serve import main as serve_main
from .serve import write_line


def report(
    ctx: typer.Context,
    serve: bool = typer.Option(
        False, "--serve", help="run PROGRAM (after --) as this task, reporting the lines it writes to $BSP_REPORT_FIFO"
    ),
) -> None:
    """Report a task's steps: `report --serve -- PROGRAM ARGS...` runs the task's program and reports each
    line it writes to $BSP_REPORT_FIFO (`step=3 workload=12.5 duration_s=0.42`); `report step=3
    workload=12.5 duration_s=0.42`, run by that program, writes one such line."""
    if serve:
        raise typer.Exit(serve_main(list(ctx.args)))
    pairs = dict(a.partition("=")[::2] for a in ctx.args)
    if not ctx.args or any("=" not in a for a in ctx.args):
        raise InputError(
            "report: expected key=value pairs such as step=3 workload=12.5 duration_s=0.42, or --serve -- PROGRAM",
            field="report",
        )
    write_line(pairs)

"""The `bsp-planner` command line: one command group per verb.

Each group lives beside the code it drives (`profiling/cli.py`, `forecasting/cli.py`, ...) and keeps
heavy imports (TensorFlow, torch, kazoo) inside its commands, so `bsp-planner --help` stays fast.
"""

from __future__ import annotations

import sys
import warnings

import typer
from rich.console import Console

from .errors import InputError, InputWarning
from .plugins import import_optional

app = typer.Typer(
    name="bsp-planner",
    help="Split a CPU budget among the tasks of a BSP job and decide when to reconfigure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, soft_wrap=True)  # a path in a message is never cut in two


def _register() -> None:
    from .init_cli import init
    from .profiling.cli import app as profile_app
    from .simulate_cli import simulate

    app.add_typer(profile_app, name="profile")
    app.command("simulate")(simulate)
    app.command("init")(init)
    for module, name in (
        ("bsp_planner.forecasting.cli", "forecast"),
        ("bsp_planner.rl.cli", "rl"),
        ("bsp_planner.runtime.cli", "runtime"),
    ):
        mod = import_optional(module)
        if mod is None:
            continue  # that part of the product is not there
        if hasattr(mod, "register"):
            mod.register(app)
        else:
            app.add_typer(mod.app, name=name)


_register()


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning) -> None:
    """Warnings about inputs read as plain text, like errors; any other warning as Python shows it."""
    if issubclass(category, InputWarning):
        err_console.print(f"[bold yellow]warning:[/] {message}", highlight=False)
    else:
        _default(message, category, filename, lineno, file, line)


def main() -> None:
    warnings.showwarning = _show_warning
    try:
        app()
    except InputError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()

"""The `bsp-planner` command line: one command group per verb.

Each group lives beside the code it drives (`profiling/cli.py`, `forecasting/cli.py`, ...) and keeps
heavy imports (TensorFlow, torch, kazoo) inside its commands, so `bsp-planner --help` stays fast.
"""

from __future__ import annotations

import signal
import sys
import warnings
from collections.abc import Callable

from .core.signals import default_while_starting

default_while_starting()  # before the heavy imports below: a Ctrl-C now ends the command, never a traceback

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402

from .core.errors import InputError, InputWarning  # noqa: E402
from .core.registry import NotInstalled, Registry, resolve  # noqa: E402

app = typer.Typer(
    name="bsp-planner",
    help="Split a CPU budget among the tasks of a BSP job and decide when to reconfigure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, soft_wrap=True)  # a path in a message is never cut in two


def _print_version(asked: bool) -> None:
    if asked:
        from . import __version__

        print(f"bsp-planner {__version__}")
        raise typer.Exit()


@app.callback()
def _top(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, metavar="", help="Print the version and exit."
    ),
) -> None:
    pass


Attach = Callable[[typer.Typer, str], None]


def _group(spec: str) -> Attach:
    """A typer app ('module:app') as the command group `bsp-planner NAME ...`."""
    return lambda app, name: app.add_typer(resolve(spec), name=name)


def _command(spec: str) -> Attach:
    """A function ('module:function') as the command `bsp-planner NAME`."""
    return lambda app, name: app.command(name)(resolve(spec))


def _commands(spec: str) -> Attach:
    """A module's `register(app)` ('module:register') adding several top-level commands."""
    return lambda app, name: resolve(spec)(app)


#: Every command group, one line each; a part absent from the installation is left out.
COMMANDS: Registry[Attach] = Registry("command group")
COMMANDS.register("profile", _group("bsp_planner.profiling.cli:app"))
COMMANDS.register("simulate", _command("bsp_planner.simulate.cli:simulate"))
COMMANDS.register("init", _command("bsp_planner.inputs.init_cli:init"))
COMMANDS.register("forecast", _group("bsp_planner.forecasting.cli:app"))
COMMANDS.register("rl", _group("bsp_planner.rl.cli:app"))
COMMANDS.register("runtime", _commands("bsp_planner.runtime.cli:register"))  # run, worker, zk
COMMANDS.register("k8s", _group("bsp_planner.k8s.cli:app"))  # operator
# `report --serve -- PROGRAM ARGS...`: everything after the options is the program's, passed through as written
COMMANDS.register(
    "report",
    lambda app, name: app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
        resolve("bsp_planner.task.report_cli:report")
    ),
)


def _register() -> None:
    for name in COMMANDS:
        try:
            COMMANDS.get(name)(app, name)
        except NotInstalled:
            continue  # that part of the product is not there


_register()


_shown: set[str] = set()  # input warnings already printed: each once, however often its check runs


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning) -> None:
    """Warnings about inputs read as plain text, like errors, each once; any other warning as Python shows it."""
    if issubclass(category, InputWarning):
        if str(message) in _shown:
            return
        _shown.add(str(message))
        err_console.print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False)
    else:
        _default(message, category, filename, lineno, file, line)


def main() -> None:
    """Run a command: a bad input is one line and exit 2; an output that cannot be written (a full disk,
    a read-only folder) one line naming it and exit 3; SIGINT, SIGTERM or SIGHUP the clean stop of
    Ctrl-C and exit 128 + the signal's number (:mod:`bsp_planner.core.signals`)."""
    from .core import signals

    warnings.showwarning = _show_warning
    with signals.installed():
        try:
            # not standalone: click's own usage errors (a flag's value of the wrong type, an unknown
            # option) come here, to be one line like every other bad input rather than a boxed panel
            command = typer.main.get_command(app)
            _flags_without_a_type(command)
            code = command.main(standalone_mode=False)
            sys.exit(code if isinstance(code, int) else 0)
        except typer.Abort:  # end of input at a prompt
            _error("aborted")
            sys.exit(1)
        except typer.TyperException as exc:  # click's usage errors, as typer carries them
            _usage_error(exc)
        except InputError as exc:
            _error(str(exc))
            sys.exit(exc.exit_code)
        except OSError as exc:
            _error(describe_os_error(exc))
            sys.exit(3)
        except KeyboardInterrupt:  # a signal that came after the command's own handling ended
            _stopped(signals.received() or signal.SIGINT)
        except SystemExit as exc:
            signum = signals.received()
            if signum is None or exc.code in (0, None):
                raise
            _stopped(signum)


def _stopped(signum: int) -> None:
    err_console.print(f"stopped by {signal.Signals(signum).name}", highlight=False, markup=False)
    sys.exit(128 + signum)


def _flags_without_a_type(command) -> None:
    """typer's help shows a flag's type (`--learn <bool>`, even `--help <bool>`) as if it took a value,
    which it refuses (`--learn=true`): a flag of every command, its --help included, shows none."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _flags_without_a_type(sub)


def _usage_error(exc: typer.TyperException) -> None:
    """A usage error in one line, naming the flag and what it expects; exit 2 (click's code)."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # `bsp-planner profile` alone: typer printed the help
        sys.exit(getattr(exc, "exit_code", 2))
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    _error(" ".join(exc.format_message().split()) + where)
    sys.exit(getattr(exc, "exit_code", 2))


def _error(message: str) -> None:
    # the message as written: a file's `[[task]]` is text, not Rich markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def describe_os_error(exc: OSError) -> str:
    """One line for an OSError: the path(s) it names and the system's reason (`No space left on device`)."""
    where = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    cause = exc.strerror or str(exc)
    return f"{where}: {cause}" if where else cause


if __name__ == "__main__":
    main()

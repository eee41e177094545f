"""Running the command line inside a test: `bsp-planner ARGS` through the real entry point (its error
handling, exit codes and warnings included), with the output captured."""

from __future__ import annotations

import sys

from bsp_planner import cli


def run_cli(args, monkeypatch, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `bsp-planner ARGS` (paths and numbers in ARGS as they are). Both
    outputs have their white space folded to single spaces: the terminal wraps long lines (an error
    names a path, a field and what was expected), and a test looks for phrases, not line breaks."""
    monkeypatch.setattr(sys, "argv", ["bsp-planner", *map(str, args)])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, " ".join(out.out.split()), " ".join(out.err.split())

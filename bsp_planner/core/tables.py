"""Printing rich tables without ever cutting a column: full width when the output is not a terminal (a pipe,
a file), and on a narrow terminal the columns split over several tables, each repeating the first (key) column."""

from __future__ import annotations

import dataclasses
import json
import sys
from copy import copy

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text


def natural_width(console: Console, table: Table) -> int:
    """Characters the table takes with no cell wrapped or cut."""
    return Measurement.get(console, console.options.update(max_width=1_000_000), table).maximum


def print_table(console: Console, table: Table) -> None:
    """Print `table` whole. Not a terminal: at its natural width (a pipe or file gets every column, however
    wide). A terminal narrower than the table: the columns after the first in groups that fit, each group a
    table of its own headed by the first column, so every value is still on screen; a group of one column
    that still does not fit wraps its cells rather than cutting them."""
    width = natural_width(console, table)
    if not console.is_terminal:
        # a console's own width caps what one print may take: a console as wide as the table, on the same file
        Console(file=console.file, width=width, color_system=None).print(_wrapping(table))
        return
    if width <= console.width or len(table.columns) < 3:
        console.print(_wrapping(table))
        return
    for part in _split(console, table, console.width):
        console.print(_wrapping(part))


def _with_columns(table: Table, columns: list[Column], title: str | Text | None) -> Table:
    part = copy(table)
    part.columns = [copy(c) for c in columns]
    part.title = title
    return part


def _split(console: Console, table: Table, width: int) -> list[Table]:
    key, rest = table.columns[0], table.columns[1:]
    groups: list[list[Column]] = [[]]
    for column in rest:
        trial = _with_columns(table, [key, *groups[-1], column], table.title)
        if groups[-1] and natural_width(console, trial) > width:
            groups.append([column])
        else:
            groups[-1].append(column)
    return [_with_columns(table, [key, *group], table.title if i == 0 else None) for i, group in enumerate(groups)]


def _wrapping(table: Table) -> Table:
    """The table with every cell allowed to wrap (folding a long word) instead of ending in '…'."""
    part = copy(table)
    part.columns = [dataclasses.replace(c, no_wrap=False, overflow="fold") for c in table.columns]
    return part


def print_json(value: object) -> None:
    """`--json`: the value as one JSON document on stdout (what a script reads instead of the table)."""
    json.dump(value, sys.stdout, indent=2, allow_nan=False, default=str)
    sys.stdout.write("\n")

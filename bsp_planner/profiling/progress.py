"""The runner's progress display: a rich bar with a cost-weighted ETA, or plain lines without a terminal."""

from __future__ import annotations

import time

from rich.console import Console

from .grid import Cell, level_text
from .results import RunResult


def cell_text(cell: Cell) -> str:
    name, w, c, r = cell
    return f"{name} w={level_text(w)} {level_text(c)}m #{r}"


class GridProgress:
    """rich progress with an ETA that weighs each run by its expected cost (workload / CPU), since a
    run at 250m and workload 50 takes ~40x one at 2000m and workload 10."""

    LOG_EVERY_S = 60.0

    def __init__(self, todo: list[Cell]) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[cell]:<34}"),
            BarColumn(),
            TextColumn("{task.fields[runs]}/{task.fields[n]} runs"),
            TextColumn("[red]{task.fields[fails]}[/] failed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            speed_estimate_period=600,
        )
        self.total = sum(self.weight(c) for c in todo)
        self.task = self.progress.add_task("profile", total=self.total, cell="", runs=0, n=len(todo), fails=0)
        self.runs = 0
        self.fails = 0
        self.done_weight = 0.0
        # no live bar without a terminal (nohup ... > log): a plain line every LOG_EVERY_S instead
        self.plain = not self.console.is_terminal
        self.t0 = self.last_log = time.monotonic()
        self.progress.start()

    @staticmethod
    def weight(cell: Cell) -> float:
        _, w, c, _ = cell
        return w / c

    def start(self, cell: Cell) -> None:
        self.progress.update(self.task, cell=cell_text(cell))

    def note(self, text: str) -> None:
        """Where the running cell is (a profiled process's workload, step and measured seconds)."""
        self.progress.update(self.task, cell=text)
        now = time.monotonic()
        if self.plain and now - self.last_log >= self.LOG_EVERY_S:
            self.last_log = now
            self.console.print(text, highlight=False)

    def done(self, cell: Cell, result: RunResult) -> None:
        self.runs += 1
        if not result.ok:
            self.fails += 1
            self.progress.console.print(f"[red]failed[/] {cell_text(cell)}: {result.reason}", highlight=False)
        self.progress.update(self.task, advance=self.weight(cell), runs=self.runs, fails=self.fails)
        self.done_weight += self.weight(cell)
        now = time.monotonic()
        if self.plain and (now - self.last_log >= self.LOG_EVERY_S or self.runs == self.progress.tasks[0].fields["n"]):
            self.last_log = now
            elapsed = now - self.t0
            eta = elapsed * (self.total - self.done_weight) / self.done_weight if self.done_weight else 0.0
            self.console.print(
                f"{self.runs}/{self.progress.tasks[0].fields['n']} runs, {self.fails} failed, "
                f"{elapsed / 60:.1f} min elapsed, ETA {eta / 60:.1f} min (last: {cell_text(cell)})",
                highlight=False,
            )

    def stop(self) -> None:
        self.progress.stop()

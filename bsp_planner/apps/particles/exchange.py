"""Boundary exchange between neighbouring ranks through files in a shared folder.

After superstep t, rank r writes the particles leaving its slice to ``t<t>-r<r>-left.npz`` and
``t<t>-r<r>-right.npz`` (written under a temporary name, then renamed: a reader never sees half a file)
and reads ``t<t>-r<left>-right.npz`` and ``t<t>-r<right>-left.npz``, waiting until they exist. That wait
is the application's own synchronisation: a rank cannot start superstep t+1 before both neighbours have
finished superstep t. Every file has exactly one reader, which deletes it once read.

A rank that stops (end of its steps, or the run told it to) writes ``end-r<r>``; a neighbour waiting for
its files sees that marker and stops too, instead of waiting for files that will never come. A rank that
ran all its steps then waits for every rank's marker before it exits (a collective end).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .model import RankState


class NeighbourGone(Exception):
    """A neighbour stopped (its end marker) before sending the files of this superstep."""


class ExchangeTimeout(Exception):
    """A neighbour's file did not appear in time."""


class FileExchange:
    """The exchange folder as seen by one rank."""

    poll_s = 0.002  # the first wait between looks for a file; it grows to 20 ms

    def __init__(self, folder: str | Path, rank: int, ranks: int, *, timeout_s: float = 600.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.ranks = ranks
        self.left = (rank - 1) % ranks
        self.right = (rank + 1) % ranks
        self.timeout_s = timeout_s

    def _file(self, step: int, rank: int, side: str) -> Path:
        return self.folder / f"t{step}-r{rank}-{side}.npz"

    def _end_marker(self, rank: int) -> Path:
        return self.folder / f"end-r{rank}"

    def _write(self, path: Path, part: RankState) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, x=part.x, v=part.v, u=part.u)
        os.replace(tmp, path)

    def _read(self, path: Path, neighbour: int, step: int) -> RankState:
        deadline = time.monotonic() + self.timeout_s
        poll = self.poll_s
        while not path.exists():
            if self._end_marker(neighbour).exists() and not path.exists():
                raise NeighbourGone(f"rank {neighbour} stopped before sending its particles of step {step}")
            if time.monotonic() > deadline:
                raise ExchangeTimeout(
                    f"rank {self.rank}: no particles from rank {neighbour} for step {step} after "
                    f"{self.timeout_s:g} s ({path})"
                )
            time.sleep(poll)
            poll = min(poll * 1.5, 0.02)  # short at first (neighbours usually finish together)
        with np.load(path) as data:
            part = RankState(data["x"], data["v"], data["u"])
        path.unlink()
        return part

    def swap(self, step: int, to_left: RankState, to_right: RankState) -> tuple[RankState, RankState]:
        """Send this rank's outgoing particles of `step`, then wait for the neighbours' ones:
        (from_left, from_right)."""
        if self.ranks == 1:
            return RankState.empty(), RankState.empty()
        self._write(self._file(step, self.rank, "left"), to_left)
        self._write(self._file(step, self.rank, "right"), to_right)
        from_left = self._read(self._file(step, self.left, "right"), self.left, step)
        from_right = self._read(self._file(step, self.right, "left"), self.right, step)
        return from_left, from_right

    def finish(self) -> None:
        """Tell the neighbours this rank stops (idempotent)."""
        self._end_marker(self.rank).touch()

    def finalize(self) -> None:
        """A rank that ran all its steps: mark its end, then wait until every rank has marked its end (a
        collective end, like MPI_Finalize), so that no rank leaves while another is still in its last
        superstep. Bounded by the exchange timeout; a rank that never ends is an ExchangeTimeout."""
        self.finish()
        deadline = time.monotonic() + self.timeout_s
        poll = self.poll_s
        while True:
            missing = [r for r in range(self.ranks) if not self._end_marker(r).exists()]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise ExchangeTimeout(
                    f"rank {self.rank}: rank(s) {', '.join(map(str, missing))} did not finish within {self.timeout_s:g} s"
                )
            time.sleep(poll)
            poll = min(poll * 1.5, 0.02)

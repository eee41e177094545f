"""Each federate's compute per granted time step, from HELICS's own profiler output.

A broker or core started with ``--profiler=log`` prints, as each happens, every federate's entry into and
exit from HELICS's blocking calls, on the federate's steady clock (nanoseconds)::

    <PROFILING>f0[131072](created)MARKER<19038344261989|1795862845414503637>[t=-9223372036.854776]</PROFILING>
    <PROFILING>f0[131072](executing)HELICS CODE EXIT<19038383918663>[t=1]</PROFILING>
    <PROFILING>f0[131072](executing)HELICS CODE ENTRY<19039544510990>[t=1]</PROFILING>

The MARKER pairs the federate's steady clock with the epoch (``steady|system``, ns). A time request's
EXIT is a grant; the federate then computes until its next ENTRY (its next time request, or its
disconnect): that span is one step's compute. The EXIT of entering executing mode (after an ENTRY in
state ``initializing``) is no grant. (``--profiler=FILE`` writes the same lines, but only at the end.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINE = re.compile(
    r"<PROFILING>(?P<name>.+?)\[\d+\]\((?P<state>[^)]*)\)(?P<what>.*?)<(?P<ns>\d+)(?:\|(?P<epoch_ns>\d+))?>"
    r"\[t=(?P<t>[^\]]*)\]</PROFILING>"
)


@dataclass(frozen=True)
class GrantedStep:
    """One step of a federate: its index (0, 1, ... in grant order), the HELICS time it was granted, and
    its compute's start (the grant) and end (the next time request) as ``time.time()`` seconds."""

    step: int
    granted_time: float
    started_at: float
    ended_at: float

    @property
    def compute_s(self) -> float:
        return self.ended_at - self.started_at


@dataclass
class FederateSteps:
    """Follows one federate's profiler lines (:meth:`feed` each line, any federate's) and returns its
    steps as they complete."""

    name: str
    offset_ns: int | None = None  # epoch - steady, from the federate's MARKER
    _granted: tuple[int, float] | None = field(default=None, repr=False)  # (steady ns, time) of an open grant
    _initializing: bool = field(default=False, repr=False)
    _next: int = field(default=0, repr=False)

    @property
    def open(self) -> bool:
        """A grant seen whose step has not ended yet."""
        return self._granted is not None

    def feed(self, line: str) -> GrantedStep | None:
        m = LINE.search(line)
        if m is None or m["name"] != self.name:
            return None
        ns = int(m["ns"])
        if m["epoch_ns"] is not None:
            self.offset_ns = int(m["epoch_ns"]) - ns
            return None
        what = m["what"].strip()
        if what.endswith("ENTRY"):
            self._initializing = m["state"] == "initializing"
            if self._granted is None or self.offset_ns is None:
                return None
            (start_ns, granted), self._granted = self._granted, None
            step = GrantedStep(self._next, granted, (start_ns + self.offset_ns) / 1e9, (ns + self.offset_ns) / 1e9)
            self._next += 1
            return step
        if what.endswith("EXIT") and not self._initializing:
            self._granted = (ns, float(m["t"]))
        elif what.endswith("EXIT"):
            self._initializing = False
        return None

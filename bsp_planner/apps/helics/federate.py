"""One federate of the ring federation: a HELICS value federate, as a bsp-planner process task.

    python -m bsp_planner.apps.helics.federate --index I --federates N --broker-port P [--steps S] ...

Federate ``f<I>`` holds its slice of the ring (:mod:`.model`). Per superstep ``k`` (HELICS time ``k+1``,
period 1) it is granted the time, takes the cells its left neighbour sent after step ``k-1``, runs the
CPU kernel at its workload (``base`` + the work its cells hold, :mod:`bsp_planner.apps.kernel`) and
publishes the cells that leave its slice to its right neighbour. HELICS's own time coordination is the
federation's only synchronisation: bsp-planner's task library only watches (observe mode), timing the
compute of each step and reporting the workload the federate sized it by.

* Under a bsp-planner run (``BSP_RUN_ID`` set) the federate joins the run with ``bsp_planner.task`` and
  runs until the run's length (``session.steps``) or ``--steps``, whichever is shorter. A federate
  restarted mid-run cannot rejoin its federation (HELICS does not let a federate back in), so it refuses to
  start at any step but 0.
* Under ``bsp-planner profile run`` (``session.sync == "profile"``) it runs alone, without HELICS: each
  step runs the kernel at the workload the profiler assigns.
* It binds its own port (``--port``, by default ``$BSP_PORT``: the run's ``{port}`` for the task) rather
  than one the broker hands out (``P + 5``, ``P + 6``...), which another program may hold.
* Started by hand it needs ``--steps`` and a broker (``python -m bsp_planner.apps.helics.broker``);
  ``--reports FILE`` keeps each step's report as a JSON line (``python -m bsp_planner.apps.helics.local``
  starts a whole federation that way).

``--plain`` runs the HELICS loop only, as a federate that knows nothing of bsp-planner would: it joins no
run and reports nothing, even under a run (its steps are then observed through HELICS's profiler by
:mod:`.observe`); it needs ``--steps``.

``--timings FILE`` appends per step ``{step, start, end, grant_s, compute_s}``: the wall-clock start and
end of the compute block (``time.time()``, seconds) and the time spent waiting for HELICS's time grant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from ... import task
from ...inputs.placeholders import ENV_PORT
from ..kernel import DEFAULT_OPS_PER_UNIT, kernel
from ..session import open_session, under_coordinator
from .model import Ring, advance, initial_field, local_cells, outgoing, workload

LOCAL = "tcp://127.0.0.1"  # the whole federation on the loopback interface


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.federate", description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=int, required=True, help="this federate's place in the ring, 0..federates-1")
    p.add_argument("--federates", type=int, required=True, help="federates in the ring")
    p.add_argument("--broker-port", type=int, default=None, help="the broker's TCP port on 127.0.0.1")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="this federate's own TCP port (default: $BSP_PORT; else the broker picks)",
    )
    p.add_argument("--steps", type=int, default=None, help="supersteps (default: the run's length)")
    p.add_argument("--cells", type=int, default=Ring.cells, help="cells per federate")
    p.add_argument("--hotspot", type=float, default=Ring.hotspot, help="the hotspot's work in all (units)")
    p.add_argument("--base", type=float, default=Ring.base, help="every federate's floor workload (units)")
    p.add_argument("--speed", type=int, default=Ring.speed, help="cells the hotspot moves per step")
    p.add_argument("--ops-per-unit", type=int, default=DEFAULT_OPS_PER_UNIT, help="kernel iterations per unit")
    p.add_argument("--reports", default=None, help="standalone: append each step's report to this JSONL file")
    p.add_argument("--timings", default=None, help="append per step {step, start, end, grant_s, compute_s}")
    p.add_argument("--plain", action="store_true", help="the HELICS loop only: join no run, report nothing")
    p.add_argument("--timeout-s", type=float, default=60.0, help="HELICS: longest wait to reach the broker")
    args = p.parse_args(argv)
    try:
        ring(args).check()
    except ValueError as exc:
        p.error(f"--{exc}")
    if not 0 <= args.index < args.federates:
        p.error(f"--index: expected 0..{args.federates - 1}, got {args.index}")
    if args.steps is not None and args.steps < 0:
        p.error(f"--steps: expected a non-negative count, got {args.steps}")
    if args.ops_per_unit < 1:
        p.error(f"--ops-per-unit: expected at least 1, got {args.ops_per_unit}")
    profiling = bool(os.environ.get(task.PROFILE_ENV))
    if not profiling and (args.broker_port is None or not 0 < args.broker_port < 65536):
        p.error(f"--broker-port: expected the broker's TCP port (1..65535), got {args.broker_port}")
    if args.port is None and os.environ.get(ENV_PORT, "").isdigit():
        args.port = int(os.environ[ENV_PORT])
    if args.port is not None and not 0 < args.port < 65536:
        p.error(f"--port: expected a TCP port (1..65535), got {args.port}")
    if args.steps is None and (args.plain or not under_coordinator()):
        p.error("--steps: required when started outside a bsp-planner run, or with --plain")
    return args


def ring(args: argparse.Namespace) -> Ring:
    return Ring(args.federates, args.cells, args.hotspot, args.base, args.speed)


def run_profiled(args: argparse.Namespace, session: Any) -> int:
    """Under `bsp-planner profile run`: alone, no HELICS; each step's kernel at the assigned workload."""
    step = session.first_step
    while not session.ended:
        w = session.assigned_workload(step)
        with session.step(step, workload=w):
            kernel(round(w * args.ops_per_unit))
        step += 1
    return 0


class Federate:
    """The HELICS side: a value federate ``f<index>`` with one publication (the cells leaving its slice)
    and one input (its left neighbour's). Closed (disconnected and freed) by :meth:`close`."""

    def __init__(self, args: argparse.Namespace) -> None:
        try:
            import helics as h
        except ImportError:
            raise RuntimeError("the helics package is not installed (pip install 'bsp-planner[cosim]')") from None

        self.h = h
        n, i = args.federates, args.index
        info = h.helicsCreateFederateInfo()
        h.helicsFederateInfoSetCoreTypeFromString(info, "zmq")
        h.helicsFederateInfoSetCoreInitString(
            info,
            f"--federates=1 --broker_address={LOCAL} --local_interface={LOCAL} --brokerport={args.broker_port} "
            f"--timeout={int(args.timeout_s * 1000)}ms"
            # its own port, chosen free by the run: the broker would hand out broker port + 5, + 6, ... whether
            # or not another program holds them, and a federate that cannot bind never joins
            + (f" --localport={args.port}" if args.port is not None else ""),
        )
        h.helicsFederateInfoSetTimeProperty(info, h.HELICS_PROPERTY_TIME_PERIOD, 1.0)
        # never wait_for_current_time_update: in a ring of value federates at most one federate may set it
        self.fed = h.helicsCreateValueFederate(f"f{i}", info)
        h.helicsFederateInfoFree(info)
        self.pub = h.helicsFederateRegisterGlobalPublication(self.fed, f"f{i}/cells", h.HELICS_DATA_TYPE_VECTOR, "")
        self.sub = h.helicsFederateRegisterSubscription(self.fed, f"f{(i - 1) % n}/cells", "")
        h.helicsFederateEnterExecutingMode(self.fed)

    def grant(self, step: int) -> None:
        """Wait for HELICS time step+1: every value published before it has arrived."""
        granted = self.h.helicsFederateRequestTime(self.fed, float(step + 1))
        if granted < step + 1:
            raise RuntimeError(f"HELICS granted time {granted}, expected {step + 1}")

    def incoming(self, step: int, size: int) -> np.ndarray:
        """The cells the left neighbour published after its step `step - 1`."""
        if not self.h.helicsInputIsUpdated(self.sub):
            raise RuntimeError(f"step {step}: the left neighbour's cells of step {step - 1} did not arrive")
        got = np.asarray(self.h.helicsInputGetVector(self.sub), dtype=float)
        if got.shape != (size,):
            raise RuntimeError(f"step {step}: expected {size} cells from the left neighbour, got {got.shape}")
        return got

    def publish(self, cells: np.ndarray) -> None:
        self.h.helicsPublicationPublishVector(self.pub, [float(x) for x in cells])

    def close(self) -> None:
        h = self.h
        try:
            h.helicsFederateDisconnect(self.fed)
        finally:
            h.helicsFederateFree(self.fed)
            h.helicsCloseLibrary()


def run_federate(args: argparse.Namespace) -> int:
    r = ring(args)
    name = os.environ.get("BSP_TASK") or f"f{args.index}"
    with ExitStack() as stack:
        session = stack.enter_context(
            # --plain: a session that times the steps for --timings and tells nobody
            task.local_session(name, steps=args.steps)
            if args.plain
            else open_session(name, reports=args.reports, steps=args.steps)
        )
        if session.sync == "profile":
            return run_profiled(args, session)
        if session.first_step != 0 or int(os.environ.get("BSP_INCARNATION", "0") or 0) > 0:
            # HELICS does not let a federate rejoin a running federation, and the cells live in memory only
            print(
                f"federate f{args.index}: restarted at step {session.first_step} of a running federation; a "
                "HELICS federate cannot rejoin it (run process tasks with --reconfigure in-place, and start a new "
                "run after a failure)",
                file=sys.stderr,
            )
            return 1
        steps = args.steps if args.steps is not None else session.steps
        if under_coordinator() and session.steps and not args.plain:
            steps = min(steps, session.steps)
        timings = None
        if args.timings:
            Path(args.timings).parent.mkdir(parents=True, exist_ok=True)
            timings = stack.enter_context(open(args.timings, "a"))
        fed = Federate(args)
        stack.callback(fed.close)
        cells = local_cells(initial_field(r), r, args.index)
        with contextlib.suppress(task.RunEnded):
            for step in range(steps):
                t0 = time.perf_counter()
                fed.grant(step)
                if step > 0:
                    cells = advance(cells, fed.incoming(step, r.speed))
                w = workload(cells, r)
                t1 = time.perf_counter()
                start = time.time()
                with session.step(step, workload=w):
                    kernel(round(w * args.ops_per_unit))
                end = time.time()
                if step + 1 < steps:  # nobody needs the cells of the last step
                    fed.publish(outgoing(cells, r))
                if timings is not None:
                    row = {"step": step, "start": start, "end": end, "grant_s": t1 - t0, "compute_s": end - start}
                    timings.write(json.dumps(row) + "\n")
                    timings.flush()
    return 0


def _expected_errors() -> tuple[type[BaseException], ...]:
    """What ends a federate with one line instead of a traceback: HELICS's errors, ours, a failed join."""
    errors: tuple[type[BaseException], ...] = (RuntimeError, task.TaskJoinError)
    try:
        from helics import HelicsException
    except ImportError:
        return errors
    return (*errors, HelicsException)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run_federate(args)
    except _expected_errors() as exc:  # the broker gone, a neighbour failed, a session that cannot join
        print(f"federate f{args.index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

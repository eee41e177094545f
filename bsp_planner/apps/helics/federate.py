"""One federate of the ring or the star federation: a HELICS value federate, as a bsp-planner process task.

    python -m bsp_planner.apps.helics.federate --index I --federates N --broker-port P [--steps S] ...
    python -m bsp_planner.apps.helics.federate --shape star --index I --federates N --broker-port P ...

Federate ``f<I>`` holds its slice of the ring (:mod:`.model`). Per superstep ``k`` (HELICS time ``k+1``,
period 1) it is granted the time, takes the cells its left neighbour sent after step ``k-1``, runs the
CPU kernel at its workload (``base`` + the work its cells hold, :mod:`bsp_planner.apps.kernel`) and
publishes the cells that leave its slice to its right neighbour. HELICS's own time coordination is the
federation's only synchronisation: bsp-planner's task library only watches (observe mode), timing the
compute of each step and reporting the workload the federate sized it by.

``--shape star`` (:mod:`.star_model`): federates ``0 .. N-2`` are the leaves ``l<I>``, federate ``N-1`` the
``hub``. Per superstep ``k`` a leaf is granted HELICS time ``k+1``, reads what the hub published in step
``k-1``, computes its own workload and publishes ``[k, workload]``; the hub runs half a step behind (time
``k+1.5``, a time offset of 0.5 on period 1), so HELICS grants it only once every leaf has published step
``k`` and asked for ``k+2``: it reads the leaves' values of the same step, sizes its compute by them and
publishes ``[k, workload]`` for the leaves' next step. No federate sets ``wait_for_current_time_update``.
A value stamped with another step than expected ends the federate with an error.

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
from .star_model import HUB, Star, federate_names, hub_workload, leaf_workloads

LOCAL = "tcp://127.0.0.1"  # the whole federation on the loopback interface


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.federate", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=("ring", "star"), default="ring", help="the federation's shape")
    p.add_argument("--index", type=int, required=True, help="this federate's place, 0..federates-1 (star: hub last)")
    p.add_argument("--federates", type=int, required=True, help="federates in the federation (star: leaves + hub)")
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
    p.add_argument("--seed", type=int, default=Star.seed, help="star: the seed of the leaves' bursts")
    p.add_argument("--ops-per-unit", type=int, default=DEFAULT_OPS_PER_UNIT, help="kernel iterations per unit")
    p.add_argument("--reports", default=None, help="standalone: append each step's report to this JSONL file")
    p.add_argument("--timings", default=None, help="append per step {step, start, end, grant_s, compute_s}")
    p.add_argument("--plain", action="store_true", help="the HELICS loop only: join no run, report nothing")
    p.add_argument("--timeout-s", type=float, default=60.0, help="HELICS: longest wait to reach the broker")
    args = p.parse_args(argv)
    if args.shape == "star" and args.federates < 2:
        p.error(f"--federates: a star needs a hub and at least one leaf, got {args.federates}")
    try:
        (star(args) if args.shape == "star" else ring(args)).check()
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


def star(args: argparse.Namespace) -> Star:
    return Star(leaves=max(args.federates - 1, 1), seed=args.seed)


def federate_name(args: argparse.Namespace) -> str:
    """The federate's HELICS name (and, started by hand, its task's): ``f<I>``, or the star's ``l<I>``/``hub``."""
    if args.shape == "star":
        return federate_names(args.federates - 1)[args.index]
    return f"f{args.index}"


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
    """The HELICS side: a value federate `name` with one publication `publication` (a vector) and one
    input per name in `subscriptions`, granted time ``step + 1 + time_offset`` in each step. Closed
    (disconnected and freed) by :meth:`close`."""

    def __init__(
        self,
        args: argparse.Namespace,
        name: str,
        publication: str,
        subscriptions: list[str],
        time_offset: float = 0.0,
    ) -> None:
        try:
            import helics as h
        except ImportError:
            raise RuntimeError("the helics package is not installed (pip install 'bsp-planner[cosim]')") from None

        self.h = h
        self.time_offset = time_offset
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
        if time_offset:
            h.helicsFederateInfoSetTimeProperty(info, h.HELICS_PROPERTY_TIME_OFFSET, time_offset)
        # never wait_for_current_time_update: in a ring of value federates at most one federate may set it
        self.fed = h.helicsCreateValueFederate(name, info)
        h.helicsFederateInfoFree(info)
        self.pub = h.helicsFederateRegisterGlobalPublication(self.fed, publication, h.HELICS_DATA_TYPE_VECTOR, "")
        self.subs = [h.helicsFederateRegisterSubscription(self.fed, key, "") for key in subscriptions]
        self.keys = subscriptions
        h.helicsFederateEnterExecutingMode(self.fed)

    def grant(self, step: int) -> None:
        """Wait for HELICS time ``step + 1 + time_offset``: every value published before it has arrived."""
        wanted = step + 1 + self.time_offset
        granted = self.h.helicsFederateRequestTime(self.fed, float(wanted))
        if granted < wanted:
            raise RuntimeError(f"HELICS granted time {granted}, expected {wanted}")

    def incoming(self, step: int, size: int, sub: int = 0) -> np.ndarray:
        """The vector of `size` values last published on subscription `sub`, which must be new."""
        if not self.h.helicsInputIsUpdated(self.subs[sub]):
            raise RuntimeError(f"step {step}: no new value from {self.keys[sub]}")
        got = np.asarray(self.h.helicsInputGetVector(self.subs[sub]), dtype=float)
        if got.shape != (size,):
            raise RuntimeError(f"step {step}: expected {size} values from {self.keys[sub]}, got {got.shape}")
        return got

    def publish(self, values: np.ndarray | list[float]) -> None:
        self.h.helicsPublicationPublishVector(self.pub, [float(x) for x in values])

    def close(self) -> None:
        h = self.h
        try:
            h.helicsFederateDisconnect(self.fed)
        finally:
            h.helicsFederateFree(self.fed)
            h.helicsCloseLibrary()


class RingCells:
    """A ring federate's part of each step: it takes the cells its left neighbour sent after the step
    before and hands the cells that leave its slice to its right neighbour."""

    time_offset = 0.0

    def __init__(self, args: argparse.Namespace) -> None:
        self.ring, self.index = ring(args), args.index
        self.publication = f"f{args.index}/cells"
        self.subscriptions = [f"f{(args.index - 1) % args.federates}/cells"]
        self.cells = local_cells(initial_field(self.ring), self.ring, args.index)

    def take(self, fed: Federate, step: int) -> float:
        """Read this step's inputs (once granted); returns the step's workload (units)."""
        if step > 0:
            self.cells = advance(self.cells, fed.incoming(step, self.ring.speed))
        return workload(self.cells, self.ring)

    def give(self, fed: Federate, step: int, last: bool) -> None:
        if not last:  # nobody needs the cells of the last step
            fed.publish(outgoing(self.cells, self.ring))


class StarLeaf:
    """A star leaf's part of each step: it checks the hub's value of the step before, sizes its compute by
    its own workload (:func:`.star_model.leaf_workloads`) and publishes ``[step, workload]`` to the hub."""

    time_offset = 0.0

    def __init__(self, args: argparse.Namespace, steps: int) -> None:
        self.name = federate_name(args)
        self.publication, self.subscriptions = f"{self.name}/load", [f"{HUB}/load"]
        self.workloads = leaf_workloads(star(args), steps)[:, args.index]
        self.w = 0.0

    def take(self, fed: Federate, step: int) -> float:
        if step > 0:
            stamp = fed.incoming(step, 2)[0]
            if stamp != step - 1:
                raise RuntimeError(f"step {step}: the hub's value is of step {stamp:g}, expected {step - 1}")
        self.w = float(self.workloads[step])
        return self.w

    def give(self, fed: Federate, step: int, last: bool) -> None:
        fed.publish([step, self.w])  # the hub needs the last step's too


class StarHub:
    """The star's hub: granted half a step after the leaves, it reads every leaf's ``[step, workload]`` of
    the same step, sizes its compute by them (:func:`.star_model.hub_workload`) and publishes
    ``[step, workload]`` for the leaves' next step."""

    time_offset = 0.5

    def __init__(self, args: argparse.Namespace) -> None:
        self.star = star(args)
        self.publication = f"{HUB}/load"
        self.subscriptions = [f"{leaf}/load" for leaf in federate_names(self.star.leaves)[:-1]]
        self.w = 0.0

    def take(self, fed: Federate, step: int) -> float:
        leaves = [fed.incoming(step, 2, sub) for sub in range(len(self.subscriptions))]
        late = [key for key, (stamp, _) in zip(self.subscriptions, leaves, strict=True) if stamp != step]
        if late:
            raise RuntimeError(f"step {step}: the values of {', '.join(late)} are not of this step")
        self.w = hub_workload(self.star, [w for _, w in leaves])
        return self.w

    def give(self, fed: Federate, step: int, last: bool) -> None:
        if not last:
            fed.publish([step, self.w])


def federate_part(args: argparse.Namespace, steps: int) -> RingCells | StarLeaf | StarHub:
    """What this federate does around its compute in each step, by --shape and --index."""
    if args.shape == "ring":
        return RingCells(args)
    return StarHub(args) if args.index == args.federates - 1 else StarLeaf(args, steps)


def run_federate(args: argparse.Namespace) -> int:
    name = os.environ.get("BSP_TASK") or federate_name(args)
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
            # HELICS does not let a federate rejoin a running federation, and its state lives in memory only
            print(
                f"federate {federate_name(args)}: restarted at step {session.first_step} of a running federation; "
                "a HELICS federate cannot rejoin it (run process tasks with --reconfigure in-place, and start a "
                "new run after a failure)",
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
        part = federate_part(args, steps)
        fed = Federate(args, federate_name(args), part.publication, part.subscriptions, part.time_offset)
        stack.callback(fed.close)
        with contextlib.suppress(task.RunEnded):
            for step in range(steps):
                t0 = time.perf_counter()
                fed.grant(step)
                w = part.take(fed, step)
                t1 = time.perf_counter()
                start = time.time()
                with session.step(step, workload=w):
                    kernel(round(w * args.ops_per_unit))
                end = time.time()
                part.give(fed, step, last=step + 1 == steps)
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
        print(f"federate {federate_name(args)}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The particles application's step loop: one rank, as a bsp-planner task.

    python -m bsp_planner.apps.particles --rank R --ranks N --exchange-dir DIR [--steps S] ...

Under a bsp-planner run (``process = [...]`` in the job file) the coordinator sets the environment and the
rank joins the run through ``bsp_planner.task``; in barrier mode each superstep waits for our barrier, in
observe mode it only reports. Started by ``bsp-planner profile run`` (a profiling session) the rank
runs alone: each superstep it holds the particle count the profiler assigns (regenerated when that
changes) and does the same compute as in a run, without the exchange. Started by hand it runs ``--steps``
supersteps with a local session (``--reports FILE`` keeps each step's report as a JSON line). Either way
the ranks of a run synchronise among themselves through the boundary exchange (:mod:`.exchange`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ... import task
from ..session import open_session, under_coordinator
from .exchange import ExchangeTimeout, FileExchange, NeighbourGone
from .model import (
    Physics,
    RankState,
    advance,
    initial_particles,
    initial_rank_state,
    merge_incoming,
    split_outgoing,
)

DEFAULT_PARTICLES = 24_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.particles", description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True, help="this process's rank, 0..ranks-1")
    p.add_argument("--ranks", type=int, required=True, help="number of ranks (slices of the domain)")
    p.add_argument("--particles", type=int, default=DEFAULT_PARTICLES, help="particles in the whole domain")
    p.add_argument("--seed", type=int, default=1, help="seed of the initial particles and the random kicks")
    p.add_argument("--steps", type=int, default=None, help="supersteps to run (default: until the run ends)")
    p.add_argument(
        "--exchange-dir",
        default=None,
        help="folder shared by the ranks for the boundary exchange (default: $BSP_RUN_DIR/particles)",
    )
    p.add_argument("--reports", default=None, help="standalone: append each step's report to this JSONL file")
    p.add_argument("--timeout-s", type=float, default=600.0, help="longest wait for a neighbour's particles")
    p.add_argument(
        "--timings",
        default=None,
        help="append per step {step, enter_s, compute_s, leave_s, exchange_s} (JSON lines): the time spent "
        "entering and leaving session.step, in the compute, and in the boundary exchange",
    )
    args = p.parse_args(argv)
    if args.ranks < 1:
        p.error(f"--ranks: expected at least 1, got {args.ranks}")
    if not 0 <= args.rank < args.ranks:
        p.error(f"--rank: expected 0..{args.ranks - 1}, got {args.rank}")
    if args.particles < 0:
        p.error(f"--particles: expected a non-negative count, got {args.particles}")
    if args.steps is not None and args.steps < 0:
        p.error(f"--steps: expected a non-negative count, got {args.steps}")
    if args.exchange_dir is None:
        run_dir = os.environ.get("BSP_RUN_DIR")
        if not run_dir:
            p.error("--exchange-dir: required when BSP_RUN_DIR is not set (started outside a bsp-planner run)")
        args.exchange_dir = str(Path(run_dir) / "particles")
    if args.steps is None and not under_coordinator():
        p.error("--steps: required when started outside a bsp-planner run")
    return args


def step_rng(seed: int, rank: int, step: int) -> np.random.Generator:
    """The random kicks of one rank's superstep: the same whenever the run is repeated with this seed."""
    return np.random.default_rng([seed, rank, step])


def run_profiled(args: argparse.Namespace, session, physics: Physics) -> int:
    """The step loop under `bsp-planner profile run`: the same timed block as :func:`run_rank` (advance and
    split) on the assigned number of particles; the particles that would leave stay (no neighbours run),
    so the count is the assigned one every step: the current ones while the count matches, else a fresh,
    seeded set of that many (spread as at step 0)."""
    state = RankState.empty()
    step = session.first_step
    while not session.ended:
        assigned = session.assigned_workload(step)
        if assigned is not None and int(round(assigned)) != state.count:
            state = initial_particles(int(round(assigned)), args.seed, physics)
        with session.step(step, workload=state.count):
            state = advance(state, physics, step_rng(args.seed, args.rank, step))
            kept, to_left, to_right = split_outgoing(state, args.rank, args.ranks)
        state = merge_incoming(kept, to_left, to_right)
        step += 1
    return 0


def run_rank(args: argparse.Namespace) -> int:
    physics = Physics()
    task_name = os.environ.get("BSP_TASK") or f"p{args.rank}"
    if os.environ.get(task.PROFILE_ENV):
        with open_session(task_name) as session:
            return run_profiled(args, session, physics)
    exchange = FileExchange(args.exchange_dir, args.rank, args.ranks, timeout_s=args.timeout_s)
    state = initial_rank_state(args.rank, args.ranks, args.particles, args.seed, physics)
    step = 0
    timings = open(args.timings, "a") if args.timings else None
    try:
        with open_session(task_name, reports=args.reports, steps=args.steps) as session:
            if session.first_step != 0:
                # the particles live only in this process's memory: a resumed run cannot rebuild them
                print(
                    f"particles rank {args.rank}: the run resumes at step {session.first_step}, but this "
                    "application keeps its particles in memory only and cannot resume; start a new run",
                    file=sys.stderr,
                )
                return 1
            try:
                while (args.steps is None or step < args.steps) and not session.ended:
                    t0 = time.perf_counter()
                    with session.step(step, workload=state.count):
                        t1 = time.perf_counter()
                        state = advance(state, physics, step_rng(args.seed, args.rank, step))
                        kept, to_left, to_right = split_outgoing(state, args.rank, args.ranks)
                        t2 = time.perf_counter()
                    t3 = time.perf_counter()
                    from_left, from_right = exchange.swap(step, to_left, to_right)
                    state = merge_incoming(kept, from_left, from_right)
                    if timings is not None:
                        times = {
                            "enter_s": t1 - t0,
                            "compute_s": t2 - t1,
                            "leave_s": t3 - t2,
                            "exchange_s": time.perf_counter() - t3,
                        }
                        timings.write(json.dumps({"step": step, **times}) + "\n")
                        timings.flush()
                    step += 1
            except task.RunEnded:
                pass  # the coordinator ended the run (barrier mode): a normal end
            # still joined: every rank has run (and reported) its last superstep before any leaves
            exchange.finalize()
    except NeighbourGone as exc:
        print(f"particles rank {args.rank}: {exc}; stopping at step {step}", file=sys.stderr)
        return 0
    except ExchangeTimeout as exc:
        print(f"particles rank {args.rank}: {exc}", file=sys.stderr)
        return 1
    finally:
        exchange.finish()
        if timings is not None:
            timings.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_rank(parse_args(argv))

"""A HELICS federation (the ring, or the star) without bsp-planner: a broker and N federate processes here.

    python -m bsp_planner.apps.helics.local --federates 4 --steps 30 --out /tmp/ring
    python -m bsp_planner.apps.helics.local --shape star --federates 5 --steps 30 --out /tmp/star

Each federate runs with a local session (no coordinator), appending its reports to ``OUT/<name>.jsonl``
and its timings to ``OUT/timings-<name>.jsonl`` (names ``f<i>``; the star's ``l<i>`` and ``hub``); the
broker's output goes to ``OUT/broker.log``. Prints each step's workloads and the federation's wall time
(from the first federate's first compute to the last one's last). Model options (``--cells``,
``--hotspot``, ``--base``, ``--speed``, ``--seed``, ``--ops-per-unit``) are passed to every federate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import bsp_planner

from ...inputs.placeholders import choose_ports
from .star_model import federate_names as star_names

MODEL_OPTIONS = ("cells", "hotspot", "base", "speed", "seed", "ops_per_unit")


def federate_names(shape: str, federates: int) -> list[str]:
    """The federates' names in index order: the ring's ``f<i>``, the star's leaves ``l<i>`` then ``hub``."""
    return star_names(federates - 1) if shape == "star" else [f"f{i}" for i in range(federates)]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def run_federation(
    out: Path,
    federates: int,
    steps: int,
    model: dict[str, object] | None = None,
    timeout_s: float = 300.0,
    shape: str = "ring",
) -> dict:
    """Run broker + federates to the end; returns {"codes", "reports", "timings", "wall_s"} (reports and
    timings: one list per federate, in index order). Every process is ended on the way out, even on a
    timeout."""
    out.mkdir(parents=True, exist_ok=True)
    names = federate_names(shape, federates)
    # the broker's port with port + 1 free too (the ZeroMQ broker binds both), and one for each federate
    ports = choose_ports(["broker", *names])
    port = ports["broker"]
    extra: list[str] = []
    for key, value in (model or {}).items():
        extra += [f"--{key.replace('_', '-')}", str(value)]
    py = sys.executable
    # this bsp_planner first on the path, no bsp-planner run's variables (they run alone, with local sessions)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BSP_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(bsp_planner.__file__).parent.parent), env.get("PYTHONPATH")])
    )
    procs: list[subprocess.Popen] = []
    with open(out / "broker.log", "ab") as log:
        broker = subprocess.Popen(
            [py, "-m", "bsp_planner.apps.helics.broker", "--federates", str(federates), "--port", str(port)]
            + ["--exit-with-broker"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        for i, name in enumerate(names):
            argv = [py, "-m", "bsp_planner.apps.helics.federate", "--shape", shape, "--index", str(i)]
            argv += ["--federates", str(federates), "--broker-port", str(port), "--port", str(ports[name])]
            argv += ["--steps", str(steps), *extra]
            argv += ["--reports", str(out / f"{name}.jsonl"), "--timings", str(out / f"timings-{name}.jsonl")]
            with open(out / f"{name}.log", "ab") as log:
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + timeout_s
        codes = [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
        broker_code = broker.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for p in [*procs, broker]:  # the broker wrapper's helics_broker ends with it
            if p.poll() is None:
                p.kill()
                p.wait()
    timings = [read_jsonl(out / f"timings-{name}.jsonl") for name in names]
    rows = [r for per in timings for r in per]  # wall time: the earliest compute start to the latest end
    return {
        "codes": codes,
        "broker_code": broker_code,
        "reports": [read_jsonl(out / f"{name}.jsonl") for name in names],
        "timings": timings,
        "wall_s": max(r["end"] for r in rows) - min(r["start"] for r in rows) if all(timings) else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.local", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=("ring", "star"), default="ring")
    p.add_argument("--federates", type=int, default=4, help="the ring's federates; the star's leaves + 1 (hub)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", required=True, help="folder for the reports, timings and logs")
    for name in MODEL_OPTIONS:  # passed on to every federate only when given
        p.add_argument(f"--{name.replace('_', '-')}", type=float if name in ("hotspot", "base") else int)
    args = p.parse_args(argv)
    if args.federates < 1 or args.steps < 0:
        p.error("--federates: expected at least 1; --steps: expected a non-negative count")
    model = {k: getattr(args, k) for k in MODEL_OPTIONS if getattr(args, k) is not None}
    if args.shape == "star" and args.federates < 2:
        p.error("--federates: a star needs a hub and at least one leaf")
    if importlib.util.find_spec("helics") is None:  # every federate would fail, its cause only in its log
        p.error(f"the helics package is not installed for {sys.executable}: pip install 'bsp-planner[cosim]'")
    result = run_federation(Path(args.out), args.federates, args.steps, model, shape=args.shape)
    for step in range(args.steps):
        row = [next((r["workload"] for r in per if r["step"] == step), None) for per in result["reports"]]
        print(f"step {step:3d}  " + "  ".join("-" if w is None else f"{w:7.2f}" for w in row))
    if result["wall_s"] is not None:
        print(f"federation wall time {result['wall_s']:.3f} s")
    names = federate_names(args.shape, args.federates)
    bad = [f"{name}: exit {c}" for name, c in zip(names, result["codes"], strict=True) if c != 0]
    if bad:
        print("failed: " + ", ".join(bad) + f" (logs in {args.out})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

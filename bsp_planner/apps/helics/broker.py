"""The ring federation's HELICS broker, as a job's `[[service]]` (or started by hand).

    python -m bsp_planner.apps.helics.broker --federates N --port P [--loglevel warning]

Runs the ``helics_broker`` program that the ``helics`` wheel ships (``helics/install/bin/``; else the
first on PATH) as ``helics_broker -f N --coretype=zmq --local_interface=tcp://127.0.0.1 --port P``: a
ZeroMQ broker on the loopback interface, listening on port P (and P+1, which the ZeroMQ core also binds).
It prints ``broker ready on port P`` once it accepts connections.

HELICS ends a broker when its federation has finished, which to a run would look like its service dying
before the run ended. So this wrapper keeps running after the broker's normal end (exit code 0) until it
is stopped (SIGTERM or SIGINT, as a run stops its services); a broker that fails (non-zero exit, or
killed) ends the wrapper with its exit code at once. ``--exit-with-broker`` ends it with the broker.
A SIGTERM or SIGINT is passed on to the broker.

``--profile FILE`` turns on HELICS's profiler (``--profiler=log``: each federate's time requests and grants,
printed as they happen) and appends its lines to FILE as they come, one flushed line each, for
:mod:`.observe` to follow; the broker's other output goes on to the wrapper's.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ...core.signals import die_with
from ...inputs.placeholders import ENV_PORT

BINARY = "helics_broker"


def find_broker() -> str | None:
    """The path of the helics_broker program: the helics wheel's own, else the first on PATH, else None.
    Found without importing helics (which loads its shared library)."""
    spec = importlib.util.find_spec("helics")
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "install" / "bin" / BINARY
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which(BINARY)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bsp_planner.apps.helics.broker", description=__doc__.split("\n\n")[0])
    p.add_argument("--federates", type=int, required=True, help="federates the federation waits for")
    p.add_argument("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: $BSP_PORT)")
    p.add_argument("--loglevel", default="warning", help="helics_broker's --loglevel (warning, summary, debug...)")
    p.add_argument("--exit-with-broker", action="store_true", help="end when the broker ends, even normally")
    p.add_argument("--profile", default=None, help="append HELICS's profiler lines to this file as they come")
    args = p.parse_args(argv)
    if args.federates < 1:
        p.error(f"--federates: expected at least 1, got {args.federates}")
    if args.port is None:
        env = os.environ.get(ENV_PORT, "")
        if not env.isdigit():
            p.error("--port: required when $BSP_PORT is not set")
        args.port = int(env)
    if not 0 < args.port < 65535:
        p.error(f"--port: expected a TCP port 1..65534 (the broker also binds port + 1), got {args.port}")
    return args


def _announce_when_ready(proc: subprocess.Popen, port: int) -> None:
    while proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            print(f"broker ready on port {port}", flush=True)
            return
        time.sleep(0.05)


def _split_profile(out, profile: Path) -> None:
    """The broker's output: its profiler lines to `profile` (flushed, so a follower reads each at once),
    the rest to our stdout."""
    with open(profile, "a") as fh:
        for raw in out:
            line = raw.decode(errors="replace")
            if "<PROFILING>" in line:
                fh.write(line[line.index("<PROFILING>") :])
                fh.flush()
            else:
                sys.stdout.write(line)
                sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    binary = find_broker()
    if binary is None:
        print(
            f"{BINARY} was not found: install the helics wheel (pip install 'bsp-planner[cosim]'), which ships it",
            file=sys.stderr,
        )
        return 2
    stopping = threading.Event()
    wrapper = os.getpid()
    # helics_broker ends with this wrapper however it ends (SIGKILL included): whoever stops the wrapper
    # stops the broker, and no broker is left holding its ports
    federation = ["-f", str(args.federates), "--coretype=zmq", "--local_interface=tcp://127.0.0.1"]
    profiling = ["--profiler=log"] if args.profile else []
    proc = subprocess.Popen(
        [binary, *federation, "--port", str(args.port), "--loglevel", args.loglevel, *profiling],
        preexec_fn=lambda: die_with(wrapper),
        stdout=subprocess.PIPE if args.profile else None,
    )
    copier = None
    if args.profile:
        Path(args.profile).parent.mkdir(parents=True, exist_ok=True)
        copier = threading.Thread(target=_split_profile, args=(proc.stdout, Path(args.profile)), daemon=True)
        copier.start()

    def stop(signum: int, _frame: object) -> None:
        stopping.set()
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=_announce_when_ready, args=(proc, args.port), daemon=True).start()
    code = proc.wait()
    if copier is not None:
        copier.join(timeout=5)  # the profiler's last lines, written before the broker ended
    if stopping.is_set():
        return 0
    if code != 0:  # failed, or killed by a signal (-N): the shell's 128 + N
        return code if code > 0 else 128 - code
    if args.exit_with_broker:
        return 0
    print("the federation has finished; the broker ended (waiting to be stopped)", flush=True)
    stopping.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

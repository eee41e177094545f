"""`bsp-planner report --serve -- PROGRAM ...`: a task in any language reports its steps as lines.

    process = ["bsp-planner", "report", "--serve", "--", "bash", "sim.sh"]          # in the job
    echo "step=$t workload=$w duration_s=$secs" > "$BSP_REPORT_FIFO"              # in sim.sh, per step

The server joins the run as the task (from the environment the run sets: :data:`.session.ENV`), so it
is the run's member for as long as the program runs: a program that reports through many short-lived
writes never looks like a task leaving the run. It makes a FIFO, starts PROGRAM with its path in
``BSP_REPORT_FIFO`` (and the run's ``BSP_STEPS``, an upper bound in observe mode, and ``BSP_FIRST_STEP``),
and reports each line (:mod:`.lines`) as ``session.report`` would. The FIFO is held open for reading and
writing, so a writer opening and closing it per line never ends the stream; a line shorter than the
pipe buffer (4096 bytes) is written whole even by concurrent writers.

It ends with PROGRAM: its exit code is the server's, once every line it wrote is reported. A line that
is not a step report, or a step out of order, ends PROGRAM and the server with exit code 2 and one line
naming the task, the step and what was expected. SIGTERM and SIGINT are passed on to PROGRAM.
``bsp-planner report STEP-KEYS...`` (without --serve) writes one line to ``$BSP_REPORT_FIFO`` for a
program that would rather run a command per step.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..core.errors import InputError
from .errors import RunEnded
from .lines import parse_report_line
from .profiling import join

FIFO_ENV = "BSP_REPORT_FIFO"
STEPS_ENV = "BSP_STEPS"
FIRST_STEP_ENV = "BSP_FIRST_STEP"
EXIT_INPUT = 2


def _lines(fd: int, pending: bytes) -> tuple[list[str], bytes]:
    """Whole lines read so far from the FIFO (non-blocking), and the rest of a line not yet whole."""
    data = pending
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    *whole, rest = data.split(b"\n")
    return [w.decode(errors="replace") for w in whole if w.strip()], rest


def serve(program: list[str]) -> int:
    """Run `program` as this task, reporting its FIFO's lines; its exit code (or 2 on a bad line)."""
    if not program:
        raise InputError(
            "report --serve: no program to run (expected: report --serve -- PROGRAM ARGS...)", field="program"
        )
    with join() as session, tempfile.TemporaryDirectory(prefix="bsp-report-") as scratch:
        path = Path(scratch) / "report.fifo"
        os.mkfifo(path, 0o600)
        # read-write: the FIFO always has a writer (this one), so a program's writer closing never reads as EOF
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        env = {
            **os.environ,
            FIFO_ENV: str(path),
            STEPS_ENV: str(session.steps),
            FIRST_STEP_ENV: str(session.first_step),
        }
        try:
            proc = subprocess.Popen(program, env=env)
        except OSError as exc:
            os.close(fd)
            raise InputError(f"report --serve: cannot start {program[0]!r}: {exc.strerror}", field="program") from None

        def forward(signum: int, _frame: object) -> None:
            if proc.poll() is None:
                proc.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, forward)
        pending = b""
        try:
            while True:
                done = proc.poll() is not None
                if not done:
                    select.select([fd], [], [], 0.2)  # a line, or a look at whether the program ended
                lines, pending = _lines(fd, pending)
                for line in lines:
                    session.report(**parse_report_line(line, f"task {session.task_name}: report line"))
                if done:
                    return int(proc.returncode) if proc.returncode >= 0 else 128 - proc.returncode
        except BaseException:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
            raise
        finally:
            os.close(fd)


def write_line(fields: dict[str, str]) -> None:
    """One report line to the FIFO the server gave this program ($BSP_REPORT_FIFO)."""
    path = os.environ.get(FIFO_ENV, "")
    if not path:
        raise InputError(
            f"${FIFO_ENV} is not set: run the program under `bsp-planner report --serve -- PROGRAM`", field=FIFO_ENV
        )
    line = " ".join(f"{k}={v}" for k, v in fields.items())
    parse_report_line(line, "bsp-planner report")  # refuse here, with the caller, not in the server
    with open(path, "w") as fh:
        fh.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m bsp_planner.task.serve -- PROGRAM ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        return serve(args)
    except (InputError, RunEnded) as exc:  # RunEnded here: a step past the run's last
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())

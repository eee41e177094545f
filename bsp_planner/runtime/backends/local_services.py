"""The local backend's services: each a process tree in a cgroup of its own, its output capped.

A service (``[[service]]`` in the job, :mod:`..services`) is tracked as a task is: it joins its own group,
``<cgroup-prefix>.services.<run-id>/<name>`` (no CPU quota: it is not a task the plan sizes; beside the
run's group, so that the run's weight does not lift it above the host's other work), between fork and
exec, so everything it starts is in there too, a daemon it double-forks included. It counts as running
while anything of it is left in the group, and a stop ends everything in the group (SIGTERM, then
SIGKILL) and removes it. Its output goes through a pipe that the coordinator reads: the log keeps the
first :data:`OUTPUT_KEEP_BYTES` of each start and the last as many once it ends (a command task's step keeps
its last 16 KiB as well), so a flooding service cannot fill the disk.

A readiness check cannot be fooled or hang: a ``tcp_port`` counts only once a process of the service's
own group listens on it (``/proc/net/tcp``, ``/proc/net/tcp6`` and the sockets among its processes' open
files), never another program's, nor a port that a crashed-and-restarted service never bound; a
``log_line`` is matched by :class:`~..services.ReadyLine` with a time limit (the ``regex`` module's `timeout`), so a
pattern that backtracks without end gives up at ``ready_timeout_s`` and a stop signal is answered.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InputError
from ...core.signals import kill_group
from ...profiling.cgroups import CpuQuotaGroup, Hierarchy
from ...task.reporter import cpu_cgroup, move_threads, tasks_file
from ..worker import OUTPUT_KEEP_BYTES

STOP_TIMEOUT_S = 10.0
LOCAL_HOST = "127.0.0.1"
SERVICE_GROUP_INFIX = ".services."  # <cgroup-prefix>.services.<run-id>/<service>
READ_CHUNK = 65536
PENDING_LINES = 4096  # lines kept for a log_line readiness check not yet made (the oldest dropped first)
LINE_LIMIT = 16384  # of a line not yet ended, what is kept for a readiness check
TCP_LISTEN = "0A"


class CappedOutput:
    """One start's output: its first `keep` bytes written to the log as they come, the last `keep` kept in
    memory and written after a line saying how much was left out when the output ends (:meth:`close`)."""

    def __init__(self, log_path: Path, keep: int = OUTPUT_KEEP_BYTES) -> None:
        self.log_path = log_path
        self.keep = keep
        self.total = 0  # bytes it printed
        self.recent = bytearray()  # its last `keep` bytes
        self.lines: collections.deque[str] = collections.deque(maxlen=PENDING_LINES)  # for ReadyLine
        self.partial = b""  # the start of a line not yet ended
        self.want_lines = True  # until its readiness is settled: then a flood costs no line splitting
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            head = chunk[: max(0, self.keep - self.total)]
            if head:
                with contextlib.suppress(OSError), open(self.log_path, "ab") as log:
                    log.write(head)
            self.total += len(chunk)
            self.recent += chunk
            del self.recent[: max(0, len(self.recent) - self.keep)]
            if not self.want_lines:
                return
            *done, self.partial = (self.partial + chunk).split(b"\n")
            self.partial = self.partial[-LINE_LIMIT:]
            self.lines.extend(line.decode(errors="replace") for line in done)

    def close(self) -> None:
        with self.lock:
            past_head = self.total - self.keep
            if past_head <= 0:
                return
            tail = bytes(self.recent[-min(len(self.recent), past_head) :])
            left_out = past_head - len(tail)
            note = f"\n--- {left_out} bytes of its output left out (its first and last {self.keep} are kept)\n"
            with contextlib.suppress(OSError), open(self.log_path, "ab") as log:
                log.write((note.encode() if left_out else b"") + tail)

    def take_lines(self) -> list[str]:
        """The lines printed since the last call, and the line it is printing (kept for the next call)."""
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
            return lines + ([self.partial.decode(errors="replace")] if self.partial else [])

    def tail(self, limit: int) -> str:
        with self.lock:
            return bytes(self.recent[-limit:]).decode(errors="replace")


@dataclass
class _Service:
    proc: subprocess.Popen
    output: CappedOutput
    reader: threading.Thread
    group: CpuQuotaGroup | None


class LocalServiceRunner:
    """Services as process trees on this machine, their output in ``<log_dir>/<name>.log``, working in
    `cwd`; each in ``<hierarchy root>/<group_parent>/<name>`` (None: in no group of their own, signalled
    by process group only)."""

    def __init__(
        self, log_dir: Path, cwd: str | None = None, group_parent: str | None = None, hierarchy: Hierarchy | None = None
    ) -> None:
        self.log_dir = Path(log_dir)
        self.cwd = cwd
        self.group_parent = group_parent
        self.hierarchy = hierarchy
        self.procs: dict[str, _Service] = {}
        # where the coordinator runs before its threads join the run's group (own_share), and its niceness: a
        # service restarted mid-run starts at the coordinator's own priority, not at its raised one
        self.home_tasks = tasks_file(cpu_cgroup())
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def _group(self, name: str) -> CpuQuotaGroup | None:
        if self.group_parent is None:
            return None
        g = CpuQuotaGroup(name, prefix=self.group_parent, hierarchy=self.hierarchy)
        if g.path.exists():  # left by a killed coordinator of this run: nothing of it may go on
            g.created = True
            g.remove()
        return g.create()

    def launch(self, name: str, args: list[str], env: dict[str, str], ready_port: int | None) -> None:
        if name in self.procs:
            self.stop([name])
        log = self.log_path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} service {name}: {' '.join(args)}\n".encode())
        group = self._group(name)
        preexec = _preexec(group, self.home_tasks, self.niceness)
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env={**os.environ, **env},
                preexec_fn=preexec,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        output = CappedOutput(log)
        assert proc.stdout is not None  # a pipe
        reader = threading.Thread(target=_drain, args=(proc.stdout, output), name=f"service-{name}", daemon=True)
        reader.start()
        self.procs[name] = _Service(proc, output, reader, group)

    def _members(self, s: _Service) -> list[int]:
        return s.group.pids() if s.group is not None else []

    def exit_code(self, name: str) -> int | None:
        """None while it runs: its first process, or (exit code 0) what it left in its group, a daemon."""
        s = self.procs.get(name)
        if s is None:
            return None
        code = s.proc.poll()
        if code == 0 and self._members(s):
            return None
        return code

    def ready(self, name: str, port: int | None, pattern) -> bool:
        s = self.procs[name]
        if pattern is None:
            s.output.want_lines = False
        if port is not None:
            if s.group is None:
                from ..zkserver import port_in_use

                return port_in_use(LOCAL_HOST, port, timeout_s=0.2)
            return listening(port, self._members(s))
        if pattern is not None:
            if any(pattern.search(line) for line in s.output.take_lines()):
                s.output.want_lines = False
                return True
            return False
        return True  # no readiness check: started is ready

    def port_note(self, name: str, port: int) -> str:
        """Why service `name` is not ready on `port` where another program holds it ("" where none does)."""
        s = self.procs.get(name)
        own = set(self._members(s)) if s is not None else set()
        others = sorted(p for p in listening_pids(port) if p not in own)
        if not others:
            return ""
        try:
            what = Path(f"/proc/{others[0]}/comm").read_text().strip()
        except OSError:
            what = "?"
        return f"; port {port} is held by another program (pid {others[0]}, {what}), not by the service"

    def host(self, name: str) -> str:
        return LOCAL_HOST

    def tail(self, name: str) -> str:
        s = self.procs.get(name)
        if s is not None:
            return s.output.tail(1500)
        from ..services import log_tail

        return log_tail(self.log_path(name), 1500)

    def stop(self, names: list[str]) -> None:
        """SIGTERM to each service's process group and to everything in its group, the wait (all at once),
        then SIGKILL to whatever is left and the group removed."""
        stopping = [(n, self.procs.pop(n)) for n in names if n in self.procs]
        for _, s in stopping:
            kill_group(s.proc.pid, signal.SIGTERM)
            for pid in self._members(s):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for _, s in stopping:
            with contextlib.suppress(subprocess.TimeoutExpired):
                s.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            while self._members(s) and time.monotonic() < deadline:
                time.sleep(0.02)
            kill_group(s.proc.pid)  # its own children in its session
            if s.group is not None:
                with contextlib.suppress(OSError):  # a group the kernel keeps busy: what it held is killed
                    s.group.remove()  # and everything else it started, wherever it went: SIGKILL, then the group
            with contextlib.suppress(subprocess.TimeoutExpired):
                s.proc.wait(timeout=5)
            s.reader.join(timeout=5)  # its output ends with its last process
            s.output.close()


def check_service_programs(job, path=None) -> None:
    """Every service's program (its command's first word) is a file this machine can run: refused before
    the run (InputError naming the service's `command`) rather than as a failure once the run folder exists.
    A program named by a placeholder other than `{python}` is known only when the run starts."""
    for i, sv in enumerate(job.services):
        program = sv.command[0].replace("{python}", sys.executable)
        if "{" in program:
            continue
        found = program if "/" in program else shutil.which(program, path=sv.env.get("PATH"))
        why = ""
        if found is None or not os.path.exists(found):
            why = "no such program" + ("" if "/" in program else " on PATH")
        elif os.path.isdir(found) or not os.access(found, os.X_OK):
            why = "not an executable file"
        if why:
            raise InputError(
                f"service '{sv.name}' runs {program!r}: {why}; give an executable program (or make the file "
                'executable: chmod +x), or run it through an interpreter: command = ["{python}", "script.py"]',
                path=job.path or path,
                field=f"service[{i}].command",
            )


def _drain(pipe, output: CappedOutput) -> None:
    """The reader of one start's output, until the last process holding the pipe ends."""
    fd = pipe.fileno()
    try:
        while chunk := os.read(fd, READ_CHUNK):
            output.feed(chunk)
    except OSError:
        pass
    finally:
        pipe.close()


def listening_sockets(port: int) -> set[str]:
    """The TCP sockets listening on `port` on this host (IPv4 or IPv6, any address), as a process's open
    file names them (``socket:[<inode>]``)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    return inodes


def listening_pids(port: int) -> set[int]:
    """Every process of this host with a socket listening on TCP `port` (a scan of /proc: for a message)."""
    sockets = listening_sockets(port)
    found: set[int] = set()
    if not sockets:
        return found
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and listening(port, [int(proc.name)], sockets):
            found.add(int(proc.name))
    return found


def listening(port: int, pids: list[int], sockets: set[str] | None = None) -> bool:
    """Whether one of `pids` listens on TCP `port` itself (`sockets`: listening_sockets(port), if known)."""
    sockets = listening_sockets(port) if sockets is None else sockets
    if not sockets:
        return False
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        with contextlib.suppress(OSError):
            for fd in os.listdir(fds):
                with contextlib.suppress(OSError):
                    if os.readlink(fds / fd) in sockets:
                        return True
    return False


def _preexec(group: CpuQuotaGroup | None, home_tasks: Path | None, niceness: int) -> Callable[[], None]:
    """In the child before it execs (plain system calls only): into its group (or back where the coordinator
    came from), the coordinator's own priority, and SIGTERM when the coordinator dies."""
    join = group.preexec_fn if group is not None else None
    from ...core.signals import die_with

    parent = os.getpid()

    def preexec() -> None:
        if join is not None:
            join()  # joins its group and asks for the parent-death signal
        elif home_tasks is not None:
            move_threads([os.getpid()], home_tasks)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
        die_with(parent)

    return preexec

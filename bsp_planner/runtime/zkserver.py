"""A standalone ZooKeeper server on this machine, for live runs and tests (`bsp-planner zk start|stop|status`).

The server is Apache ZooKeeper's own Java program (``org.apache.zookeeper.server.ZooKeeperServerMain``),
run from the jars of Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``, whose manifest
lists its dependencies) or of an Apache tarball (``$ZOOKEEPER_HOME/lib``); ``BSP_PLANNER_ZK_CLASSPATH``
overrides both. No system service is involved: the server is a child process with its own session,
configuration file, data directory, log and pid file, all inside one folder (``runs/zookeeper`` by
default), listening on loopback only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..profiling.cgroups import DEFAULT_PREFIX, MAX_SHARES, CpuQuotaGroup

DEFAULT_PORT = 2181
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DATA_DIR = Path("runs/zookeeper")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
ENV_CLASSPATH = "BSP_PLANNER_ZK_CLASSPATH"
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
LOGGER_JAR = Path("/usr/share/java/slf4j-simple.jar")  # optional: without it the server logs nothing
#: the cpu cgroup of a server started here: ``<root>/bsp-planner.zk/server-<port>``, see :func:`weigh_server`
SERVER_GROUP_PREFIX = f"{DEFAULT_PREFIX}.zk"
INSTALL_HINT = (
    "install Debian's package (`apt-get install zookeeper`, which brings Java), or unpack an Apache ZooKeeper "
    f"release and set ZOOKEEPER_HOME, or set {ENV_CLASSPATH} to the server's classpath"
)


def find_java() -> str:
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        raise InputError(
            f"java not found on PATH; the ZooKeeper server is a Java program: {INSTALL_HINT}", field="java"
        )
    return java


def zookeeper_classpath() -> str:
    """The server's classpath: $BSP_PLANNER_ZK_CLASSPATH, Debian's jar, or $ZOOKEEPER_HOME's jars."""
    explicit = os.environ.get(ENV_CLASSPATH)
    if explicit:
        return explicit
    if DEBIAN_JAR.is_file():
        parts = [str(DEBIAN_JAR)]  # its manifest's Class-Path names netty, jute, slf4j...
        if LOGGER_JAR.is_file():
            parts.append(str(LOGGER_JAR))
        return os.pathsep.join(parts)
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(Path(home).glob("*.jar")) + sorted((Path(home) / "lib").glob("*.jar"))
        if jars:
            return os.pathsep.join(str(j) for j in jars)
    raise InputError(
        f"the ZooKeeper server's jars were not found (looked for {DEBIAN_JAR}); {INSTALL_HINT}", field="zookeeper"
    )


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts connections on host:port (a server, or a service that is ready)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        return s.connect_ex((host, port)) == 0


def four_letter(host: str, port: int, word: str, timeout_s: float = 1.0) -> str | None:
    """Send a ZooKeeper four-letter command; the reply, or None if nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word.encode())
            return b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")  # until the server closes
    except OSError:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def configured_port(data_dir: Path) -> int:
    """The client port a folder's server was started with (its zoo.cfg's), else the default."""
    cfg = Path(data_dir) / "zoo.cfg"
    lines = cfg.read_text().splitlines() if cfg.is_file() else []
    ports = [int(line.split("=", 1)[1]) for line in lines if line.startswith("clientPort=")]
    return ports[-1] if ports else DEFAULT_PORT


def running_servers() -> list[LocalZooKeeper]:
    """Every server on this machine that `zk start` (a LocalZooKeeper) started and that still runs: a
    ZooKeeper process whose folder's server.pid names it. Where to look when a folder has none."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        cmd = _cmdline(int(proc.name))
        if MAIN_CLASS not in cmd:
            continue
        config = Path(next((a for a in reversed(cmd) if a.endswith("zoo.cfg")), ""))
        if config.name != "zoo.cfg":
            continue
        server = LocalZooKeeper(config.parent, port=configured_port(config.parent))
        if server.recorded_pid() == int(proc.name):
            found.append(server)
    return sorted(found, key=lambda z: str(z.data_dir))


def stop_command(server: LocalZooKeeper) -> str:
    """`zk stop` as it must be typed for this server: --data-dir unless the folder is the default one here."""
    default = server.data_dir == DEFAULT_DATA_DIR.resolve()
    return "bsp-planner zk stop" + ("" if default else f" --data-dir {shlex.quote(str(server.data_dir))}")


@dataclass
class LocalZooKeeper:
    """One standalone server: its folder holds zoo.cfg, the data, server.log and server.pid."""

    data_dir: Path = DEFAULT_DATA_DIR
    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    tick_ms: int = 2000
    heap_mb: int = 256

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self.config_path = self.data_dir / "zoo.cfg"
        self.pid_path = self.data_dir / "server.pid"
        self.log_path = self.data_dir / "server.log"
        self._proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "\n".join(
                [
                    "# written by bsp-planner: a standalone server on loopback",
                    f"tickTime={self.tick_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "maxClientCnxns=0",  # a run opens one session per task, all from this address
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    f"maxSessionTimeout={self.tick_ms * 30}",
                ]
            )
            + "\n"
        )

    # -- state -------------------------------------------------------------------------------------
    def recorded_pid(self) -> int | None:
        """The pid in server.pid if that process is still this folder's ZooKeeper server."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None
        cmd = _cmdline(pid)
        if MAIN_CLASS in cmd and str(self.config_path) in cmd:
            return pid
        return None

    def ok(self) -> bool:
        """The server serves requests (`ruok` says imok even before it does; `srvr` tells the mode)."""
        reply = four_letter(self.host, self.port, "srvr") or ""
        return "Mode:" in reply

    # -- start / stop -------------------------------------------------------------------------------
    def start(self, wait_s: float = 60.0) -> int:
        """Start the server (detached from this terminal) and wait until it answers; returns its pid."""
        if self.recorded_pid() is not None:
            raise InputError(
                f"a ZooKeeper server from {self.data_dir} is already running (pid {self.recorded_pid()}) on "
                f"{self.hosts}; stop it with `bsp-planner zk stop --data-dir {self.data_dir}`",
                field="zk",
            )
        if port_in_use(self.host, self.port):
            raise InputError(
                f"port {self.port} on {self.host} is already taken (another ZooKeeper?); pick one with --port",
                field="--port",
            )
        java = find_java()
        classpath = zookeeper_classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        args = [
            java,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dzookeeper.log.dir={self.data_dir}",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        weigh_server(self._proc.pid, self.port)
        try:
            self.pid_path.write_text(f"{self._proc.pid}\n")
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self.pid_path.unlink(missing_ok=True)
                    raise InputError(
                        f"the ZooKeeper server exited with code {self._proc.returncode} while starting: "
                        f"{_log_error(self.log_path)} (the whole log: {self.log_path})",
                        field="zk",
                    )
                if self.ok():
                    return self._proc.pid
                time.sleep(0.1)
        except BaseException:  # Ctrl-C, a signal, a full disk: no JVM is left running unknown
            if self._proc.poll() is None:
                self.stop(timeout_s=5.0)
            raise
        self.stop()
        raise InputError(
            f"the ZooKeeper server did not answer on {self.hosts} within {wait_s:g} s; see {self.log_path}", field="zk"
        )

    def stop(self, timeout_s: float = 15.0, sig: int = signal.SIGTERM) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after timeout_s); False if none was running."""
        pid = self._proc.pid if self._proc is not None and self._proc.poll() is None else self.recorded_pid()
        if pid is None:
            self._forget()
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while self._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.02)
        self._forget()
        return True

    def kill(self) -> bool:
        """Crash the server (SIGKILL): what the fault tests do to it."""
        return self.stop(timeout_s=0.0, sig=signal.SIGKILL)

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return MAIN_CLASS in _cmdline(pid)

    def _forget(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
        self._proc = None
        self.pid_path.unlink(missing_ok=True)
        with contextlib.suppress(Exception):  # no group (see weigh_server), or another server's is inside still
            group = _server_group(self.port)
            group.path.rmdir()
            group.parent.rmdir()


def _server_group(port: int) -> CpuQuotaGroup:
    return CpuQuotaGroup(f"server-{port}", prefix=SERVER_GROUP_PREFIX)


def weigh_server(pid: int, port: int) -> Path | None:
    """Move the server's process (every thread) into a cpu cgroup of its own with the largest CPU weight.

    Every report of a live run and every quota written on one passes through the server: competing as one
    ordinary process on a busy host, it answered a report's write and its watch a p95 of 100-150 ms late,
    against 10-20 ms with the weight (BENCHMARKS.md "Decision latency"). The server uses little CPU, so the
    weight costs the host's other work next to nothing. The group's path, or None where there is no cpu
    controller or no permission (the server then runs where it was started)."""
    try:
        group = _server_group(port)
        for left in group.parent.glob("server-*"):  # emptied groups of servers that were killed, not stopped
            with contextlib.suppress(OSError):  # a running server's group is not empty: rmdir refuses it
                left.rmdir()
        if not group.path.is_dir():
            group.create()
        group.set_weight(MAX_SHARES)
        (group.path / "cgroup.procs").write_text(str(pid))
    except Exception:
        return None
    return group.path


def _log_error(log_path: Path) -> str:
    """The line of a server log that says why it stopped (its last ERROR, or its last line)."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    errors = [ln for ln in lines if " ERROR " in f" {ln} " or "Exception" in ln]
    line = (errors or lines or ["(empty log)"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."

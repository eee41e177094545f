"""The run-wide placeholders of a job's argument lists: `{job_dir}`, `{port}` and `{port:NAME}`.

A job's task `command`/`process` and service `command`, `env` values and `ready` check may hold them
(besides the per-step `{workload}`, `{step}`, `{task}`, `{run_dir}` and `{python}` of :mod:`.job`):

* ``{job_dir}``: the folder of the job file (absolute);
* ``{port}``: a free loopback TCP port chosen for this task or service when the run starts;
* ``{port:NAME}``: the port chosen for task or service NAME;
* ``{host:NAME}``: the address of service NAME as the tasks reach it (127.0.0.1 on the local backend, the
  service pod's IP on Kubernetes), known once the service started (services start before the tasks).

Every task and service gets its port when the run (or a profile cell) starts; a program finds its own as
``BSP_PORT`` in its environment. A command task's worker rebuilds the values from its environment
(:func:`values_from_env`), because it substitutes the command afresh at every step.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping
from contextlib import ExitStack

PORT_REF = re.compile(r"\{port:([^{}]*)\}")
HOST_REF = re.compile(r"\{host:([^{}]*)\}")
ENV_PORT = "BSP_PORT"  # this task's or service's own port
ENV_PORTS = "BSP_PORTS"  # every port of the run: "name=port,name=port"
ENV_HOSTS = "BSP_HOSTS"  # every service's address: "name=host,name=host"
ENV_JOB_DIR = "BSP_JOB_DIR"


#: every placeholder name a job's arguments may hold: these, `{port:NAME}` and `{host:NAME}`
KNOWN_NAMES = ("workload", "step", "task", "run_dir", "python", "job_dir", "port")
# `{name}` or `{name:...}` shaped like a placeholder (not `${VAR}`, a shell's, nor a program's own JSON)
_LOOKS_LIKE = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)(:[^{}]*)?\}")
_UNCLOSED = re.compile(r"\{(port|host):[^{}]*$")


def unknown_placeholders(arg: str) -> list[str]:
    """The placeholder-shaped parts of one argument bsp-planner does not replace: a misspelt name
    (`{jobdir}`, `{PORT}`), or an unclosed `{port:NAME`. They reach the program as written."""
    out = [
        m.group(0)
        for m in _LOOKS_LIKE.finditer(arg)
        if (m.group(2) is None and m.group(1) not in KNOWN_NAMES)
        or (m.group(2) is not None and m.group(1) not in ("port", "host"))
    ]
    return out + [m.group(0) for m in _UNCLOSED.finditer(arg)]


def port_refs(arg: str) -> list[str]:
    """The NAMEs of the `{port:NAME}` placeholders in one argument."""
    return PORT_REF.findall(arg)


def host_refs(arg: str) -> list[str]:
    """The NAMEs of the `{host:NAME}` placeholders in one argument."""
    return HOST_REF.findall(arg)


def choose_ports(names: Iterable[str], host: str = "127.0.0.1", tries: int = 64) -> dict[str, int]:
    """A distinct free TCP port P on `host` for every name, with P + 1 free too and no other name's: a
    ZeroMQ broker (HELICS's, among others) given port P binds P + 1 as well. The sockets stay bound until
    all are chosen (so no two names' pairs overlap), then are closed for the programs to bind; another
    program of the machine could take one in between, which its program then reports as a bind error."""
    names = list(dict.fromkeys(names))
    ports: dict[str, int] = {}
    with ExitStack() as stack:
        for name in names:
            for _ in range(tries):
                s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                s.bind((host, 0))  # held even when its neighbour is taken: the kernel then offers another
                port = s.getsockname()[1]
                if port >= 65535:
                    continue
                neighbour = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                try:
                    neighbour.bind((host, port + 1))
                except OSError:
                    continue
                ports[name] = port
                break
            else:  # pragma: no cover - a machine with almost no free ports
                raise OSError(f"no free pair of TCP ports (P, P + 1) on {host} after {tries} tries")
    return ports


def run_values(name: str | None, ports: Mapping[str, int], job_dir: str) -> dict[str, str]:
    """The run-wide placeholder values seen by task or service `name` (None: none of its own)."""
    values = {f"port:{n}": str(p) for n, p in ports.items()}
    if name is not None and name in ports:
        values["port"] = str(ports[name])
    if job_dir:
        values["job_dir"] = job_dir
    return values


def run_env(name: str, ports: Mapping[str, int], job_dir: str) -> dict[str, str]:
    """What task or service `name` finds in its environment: its port, every port, the job's folder."""
    env = {ENV_PORTS: ",".join(f"{n}={p}" for n, p in ports.items())}
    if name in ports:
        env[ENV_PORT] = str(ports[name])
    if job_dir:
        env[ENV_JOB_DIR] = job_dir
    return env


def values_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """:func:`run_values` as a process rebuilds them from the environment :func:`run_env` gave it."""
    values: dict[str, str] = {}
    for variable, placeholder in ((ENV_PORTS, "port"), (ENV_HOSTS, "host")):  # "name=value,name=value"
        for item in env.get(variable, "").split(","):
            n, sep, v = item.partition("=")
            if sep:
                values[f"{placeholder}:{n}"] = v
    if env.get(ENV_PORT):
        values["port"] = env[ENV_PORT]
    if env.get(ENV_JOB_DIR):
        values["job_dir"] = env[ENV_JOB_DIR]
    return values


def alone_values(name: str, args: Iterable[str], job_dir: str) -> tuple[dict[str, str], dict[str, str]]:
    """(placeholder values, environment) for task `name` run without its job's others (a profile cell): a
    free port of its own and one for every `{port:NAME}` its `args` name (nobody listens there: a program
    that talks to the others skips that when profiled)."""
    args = list(args)
    refs = [r for a in args for r in port_refs(a)]
    ports = choose_ports([name, *refs])
    hosts = {f"host:{r}": "127.0.0.1" for a in args for r in host_refs(a)}
    return {**run_values(name, ports, job_dir), **hosts}, run_env(name, ports, job_dir)

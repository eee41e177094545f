"""ZooKeeper for the live benchmarks: a local server on a free loopback port, credentials, the run's root
under /bench, and participant processes (the benchmark script itself, run as `SCRIPT _participant ...`)
whose last line of output is their JSON result."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port  # noqa: E402
from bsp_planner.zk.credentials import Credentials, generate_credentials, write_credentials_file  # noqa: E402
from bsp_planner.zk.schema import RunPaths  # noqa: E402
from bsp_planner.zk.session import ZkSession  # noqa: E402


@contextlib.contextmanager
def local_server(folder: Path) -> Iterator[LocalZooKeeper]:
    """A standalone server (the one `bsp-planner zk start` runs) with its data in `folder`, stopped after."""
    server = LocalZooKeeper(folder, port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def credentials(path: Path) -> tuple[Credentials, Path]:
    """New digest credentials and the file (mode 600) that hands them to participant processes."""
    creds = generate_credentials()
    return creds, write_credentials_file(path, creds)


def make_root(coord: ZkSession, root: str) -> RunPaths:
    """/bench (open to every benchmark run), the run's root under it and its barriers' parent."""
    coord.ensure_path("/bench", acl=coord.creds.parent_acl())
    coord.create(root)
    paths = RunPaths(root)
    coord.create(paths.barriers)
    return paths


def spawn(script: str, groups: Iterable[list[str]], args: Callable[[list[str]], list[str]]) -> list[subprocess.Popen]:
    """One participant process per group of names: `python SCRIPT _participant *args(group)`."""
    return [
        subprocess.Popen([sys.executable, script, "_participant", *args(g)], stdout=subprocess.PIPE, text=True)
        for g in groups
    ]


def collect(procs: list[subprocess.Popen], timeout_s: float) -> list:
    """Each process's result: the JSON of its last line of output, once it has ended."""
    out = []
    for proc in procs:
        text, _ = proc.communicate(timeout=timeout_s)
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out


def kill_left(procs: list[subprocess.Popen]) -> None:
    """Kill the participant processes still running (a failed benchmark must not leave them behind)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()


def in_threads(names: list[str], one: Callable[[str], None]) -> None:
    """one(name) for every participant name, each in a thread of its own; returns when all have ended."""
    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

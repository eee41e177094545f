"""CPU-quota cgroups: the mechanism a kubelet uses for a container's CPU limit, without Kubernetes.

A CPU limit of ``m`` millicores becomes a CFS bandwidth quota of ``m / 1000`` of every period (by
default ``m * 100`` us per 100 000 us period, a kubelet's default; the local backend and the profiler take
the period as a setting, ``cfs_period_us``, with this one default so that profiles and runs agree):
cgroup v1 writes ``cpu.cfs_period_us`` and ``cpu.cfs_quota_us`` under ``/sys/fs/cgroup/cpu/<prefix>/<name>``,
cgroup v2 writes ``"<quota> <period>"`` to ``cpu.max`` under ``/sys/fs/cgroup/<prefix>/<name>``. Whichever
the host has is found once (:func:`detect_hierarchy`).

:class:`CpuQuotaGroup` is one fresh group: create it, set its quota, put processes in it (best before they
do any work: :meth:`CpuQuotaGroup.preexec_fn` moves a child into the group between fork and exec), and
remove it, killing whatever is still inside. As a context manager it is always removed, on Ctrl-C too::

    with CpuQuotaGroup("affinity-1", millicores=500) as group:
        proc = subprocess.Popen(args, preexec_fn=group.preexec_fn, start_new_session=True)
        proc.wait()

Creating groups needs root, or a cgroup subtree delegated to the user (v2); :class:`CgroupUnavailable`
says which when it is missing.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.leftovers import running  # a zombie counts as gone: its groups are stale
from ..core.signals import die_with

# The default CFS period, a kubelet's (cpuCFSQuotaPeriod). A task limited to a fraction f of a CPU runs
# f x period and then waits for the next period, so a step's wall time depends on where in the period it
# starts and ends: up to (1 - f) x period either way. At 250m and 100 ms that is 75 ms, a large part of a
# step of a few hundred ms; a 10 ms period cuts it tenfold (BENCHMARKS.md, "Live per-step noise").
CFS_PERIOD_US = 100_000
MIN_PERIOD_US = 1_000  # the kernel's range for cpu.cfs_period_us (v1) and cpu.max's period (v2)
MAX_PERIOD_US = 1_000_000
MIN_QUOTA_US = 1_000  # the kernel refuses quotas under 1 ms
MAX_SHARES = 262_144  # v1 cpu.shares range is 2..262144 (v2 cpu.weight 1..10000)
DEFAULT_PREFIX = "bsp-planner"
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuStat:
    """The kernel's CFS bandwidth accounting of one group (its ``cpu.stat``): of the `nr_periods`
    periods in which the group ran, `nr_throttled` ended with the group throttled (it had used its
    whole quota), for `throttled_s` seconds in all. Proof that a quota is enforced, whatever the host's load."""

    nr_periods: int
    nr_throttled: int
    throttled_s: float


class CgroupUnavailable(InputError):
    """The host cannot give this process CPU-quota cgroups (no cpu controller, or no permission)."""


@dataclass(frozen=True)
class Hierarchy:
    """Where CPU-quota groups are made: the cpu controller's mount (v1) or the unified root (v2)."""

    version: int  # 1 or 2
    root: Path


def detect_hierarchy(cgroup_root: Path = CGROUP_ROOT) -> Hierarchy:
    """The cgroup hierarchy holding the cpu controller: pure v2, or v1 (also on hybrid hosts)."""
    controllers = cgroup_root / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        return Hierarchy(2, cgroup_root)
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        v1 = cgroup_root / name
        if (v1 / "cpu.cfs_quota_us").is_file():
            return Hierarchy(1, v1)
    unified = cgroup_root / "unified" / "cgroup.controllers"
    if unified.is_file() and "cpu" in unified.read_text().split():
        return Hierarchy(2, unified.parent)
    raise CgroupUnavailable(
        f"no cgroup hierarchy with the cpu controller under {cgroup_root} (looked for v2 cpu.max and "
        "v1 cpu/cpu.cfs_quota_us); CPU limits need a Linux host with CFS bandwidth control",
        path=cgroup_root,
    )


def _permission_error(path: Path, exc: OSError) -> CgroupUnavailable:
    return CgroupUnavailable(
        f"cannot create or write CPU-quota cgroups here ({exc.strerror}); run as root "
        "(e.g. `sudo`), or on cgroup v2 delegate a subtree to your user and set its cpu controller",
        path=path,
    )


def check_period_us(period_us: int, field: str = "cfs_period_us") -> int:
    """A CFS period the kernel accepts (whole microseconds in 1 000..1 000 000); InputError naming `field`."""
    if isinstance(period_us, bool) or not isinstance(period_us, int) or not MIN_PERIOD_US <= period_us <= MAX_PERIOD_US:
        raise InputError(
            f"expected a CFS period of {MIN_PERIOD_US}..{MAX_PERIOD_US} whole microseconds, got {period_us!r}",
            field=field,
        )
    return period_us


def quota_us(millicores: float, period_us: int = CFS_PERIOD_US) -> int:
    """The CFS quota of a CPU limit: 1000m is one full CPU, i.e. one whole period per period."""
    check_period_us(period_us)
    if not millicores > 0:
        raise InputError(f"expected a positive CPU limit, got {millicores!r}", field="cpu_millicores")
    quota = int(round(millicores * period_us / 1000))
    if quota < MIN_QUOTA_US:
        raise InputError(
            f"a CPU limit of {millicores:g}m is a quota of {quota} us per {period_us} us; the kernel's "
            f"minimum is {MIN_QUOTA_US} us (use at least {MIN_QUOTA_US * 1000 // period_us}m)",
            field="cpu_millicores",
        )
    return quota


_counter = itertools.count()


class CpuQuotaGroup:
    """One fresh cgroup with a CFS CPU quota; removed (and emptied) on :meth:`remove` or on leaving a
    ``with`` block."""

    def __init__(
        self,
        name: str | None = None,
        *,
        millicores: float | None = None,
        prefix: str = DEFAULT_PREFIX,
        hierarchy: Hierarchy | None = None,
        period_us: int = CFS_PERIOD_US,
    ) -> None:
        self.hierarchy = hierarchy or detect_hierarchy()
        self.name = name or f"g{os.getpid()}-{next(_counter)}"
        if "/" in self.name or "/" in prefix or self.name in ("", ".", "..") or prefix in ("", ".", ".."):
            raise InputError(f"a cgroup name must be one path component, got {prefix!r}/{self.name!r}")
        self.prefix = prefix
        self.period_us = check_period_us(period_us)
        self.millicores = millicores
        self.parent = self.hierarchy.root / prefix
        self.path = self.parent / self.name
        self._procs = str(self.path / "cgroup.procs")
        self.created = False

    # -- lifecycle -------------------------------------------------------------------------------
    def create(self) -> CpuQuotaGroup:
        try:
            for attempt in range(5):
                try:
                    self.parent.mkdir(exist_ok=True)
                    if self.hierarchy.version == 2:
                        self._enable_cpu_controller()
                    self.path.mkdir()
                    break
                except FileNotFoundError:
                    # another runner removed the (empty) prefix group between our two mkdirs
                    if attempt == 4:
                        raise
            self.created = True
        except FileExistsError:
            raise CgroupUnavailable(f"cgroup {self.path} already exists; pick another name", path=self.path) from None
        except OSError as exc:  # PermissionError among them (EACCES, EPERM)
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise _permission_error(self.parent, exc) from exc
            raise
        if self.millicores is not None:
            self.set_quota(self.millicores)
        return self

    def _enable_cpu_controller(self) -> None:
        for group in (self.hierarchy.root, self.parent):
            control = group / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")

    def set_quota(self, millicores: float) -> None:
        """Limit the group to `millicores` (1000 = one CPU) per period, as a kubelet does."""
        quota = quota_us(millicores, self.period_us)
        try:
            if self.hierarchy.version == 1:
                (self.path / "cpu.cfs_period_us").write_text(str(self.period_us))
                (self.path / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (self.path / "cpu.max").write_text(f"{quota} {self.period_us}")
        except PermissionError as exc:
            raise _permission_error(self.path, exc) from exc
        self.millicores = millicores

    def set_weight(self, shares: int, *, parent: bool = True) -> None:
        """The weight of the group when the CPU is contended, in v1 ``cpu.shares`` units (1024 = one
        ordinary process, 2..262144); on v2 converted to ``cpu.weight`` as a kubelet converts them.

        The weight counts among siblings, so with `parent` the prefix group gets it too: that group is
        what competes with the host's other processes. A high weight makes the quota, not the rest of a
        busy host, the limit of a run, as the scheduler's request accounting does for a Kubernetes pod
        whose request equals its limit."""
        shares = max(2, min(MAX_SHARES, int(shares)))
        groups = [self.parent, self.path] if parent else [self.path]
        try:
            for g in groups:
                if self.hierarchy.version == 1:
                    (g / "cpu.shares").write_text(str(shares))
                else:
                    (g / "cpu.weight").write_text(str(1 + ((shares - 2) * 9999) // (MAX_SHARES - 2)))
        except PermissionError as exc:
            raise _permission_error(self.path, exc) from exc

    def quota(self) -> tuple[int, int]:
        """(quota_us, period_us) as the kernel has them; quota -1 means no limit."""
        if self.hierarchy.version == 1:
            q = int((self.path / "cpu.cfs_quota_us").read_text())
            p = int((self.path / "cpu.cfs_period_us").read_text())
            return q, p
        q_text, p_text = (self.path / "cpu.max").read_text().split()
        return (-1 if q_text == "max" else int(q_text)), int(p_text)

    def cpu_stat(self) -> CpuStat:
        """The group's bandwidth accounting so far (v1 ``throttled_time`` is in ns, v2 ``throttled_usec`` in us)."""
        fields: dict[str, int] = {}
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                fields[key] = int(value)
        v2 = "throttled_usec" in fields
        throttled_s = fields["throttled_usec"] / 1e6 if v2 else fields.get("throttled_time", 0) / 1e9
        return CpuStat(fields.get("nr_periods", 0), fields.get("nr_throttled", 0), throttled_s)

    @property
    def preexec_fn(self) -> Callable[[], None]:
        """For ``subprocess.Popen(preexec_fn=group.preexec_fn)``: the child joins the group before it execs,
        so no work escapes the quota; and it gets SIGTERM if the process that started it dies, SIGKILL
        included (a killed profiler leaves no stress-ng behind). A starter that died before the child asked
        for that signal (a moment a loaded machine makes long) is caught too: the child exits at once.
        Read it in the starting process, just before the start: it names that process as the parent."""
        return self.joiner()

    def joiner(self, signum: int = signal.SIGTERM) -> Callable[[], None]:
        """:attr:`preexec_fn`, the child getting `signum` when its starter dies (SIGKILL: a profiled task's
        process, which may ignore SIGTERM)."""
        procs, parent = self._procs, os.getpid()

        def join() -> None:  # in the forked child: plain system calls only
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
            die_with(parent, signum)

        return join

    def pids(self) -> list[int]:
        try:
            text = Path(self._procs).read_text()
        except FileNotFoundError:
            return []
        return [int(x) for x in text.split()]

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill whatever is left inside, then remove the group (and the prefix group once empty)."""
        if not self.created:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            self.kill_all()
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.created = False
        with contextlib.suppress(OSError):
            self.parent.rmdir()  # only succeeds when no other group (another runner's) is inside

    def __enter__(self) -> CpuQuotaGroup:
        return self.create()

    def __exit__(self, *exc_info) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"CpuQuotaGroup({str(self.path)!r}, millicores={self.millicores!r}, v{self.hierarchy.version})"


# -- groups left by a killed runner ---------------------------------------------------------------------
#: the names runners give their groups, each carrying the runner's pid: ``<task>-<pid>-<ns>`` (a profile
#: run), ``check-<pid>`` (the permission probe), ``g<pid>-<n>`` (unnamed groups), ``probe-<pid>`` and
#: ``probe-<pid>-a<i>``/``-b<i>`` (a live run measuring its reconfiguration costs)
_OWNED_NAME = re.compile(
    r"^(?:.+-(?P<run>\d+)-\d+|check-(?P<check>\d+)|g(?P<anon>\d+)-\d+|probe-(?P<probe>\d+)(?:-[ab]\d+)?)$"
)


def owner_pid(group_name: str) -> int | None:
    """The pid of the process that made a group, from its name; None for names runners do not make."""
    m = _OWNED_NAME.match(group_name)
    if m is None:
        return None
    return int(next(v for v in m.groupdict().values() if v is not None))


def remove_stale_groups(prefix: str = DEFAULT_PREFIX, hierarchy: Hierarchy | None = None) -> list[str]:
    """Remove the groups under ``prefix`` whose runner is gone (a profiler killed mid-grid leaves its
    group, and the stress-ng still running in it, behind): kill what is inside, remove the group. A group
    whose runner still runs (another profile run beside this one) is left alone. Returns the removed
    groups as ``prefix/name``."""
    h = hierarchy or detect_hierarchy()
    parent = h.root / prefix
    removed: list[str] = []
    if not parent.is_dir():
        return removed
    for child in sorted(parent.iterdir()):
        pid = owner_pid(child.name) if child.is_dir() else None
        if pid is None or pid == os.getpid() or running(pid):
            continue
        g = CpuQuotaGroup(child.name, prefix=prefix, hierarchy=h)
        g.created = True  # it exists: remove() kills whatever is inside, then removes it
        try:
            g.remove()
        except OSError:
            continue  # another runner removed it first, or it cannot be emptied: not ours to insist on
        removed.append(f"{prefix}/{child.name}")
    return removed

"""How every command ends on SIGINT, SIGTERM and SIGHUP: the same way as on Ctrl-C.

`installed` (around every command, by the CLI's `main`) turns each of the three signals into :class:`Stopped`, a
KeyboardInterrupt, raised in the main thread. Every command already cleans up on Ctrl-C in ``finally``
and ``except BaseException`` blocks (pools terminated, stress-ng and task processes killed, cgroups
removed, staged outputs dropped, a live run left resumable), so a `kill` or a closed terminal now takes
the same path instead of ending the process where it stands. The exit status is then 128 + the signal's
number (130, 143, 129), as a shell reports a process the signal ended.

While a command cleans up after the first signal, further ones are recorded and ignored: a second
`kill` must not cut the cleanup in half (SIGKILL remains for that). A command with a gentler stop of its
own (a live run stops at its next safe point) routes the signals to it with :func:`routed_to`.

Child processes that must not see the terminal's Ctrl-C themselves (pool workers: their parent stops
them) call :func:`child_defaults`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

#: The signals that stop a command cleanly.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

PR_SET_PDEATHSIG = 1

_received: list[int] = []
_hooks: list = []  # the unraisable hook in place before ours


class Stopped(KeyboardInterrupt):
    """A stop asked by a signal; `signum` says which, `exit_code` is 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def received() -> int | None:
    """The first stop signal this process received, or None."""
    return _received[0] if _received else None


def default_while_starting(argv0: str | None = None) -> None:
    """In the `bsp-planner` process itself (the console script or ``python -m bsp_planner.cli``), until
    :func:`installed` takes the stop signals in hand: SIGINT's default action, as SIGTERM and SIGHUP have.

    The command line spends a second or more importing before its command starts; a Ctrl-C there would
    otherwise raise KeyboardInterrupt inside some library's import (a traceback) or inside a finaliser,
    where Python drops it and the command then runs to the end as if never stopped. With the default
    action the process ends by the signal, as a shell reports it (130). Imported by anything else (a
    test, an application), nothing changes."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    name = os.path.basename(argv0 if argv0 is not None else sys.argv[0])
    as_module = any(a == "-m" and b == "bsp_planner.cli" for a, b in zip(argv, argv[1:], strict=False))
    if (name == "bsp-planner" or as_module) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _raise_once(signum: int, frame: object) -> None:
    first = not _received
    _received.append(signum)
    if first:
        raise Stopped(signum)
    # a second signal while the first one's cleanup runs: recorded, ignored


@contextlib.contextmanager
def _handled_by(handler: Callable[[int, object], None]) -> Iterator[None]:
    """The stop signals go to `handler` within the block; the previous handlers come back after it."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise :class:`Stopped`; the previous handlers and a
    clean record come back after it (a process may run several commands: the tests do). Outside the
    main thread (where Python cannot take signals) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_hook = sys.unraisablehook
    _received.clear()
    _hooks[:] = [previous_hook]
    sys.unraisablehook = _redeliver_if_swallowed
    try:
        with _handled_by(_raise_once):
            yield
    finally:
        sys.unraisablehook = previous_hook
        _received.clear()


def _redeliver_if_swallowed(unraisable) -> None:
    """A Stopped raised where Python drops exceptions (an at-fork callback, a finaliser) never reaches the
    command: forget it and send the signal again a moment later, when the main thread is elsewhere."""
    exc = unraisable.exc_value
    if isinstance(exc, Stopped):
        _received.clear()
        threading.Timer(0.05, os.kill, (os.getpid(), exc.signum)).start()
        return
    (_hooks[0] if _hooks else sys.__unraisablehook__)(unraisable)


@contextlib.contextmanager
def routed_to(on_stop: Callable[[int], bool]) -> Iterator[None]:
    """Within the block, a stop signal calls ``on_stop(signum)`` first: True means the command took the
    stop in hand (it will raise :class:`Stopped` itself at a safe point), False raises it here and now.
    A second signal raises at once."""

    def handler(signum: int, frame: object) -> None:
        first = not _received
        _received.append(signum)
        if not first or not on_stop(signum):
            for s in STOP_SIGNALS:  # from here on the cleanup runs; it is not cut by a third signal
                signal.signal(s, _raise_once)
            raise Stopped(signum)

    with _handled_by(handler):
        yield


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold the stop signals back within the block (they are delivered as it ends): for a few steps that a
    stop must not cut in half, e.g. starting a process pool (a pool half started cannot be shut down).
    Threads and processes started within inherit the block: they unblock themselves (:func:`child_defaults`)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def child_defaults(parent_pid: int | None = None) -> None:
    """In a forked helper process (a pool worker): ignore the terminal's SIGINT and SIGHUP (the parent
    stops it), die on SIGTERM, and get SIGTERM when the parent dies, even by SIGKILL. With `parent_pid`
    (the pid that started it), a parent that died before the signal was asked for ends it here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # started under `deferred`
    die_with(parent_pid)


_PRCTL: Callable[..., int] | None
try:  # looked up here, never between fork and exec
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _PRCTL = None


def die_with(parent_pid: int | None, signum: int = signal.SIGTERM) -> None:
    """In a child (a forked helper, or between fork and exec in ``preexec_fn``): get `signum` when the
    parent dies, and end now (exit 1) if `parent_pid`, the process that started it, already went between
    the fork and this call. Plain system calls only (Linux's prctl; without it no death signal)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def kill_group(leader_pid: int, signum: int = signal.SIGKILL) -> None:
    """Signal the process group a child leads (one started with ``start_new_session``: its group id is its
    pid). A group that has already ended, or that is no longer ours to signal, is left as it is: the
    callers are stopping it either way."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader_pid, signum)

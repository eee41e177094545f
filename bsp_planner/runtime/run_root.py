"""The run's subtree in ZooKeeper: its root (created by a new run, recognised by a resumed one, refused
when it belongs to another run) and the nodes under it, with the tasks' checkpoints brought up to the
run log when the server lost them."""

from __future__ import annotations

from ..zk.credentials import Credentials
from ..zk.schema import RootHeld, RunPaths, checkpoint_value, parse_checkpoint, parse_run
from ..zk.session import ZkSession
from .run_lock import RunLock


def claim_root(
    session: ZkSession,
    paths: RunPaths,
    creds: Credentials,
    value: dict,
    run_id: str,
    tasks: list[str],
    resume: bool,
    lock: RunLock,
    barrier: str = "double",
) -> bool:
    """Create the run's root with its description `value`, or find it: True if this call created it.
    Raises RootHeld for a root of another run, of this run without --resume (naming its live coordinator
    if it has one), or of this run with other tasks."""
    from kazoo.exceptions import NoAuthError

    s = session
    root = paths.root
    parent = root.rsplit("/", 1)[0]
    try:
        if parent:
            s.ensure_path(parent, acl=creds.parent_acl())
        if s.create(root, value):
            return True
    except NoAuthError:
        raise RootHeld(
            f"cannot create {root}: its parent belongs to someone else in ZooKeeper {s.hosts}; choose another --zk-root",
            field="--zk-root",
        ) from None
    try:
        existing = s.get(root)
    except NoAuthError:
        raise RootHeld(
            f"{root} is held by another run (its ACL does not admit this run's credentials); choose another --zk-root",
            field="--zk-root",
        ) from None
    info = parse_run(root, existing or {})
    if info.run_id != run_id:
        raise RootHeld(f"{root} is held by run {info.run_id!r}; choose another --zk-root", field="--zk-root")
    if not resume:
        holders = lock.holders()
        live = f", coordinated now by {holders[0].describe()}" if holders else ""
        raise RootHeld(
            f"{root} already holds run {run_id!r}{live}; continue it with --resume {run_id}", field="--zk-root"
        )
    if any(info.tasks.get(t) is None for t in tasks):
        raise RootHeld(f"{root} holds run {run_id!r} with other tasks than this job", field="--zk-root")
    if info.barrier != barrier:  # its tasks pass the barrier the root names: the coordinator must count the same way
        raise RootHeld(
            f"{root} holds run {run_id!r} with the {info.barrier} barrier, not the {barrier} one; resume it with its own "
            "settings",
            field="--barrier",
        )
    return False


def prepare_tree(
    session: ZkSession, paths: RunPaths, tasks: list[str], logged_steps: int, incarnations: dict[str, int]
) -> list[str]:
    """The nodes under the root (idempotent: a resumed run finds them), and every task's checkpoint at
    least at the last logged step: the run log is the record of what every task completed, so a
    checkpoint behind it (a server restarted without its data) is moved up to it. Returns the tasks
    whose checkpoint had to be rebuilt."""
    s = session
    for path in (paths.members, paths.barriers, *(p for t in tasks for p in (paths.steps(t), paths.results(t)))):
        s.ensure_path(path)  # with the tasks' own nodes and their parent
    rebuilt = []
    for t in tasks:
        cp_path = paths.checkpoint(t)
        s.create(cp_path, checkpoint_value(-1, 0))
        cp = s.get(cp_path)
        last = parse_checkpoint(cp_path, cp) if cp is not None else -1
        if last < logged_steps - 1:
            s.set(cp_path, checkpoint_value(logged_steps - 1, incarnations.get(t, 0)))
            rebuilt.append(t)
    return rebuilt

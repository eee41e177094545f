"""Coordination over ZooKeeper (kazoo): the run's znode tree, its ACLs, validated values, the step barrier.

One run owns one subtree, ``ROOT`` (``--zk-root``, by default ``/bsp-planner/runs/<run-id>``)::

    ROOT                         run description (JSON): tasks, stressors, ops per unit, workload range
    ROOT/lock/<...>__lock__<n>   kazoo's Lock recipe: the one live coordinator (pid, host, instance)
    ROOT/members/<task>          ephemeral: the task's worker is up (incarnation, pid, next step)
    ROOT/tasks/<task>/steps/<t>  the task's workload for step t (JSON; {"stop": true} ends the worker)
    ROOT/tasks/<task>/results/<t>  what the worker measured in step t (duration, enter wait)
    ROOT/tasks/<task>/checkpoint   the worker's state: the last superstep it completed
    ROOT/barrier/<t>/enter/<task>, ROOT/barrier/<t>/go      the double barrier of step t: entering...
    ROOT/barrier/<t>/leave/<task>, ROOT/barrier/<t>/done    ...and leaving

Every node of the run carries a digest ACL for the run's credentials only (``user:password`` from a file
or the environment, never from the command line), so another client can neither enter a barrier nor
rewrite a workload. Every value is compact JSON, checked against a schema when read: a malformed value
raises :class:`MalformedValue` naming the znode and the field.

Writes are idempotent (a create that finds its node is treated as done, after checking the node says the
same thing) and retried through connection loss, so a ZooKeeper restart inside the session timeout is
invisible to the protocol; waits re-check on every reconnect, since kazoo does not re-register watches
with a restarted server.
"""

from .barrier import StepBarrier
from .counting_barrier import CountingBarrier
from .credentials import (
    ENV_AUTH,
    ENV_AUTH_FILE,
    Credentials,
    generate_credentials,
    load_credentials,
    parse_credentials,
    read_credentials_file,
    run_credentials,
    worker_auth_env,
    write_credentials_file,
)
from .schema import (
    BARRIER_KINDS,
    DEFAULT_PARENT,
    FORMAT,
    MAX_DURATION_S,
    MAX_VALUE_BYTES,
    MAX_WORKLOAD,
    TASK_NAME,
    MalformedValue,
    RootHeld,
    RunInfo,
    RunPaths,
    check_task_name,
    check_workload,
    checkpoint_value,
    decode,
    encode,
    get_float,
    get_int,
    get_str,
    member_value,
    parse_checkpoint,
    parse_member,
    parse_result,
    parse_run,
    parse_step,
    result_value,
    run_value,
    step_name,
    step_value,
    stop_value,
)
from .session import (
    DEFAULT_HOSTS,
    ENV_HOSTS,
    LOCAL_HINT,
    POD_HINT,
    RECHECK_S,
    Prefetch,
    ZkSession,
    ZkUnavailable,
    quiet_kazoo,
)


def step_barrier(
    kind: str, session: ZkSession, paths: RunPaths, t: int, participants: list[str] | tuple[str, ...]
) -> StepBarrier | CountingBarrier:
    """Step t's barrier of the run's kind: "double" (participants count themselves: :class:`StepBarrier`)
    or "counting" (the coordinator counts and releases: :class:`CountingBarrier`). Both have the same
    nodes and the same participant side (enter, leave, is_done)."""
    if kind == "counting":
        return CountingBarrier(session, paths, t, participants)
    if kind == "double":
        return StepBarrier(session, paths, t, participants)
    raise ValueError(f"unknown barrier kind {kind!r} (expected {' or '.join(BARRIER_KINDS)})")


__all__ = [
    "BARRIER_KINDS",
    "CountingBarrier",
    "step_barrier",
    "StepBarrier",
    "ENV_AUTH",
    "ENV_AUTH_FILE",
    "Credentials",
    "generate_credentials",
    "load_credentials",
    "parse_credentials",
    "read_credentials_file",
    "run_credentials",
    "worker_auth_env",
    "write_credentials_file",
    "DEFAULT_PARENT",
    "FORMAT",
    "MAX_DURATION_S",
    "MAX_WORKLOAD",
    "check_workload",
    "MAX_VALUE_BYTES",
    "TASK_NAME",
    "MalformedValue",
    "RootHeld",
    "RunInfo",
    "RunPaths",
    "check_task_name",
    "checkpoint_value",
    "decode",
    "encode",
    "get_float",
    "get_int",
    "get_str",
    "member_value",
    "parse_checkpoint",
    "parse_member",
    "parse_result",
    "parse_run",
    "parse_step",
    "result_value",
    "run_value",
    "step_name",
    "step_value",
    "stop_value",
    "DEFAULT_HOSTS",
    "ENV_HOSTS",
    "LOCAL_HINT",
    "POD_HINT",
    "RECHECK_S",
    "Prefetch",
    "ZkSession",
    "ZkUnavailable",
    "quiet_kazoo",
]

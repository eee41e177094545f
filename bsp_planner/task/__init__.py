"""The task library: turn a long-running BSP program into bsp-planner tasks (issue 15, docs/live.md).

    from bsp_planner import task

    with task.join() as session:            # from the environment the coordinator sets
        step = session.first_step
        while not session.ended:
            with session.step(step, workload=len(particles)):
                compute()                   # timed: wall and CPU seconds
            step += 1

An application that times its compute itself reports each step after the fact instead:
``session.report(step, duration_s=0.42, workload=w)`` (observe mode, a local session, the profiler).
``session.steps`` is the run's length (in observe mode only an upper bound: a run whose tasks all end
normally after their last step is complete), ``session.ended`` whether this task's run is over.

``join()`` reads BSP_RUN_ID, BSP_TASK, BSP_ZOOKEEPER, the credentials (BSP_ZK_AUTH or
BSP_PLANNER_ZK_AUTH / BSP_PLANNER_ZK_AUTH_FILE), BSP_SYNC ("barrier" or "observe"), BSP_RUN_DIR and
BSP_ZK_ROOT; :func:`local_session` gives the same API with no coordinator, for running and testing a
program standalone; started by `bsp-planner profile run` (BSP_PROFILE set) ``join()`` returns the
profiler's session (:mod:`.profiling`). Only kazoo is needed.
"""

from .errors import RunEnded, StepOrderError, TaskJoinError
from .local import LocalSession, local_session
from .profiling import PROFILE_ENV, ProfilingSession, join
from .session import ENV, StepTimer, TaskSession

__all__ = [
    "ENV",
    "LocalSession",
    "PROFILE_ENV",
    "ProfilingSession",
    "RunEnded",
    "StepOrderError",
    "StepTimer",
    "TaskJoinError",
    "TaskSession",
    "join",
    "local_session",
]

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

Its modules: :mod:`.credentials` (who may touch the run), :mod:`.schema` (the tree and its values),
:mod:`.session` (the kazoo session), :mod:`.barrier` (the step barriers).
"""
